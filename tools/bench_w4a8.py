"""Lesson 09 measurements: W4A8 (two-level 4-bit weights, per-token INT8 activations) against cuBLAS FP16, PyTorch's
W8A8 route (quantize + torch._int_mm + scale, and _int_mm alone), lesson 06's W8A8 and lesson 07's W4A16, at
M = 16 … 256, weights rotated past L2. Every route includes its own activation quantization where it has one; each
is timed twice and the lower median kept. The decode sizes (M ≤ 32) are also replayed from a CUDA graph
(bench.graph_fn, column graph_us), as lessons 06-08, 10 and 12 time theirs.
With --record the rows go to results/09.json (COURSE_RECORD=1 for the shipped file).

    python tools/bench_w4a8.py [--m 16 32 64 128 256] [--exercises] [--record]
"""
import argparse

import torch

from harness import bench, build, catalog, problems, results, roofline

SHAPES_KN = [(4096, 14336), (14336, 4096), (8192, 8192)]
OURS = "(09) W4A8"
GRAPH_MAX_M = 32  # the decode sizes: timed in a CUDA graph too


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--m", type=int, nargs="+", default=[16, 32, 64, 128, 256])
    ap.add_argument("--exercises", action="store_true", help="time your kernels/ files, not the solutions")
    ap.add_argument("--record", action="store_true")
    ap.add_argument("--only", nargs="*", default=[], help="time only the routes whose names contain one of these")
    ap.add_argument("--flags", default="", help="extra nvcc flags for lesson 09's file, e.g. --flags=-DTILE_STAGES=3")
    a = ap.parse_args()
    sol = not a.exercises
    mod = build.load(9, "w4a8", solution=sol, extra_cuda_flags=a.flags.split() or None)
    p, p88, p416, f16 = catalog.W4A8, catalog.W8A8, catalog.W4A16, catalog.FP16
    routes = {  # name: (problem, op)
        "cuBLAS FP16 (FP16 weights)": (f16, problems.torch_linear),
        "torch W8A8 (quantize + _int_mm + scale)": (p88, problems.torch_w8a8),
        "(06) W8A8": (p88, p88.bind(build.load(6, "w8a16", solution=sol).linear_w8a8)),
        "(07) W4A16": (p416, p416.bind(build.load(7, "w4a16", solution=sol).linear_w4a16)),
        OURS: (p, p.bind(mod.linear_w4a8)),
    }
    bw = roofline.ceilings()["copy_GBps"]
    rows = []
    for K, N in SHAPES_KN:
        for M in a.m:
            shape = (M, N, K)
            timed, graph = {}, M <= GRAPH_MAX_M
            for name, (prob, op) in routes.items():
                if a.only and name not in (OURS, "cuBLAS FP16 (FP16 weights)") and not any(o in name for o in a.only):
                    continue
                if "_int_mm" in name and M <= 16:
                    continue  # torch._int_mm refuses M ≤ 16
                # the better of two timings: a route launching several kernels from Python can be delayed by
                # a host hiccup inside a timed batch (one run had lesson 06's W8A8 at 5.5× its usual time)
                sets = bench.input_sets(prob, shape)
                timed[name] = (prob, min((bench.time_fn(op, sets, reps=50, graph=graph) for _ in range(2)),
                                         key=lambda t: t.median_us))
            base, ours = timed["cuBLAS FP16 (FP16 weights)"][1].median_us, timed[OURS][1].median_us
            print(f"\nM={M} K={K} N={N}: {p.flops(shape) / 1e9:.1f} GFLOP; W4A8 reads {p.bytes(shape) / 1e6:.1f} MB, "
                  f"floor {p.bytes(shape) / bw / 1e3:.1f} µs")
            for name, (prob, t) in timed.items():
                nbytes = prob.bytes(shape)
                rows.append(dict(op=name, shape=list(shape), desc=p.describe(shape), us=round(t.median_us, 2),
                                 gbs=round(nbytes / t.median_us / 1e3, 1),
                                 pct_copy_bw=round(100 * nbytes / bw / 1e3 / t.median_us, 1),
                                 speedup_vs_cublas=round(base / t.median_us, 2),
                                 w4a8_speedup=round(t.median_us / ours, 2),
                                 tops=round(p.flops(shape) / t.median_us / 1e6, 1)))
                r = rows[-1]
                if graph:
                    r["graph_us"] = t.graph_us and round(t.graph_us, 2)
                g = f"   in a graph {t.graph_us:>7.1f} µs" if t.graph_us else ""
                print(f"  {name:<42} {r['us']:>8.1f} µs {r['pct_copy_bw']:>6.1f}% of copy bw {r['tops']:>6.1f} TOP/s "
                      f"{r['speedup_vs_cublas']:>5.2f}× cuBLAS  W4A8 is {r['w4a8_speedup']:.2f}× faster{g}")
                if t.graph_error:
                    print(f"  {name}: not timed in a CUDA graph: {t.graph_error}")
    if a.record:
        results.record(9, "table", rows)


if __name__ == "__main__":
    main()
