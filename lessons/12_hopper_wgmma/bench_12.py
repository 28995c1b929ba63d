"""Lesson 12's benchmark, weights rotated past L2, every route on the same weights in the same run: lesson 12's
kernel (TMA + wgmma) against cuBLAS FP16, Marlin, lesson 10's (mma.sync) and lesson 07's W4A16. The decode sizes
(M ≤ 32) are also replayed from a CUDA graph (bench.graph_fn, column graph_us), as in lesson 10's table.

    python lessons/12_hopper_wgmma/bench_12.py [--m 1 16 32 64 128 256] [--check] [--exercises] [--record]

The notebook imports it (`import bench_12; bench_12.run(...)`). With --record the rows go to build/results/12.json
(results/12.json with COURSE_RECORD=1). --exercises times your kernels/ file for lesson 12; lessons 07's and 10's
kernels always come from solutions/. --check checks lesson 12's kernel on the odd shapes first.
"""
import argparse
import sys

import torch

from harness import bench, build, catalog, check, results, roofline
from harness.baselines import marlin

SECTION = "table"
_L10 = bench.lesson_module(10)
SHAPES_KN, GRAPH_MAX_M, weight_sets = _L10.SHAPES_KN, _L10.GRAPH_MAX_M, _L10.weight_sets
CUBLAS, MARLIN, W4A16_07 = results.CUBLAS_FP16, _L10.MARLIN, _L10.W4A16_07
OURS = results.register("w4a16_wgmma", "(12) W4A16, TMA + wgmma", "12 W4A16 (TMA + wgmma)")
TEN = results.register("w4a16_pipe_mma", "(10) W4A16, mma.sync", "10 W4A16 (mma.sync)")

VIEWS = {
    "main": {"columns": [CUBLAS, MARLIN, W4A16_07, TEN, OURS],
             "derived": [["tflops", OURS], ["vs", OURS, CUBLAS], ["vs", OURS, TEN], ["vs", OURS, MARLIN]]},
    "graph": {"kernels": {OURS: "12 W4A16"}, "vs": {"cuBLAS FP16": CUBLAS, "Marlin": MARLIN, "lesson 07": W4A16_07,
                                                    "lesson 10": TEN}},
    "headline": {"ours": OURS, "base": CUBLAS, "shape": [128, 8192, 8192]},
}


def run(ms=(1, 16, 32, 64, 128, 256), *, kns=None, solution: bool = True, record: bool = False, check_first=False,
        verbose: bool = True) -> list:
    """Time every route on every shape in one run; returns the rows (results.Row), recorded with record=True."""
    mod = build.load(12, "w4a16_wgmma", solution=solution)
    p, pf = catalog.W4A16, catalog.W4A16_FRAG
    ours = pf.bind(mod.linear_w4a16_wgmma, results.name(OURS))
    if check_first:
        res = check.check(pf, ours)
        print(res, flush=True)
        if not res.ok:
            raise RuntimeError("lesson 12's kernel fails its check: not timed")
    routes = {OURS: (pf, ours),  # other lessons' kernels from their solutions
              TEN: (pf, pf.bind(build.load(10, "w4a16_pipe_fast", solution=True).linear_w4a16_frag)),
              W4A16_07: (p, p.bind(build.load(7, "w4a16_fast", solution=True).linear_w4a16))}
    bw = roofline.ceilings()["copy_GBps"]
    no_marlin = marlin.unavailable()
    if no_marlin:
        print(f"Marlin is not timed: {no_marlin}")
    rows = []
    for K, N in kns or SHAPES_KN:
        for M in ms:
            shape = (M, N, K)
            sets, frags, w16 = weight_sets(shape)
            graph = M <= GRAPH_MAX_M
            tf = lambda op, s: bench.time_fn(op, s, reps=50, graph=graph)  # noqa: E731
            timed = {CUBLAS: tf(lambda x, q, s: torch.nn.functional.linear(x, w16[id(q)]), sets)}
            if not no_marlin:
                timed[MARLIN] = tf(marlin.bench_op(sets), sets)
            for route, (prob, op) in routes.items():
                timed[route] = tf(op, frags if prob is pf else sets)
            del sets, frags, w16
            base = timed[CUBLAS].median_us
            for route, t in timed.items():
                nbytes = catalog.FP16.bytes(shape) if route == CUBLAS else p.bytes(shape)
                extra = dict(desc=p.describe(shape), gbs=round(nbytes / t.median_us / 1e3, 1),
                             pct_copy_bw=round(100 * nbytes / bw / 1e3 / t.median_us, 1),
                             speedup_vs_cublas=round(base / t.median_us, 2),
                             tflops=round(p.flops(shape) / t.median_us / 1e6, 2))
                if route == OURS:
                    extra["speedup_vs_10"] = round(timed[TEN].median_us / t.median_us, 2)
                    if MARLIN in timed:
                        extra["speedup_vs_marlin"] = round(timed[MARLIN].median_us / t.median_us, 2)
                rows.append(results.Row.measured(route, shape, t.median_us, t.graph_us if graph else None, nbytes,
                                                 p.flops(shape), CUBLAS, **extra))
                if t.graph_error:
                    print(f"  {results.name(route)}: not timed in a CUDA graph: {t.graph_error}")
            if verbose:
                print(f"M={M} K={K} N={N}: {len(timed)} routes timed", flush=True)
    if record:
        print("recorded in", results.record(12, SECTION, rows, views=VIEWS).relative_to(build.ROOT))
    return rows


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--m", type=int, nargs="+", default=[1, 16, 32, 64, 128, 256])
    ap.add_argument("--kn", type=int, nargs=2, action="append", help="K N (default: the four lesson shapes)")
    ap.add_argument("--exercises", action="store_true", help="time your kernels/ file for lesson 12, not the solution")
    ap.add_argument("--check", action="store_true", help="check lesson 12's kernel on the odd shapes first")
    ap.add_argument("--record", action="store_true")
    a = ap.parse_args(argv)
    try:
        rows = run(a.m, kns=[tuple(kn) for kn in a.kn] if a.kn else None, solution=not a.exercises, record=a.record,
                   check_first=a.check)
    except RuntimeError as e:
        print(e)
        sys.exit(1)
    print("\n" + results.view_markdown(12, SECTION, sec=results.this_run(rows, VIEWS)))


if __name__ == "__main__":
    main()
