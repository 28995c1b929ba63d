"""Lesson 07 tuning: build the fused W4A16 kernels with other -D settings, check each, and time it, weights rotated
past L2.

    python dev/tune_w4a16.py [-DGEMV_STAGES=4 ...]            the decode GEMV (gemv_w4a16) at M = 1 and 16
    python dev/tune_w4a16.py --tiles [-D...]                  the same GEMV on weights in 16-row tiles
                                                                (gemv_w4a16_tiles, quant.to_tiles)
    python dev/tune_w4a16.py --tiles --persist                the GEMV on tiles at M <= 8, a block per unit
                                                                against one generation of looping blocks: per
                                                                call and in a CUDA graph, outputs compared bit
                                                                for bit on the large shapes
    python dev/tune_w4a16.py --tiled [-DTILE_STAGES=3 ...]    the tiled kernel (gemm_w4a16) at M = 16..256,
                                                                next to the GEMV and cuBLAS FP16
    python dev/tune_w4a16.py --same-bytes   cuBLAS and an FP16 GEMV on FP16 weights of the INT4 weights' bytes

Settings: GEMV_PERSIST, GEMV_PREFETCH, GEMV_L2_HINT, GEMV_LOADS_ONLY (an experiment: the loads without the arithmetic), GEMV_R, GEMV_WARPS, GEMV_MIN_BLOCKS, GEMV_RING_UNROLL, TILE_STAGES, TILE_SPLIT_BLOCKS. Prints each variant's time and % of the
measured copy bandwidth. What the sweeps found is in lessons/07_fused_int4/notes.md."""
import re
import sys

import torch

from harness import bench, build, catalog, check, roofline

