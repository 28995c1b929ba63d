"""Lesson 06's benchmark: W8A16 (INT8 weights, group 128) four ways, against cuBLAS on FP16 weights, at decode and
small-batch shapes, weights rotated past L2, every route in the same run.

The four implementations, each with the lesson's teaching kernels (kernels/ with --exercises, else solutions/):
(a) unfused Python: dequantize with PyTorch ops (FP32 intermediate), then matmul
(b) unfused cuBLAS: the dequantize kernel writes FP16 W, then cuBLAS (F.linear)
(c) separate CUDA: the dequantize kernel, then the FP16 GEMV
(d) fused: the GEMV reading INT8 weights, dequantizing in registers; no FP16 W in memory
and W8A8 (x quantized per token, then the INT8 GEMV with its scaling epilogue).

The lesson's fast kernel (solutions/06_fused_int8/w8a16_fast.cu, no exercise) on the same shapes, the recorded rows:
(b), (d) linear_w8a16 (its tensor-core GEMV to M = 16, its tiled kernel above; each also timed alone at every M),
(e) at M <= 16 the fused GEMV on the same weights stored in 16-row tiles (repacked before timing), and W8A8 (M > 16,
where torch._int_mm runs) against PyTorch's quantize + torch._int_mm + scaling and torch._int_mm alone. Its route
(c) runs its FP16 GEMV at M <= 16 and lesson 04's fast GEMM above (solution mode only: with --exercises nothing of
another lesson is timed). At M <= 16 every route is also timed replayed from a CUDA graph (column graph_us).

    python lessons/06_fused_int8/bench_06.py [--m 1 4 16 64 256] [--exercises] [--record]

The notebook imports it (`import bench_06`): run(...) times a subset (routes=, shapes=) in the notebook's process;
traffic() is the bytes each route moves (no GPU needed). With --record the rows go to build/results/06.json
(results/06.json with COURSE_RECORD=1).
"""
import argparse

import torch

from harness import bench, build, catalog, quant, results, roofline
from harness.problems import torch_w8a8

SECTION = "table"
SHAPES_KN = [(4096, 4096), (4096, 14336), (14336, 4096), (8192, 8192)]
CUBLAS = results.CUBLAS_FP16
PYTHON = results.register("w8a16.python", "(a) unfused Python")
# the teaching kernels (w8a16.cu)
BASIC_UNFUSED = results.register("w8a16.basic_dequant_cublas", "(b) dequantize kernel + cuBLAS", "(b) dequant + cuBLAS")
BASIC_SEPARATE = results.register("w8a16.basic_separate", "(c) dequantize kernel + FP16 GEMV", "(c) dequant + GEMV")
BASIC_FUSED = results.register("w8a16.basic_fused", "(d) fused GEMV (teaching kernel)", "(d) fused GEMV")
BASIC_W8A8 = results.register("w8a8.basic", "W8A8 teaching GEMV (quantize + INT8 GEMV)", "W8A8 teaching GEMV")
# the fast kernel (w8a16_fast.cu): the recorded routes
UNFUSED = results.register("w8a16.dequant_cublas", "(b) unfused cuBLAS")
SEPARATE = results.register("w8a16.separate", "(c) separate CUDA")
FUSED = results.register("w8a16.fused", "(d) fused W8A16")
GEMV = results.register("w8a16.gemv", "(d) fused, GEMV kernel", "(d) GEMV, row-major q")
TILED = results.register("w8a16.tiled", "(d) fused, tiled kernel")
GEMV_TILES = results.register("w8a16.gemv_tiles", "(e) fused GEMV, 16-row tiles", "(e) GEMV, 16-row tiles")
INT8PACK = results.register("torch.int8pack", "torch._weight_int8pack_mm (per-channel)")
W8A8 = results.register("w8a8.ours", "W8A8 ours (quantize + INT8 GEMM)", "ours: quantize + INT8 GEMM")
W8A8_TORCH = results.register("w8a8.torch", "W8A8 torch (quantize + _int_mm + scale)",
                              "torch: quantize + `_int_mm` + scale")
INT_MM = results.register("w8a8.int_mm", "W8A8 torch._int_mm alone (x quantized beforehand)", "`_int_mm` alone")

