"""Lesson 06's benchmark: W8A16 (INT8 weights, group 128) four ways, against cuBLAS on FP16 weights, at decode and
small-batch shapes, weights rotated past L2, every route in the same run.

(a) unfused Python: dequantize with PyTorch ops (FP32 intermediate), then matmul
(b) unfused cuBLAS: our dequantize kernel writes FP16 W, then cuBLAS (F.linear)
(c) separate CUDA: our dequantize kernel, then our FP16 GEMV (M <= 16) or lesson 04's mma.sync GEMM (the solution's)
(d) fused: dequantize in registers, no FP16 W in memory: linear_w8a16 (the GEMV to M = 16, the tiled kernel
    above); the GEMV and the tiled kernel are also timed on their own at every M
(e) M <= 16: the fused GEMV on the same weights stored in 16-row tiles (repacked before timing)
At M <= 16 every route is also timed replayed from a CUDA graph (bench.graph_fn), column graph_us.
W8A8 (M > 16, where torch._int_mm runs): our per-token quantize + INT8 GEMM with the scaling epilogue, against
PyTorch's quantize + torch._int_mm + scaling, and torch._int_mm alone on x quantized beforehand.

    python lessons/06_fused_int8/bench_06.py [--m 1 4 16 64 256] [--exercises] [--record]

The notebook imports it (`import bench_06; bench_06.run(...)`). With --record the rows go to build/results/06.json
(results/06.json with COURSE_RECORD=1). --exercises times your kernels/ file for lesson 06; lesson 04's GEMM in
route (c) always comes from solutions/.
"""
import argparse

import torch

from harness import bench, build, catalog, quant, results, roofline
from harness.problems import torch_w8a8

SECTION = "table"
SHAPES_KN = [(4096, 4096), (4096, 14336), (14336, 4096), (8192, 8192)]
CUBLAS = results.CUBLAS_FP16
PYTHON = results.register("w8a16.python", "(a) unfused Python")
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

VIEWS = {
    "main": {"columns": [CUBLAS, PYTHON, UNFUSED, SEPARATE, FUSED],
             "derived": [["pct", FUSED], ["vs", FUSED, UNFUSED], ["vs", FUSED, CUBLAS]]},
    "tiles": {"only": GEMV_TILES, "columns": [CUBLAS, GEMV, GEMV_TILES],
              "derived": [["pct", GEMV], ["pct", GEMV_TILES], ["vs", GEMV_TILES, GEMV], ["vs", GEMV_TILES, CUBLAS]],
              "note": "µs, median; weights rotated past L2; (d) and (e) are the same kernel, same arithmetic, on the "
                      "same bytes in two orders."},
    "w8a8": {"only": W8A8, "columns": [W8A8, W8A8_TORCH, INT_MM, FUSED], "derived": [["vs", W8A8, W8A8_TORCH]]},
    "graph": {"kernels": {GEMV_TILES: "06 W8A16"}, "vs": {"cuBLAS FP16": CUBLAS, "dequantize + cuBLAS": UNFUSED}},
    "headline": {"ours": FUSED, "base": CUBLAS, "shape": [1, 8192, 8192]},
}


