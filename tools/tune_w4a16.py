"""Lesson 07 tuning: build the fused W4A16 GEMV with other -D settings (GEMV_PREFETCH, GEMV_R, GEMV_WARPS, GEMV_MIN_BLOCKS), check
each, and time it at decode shapes, weights rotated past L2.

    python tools/tune_w4a16.py [-DGEMV_PREFETCH=1 ...]

Prints each variant's time and % of the measured copy bandwidth. What the sweeps found is in NOTES.md."""
import sys

from harness import bench, build, catalog, check, roofline

VARIANTS = {"shipped": [], "3 blocks/SM": ["-DGEMV_MIN_BLOCKS=3"],
            "3 blocks/SM, 1 ahead": ["-DGEMV_MIN_BLOCKS=3", "-DGEMV_PREFETCH=1"],
            "4 blocks/SM, 1 ahead": ["-DGEMV_MIN_BLOCKS=4", "-DGEMV_PREFETCH=1"], "1 ahead": ["-DGEMV_PREFETCH=1"]}
extra = [a for a in sys.argv[1:] if a.startswith("-D")]
if extra:
    VARIANTS = {"command line " + " ".join(extra): extra}
SHAPES = [(1, 8192, 8192), (16, 8192, 8192), (1, 14336, 4096), (1, 4096, 14336), (16, 4096, 14336)]

for name, err in build.prebuild(7, "w4a16", VARIANTS).items():  # in parallel; loads below hit the cache
    print(f"build {name} failed:\n{err}")
bw = roofline.ceilings()["copy_GBps"]
prob = catalog.W4A16
for name, flags in VARIANTS.items():
    mod = build.load(7, "w4a16", solution=True, extra_cuda_flags=flags)
    op = prob.bind(mod.gemv_w4a16)
    res = check.check(prob, op)
    if not res.ok:
        print(f"FAIL {name}\n{res.first_failure()}")
        continue
    regs = {k: (v["sm_90"]["registers"], v["sm_90"]["spill_stores"]) for k, v in mod.resources().items() if "true" in k}
    cells = []
    for s in SHAPES:
        t = bench.time_fn(op, bench.input_sets(prob, s), reps=50).median_us
        cells.append(f"M={s[0]} N={s[1]} K={s[2]}: {t:6.1f} µs {100 * prob.bytes(s) / bw / 1e3 / t:5.1f}%")
    print(f"{name:<26} {regs}\n    " + "\n    ".join(cells), flush=True)
