"""Lesson 06 tuning: build the fused W8A16 GEMV with other -D settings (GEMV_WARPS, GEMV_UNROLL,
GEMV_L2_PREFETCH, GEMV_MIN_BLOCKS, GEMV_I8_CHUNKS), check each, and time it at decode shapes, weights rotated past L2.

    python tools/tune_w8a16.py [-DGEMV_UNROLL=3 ...]

Prints each variant's time and % of the measured copy bandwidth. What the sweeps found is in NOTES.md."""
import sys

from harness import bench, build, catalog, check, roofline

VARIANTS = {"shipped": [], "32 int8 per lane": ["-DGEMV_I8_CHUNKS=2"],
            "32 per lane, 1 in flight": ["-DGEMV_I8_CHUNKS=2", "-DGEMV_UNROLL=1"],
            "32 per lane, 16 warps": ["-DGEMV_I8_CHUNKS=2", "-DGEMV_WARPS=16"],
            "32 per lane, 16 warps, 1 in flight": ["-DGEMV_I8_CHUNKS=2", "-DGEMV_WARPS=16", "-DGEMV_UNROLL=1"],
            "16 warps, 1 in flight": ["-DGEMV_WARPS=16", "-DGEMV_UNROLL=1"]}
extra = [a for a in sys.argv[1:] if a.startswith("-D")]
if extra:
    VARIANTS = {"command line " + " ".join(extra): extra}
SHAPES = [(1, 8192, 8192), (16, 8192, 8192), (1, 14336, 4096), (16, 14336, 4096), (1, 4096, 14336), (1, 4096, 4096)]

for name, err in build.prebuild(6, "w8a16", VARIANTS).items():  # in parallel; loads below hit the cache
    print(f"build {name} failed:\n{err}")
bw = roofline.ceilings()["copy_GBps"]
prob = catalog.W8A16
for name, flags in VARIANTS.items():
    op = prob.bind(build.load(6, "w8a16", solution=True, extra_cuda_flags=flags).gemv_w8a16)
    res = check.check(prob, op)
    if not res.ok:
        print(f"FAIL {name}\n{res.first_failure()}")
        continue
    cells = []
    for s in SHAPES:
        t = bench.time_fn(op, bench.input_sets(prob, s), reps=50).median_us
        cells.append(f"M={s[0]} N={s[1]} K={s[2]}: {t:6.1f} µs {100 * prob.bytes(s) / bw / 1e3 / t:5.1f}%")
    print(f"{name:<22} " + " | ".join(cells), flush=True)
