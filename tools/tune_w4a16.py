"""Lesson 07 tuning: build the fused W4A16 kernels with other -D settings, check each, and time it, weights rotated
past L2.

    python tools/tune_w4a16.py [-DGEMV_STAGES=4 ...]            the decode GEMV (gemv_w4a16) at M = 1 and 16
    python tools/tune_w4a16.py --tiled [-DTILE_STAGES=3 ...]    the tiled kernel (gemm_w4a16) at M = 16..256,
                                                                next to the GEMV and cuBLAS FP16

Settings: GEMV_PREFETCH, GEMV_R, GEMV_WARPS, GEMV_MIN_BLOCKS, GEMV_RING_UNROLL, TILE_STAGES, TILE_SPLIT_BLOCKS. Prints each variant's time and % of the
measured copy bandwidth. What the sweeps found is in NOTES.md."""
import sys

import torch

from harness import bench, build, catalog, check, roofline

TILED = "--tiled" in sys.argv
VARIANTS = {"shipped": [], "1 ahead": ["-DGEMV_PREFETCH=1"], "1 ahead, 2 blocks/SM": ["-DGEMV_PREFETCH=1", "-DGEMV_MIN_BLOCKS=2"],
            "1 ahead, 16 outputs": ["-DGEMV_PREFETCH=1", "-DGEMV_R=1"], "1 ahead, 4 warps": ["-DGEMV_PREFETCH=1", "-DGEMV_WARPS=4"],
            "2 ahead, not unrolled, 2 blocks/SM": ["-DGEMV_RING_UNROLL=0", "-DGEMV_MIN_BLOCKS=2"],
            "loads only, 1 ahead": ["-DGEMV_LOADS_ONLY=1", "-DGEMV_PREFETCH=1"],
            "loads only, 2 ahead": ["-DGEMV_LOADS_ONLY=1", "-DGEMV_PREFETCH=2"],
            "loads only, 3 ahead": ["-DGEMV_LOADS_ONLY=1", "-DGEMV_PREFETCH=3"]}
SHAPES = [(1, 8192, 8192), (8, 8192, 8192), (16, 8192, 8192), (1, 14336, 4096), (1, 4096, 14336), (8, 4096, 14336),
          (16, 14336, 4096)]
if TILED:
    VARIANTS = {"shipped": [], "x paired by every warp": ["-DTILE_PREPAIR=0"], "3 stages": ["-DTILE_STAGES=3"]}
    SHAPES = [(m, n, k) for m in (16, 32, 64, 128, 256) for n, k in ((8192, 8192), (14336, 4096))]
extra = [a for a in sys.argv[1:] if a.startswith("-D")]
if extra:
    VARIANTS = {"command line " + " ".join(extra): extra}

for name, err in build.prebuild(7, "w4a16", VARIANTS).items():  # in parallel; loads below hit the cache
    print(f"build {name} failed:\n{err}")
bw = roofline.ceilings()["copy_GBps"]
prob = catalog.W4A16


def cublas_us(s):  # cuBLAS FP16 on FP16 weights of the same shape, this run
    sets = bench.input_sets(catalog.FP16, s)
    return bench.time_fn(torch.nn.functional.linear, sets, reps=50).median_us


base = {s: cublas_us(s) for s in SHAPES}
for name, flags in VARIANTS.items():
    mod = build.load(7, "w4a16", solution=True, extra_cuda_flags=flags)
    regs = {k: (v["sm_90"]["registers"], v["sm_90"]["spill_stores"]) for k, v in mod.resources().items()
            if ("tiled" in k) == TILED and "<true" in k}
    ops = {"tiled": prob.bind(mod.gemm_w4a16)} if TILED and name != "shipped" else \
        {"tiled": prob.bind(mod.gemm_w4a16), "GEMV": prob.bind(mod.gemv_w4a16)} if TILED else \
        {"GEMV": prob.bind(mod.gemv_w4a16)}
    for what, op in ops.items():
        res = check.check(prob, op)
        if not res.ok and "LOADS_ONLY" not in str(flags):
            print(f"FAIL {name} {what}\n{res.first_failure()}")
            continue
        cells = []
        for s in SHAPES:
            t = bench.time_fn(op, bench.input_sets(prob, s), reps=50).median_us
            cells.append(f"M={s[0]} N={s[1]} K={s[2]}: {t:6.1f} µs {100 * prob.bytes(s) / bw / 1e3 / t:5.1f}% "
                         f"{base[s] / t:4.2f}x cuBLAS ({base[s]:.1f})")
        print(f"{name:<22} {what} {regs}\n    " + "\n    ".join(cells), flush=True)
