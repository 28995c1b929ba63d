"""Lesson 07 measurements: W4A16 (INT4 weights, group 128) against cuBLAS FP16, dequantize + cuBLAS, PyTorch's
tinygemm INT4 kernel, Marlin (harness/marlin.py) and lesson 06's INT8 kernel, at decode and small-batch shapes,
weights rotated past L2.
With --record the rows go to results/07.json (COURSE_RECORD=1 for the shipped file).

    python tools/bench_w4a16.py [--m 1 4 16 64 256] [--exercises] [--record]

tinygemm (torch._weight_int4pack_mm) takes bf16 activations and its own packed layout
(torch._convert_weight_to_int4pack) with scales and zeros as [K/128, N, 2]: it is timed on random weights of
that layout, the same sizes; its values are not compared. Marlin runs on each input set's own weights, packed into
its layout before timing (tests/test_marlin.py checks its results).
At M <= 16 it also times the GEMV on the same weights stored in 16-row tiles (quant.to_tiles, repacked before
timing, as a serving engine does at load time) against the row-major GEMV, in the same run, and every route
replayed from a CUDA graph too (bench.graph_fn: a decode step as a serving engine runs it), column graph_us.
"""
import argparse
import math

import torch

from harness import bench, build, catalog, marlin, quant, results, roofline

SHAPES_KN = [(4096, 4096), (4096, 14336), (14336, 4096), (8192, 8192)]


