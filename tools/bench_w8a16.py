"""Lesson 06 measurements: W8A16 (INT8 weights, group 128) four ways, against FP16 cuBLAS, at decode and
small-batch shapes, weights rotated past L2. With --record the rows go to results/06.json (COURSE_RECORD=1
for the shipped file).

    python tools/bench_w8a16.py [--m 1 4 16 64 256] [--exercises] [--record]

(a) unfused Python: dequantize with PyTorch ops (FP32 intermediate), then matmul
(b) unfused cuBLAS: our dequantize kernel writes FP16 W, then cuBLAS (F.linear)
(c) separate CUDA: our dequantize kernel, then our FP16 GEMV (M <= 16) or lesson 04's mma.sync GEMM
(d) fused: dequantize in registers, no FP16 W in memory: linear_w8a16 (the GEMV to M = 16, the tiled kernel
    above); the GEMV and the tiled kernel are also timed on their own at every M
(e) M <= 16: the fused GEMV on the same weights stored in 16-row tiles (quant.to_tiles, repacked before timing)
At M <= 16 every route is also timed replayed from a CUDA graph (bench.graph_fn: a decode step as a serving engine
runs it, without each call's launch), column graph_us.
W8A8 (M > 16, where torch._int_mm runs): our per-token quantize + INT8 GEMM with the scaling epilogue, against
PyTorch's quantize + torch._int_mm + scaling, and torch._int_mm alone on x quantized beforehand (the GEMM
without the rest). Its rows carry speedup_vs_torch (over PyTorch's whole route) as well as speedup_vs_b.
"""
import argparse
import math

import torch

from harness import bench, build, catalog, quant, results, roofline
from harness.results import W8A16_TILES_OP
from harness.problems import torch_w8a8

SHAPES_KN = [(4096, 4096), (4096, 14336), (14336, 4096), (8192, 8192)]


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--m", type=int, nargs="+", default=[1, 4, 16, 64, 256])
    ap.add_argument("--exercises", action="store_true", help="time your kernels/ files, not the solutions")
    ap.add_argument("--record", action="store_true")
    a = ap.parse_args()
    mod = build.load(6, "w8a16", solution=not a.exercises)
    tc = build.load(4, "tc_gemm", solution=not a.exercises)
    prob = catalog.W8A16
    fused = prob.bind(mod.linear_w8a16)
    gemv, tiled = prob.bind(mod.gemv_w8a16), prob.bind(mod.gemm_w8a16)
    gemv_tiles = catalog.W8A16_TILES.bind(mod.gemv_w8a16_tiles)
    w8a8 = catalog.W8A8.bind(mod.linear_w8a8)
    dequant = catalog.DEQUANT_W8.bind(mod.dequant_w8)
    gemv16 = catalog.GEMV_F16.bind(mod.gemv_f16)
    gemm16 = catalog.FP16.bind(tc.gemm_mma_f16)
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
        for M in a.m:
            shape = (M, N, K)
            sets = bench.input_sets(prob, shape)
            w16 = {id(s[1]): dequant(s[1], s[2]) for s in sets}  # the FP16 baseline's own weights, made before timing
            ops = {"cuBLAS FP16 (FP16 weights)": lambda x, q, s: torch.nn.functional.linear(x, w16[id(q)]),
                   "(a) unfused Python": unfused_python, "(b) unfused cuBLAS": unfused_cublas,
                   "(c) separate CUDA": separate_cuda, "(d) fused W8A16": fused,
                   "(d) fused, GEMV kernel": gemv, "(d) fused, tiled kernel": tiled}
            if M <= 16:  # the weights in tiles, each set's own, repacked before timing (an offline step)
                tw = {id(s[1]): quant.to_tiles(quant.Int8Weight(s[1], s[2], prob.group)) for s in sets}
                ops[W8A16_TILES_OP] = lambda x, q, s: gemv_tiles(x, tw[id(q)])
            try:
                int8pack(*sets[0])
                ops["torch._weight_int8pack_mm (per-channel)"] = int8pack
            except RuntimeError as e:
                print(f"torch._weight_int8pack_mm unavailable here: {str(e).splitlines()[0]}")
            # M <= 16 (decode): also each route replayed from a CUDA graph, as a serving engine runs a decode step
            timed = {k: bench.time_fn(op, sets, reps=50, graph=M <= 16) for k, op in ops.items()}
            floor = prob.bytes(shape) / bw / 1e3
            base = timed["(b) unfused cuBLAS"].median_us
            for k, t in timed.items():
                rows.append(dict(op=k, shape=list(shape), desc=prob.describe(shape), us=round(t.median_us, 2),
                                 gbs=round(prob.bytes(shape) / t.median_us / 1e3, 1),
                                 pct_copy_bw=round(100 * floor / t.median_us, 1),
                                 speedup_vs_b=round(base / t.median_us, 2),
                                 tflops=round(prob.flops(shape) / t.median_us / 1e6, 3), sets=len(sets),
                                 graph_us=t.graph_us and round(t.graph_us, 2)))
                if t.graph_error:
                    print(f"  {k}: not timed in a CUDA graph: {t.graph_error}")
            nrows = len(timed)
            if M > 16:  # W8A8: its own inputs (per-channel scales); torch._int_mm refuses M <= 16
                p8 = catalog.W8A8
                sets8 = bench.input_sets(p8, shape)
                xq = {id(s[0]): quant.quantize_per_token_int8(s[0])[0] for s in sets8}  # sets8 keep x alive
                t8 = {"W8A8 ours (quantize + INT8 GEMM)": bench.time_fn(w8a8, sets8, reps=50),
                      "W8A8 torch (quantize + _int_mm + scale)": bench.time_fn(torch_w8a8, sets8, reps=50),
                      "W8A8 torch._int_mm alone (x quantized beforehand)":
                          bench.time_fn(lambda x, q, s: torch._int_mm(xq[id(x)], q.t()), sets8, reps=50)}
                base8 = t8["W8A8 torch (quantize + _int_mm + scale)"].median_us
                for k, t in t8.items():
                    rows.append(dict(op=k, shape=list(shape), desc=p8.describe(shape), us=round(t.median_us, 2),
                                     gbs=round(p8.bytes(shape) / t.median_us / 1e3, 1),
                                     pct_copy_bw=round(100 * p8.bytes(shape) / bw / 1e3 / t.median_us, 1),
                                     speedup_vs_torch=round(base8 / t.median_us, 2),
                                     speedup_vs_b=round(base / t.median_us, 2),
                                     tflops=round(p8.flops(shape) / t.median_us / 1e6, 3), sets=len(sets8)))
                nrows += len(t8)
                del sets8
            print(f"\nM={M} K={K} N={N}: floor {floor:.1f} µs at {bw:,.0f} GB/s (INT8 weights + scales + x + y)")
            for r in rows[-nrows:]:
                g = f"   in a graph {r['graph_us']:>7.1f} µs {100 * floor / r['graph_us']:>5.1f}%" if r.get("graph_us") else ""
                print(f"  {r['op']:<40} {r['us']:>9.1f} µs {r['gbs']:>7,.0f} GB/s {r['pct_copy_bw']:>6.1f}% of copy bw "
                      f"{r['speedup_vs_b']:>6.2f}× vs (b){g}")
            del sets, w16
            tw = None
    if a.record:
        results.record(6, "table", rows)


if __name__ == "__main__":
    main()
