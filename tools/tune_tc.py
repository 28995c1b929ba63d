"""Lesson 04 tuning: build the tensor-core kernels with other tile configurations (-D macros), check
each, and time them against cuBLAS FP16 and torch._int_mm in one run.

    python tools/tune_tc.py [4096 8192] [-DMMA_BN=256 -DMMA_TB=64 ...]

A configuration is block tile width, shared tile depth in bytes, pipeline stages (see tc_gemm.cu).
What the sweeps found is in NOTES.md."""
import sys

from harness import bench, build, catalog, check
from harness.problems import torch_int_mm, torch_linear

VARIANTS = {"shipped": []}
for cfg in ("128,64,4", "128,128,2", "256,64,4", "256,128,3", "256,64,3"):
    VARIANTS[f"mma {cfg}"] = [f"-DMMA_{k}={v}" for k, v in zip(("BN", "TB", "STAGES"), cfg.split(","))]
for cfg in ("128,64,4", "256,128,3"):
    VARIANTS[f"wmma {cfg}"] = [f"-DWMMA_{k}={v}" for k, v in zip(("BN", "TB", "STAGES"), cfg.split(","))]
extra = [a for a in sys.argv[1:] if a.startswith("-D")]
if extra:
    VARIANTS = {"command line " + " ".join(extra): extra}
sizes = [int(s) for s in sys.argv[1:] if s.isdigit()] or [4096, 8192]

for name, err in build.prebuild(4, "tc_gemm", VARIANTS).items():  # in parallel; loads below hit the cache
    print(f"build {name} failed:\n{err}")

for prob, dt, base_name, base in ((catalog.FP16, "f16", "cuBLAS FP16", torch_linear),
                                  (catalog.INT8, "s8", "torch._int_mm", torch_int_mm)):
    ops = {base_name: base}
    for vname, flags in VARIANTS.items():
        mod = build.load(4, "tc_gemm", solution=True, extra_cuda_flags=flags)
        kinds = ("wmma", "mma") if vname == "shipped" else (vname.split()[0],)
        for kind in kinds:
            op = prob.bind(getattr(mod, f"gemm_{kind}_{dt}"), f"{dt} {kind} {vname.split()[-1]}")
            res = check.check(prob, op, shapes=[(17, 33, 65), (127, 255, 1001), (256, 512, 384), (300, 520, 4096)])
            print(("PASS " if res.ok else "FAIL ") + op.__name__, "" if res.ok else res)
            if res.ok:
                ops[op.__name__] = op
    bench.compare(prob, ops, [(n, n, n) for n in sizes], baseline=base_name, reps=30)
