"""Lesson 04 tuning: build the tensor-core kernels with other tile configurations, check each, and time them
against cuBLAS FP16 and torch._int_mm in one run.

    python dev/tune_tc.py [4096 8192] [MMA_BN=256 MMA_TB=64 ...]
    python dev/tune_tc.py --ablate [--record]   what each part of the kernels' K loop costs
                                                  (--record: results/04.json, section "ablate", with
                                                  COURSE_RECORD=1; lesson 04's notebook shows it)

A configuration is block tile width, shared tile depth in bytes, pipeline stages (the constexpr ints at the top of
solutions/04_tensor_cores/tc_fast.cu, set in a copy of the file: dev/tc_variants.py); the cp.async ones are built
with the launcher's copy-engine path cut ("no copy engine"), so an H100 runs them and not the copy-engine kernel.
--ablate times the named variants of dev/tc_variants.py: the mma.sync kernel with parts of its K loop switched off
(the refills, the per-step fragment loads, the waits for the tiles): the results are wrong, so those builds are
timed, not checked; the time each saves is what that part costs. It also times both kernels on the two pipelines:
cp.async copies by the math warps ("cp.async copies"), and the copy engine with padded 144-byte rows instead of
swizzled 128-byte ones (WMMA then uses its API only, load_matrix_sync and store_matrix_sync); and WMMA on swizzled
tiles writing y through store_matrix_sync instead of from registers. What the sweeps found is in
lessons/04_tensor_cores/notes.md."""
import concurrent.futures as cf
import os
import subprocess
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import tc_variants  # noqa: E402

from harness import bench, build, catalog, check, results  # noqa: E402
from harness.problems import torch_int_mm, torch_linear  # noqa: E402

ABLATE = "--ablate" in sys.argv
VARIANTS = {"shipped": ("shipped", {})}  # label -> (tc_variants name, constexpr ints set)
if ABLATE:
    VARIANTS.update({name: (name, {}) for name in tc_variants.VARIANTS})
    # Checked before timing; the K-loop ablations are wrong on purpose and only timed.
    CHECKED, WMMA_ONLY = tc_variants.CHECKED, tc_variants.WMMA_ONLY
else:
    for cfg in ("128,64,4", "128,128,2", "256,64,4", "256,128,3", "256,64,3"):
        VARIANTS[f"mma {cfg}"] = ("no copy engine", {f"MMA_{k}": int(v) for k, v in zip(("BN", "TB", "STAGES"), cfg.split(","))})
    for cfg in ("128,64,4", "256,128,3"):
        VARIANTS[f"wmma {cfg}"] = ("no copy engine", {f"WMMA_{k}": int(v) for k, v in zip(("BN", "TB", "STAGES"), cfg.split(","))})
    for stages in (3, 4):  # the copy-engine path (sm_90): ring depth
        VARIANTS[f"mma tma{stages}"] = ("shipped", {"TMA_STAGES": stages})
        VARIANTS[f"wmma tma{stages}"] = ("shipped", {"TMA_STAGES": stages})
extra = dict(a.split("=", 1) for a in sys.argv[1:] if "=" in a and not a.startswith("-"))
if extra:
    VARIANTS = {"command line " + " ".join(f"{k}={v}" for k, v in extra.items()): ("shipped", {k: int(v) for k, v in extra.items()})}
sizes = [int(s) for s in sys.argv[1:] if s.isdigit()] or [4096, 8192]
PATHS = {label: tc_variants.path(name, consts) for label, (name, consts) in VARIANTS.items()}


def prebuild(p: Path):  # in a child process, as build.prebuild does: the loads below hit the cache
    code = f"from harness import build; build.load_file({str(p)!r}, solution=True)"
    return subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=build.ROOT)


with cf.ThreadPoolExecutor(max(1, min(len(PATHS), os.cpu_count() or 1))) as ex:
    for label, r in zip(PATHS, ex.map(prebuild, PATHS.values())):
        if r.returncode:
            print(f"build {label} failed:\n{r.stderr[-2000:]}")

rows = []
for prob, dt, base_name, base in ((catalog.FP16, "f16", "cuBLAS FP16", torch_linear),
                                  (catalog.INT8, "s8", "torch._int_mm", torch_int_mm)):
    ops = {base_name: base}
    for vname in VARIANTS:
        mod = build.load_file(PATHS[vname], solution=True)
        if ABLATE:
            kinds = ("wmma",) if vname in WMMA_ONLY else ("wmma", "mma") if vname in CHECKED else ("mma",)
        else:
            kinds = ("wmma", "mma") if vname == "shipped" or extra else (vname.split()[0],)
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