def run(ms=(1, 4, 16, 64, 256), *, solution: bool = True, record: bool = False, verbose: bool = True) -> list:
    """Time every route on every shape in one run; returns the rows (results.Row), recorded with record=True."""
    mod = build.load(6, "w8a16", solution=solution)
    tc = build.load(4, "tc_fast", solution=True)  # lesson 04's GEMM: the solution, whatever lesson 06 runs
    prob = catalog.W8A16
    fused = prob.bind(mod.linear_w8a16)
    gemv, tiled = prob.bind(mod.gemv_w8a16), prob.bind(mod.gemm_w8a16)
    gemv_tiles = catalog.W8A16_TILES.bind(mod.gemv_w8a16_tiles)
    w8a8 = catalog.W8A8.bind(mod.linear_w8a8)
    dequant = catalog.DEQUANT_W8.bind(mod.dequant_w8)
    gemv16 = catalog.GEMV_F16.bind(mod.gemv_f16)
    gemm16 = catalog.FP16.bind(tc.gemm_fast_mma_f16)
    bw = roofline.ceilings()["copy_GBps"]

    def unfused_python(x, q, s):
        N, K = q.shape
        W = (q.float().view(N, -1, prob.group) * s.float()[..., None]).view(N, K).half()
        return x @ W.T

    def unfused_cublas(x, q, s):
        return torch.nn.functional.linear(x, dequant(q, s))

    def separate_cuda(x, q, s):
        W = dequant(q, s)
        return gemv16(x, W) if x.shape[0] <= 16 else gemm16(x, W)

    def int8pack(x, q, s):  # torch's INT8 weight-only kernel; per-channel scales (a different format): timed only
        return torch._weight_int8pack_mm(x, q, s[:, 0].contiguous())

    rows = []
    for K, N in SHAPES_KN:
        for M in ms:
            shape = (M, N, K)
            sets = bench.input_sets(prob, shape)
            w16 = {id(s[1]): dequant(s[1], s[2]) for s in sets}  # the FP16 baseline's own weights, made before timing
            ops = {CUBLAS: lambda x, q, s: torch.nn.functional.linear(x, w16[id(q)]),
                   PYTHON: unfused_python, UNFUSED: unfused_cublas, SEPARATE: separate_cuda, FUSED: fused,
                   GEMV: gemv, TILED: tiled}
            if M <= 16:  # the weights in tiles, each set's own, repacked before timing (an offline step)
                tw = {id(s[1]): quant.to_tiles(quant.Int8Weight(s[1], s[2], prob.group)) for s in sets}
                ops[GEMV_TILES] = lambda x, q, s: gemv_tiles(x, tw[id(q)])
            try:
                int8pack(*sets[0])
                ops[INT8PACK] = int8pack
            except RuntimeError as e:
                print(f"torch._weight_int8pack_mm is not timed: {str(e).splitlines()[0]}")
            # M <= 16 (decode): also each route replayed from a CUDA graph, as a serving engine runs a decode step
            timed = {k: bench.time_fn(op, sets, reps=50, graph=M <= 16) for k, op in ops.items()}
            floor = prob.bytes(shape) / bw / 1e3
            base = timed[UNFUSED].median_us
            for k, t in timed.items():
                rows.append(results.Row.measured(
                    k, shape, t.median_us, t.graph_us, prob.bytes(shape), prob.flops(shape), UNFUSED,
                    desc=prob.describe(shape), gbs=round(prob.bytes(shape) / t.median_us / 1e3, 1),
                    pct_copy_bw=round(100 * floor / t.median_us, 1), speedup_vs_b=round(base / t.median_us, 2),
                    tflops=round(prob.flops(shape) / t.median_us / 1e6, 3), sets=len(sets)))
                if t.graph_error:
                    print(f"  {results.name(k)}: not timed in a CUDA graph: {t.graph_error}")
            n = len(timed)
            if M > 16:  # W8A8: its own inputs (per-channel scales); torch._int_mm refuses M <= 16
                p8 = catalog.W8A8
                sets8 = bench.input_sets(p8, shape)
                xq = {id(s[0]): quant.quantize_per_token_int8(s[0])[0] for s in sets8}  # sets8 keep x alive
                t8 = {W8A8: bench.time_fn(w8a8, sets8, reps=50),
                      W8A8_TORCH: bench.time_fn(torch_w8a8, sets8, reps=50),
                      INT_MM: bench.time_fn(lambda x, q, s: torch._int_mm(xq[id(x)], q.t()), sets8, reps=50)}
                base8 = t8[W8A8_TORCH].median_us
                for k, t in t8.items():
                    rows.append(results.Row.measured(
                        k, shape, t.median_us, None, p8.bytes(shape), p8.flops(shape), W8A8_TORCH,
                        desc=p8.describe(shape), gbs=round(p8.bytes(shape) / t.median_us / 1e3, 1),
                        pct_copy_bw=round(100 * p8.bytes(shape) / bw / 1e3 / t.median_us, 1),
                        speedup_vs_torch=round(base8 / t.median_us, 2), speedup_vs_b=round(base / t.median_us, 2),
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
    ap.add_argument("--exercises", action="store_true", help="time your kernels/ file for lesson 06, not the solution")
    ap.add_argument("--record", action="store_true")
    a = ap.parse_args(argv)
    rows = run(a.m, solution=not a.exercises, record=a.record)
    for view in ("main", "tiles", "w8a8"):
        print("\n" + results.view_markdown(6, SECTION, view, sec=results.this_run(rows, VIEWS)))


if __name__ == "__main__":
    main()
