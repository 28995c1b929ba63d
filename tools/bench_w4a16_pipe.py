"""Lesson 10 measurements, weights rotated past L2, every route on the same weights in the same run.

    python tools/bench_w4a16_pipe.py --ladder [--m 16 128] [--record]   each step of the ladder against the one before
    python tools/bench_w4a16_pipe.py [--m 1 16 32 64 128 256] [--record] lesson 10's kernel against cuBLAS FP16,
                                                                        tinygemm, Marlin and lesson 07's W4A16
    python tools/bench_w4a16_pipe.py --block-cost [--record]            what one block costs: a fixed part and a
                                                                        part per K tile, and split-K's fix-up

The table's decode sizes (M ≤ 32) are also replayed from a CUDA graph (bench.graph_fn, column graph_us: a decode
step as a serving engine runs it). With --record the rows go to results/10.json ("ladder", "table" or "block_cost";
COURSE_RECORD=1 for the shipped file).
"""
import argparse
import sys
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))
from bench_w4a16 import tinygemm_op  # noqa: E402  (lesson 07's tinygemm route, the same baseline)

from harness import bench, build, catalog, marlin, quant, results, roofline  # noqa: E402

SHAPES_KN = [(4096, 4096), (4096, 14336), (14336, 4096), (8192, 8192)]
CUBLAS, OURS = "cuBLAS FP16 (FP16 weights)", "(10) W4A16, fragment order"
GRAPH_MAX_M = 32  # issue 9's decode range: these M are timed in a CUDA graph too
STEPS = ["gemm_w4a16_writeback", "gemm_w4a16_writeback_padded", "gemm_w4a16_frag", "gemm_w4a16_frag_pipe",
         "gemm_w4a16_frag_split", "linear_w4a16_frag"]


def weight_sets(shape):
    """Input sets in lesson 07's format, the same weights in fragment order, and their FP16 dequantization."""
    sets = bench.input_sets(catalog.W4A16, shape)
    frags = [(x, quant.to_fragments(quant.Int4Weight(q, s, 128))) for x, q, s in sets]
    w16 = {id(q): quant.Int4Weight(q, s, 128).dequantize().half() for _, q, s in sets}
    return sets, frags, w16


