"""Lesson 12 measurements, weights rotated past L2, every route on the same weights in the same run.

    python tools/bench_w4a16_wgmma.py [--m 1 16 32 64 128 256] [--record]   lesson 12's kernel (TMA + wgmma) against
                                                                         cuBLAS FP16, Marlin, lesson 10's (mma.sync)
                                                                         and lesson 07's W4A16
    python tools/bench_w4a16_wgmma.py --check                            the odd-shape check first

The decode sizes (M ≤ 32) are also replayed from a CUDA graph (bench.graph_fn, column graph_us), as in lesson 10's
table. With --record the rows go to results/12.json ("table"; COURSE_RECORD=1 for the shipped file).
"""
import argparse
import sys
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))
from bench_w4a16_pipe import GRAPH_MAX_M, SHAPES_KN, weight_sets  # noqa: E402  (lesson 10's shapes, weight sets)

from harness import bench, build, catalog, check, marlin, results, roofline  # noqa: E402

CUBLAS, OURS, TEN = "cuBLAS FP16 (FP16 weights)", "(12) W4A16, TMA + wgmma", "(10) W4A16, mma.sync"


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--m", type=int, nargs="+", default=[1, 16, 32, 64, 128, 256])
    ap.add_argument("--kn", type=int, nargs=2, action="append", help="K N (default: the four lesson shapes)")
    ap.add_argument("--exercises", action="store_true", help="time your kernels/ file, not the solution")
    ap.add_argument("--flags", default="", help="extra nvcc flags for lesson 12's file, e.g. --flags=-DWG_STAGES=3")
    ap.add_argument("--check", action="store_true", help="check lesson 12's kernel on the odd shapes first")
    ap.add_argument("--quick", action="store_true", help="time only cuBLAS, lesson 10's and lesson 12's kernels")
    ap.add_argument("--record", action="store_true")
    a = ap.parse_args()
    sol = not a.exercises
    mod = build.load(12, "w4a16_wgmma", solution=sol, extra_cuda_flags=a.flags.split() or None)
    p, pf = catalog.W4A16, catalog.W4A16_FRAG
    ours = pf.bind(mod.linear_w4a16_wgmma, OURS)
    if a.check:
        res = check.check(pf, ours)
        print(res, flush=True)
        if not res.ok:
            sys.exit(1)
    routes = {OURS: (pf, ours), TEN: (pf, pf.bind(build.load(10, "w4a16_pipe", solution=sol).linear_w4a16_frag))}
    if not a.quick:
        routes["(07) W4A16"] = (p, p.bind(build.load(7, "w4a16", solution=sol).linear_w4a16))
    bw = roofline.ceilings()["copy_GBps"]
    no_marlin = "not asked for" if a.quick else marlin.unavailable()
    if no_marlin and no_marlin != "not asked for":
        print(f"Marlin unavailable here: {no_marlin}")
    rows = []
    for K, N in [tuple(kn) for kn in a.kn] if a.kn else SHAPES_KN:
        for M in a.m:
            shape = (M, N, K)
            sets, frags, w16 = weight_sets(shape)
            graph = M <= GRAPH_MAX_M
            tf = lambda op, s: bench.time_fn(op, s, reps=50, graph=graph)  # noqa: E731
            timed = {CUBLAS: tf(lambda x, q, s: torch.nn.functional.linear(x, w16[id(q)]), sets)}
            if not no_marlin:
                timed[marlin.OP] = tf(marlin.bench_op(sets), sets)
            for name, (prob, op) in routes.items():
                timed[name] = tf(op, frags if prob is pf else sets)
            del sets, frags, w16
            base = timed[CUBLAS].median_us
            print(f"\nM={M} K={K} N={N}: W4A16 reads {p.bytes(shape) / 1e6:.1f} MB, floor {p.bytes(shape) / bw / 1e3:.1f} µs "
                  f"at {bw:,.0f} GB/s; {p.flops(shape) / 1e9:.1f} GFLOP")
            for name, t in timed.items():
                nbytes = catalog.FP16.bytes(shape) if name == CUBLAS else p.bytes(shape)
                row = dict(op=name, shape=list(shape), desc=p.describe(shape), us=round(t.median_us, 2),
                           gbs=round(nbytes / t.median_us / 1e3, 1),
                           pct_copy_bw=round(100 * nbytes / bw / 1e3 / t.median_us, 1),
                           speedup_vs_cublas=round(base / t.median_us, 2),
                           tflops=round(p.flops(shape) / t.median_us / 1e6, 2))
                if graph:
                    row["graph_us"] = t.graph_us and round(t.graph_us, 2)
                if name == OURS:
                    row["speedup_vs_10"] = round(timed[TEN].median_us / t.median_us, 2)
                    if marlin.OP in timed:
                        row["speedup_vs_marlin"] = round(timed[marlin.OP].median_us / t.median_us, 2)
                rows.append(row)
                vs10 = f"  {row['speedup_vs_10']:.2f}× lesson 10" if "speedup_vs_10" in row else ""
                vs10 += f", {row['speedup_vs_marlin']:.2f}× Marlin" if "speedup_vs_marlin" in row else ""
                g = f"   in a graph {t.graph_us:>7.1f} µs" if t.graph_us else ""
                print(f"  {name:<30} {row['us']:>8.1f} µs {row['pct_copy_bw']:>6.1f}% of copy bw {row['tflops']:>7.1f} TFLOP/s "
                      f"{row['speedup_vs_cublas']:>5.2f}× cuBLAS{vs10}{g}", flush=True)
                if t.graph_error:
                    print(f"  {name}: not timed in a CUDA graph: {t.graph_error}")
    if a.record:
        results.record(12, "table", rows)


if __name__ == "__main__":
    main()
