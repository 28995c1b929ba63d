"""Lesson 04 tuning: build the tensor-core kernels with other tile configurations (-D macros), check
each, and time them against cuBLAS FP16 and torch._int_mm in one run.

    python dev/tune_tc.py [4096 8192] [-DMMA_BN=256 -DMMA_TB=64 ...]
    python dev/tune_tc.py --ablate [--record]   what each part of the kernels' K loop costs
                                                  (--record: results/04.json, section "ablate", with
                                                  COURSE_RECORD=1; lesson 04's notebook shows it)

A configuration is block tile width, shared tile depth in bytes, pipeline stages (see solutions/04_tensor_cores/tc_fast.cu); the
cp.async ones are built with TC_TMA=0, so an H100 runs them and not the copy-engine path.
--ablate builds the mma.sync kernel with parts of its K loop switched off (TC_ABLATE in tc_fast.cu: the
refills, the per-step fragment loads, the waits for the tiles): the results are wrong, so those builds are
timed, not checked; the time each saves is what that part costs. It also times both kernels on the two
pipelines: cp.async copies by the math warps (TC_TMA=0), and the copy engine with padded 144-byte rows
instead of swizzled 128-byte ones (MMA_SWZ=0, WMMA_SWZ=0: WMMA then uses its API only, load_matrix_sync and
store_matrix_sync); and WMMA on swizzled tiles writing y through store_matrix_sync instead of from registers
(WMMA_REG_EPI=0). What the sweeps found is in lessons/04_tensor_cores/notes.md."""
import sys

from harness import bench, build, catalog, check, results
from harness.problems import torch_int_mm, torch_linear

ABLATE = "--ablate" in sys.argv
VARIANTS = {"shipped": []}
if ABLATE:
    VARIANTS.update({"cp.async copies": ["-DTC_TMA=0"], "copy engine, padded rows": ["-DMMA_SWZ=0", "-DWMMA_SWZ=0"],
                     "copy engine, store_matrix_sync epilogue": ["-DWMMA_REG_EPI=0"],
                     "no refills": ["-DTC_ABLATE=1"], "fragments once per tile": ["-DTC_ABLATE=2"],
                     "no waits": ["-DTC_ABLATE=4"], "none of the three": ["-DTC_ABLATE=7"]})
    # Checked before timing; the TC_ABLATE builds are wrong on purpose and only timed.
    CHECKED = {"shipped", "cp.async copies", "copy engine, padded rows", "copy engine, store_matrix_sync epilogue"}
    WMMA_ONLY = {"copy engine, store_matrix_sync epilogue"}  # a switch of the WMMA kernel alone
else:
    for cfg in ("128,64,4", "128,128,2", "256,64,4", "256,128,3", "256,64,3"):
        VARIANTS[f"mma {cfg}"] = ["-DTC_TMA=0"] + [f"-DMMA_{k}={v}" for k, v in zip(("BN", "TB", "STAGES"), cfg.split(","))]
    for cfg in ("128,64,4", "256,128,3"):
        VARIANTS[f"wmma {cfg}"] = ["-DTC_TMA=0"] + [f"-DWMMA_{k}={v}" for k, v in zip(("BN", "TB", "STAGES"), cfg.split(","))]
    for stages in (3, 4):  # the copy-engine path (sm_90): ring depth
        VARIANTS[f"mma tma{stages}"] = [f"-DTMA_STAGES={stages}"]
        VARIANTS[f"wmma tma{stages}"] = [f"-DTMA_STAGES={stages}"]
extra = [a for a in sys.argv[1:] if a.startswith("-D")]
if extra:
    VARIANTS = {"command line " + " ".join(extra): extra}
sizes = [int(s) for s in sys.argv[1:] if s.isdigit()] or [4096, 8192]

for name, err in build.prebuild(4, "tc_fast", VARIANTS).items():  # in parallel; loads below hit the cache
    print(f"build {name} failed:\n{err}")

rows = []
for prob, dt, base_name, base in ((catalog.FP16, "f16", "cuBLAS FP16", torch_linear),
                                  (catalog.INT8, "s8", "torch._int_mm", torch_int_mm)):
    ops = {base_name: base}
    for vname, flags in VARIANTS.items():
        mod = build.load(4, "tc_fast", solution=True, extra_cuda_flags=flags)
        if ABLATE:
            kinds = ("wmma",) if vname in WMMA_ONLY else ("wmma", "mma") if vname in CHECKED else ("mma",)
        else:
            kinds = ("wmma", "mma") if vname == "shipped" else (vname.split()[0],)
        for kind in kinds:
            label = f"{dt} {kind} {vname}" if ABLATE else f"{dt} {kind} {vname.split()[-1]}"
            op = prob.bind(getattr(mod, f"gemm_fast_{kind}_{dt}"), label)
            if ABLATE and vname not in CHECKED:
                ops[op.__name__] = op  # wrong on purpose: timed only
                continue
            res = check.check(prob, op, shapes=[(17, 33, 65), (127, 255, 1001), (256, 512, 384), (300, 520, 4096), (100, 300, 200)])
            print(("PASS " if res.ok else "FAIL ") + op.__name__, "" if res.ok else res)
            if res.ok:
                ops[op.__name__] = op
    rows += bench.compare(prob, ops, [(n, n, n) for n in sizes], baseline=base_name, reps=30)
if ABLATE and "--record" in sys.argv:
    results.record(4, "ablate", rows)