def block_cost(mod, record: bool):
    """One wave of 8 blocks (N = 1024: 8 tiles of 128 outputs, far fewer than the SMs), so the time is one block's:
    step 10.4 (no split) at K = 128 … 4096 fits time = fixed + per K tile · K tiles; step 10.5 at K = 4096 splits each
    tile 8 ways (its rule allows one split per 4 K tiles), 64 blocks of 4 K tiles and the fix-up that adds them; and
    the floor of any call timed this way, a one-element fill."""
    import numpy as np
    pf, N, ks = catalog.W4A16_FRAG, 1024, [128, 512, 1024, 2048, 4096]
    ops = {"10.4": pf.bind(mod.gemm_w4a16_frag_pipe), "10.5": pf.bind(mod.gemm_w4a16_frag_split)}
    one = torch.empty(1, device="cuda")
    floor = bench.time_fn(lambda *_: one.zero_(), [()], reps=50).median_us
    print(f"a one-element fill, timed the same way (the floor of any call): {floor:.1f} µs")
    rows = [dict(op="fill one element", shape=[1, 1, 1], us=round(floor, 2))]
    for M in (128, 1):
        t = {}
        for K in ks + ["split"]:
            kk = 4096 if K == "split" else K
            sets, frags, _ = weight_sets((M, N, kk))
            t[K] = bench.time_fn(ops["10.5" if K == "split" else "10.4"], frags, reps=50).median_us
            rows.append(dict(op="10.5, split 8 ways" if K == "split" else "10.4, unsplit", shape=[M, N, kk],
                             us=round(t[K], 2)))
            del sets, frags
        per, fixed = np.polyfit([k // 128 for k in ks], [t[k] for k in ks], 1)
        worst = max(abs(fixed + per * (k // 128) - t[k]) for k in ks)
        unsplit4 = fixed + per * 4
        print(f"\nM = {M}, one wave of 8 blocks, step 10.4 unsplit: " + ", ".join(f"K {k}: {t[k]:.1f}" for k in ks) + " µs")
        print(f"  fit: {fixed:.1f} µs fixed + {per:.2f} µs per K tile of 128 (largest miss {worst:.1f} µs)")
        print(f"  step 10.5 at K 4096 (64 blocks of 4 K tiles): {t['split']:.1f} µs; a block of 4 K tiles by the fit "
              f"{unsplit4:.1f}: the split and its fix-up cost {t['split'] - unsplit4:.1f} µs")
        rows.append(dict(op="fit", M=M, fixed_us=round(fixed, 2), per_ktile_us=round(per, 3)))
    if record:
        results.record(10, "block_cost", rows)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--m", type=int, nargs="+", default=None)
    ap.add_argument("--kn", type=int, nargs=2, action="append", help="K N (default: the four lesson shapes)")
    ap.add_argument("--ladder", action="store_true", help="time the six steps of the ladder")
    ap.add_argument("--exercises", action="store_true", help="time your kernels/ files, not the solutions")
    ap.add_argument("--flags", default="", help="extra nvcc flags for lesson 10's file, e.g. --flags=-DTILE_STAGES=3")
    ap.add_argument("--quick", action="store_true", help="time only cuBLAS and lesson 10's kernel (tuning)")
    ap.add_argument("--block-cost", action="store_true", help="what one block costs (one wave of 8 blocks)")
    ap.add_argument("--record", action="store_true")
    a = ap.parse_args()
    sol = not a.exercises
    mod = build.load(10, "w4a16_pipe", solution=sol, extra_cuda_flags=a.flags.split() or None)
    if a.block_cost:
        return block_cost(mod, a.record)
    p, pf = catalog.W4A16, catalog.W4A16_FRAG
    ms = a.m or ([1, 16, 32, 128] if a.ladder else [1, 16, 32, 64, 128, 256])
    shapes_kn = [tuple(kn) for kn in a.kn] if a.kn else SHAPES_KN
    if a.ladder:
        routes = {k.label: (k.problem, k.problem.bind(getattr(mod, k.launcher)))
                  for k in catalog.kernels(10) if k.launcher in STEPS}
    else:
        routes = {OURS: (pf, pf.bind(mod.linear_w4a16_frag))}
        if not a.quick:
            routes["(07) W4A16"] = (p, p.bind(build.load(7, "w4a16", solution=sol).linear_w4a16))
    bw = roofline.ceilings()["copy_GBps"]
    no_marlin = "not asked for" if a.ladder or a.quick else marlin.unavailable()
    if no_marlin and no_marlin != "not asked for":
        print(f"Marlin unavailable here: {no_marlin}")
    rows = []
    for K, N in shapes_kn:
        tiny, why = (None, "not asked for") if a.ladder or a.quick else tinygemm_op(N, K)
        if tiny is None and why != "not asked for":
            print(f"tinygemm unavailable here: {why}")
        for M in ms:
            shape = (M, N, K)
            sets, frags, w16 = weight_sets(shape)
            graph = not a.ladder and M <= GRAPH_MAX_M
            tf = lambda op, s: bench.time_fn(op, s, reps=50, graph=graph)
            timed = {CUBLAS: tf(lambda x, q, s: torch.nn.functional.linear(x, w16[id(q)]), sets)}
            if tiny:
                timed["tinygemm (_weight_int4pack_mm, bf16)"] = tf(tiny, sets)
            if not no_marlin:
                timed[marlin.OP] = tf(marlin.bench_op(sets), sets)
            for name, (prob, op) in routes.items():
                timed[name] = tf(op, frags if prob is pf else sets)
            del sets, frags, w16
            base = timed[CUBLAS].median_us
            prev = None
            print(f"\nM={M} K={K} N={N}: W4A16 reads {p.bytes(shape) / 1e6:.1f} MB, floor {p.bytes(shape) / bw / 1e3:.1f} µs "
                  f"at {bw:,.0f} GB/s")
            for name, t in timed.items():
                nbytes = catalog.FP16.bytes(shape) if name == CUBLAS else p.bytes(shape)
                row = dict(op=name, shape=list(shape), desc=p.describe(shape), us=round(t.median_us, 2),
                           gbs=round(nbytes / t.median_us / 1e3, 1),
                           pct_copy_bw=round(100 * nbytes / bw / 1e3 / t.median_us, 1),
                           speedup_vs_cublas=round(base / t.median_us, 2),
                           tflops=round(p.flops(shape) / t.median_us / 1e6, 2))
                if graph:
                    row["graph_us"] = t.graph_us and round(t.graph_us, 2)
                if marlin.OP in timed:
                    row["speedup_vs_marlin"] = round(timed[marlin.OP].median_us / t.median_us, 2)
                if a.ladder and name != CUBLAS:  # each step against the one before
                    row["speedup_vs_previous"] = round(prev / t.median_us, 2) if prev else None
                    prev = t.median_us
                rows.append(row)
                step = f"  {row['speedup_vs_previous']:.2f}× the step before" if row.get("speedup_vs_previous") else ""
                g = f"   in a graph {t.graph_us:>7.1f} µs" if t.graph_us else ""
                print(f"  {name:<40} {row['us']:>8.1f} µs {row['pct_copy_bw']:>6.1f}% of copy bw {row['tflops']:>7.1f} TFLOP/s "
                      f"{row['speedup_vs_cublas']:>5.2f}× cuBLAS{step}{g}")
                if t.graph_error:
                    print(f"  {name}: not timed in a CUDA graph: {t.graph_error}")
    if a.record:
        results.record(10, "ladder" if a.ladder else "table", rows)


if __name__ == "__main__":
    main()