def tinygemm_op(N, K, group=128, inner_k_tiles=8, l2_multiple=3.0):
    """A bf16 x → tinygemm call on random INT4 weights of shape [N, K], rotating through enough copies to
    defeat L2 as bench.input_sets does, or the reason it cannot run here."""
    import itertools
    try:
        copies = max(1, math.ceil(l2_multiple * 50e6 / (N * K // 2)))
        ws = []
        for _ in range(copies):
            w = torch.randint(0, 256, (N, K // 2), dtype=torch.uint8, device="cuda")
            ws.append((torch._convert_weight_to_int4pack(w, inner_k_tiles),
                       torch.randn(K // group, N, 2, device="cuda", dtype=torch.bfloat16) * 0.01))
        nxt, xb = itertools.cycle(ws), {}

        def fn(x, *_):  # x's bf16 copy is made on first use (the warm-up), not inside the timed calls
            packed, sz = next(nxt)
            if id(x) not in xb:
                xb[id(x)] = (x, x.bfloat16())
            return torch._weight_int4pack_mm(xb[id(x)][1], packed, group, sz)
        fn(torch.randn(1, K, device="cuda", dtype=torch.float16))
        return fn, None
    except (RuntimeError, TypeError) as e:
        return None, str(e).splitlines()[0]


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--m", type=int, nargs="+", default=[1, 4, 16, 64, 256])
    ap.add_argument("--exercises", action="store_true", help="time your kernels/ files, not the solutions")
    ap.add_argument("--record", action="store_true")
    a = ap.parse_args()
    mod = build.load(7, "w4a16", solution=not a.exercises)
    mod6 = build.load(6, "w8a16", solution=not a.exercises)
    prob, asym, p8 = catalog.W4A16, catalog.W4A16_ASYM, catalog.W8A16
    # what a model calls: the GEMV up to M = 16, the tiled kernel past it
    fused, fused_asym = prob.bind(mod.linear_w4a16), asym.bind(mod.linear_w4a16_asym)
    gemv, gemv_tiles = prob.bind(mod.gemv_w4a16), catalog.W4A16_TILES.bind(mod.gemv_w4a16_tiles)
    dequant = catalog.DEQUANT_W4.bind(mod.dequant_w4)
    int8 = p8.bind(mod6.linear_w8a16)
    bw = roofline.ceilings()["copy_GBps"]
    no_marlin = marlin.unavailable()
    if no_marlin:
        print(f"Marlin unavailable here: {no_marlin}")
    rows = []
    for K, N in SHAPES_KN:
        tiny, why = tinygemm_op(N, K)
        if why:
            print(f"tinygemm unavailable here: {why}")
        for M in a.m:
            shape = (M, N, K)
            sets = bench.input_sets(prob, shape)
            w16 = {id(s[1]): dequant(s[1], s[2]) for s in sets}  # FP16 weights for the cuBLAS baseline, made first
            tf = lambda op, sets: bench.time_fn(op, sets, reps=50, graph=M <= 16)  # decode M: in a CUDA graph too
            timed = {"cuBLAS FP16 (FP16 weights)": tf(lambda x, q, s: torch.nn.functional.linear(x, w16[id(q)]), sets),
                     "dequantize + cuBLAS": tf(lambda x, q, s: torch.nn.functional.linear(x, dequant(q, s)), sets),
                     "(07) fused W4A16": tf(fused, sets)}
            if tiny:
                timed["tinygemm (_weight_int4pack_mm, bf16)"] = tf(tiny, sets)
            if not no_marlin:
                timed[marlin.OP] = tf(marlin.bench_op(sets), sets)
            if M <= 16:  # the GEMV on row-major weights, then on the same weights in tiles (each set's own)
                tw = {id(s[1]): quant.to_tiles(quant.Int4Weight(s[1], s[2], prob.group)) for s in sets}
                timed[results.W4A16_ROWS_OP] = tf(gemv, sets)
                timed[results.W4A16_TILES_OP] = tf(lambda x, q, s: gemv_tiles(x, tw[id(q)]), sets)
                del tw
            del sets, w16
            timed["(07) fused W4A16, zero points"] = tf(fused_asym, bench.input_sets(asym, shape))
            timed["(06) fused W8A16 (INT8 weights)"] = tf(int8, bench.input_sets(p8, shape))
            base = timed["cuBLAS FP16 (FP16 weights)"].median_us
            tiny_us = timed["tinygemm (_weight_int4pack_mm, bf16)"].median_us if tiny else None
            marlin_us = timed[marlin.OP].median_us if marlin.OP in timed else None
            by = {"(07) fused W4A16, zero points": asym.bytes(shape), "(06) fused W8A16 (INT8 weights)": p8.bytes(shape),
                  "cuBLAS FP16 (FP16 weights)": catalog.FP16.bytes(shape)}
            print(f"\nM={M} K={K} N={N}: W4A16 floor {prob.bytes(shape) / bw / 1e3:.1f} µs at {bw:,.0f} GB/s")
            for k, t in timed.items():
                nbytes = by.get(k, prob.bytes(shape))
                rows.append(dict(op=k, shape=list(shape), desc=prob.describe(shape), us=round(t.median_us, 2),
                                 gbs=round(nbytes / t.median_us / 1e3, 1),
                                 pct_copy_bw=round(100 * nbytes / bw / 1e3 / t.median_us, 1),
                                 speedup_vs_cublas=round(base / t.median_us, 2),
                                 speedup_vs_tinygemm=round(tiny_us / t.median_us, 2) if tiny_us else None,
                                 speedup_vs_marlin=round(marlin_us / t.median_us, 2) if marlin_us else None,
                                 tflops=round(prob.flops(shape) / t.median_us / 1e6, 3),
                                 graph_us=t.graph_us and round(t.graph_us, 2)))
                r = rows[-1]
                g = f"   in a graph {t.graph_us:>7.1f} µs {100 * nbytes / bw / 1e3 / t.graph_us:>5.1f}%" if t.graph_us else ""
                print(f"  {k:<40} {r['us']:>9.1f} µs {r['gbs']:>7,.0f} GB/s {r['pct_copy_bw']:>6.1f}% of copy bw "
                      f"{r['speedup_vs_cublas']:>6.2f}× vs cuBLAS FP16{g}")
                if t.graph_error:
                    print(f"  {k}: not timed in a CUDA graph: {t.graph_error}")
    if a.record:
        results.record(7, "table", rows)


if __name__ == "__main__":
    main()
