"""Lesson 06 tuning: build the fused W8A16 GEMV with other -D settings (GEMV_WARPS, GEMV_UNROLL,
GEMV_L2_PREFETCH, GEMV_MIN_BLOCKS, GEMV_I8_CHUNKS), check each, and time it at decode shapes, weights rotated past L2.

    python dev/tune_w8a16.py [-DGEMV_UNROLL=3 ...]
    python dev/tune_w8a16.py --tiled [-DTILE_STAGES=3 ...]   the tiled kernel (gemm_w8a16) and W8A8 at M = 16..256
    python dev/tune_w8a16.py --same-bytes   cuBLAS and our FP16 GEMV on FP16 weights of the INT8 weights' bytes

Prints each variant's time and % of the measured copy bandwidth. What the sweeps found is in lessons/06_fused_int8/notes.md."""
import sys

import torch

from harness import bench, build, catalog, check, roofline

VARIANTS = {"shipped": [], "32 int8 per lane": ["-DGEMV_I8_CHUNKS=2"],
            "32 per lane, 1 in flight": ["-DGEMV_I8_CHUNKS=2", "-DGEMV_UNROLL=1"],
            "32 per lane, 16 warps": ["-DGEMV_I8_CHUNKS=2", "-DGEMV_WARPS=16"],
            "32 per lane, 16 warps, 1 in flight": ["-DGEMV_I8_CHUNKS=2", "-DGEMV_WARPS=16", "-DGEMV_UNROLL=1"],
            "16 warps, 1 in flight": ["-DGEMV_WARPS=16", "-DGEMV_UNROLL=1"]}
if "--same-bytes" in sys.argv:
    # Control for the bandwidth target: cuBLAS and our FP16 GEMV reading FP16 weights of the same byte count as
    # the INT8 weights of each target shape (K halved), at M = 1, next to the fused INT8 GEMV.
    bw = roofline.ceilings()["copy_GBps"]
    mod = build.load(6, "w8a16_fast", solution=True)
    f16, fused = catalog.GEMV_F16, catalog.W8A16.bind(mod.gemv_w8a16)
    for N, K in ((8192, 8192), (14336, 4096)):
        half = (1, N, K // 2)
        sets = bench.input_sets(f16, half)
        for name, op in (("cuBLAS FP16", torch.nn.functional.linear), ("our FP16 GEMV", f16.bind(mod.gemv_f16))):
            t = bench.time_fn(op, sets, reps=50).median_us
            print(f"{name:<14} M=1 N={N} K={K // 2} (FP16, {f16.bytes(half) / 1e6:.1f} MB): {t:6.1f} µs "
                  f"{100 * f16.bytes(half) / bw / 1e3 / t:5.1f}% of copy bw")
        s8 = (1, N, K)
        t = bench.time_fn(fused, bench.input_sets(catalog.W8A16, s8), reps=50).median_us
        print(f"{'fused INT8':<14} M=1 N={N} K={K} (INT8, {catalog.W8A16.bytes(s8) / 1e6:.1f} MB): {t:6.1f} µs "
              f"{100 * catalog.W8A16.bytes(s8) / bw / 1e3 / t:5.1f}% of copy bw")
    sys.exit(0)
TILED = "--tiled" in sys.argv
if TILED:
    VARIANTS = {"shipped": [], "64-token tile: 4 stages": ["-DTILE_STAGES_64=4"], "3 stages": ["-DTILE_STAGES=3"],
                "no L2 prefetch hint": ["-DTILE_L2_PREFETCH=0"]}
extra = [a for a in sys.argv[1:] if a.startswith("-D")]
if extra:
    VARIANTS = {"command line " + " ".join(extra): extra}
SHAPES = [(1, 8192, 8192), (16, 8192, 8192), (1, 14336, 4096), (16, 14336, 4096), (1, 4096, 14336), (1, 4096, 4096)]
if TILED:
    SHAPES = [(m, n, k) for m in (32, 64, 256) for n, k in ((8192, 8192), (4096, 14336), (14336, 4096))]

for name, err in build.prebuild(6, "w8a16_fast", VARIANTS).items():  # in parallel; loads below hit the cache
    print(f"build {name} failed:\n{err}")
bw = roofline.ceilings()["copy_GBps"]
prob = catalog.W8A16
def cublas_us(s):  # the baseline each shape is compared with: cuBLAS FP16 on FP16 weights, same run
    sets = bench.input_sets(prob, s)
    w16 = {id(q): q.half() * sc.repeat_interleave(prob.group, dim=1) for _, q, sc in sets}  # sets hold q alive
    return bench.time_fn(lambda x, q, sc: torch.nn.functional.linear(x, w16[id(q)]), sets, reps=50).median_us


base = {s: cublas_us(s) for s in SHAPES} if TILED else {}
for name, flags in VARIANTS.items():
    mod = build.load(6, "w8a16_fast", solution=True, extra_cuda_flags=flags)
    ops = {"tiled W8A16": (prob, prob.bind(mod.gemm_w8a16)), "W8A8": (catalog.W8A8, catalog.W8A8.bind(mod.linear_w8a8))} \
        if TILED else {"GEMV": (prob, prob.bind(mod.gemv_w8a16))}
    for what, (p, op) in ops.items():
        res = check.check(p, op)
        if not res.ok:
            print(f"FAIL {name} {what}\n{res.first_failure()}")
            continue
        cells = []
        for s in SHAPES:
            t = bench.time_fn(op, bench.input_sets(p, s), reps=50).median_us
            cell = f"M={s[0]} N={s[1]} K={s[2]}: {t:6.1f} µs {100 * p.bytes(s) / bw / 1e3 / t:5.1f}%"
            cells.append(cell + (f" {base[s] / t:4.2f}x cuBLAS" if TILED else ""))
        print(f"{name:<22} {what}\n    " + "\n    ".join(cells), flush=True)