FOUR = (CUBLAS, PYTHON, BASIC_UNFUSED, BASIC_SEPARATE, BASIC_FUSED)  # the notebook's step 4
FAST = (BASIC_FUSED, UNFUSED, GEMV, GEMV_TILES)  # going further: the fast kernel against the teaching one
VIEWS = {
    "four": {"only": BASIC_FUSED, "ms": [1, 4, 16], "columns": list(FOUR),
             "derived": [["pct", BASIC_FUSED], ["vs", BASIC_FUSED, BASIC_UNFUSED], ["vs", BASIC_FUSED, CUBLAS]]},
    "fast": {"only": GEMV_TILES, "columns": [BASIC_FUSED, GEMV, GEMV_TILES],
             "derived": [["pct", BASIC_FUSED], ["pct", GEMV_TILES], ["vs", GEMV, BASIC_FUSED],
                         ["vs", GEMV_TILES, BASIC_FUSED]],
             "note": "µs, median; weights rotated past L2; the teaching GEMV, then the fast kernel's GEMV on row-major "
                     "q and on q in 16-row tiles."},
    "main": {"columns": [CUBLAS, PYTHON, UNFUSED, SEPARATE, FUSED],
             "derived": [["pct", FUSED], ["vs", FUSED, UNFUSED], ["vs", FUSED, CUBLAS]]},
    "tiles": {"only": GEMV_TILES, "columns": [CUBLAS, GEMV, GEMV_TILES],
              "derived": [["pct", GEMV], ["pct", GEMV_TILES], ["vs", GEMV_TILES, GEMV], ["vs", GEMV_TILES, CUBLAS]],
              "note": "µs, median; weights rotated past L2; (d) and (e) are the same kernel template and arithmetic "
                      "on the same bytes in two orders, each with its own launch (outputs per block, loads in flight)."},
    "w8a8": {"only": W8A8, "columns": [W8A8, W8A8_TORCH, INT_MM, FUSED], "derived": [["vs", W8A8, W8A8_TORCH]]},
    "w8a8_basic": {"only": BASIC_W8A8, "columns": [BASIC_W8A8, W8A8, W8A8_TORCH, INT_MM],
                   "derived": [["vs", BASIC_W8A8, W8A8_TORCH], ["vs", W8A8, W8A8_TORCH]]},
    "graph": {"kernels": {GEMV_TILES: "06 W8A16"}, "vs": {"cuBLAS FP16": CUBLAS, "dequantize + cuBLAS": UNFUSED}},
    "headline": {"ours": FUSED, "base": CUBLAS, "shape": [1, 8192, 8192]},
}


# Bytes each route moves per weight, kernel by kernel: (what, bytes read, bytes written). The scales (2 bytes per
# 128 weights) and x and y are added per route by traffic(); at decode they are small next to the weights.
KERNELS_PER_WEIGHT = {
    "(a) unfused Python": [("q.float()", 1, 4), ("· scale (FP32)", 4, 4), (".half()", 4, 2), ("x @ W.T", 2, 0)],
    "(b) dequant + cuBLAS": [("dequantize kernel", 1, 2), ("cuBLAS GEMV", 2, 0)],
    "(c) dequant + GEMV": [("dequantize kernel", 1, 2), ("FP16 GEMV", 2, 0)],
    "(d) fused": [("fused GEMV", 1, 0)],
    "cuBLAS, FP16 weights": [("cuBLAS GEMV", 2, 0)],
}


def traffic(shape=(1, 8192, 8192), c: dict | None = None) -> str:
    """DRAM bytes per weight and in all of each route at `shape` (M, N, K), and the time that traffic takes: the
    floor each route's measurement is held against. A route that only reads is held to the read bandwidth, one whose
    kernels also write to the copy bandwidth (bytes read + written), both of the ceilings c (the reference GPU's
    recording unless given: the same on every machine). No GPU needed."""
    M, N, K = shape
    c = c or roofline.recorded()
    read, kind = roofline.bandwidth(c)
    head = f"{'route':<22} {'kernels':>7} {'B/weight':>9} {'MB':>8} {'floor µs':>9}  at"
    out = [f"M = {M}, N = {N}, K = {K} ({N * K / 1e6:.1f} M weights); the {c['gpu']}'s {kind} bandwidth "
           f"{read:,.0f} GB/s, copy {c['copy_GBps']:,.0f} GB/s (measured {c['date'][:10]})", head]
    for route, kernels in KERNELS_PER_WEIGHT.items():
        per = sum(r + w for _, r, w in kernels)
        writes = any(w for _, _, w in kernels)
        bw, at = (c["copy_GBps"], "copy") if writes else (read, kind)
        scales = 0 if route.startswith("cuBLAS") else 2 * N * K // 128
        total = per * N * K + scales + 2 * M * K + 2 * M * N
        out.append(f"{route:<22} {len(kernels):>7} {per:>9} {total / 1e6:>8.1f} {total / bw / 1e3:>9.1f}  {at}")
    return "\n".join(out)