if "--same-bytes" in sys.argv:
    # Control for the bandwidth target: cuBLAS and lesson 06's FP16 GEMV reading FP16 weights of the same byte
    # count as the INT4 weights (K / 4), at M = 1, next to the fused W4A16 GEMV.
    bw = roofline.ceilings()["copy_GBps"]
    mod6, mod = build.load(6, "w8a16_fast", solution=True), build.load(7, "w4a16_fast", solution=True)
    f16, fused = catalog.GEMV_F16, catalog.W4A16.bind(mod.gemv_w4a16)
    for N, K in ((8192, 8192), (14336, 4096), (4096, 14336)):
        quarter = (1, N, K // 4)
        sets = bench.input_sets(f16, quarter)
        for name, op in (("cuBLAS FP16", torch.nn.functional.linear), ("06 FP16 GEMV", f16.bind(mod6.gemv_f16))):
            t = bench.time_fn(op, sets, reps=50).median_us
            print(f"{name:<14} M=1 N={N} K={K // 4} (FP16, {f16.bytes(quarter) / 1e6:.1f} MB): {t:6.1f} µs "
                  f"{100 * f16.bytes(quarter) / bw / 1e3 / t:5.1f}% of copy bw")
        s4 = (1, N, K)
        t = bench.time_fn(fused, bench.input_sets(catalog.W4A16, s4), reps=50).median_us
        print(f"{'fused INT4':<14} M=1 N={N} K={K} (INT4, {catalog.W4A16.bytes(s4) / 1e6:.1f} MB): {t:6.1f} µs "
              f"{100 * catalog.W4A16.bytes(s4) / bw / 1e3 / t:5.1f}% of copy bw", flush=True)
    sys.exit(0)
TILED, TILES = "--tiled" in sys.argv, "--tiles" in sys.argv
VARIANTS = {"shipped": [], "L2 hint 128 B": ["-DGEMV_L2_HINT=128"], "no L2 hint": ["-DGEMV_L2_HINT=0"],
            "16 warps": ["-DGEMV_WARPS=16", "-DGEMV_MIN_BLOCKS=1"], "2 ahead": ["-DGEMV_PREFETCH=2"],
            "loads only": ["-DGEMV_LOADS_ONLY=1"], "loads only, L2 hint 128 B": ["-DGEMV_LOADS_ONLY=1", "-DGEMV_L2_HINT=128"],
            "loads only, no L2 hint": ["-DGEMV_LOADS_ONLY=1", "-DGEMV_L2_HINT=0"],
            "loads only, 16 warps": ["-DGEMV_LOADS_ONLY=1", "-DGEMV_WARPS=16", "-DGEMV_MIN_BLOCKS=1"]}
SHAPES = [(1, 8192, 8192), (8, 8192, 8192), (16, 8192, 8192), (1, 14336, 4096), (1, 4096, 14336), (8, 4096, 14336),
          (16, 14336, 4096)]
if TILES:  # the sweep behind the tiled layout's launch rule (lessons/07_fused_int4/notes.md, “The GEMV on weights in 16-row tiles”)
    VARIANTS = {"shipped": [], "loads only": ["-DGEMV_LOADS_ONLY=1"],
                "loads only, 16 warps": ["-DGEMV_LOADS_ONLY=1", "-DGEMV_WARPS=16"], "L2 hint 128 B": ["-DGEMV_L2_HINT=128"],
                "no L2 hint": ["-DGEMV_L2_HINT=0"], "2 tiles per block": ["-DGEMV_R=2"], "1 tile per block": ["-DGEMV_R=1"],
                "2 ahead, not unrolled": ["-DGEMV_PREFETCH=2", "-DGEMV_RING_UNROLL=0"], "4 warps": ["-DGEMV_WARPS=4"]}
    SHAPES = [(m, n, k) for n, k in ((8192, 8192), (14336, 4096), (4096, 14336), (4096, 4096)) for m in (1, 16)]
PERSIST = TILES and "--persist" in sys.argv
if PERSIST:  # one generation of looping blocks (shipped) against a block per unit (lessons/07_fused_int4/notes.md)
    VARIANTS = {"shipped": [], "a block per unit": ["-DGEMV_PERSIST=0"]}
    SHAPES = [(m, n, k) for n, k in ((8192, 8192), (14336, 4096), (28672, 4096), (4096, 14336)) for m in (1, 4)]
if TILED:
    VARIANTS = {"shipped": [], "x paired by every warp": ["-DTILE_PREPAIR=0"], "3 stages": ["-DTILE_STAGES=3"]}
    SHAPES = [(m, n, k) for m in (16, 32, 64, 128, 256) for n, k in ((8192, 8192), (14336, 4096))]
extra = [a for a in sys.argv[1:] if a.startswith("-D")]
if extra:
    VARIANTS = {"command line " + " ".join(extra): extra}

for name, err in build.prebuild(7, "w4a16_fast", VARIANTS).items():  # in parallel; loads below hit the cache
    print(f"build {name} failed:\n{err}")
bw = roofline.ceilings()["copy_GBps"]
prob = catalog.W4A16_TILES if TILES else catalog.W4A16  # the tiles problem's inputs are quant.Int4Tiles


def cublas_us(s):  # cuBLAS FP16 on FP16 weights of the same shape, this run
    sets = bench.input_sets(catalog.FP16, s)
    return bench.time_fn(torch.nn.functional.linear, sets, reps=50).median_us


base = {s: cublas_us(s) for s in SHAPES}
ref_out = {}  # PERSIST: the shipped build's outputs, which every variant must match bit for bit
for name, flags in VARIANTS.items():
    mod = build.load(7, "w4a16_fast", solution=True, extra_cuda_flags=flags)
    regs = {k: (v["sm_90"]["registers"], v["sm_90"]["spill_stores"]) for k, v in mod.resources().items()
            if ("tiled" in k) == TILED and "<true" in k and (re.search(r"<true, \d, \d, true", k) or not TILES)}
    ops = {"tiled": prob.bind(mod.gemm_w4a16)} if TILED and name != "shipped" else \
        {"tiled": prob.bind(mod.gemm_w4a16), "GEMV": prob.bind(mod.gemv_w4a16)} if TILED else \
        {"GEMV on tiles": prob.bind(mod.gemv_w4a16_tiles)} if TILES else {"GEMV": prob.bind(mod.gemv_w4a16)}
    for what, op in ops.items():
        res = check.check(prob, op)
        if not res.ok and "LOADS_ONLY" not in str(flags):
            print(f"FAIL {name} {what}\n{res.first_failure()}")
            continue
        cells = []
        for s in SHAPES:
            sets = bench.input_sets(prob, s)
            out = op(*sets[0]) if PERSIST else None  # a fresh output
            same = out is None or torch.equal(ref_out.setdefault(s, out), out)
            tm = bench.time_fn(op, sets, reps=50, graph=PERSIST)
            t = tm.median_us
            cells.append(f"M={s[0]} N={s[1]} K={s[2]}: {t:6.1f} µs {100 * prob.bytes(s) / bw / 1e3 / t:5.1f}% "
                         f"{base[s] / t:4.2f}x cuBLAS ({base[s]:.1f})" +
                         (f" | graph {tm.graph_us:6.1f} µs {100 * prob.bytes(s) / bw / 1e3 / tm.graph_us:5.1f}%"
                          f"{'' if same else ' OUTPUT DIFFERS from shipped'}" if PERSIST else ""))
        print(f"{name:<22} {what} {regs}\n    " + "\n    ".join(cells), flush=True)