def dequant(shape=(8192, 8192), *, solution: bool = True) -> str:
    """The dequantize kernel alone (the first kernel of routes (b) and (c)): the teaching one and the fast file's,
    timed on (N, K) with the weights rotated past L2, against the floor of its traffic (read q and the scales, write
    the FP16 W)."""
    p = catalog.DEQUANT_W8
    ops = {"teaching dequantize kernel": _teaching_op("dequant_w8_basic", solution),
           "fast file's dequantize kernel": p.bind(build.load(6, "w8a16_fast", solution=True).dequant_w8)}
    sets = bench.input_sets(p, shape)
    bw = roofline.ceilings()["copy_GBps"]  # it writes 2 bytes per weight for the one it reads: the copy's floor
    floor = p.bytes(shape) / bw / 1e3
    out = [f"N × K = {shape[0]} × {shape[1]}: {p.bytes(shape) / 1e6:.1f} MB moved, floor {floor:.1f} µs at "
           f"{bw:,.0f} GB/s", f"{'kernel':<30} {'µs':>8} {'% of floor':>11}"]
    for name, op in ops.items():
        t = bench.time_fn(op, sets, reps=50)
        out.append(f"{name:<30} {t.median_us:>8.1f} {100 * floor / t.median_us:>10.0f}%")
    return "\n".join(out)


def _teaching_op(launcher: str, solution: bool):
    k = next(k for k in catalog.kernels(6) if k.launcher == launcher)
    return catalog.op(k, solution=solution)


def run(ms=(1, 4, 16, 64, 256), *, shapes=SHAPES_KN, routes=None, solution: bool = True, record: bool = False,
        verbose: bool = True) -> list:
    """Time every route (or those in `routes`) on every (K, N) of `shapes` at every M in one run; returns the rows
    (results.Row), recorded with record=True (the full run only). solution=False times your kernels/ file's
    teaching kernels; the fast kernel has no exercise and comes from solutions/ either way."""
    if record and (routes is not None or list(shapes) != SHAPES_KN):
        raise ValueError("record=True stores the whole table: run it with every route and shape")
    want = (lambda r: True) if routes is None else (lambda r: r in routes)
    mod = build.load(6, "w8a16_fast", solution=True)  # the fast kernel: solutions/ only
    prob = catalog.W8A16
    fused = prob.bind(mod.linear_w8a16)
    gemv, tiled = prob.bind(mod.gemv_w8a16), prob.bind(mod.gemm_w8a16)
    gemv_tiles = catalog.W8A16_TILES.bind(mod.gemv_w8a16_tiles)
    w8a8 = catalog.W8A8.bind(mod.linear_w8a8)
    dequant = catalog.DEQUANT_W8.bind(mod.dequant_w8)
    gemv16 = catalog.GEMV_F16.bind(mod.gemv_f16)
    # the teaching kernels, through the catalog (shapes they do not take are refused)
    b_dequant, b_gemv16 = _teaching_op("dequant_w8_basic", solution), _teaching_op("gemv_f16_basic", solution)
    b_fused, b_w8a8 = _teaching_op("gemv_w8a16_basic", solution), _teaching_op("linear_w8a8_basic", solution)
    gemm16 = None
    if solution and want(SEPARATE):  # lesson 04's fast GEMM, for the fast kernel's route (c) at M > 16
        gemm16 = catalog.FP16.bind(build.load(4, "tc_fast", solution=True).gemm_fast_mma_f16)
    bw = roofline.bandwidth(roofline.ceilings())[0]

    def unfused_python(x, q, s):
        N, K = q.shape
        W = (q.float().view(N, -1, prob.group) * s.float()[..., None]).view(N, K).half()
        return x @ W.T

    def separate_cuda(x, q, s):
        W = dequant(q, s)
        return gemv16(x, W) if x.shape[0] <= 16 else gemm16(x, W)

    def int8pack(x, q, s):  # torch's INT8 weight-only kernel; per-channel scales (a different format): timed only
        return torch._weight_int8pack_mm(x, q, s[:, 0].contiguous())

    rows = []
    for K, N in shapes:
        for M in ms:
            shape = (M, N, K)
            sets = bench.input_sets(prob, shape)
            w16 = {id(s[1]): dequant(s[1], s[2]) for s in sets}  # the FP16 baseline's own weights, made before timing
            ops = {CUBLAS: lambda x, q, s: torch.nn.functional.linear(x, w16[id(q)]), PYTHON: unfused_python,
                   BASIC_UNFUSED: lambda x, q, s: torch.nn.functional.linear(x, b_dequant(q, s)),
                   BASIC_SEPARATE: lambda x, q, s: b_gemv16(x, b_dequant(q, s)), BASIC_FUSED: b_fused,
                   UNFUSED: lambda x, q, s: torch.nn.functional.linear(x, dequant(q, s)), FUSED: fused,
                   GEMV: gemv, TILED: tiled}
            if gemm16 is not None:
                ops[SEPARATE] = separate_cuda
            if M <= 16 and want(GEMV_TILES):  # the weights in tiles, each set's own, repacked before timing (offline)
                tw = {id(s[1]): quant.to_tiles(quant.Int8Weight(s[1], s[2], prob.group)) for s in sets}
                ops[GEMV_TILES] = lambda x, q, s: gemv_tiles(x, tw[id(q)])
            if want(INT8PACK):
                try:
                    int8pack(*sets[0])
                    ops[INT8PACK] = int8pack
                except RuntimeError as e:
                    print(f"torch._weight_int8pack_mm is not timed: {str(e).splitlines()[0]}")
            ops = {k: op for k, op in ops.items() if want(k)}
            # M <= 16 (decode): also each route replayed from a CUDA graph, as a serving engine runs a decode step
            timed = {k: bench.time_fn(op, sets, reps=50, graph=M <= 16) for k, op in ops.items()}
            floor = prob.bytes(shape) / bw / 1e3
            base = timed[UNFUSED].median_us if UNFUSED in timed else None
            for k, t in timed.items():
                rows.append(results.Row.measured(
                    k, shape, t.median_us, t.graph_us, prob.bytes(shape), prob.flops(shape), UNFUSED,
                    desc=prob.describe(shape), gbs=round(prob.bytes(shape) / t.median_us / 1e3, 1),
                    pct_bw=round(100 * floor / t.median_us, 1),
                    speedup_vs_b=base and round(base / t.median_us, 2),
                    tflops=round(prob.flops(shape) / t.median_us / 1e6, 3), sets=len(sets)))
                if t.graph_error:
                    print(f"  {results.name(k)}: not timed in a CUDA graph: {t.graph_error}")
            n = len(timed)
            w8 = [k for k in (BASIC_W8A8, W8A8, W8A8_TORCH, INT_MM) if want(k)]
            if M > 16 and w8:  # W8A8: its own inputs (per-channel scales); torch._int_mm refuses M <= 16
                p8 = catalog.W8A8
                sets8 = bench.input_sets(p8, shape)
                xq = {id(s[0]): quant.quantize_per_token_int8(s[0])[0] for s in sets8}  # sets8 keep x alive
                ops8 = {BASIC_W8A8: b_w8a8, W8A8: w8a8, W8A8_TORCH: torch_w8a8,
                        INT_MM: lambda x, q, s: torch._int_mm(xq[id(x)], q.t())}
                t8 = {k: bench.time_fn(ops8[k], sets8, reps=50) for k in w8}
                base8 = t8[W8A8_TORCH].median_us if W8A8_TORCH in t8 else None
                for k, t in t8.items():
                    rows.append(results.Row.measured(
                        k, shape, t.median_us, None, p8.bytes(shape), p8.flops(shape), W8A8_TORCH,
                        desc=p8.describe(shape), gbs=round(p8.bytes(shape) / t.median_us / 1e3, 1),
                        pct_bw=round(100 * p8.bytes(shape) / bw / 1e3 / t.median_us, 1),
                        speedup_vs_torch=base8 and round(base8 / t.median_us, 2),
                        speedup_vs_b=base and round(base / t.median_us, 2),
                        tflops=round(p8.flops(shape) / t.median_us / 1e6, 3), sets=len(sets8)))
                n += len(t8)
                del sets8
            if verbose:
                print(f"M={M} K={K} N={N}: {n} routes timed", flush=True)
            del sets, w16
    if record:
        print("recorded in", results.record(6, SECTION, rows, views=VIEWS).relative_to(build.ROOT))
    return rows


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--m", type=int, nargs="+", default=[1, 4, 16, 64, 256])
    ap.add_argument("--exercises", action="store_true",
                    help="time your kernels/ file's teaching kernels for lesson 06, not the solution's")
    ap.add_argument("--record", action="store_true")
    a = ap.parse_args(argv)
    rows = run(a.m, solution=not a.exercises, record=a.record)
    for view in ("four", "fast", "main", "tiles", "w8a8", "w8a8_basic"):
        print("\n" + results.view_markdown(6, SECTION, view, sec=results.this_run(rows, VIEWS)))


if __name__ == "__main__":
    main()
