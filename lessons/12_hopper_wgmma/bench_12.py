"""Lesson 12's benchmark, weights rotated past L2, every route on the same weights in the same run.

    python lessons/12_hopper_wgmma/bench_12.py [--m 1 16 32 64 128 256] [--check] [--record]   the fast kernel
                    (w4a16_wgmma_fast.cu: TMA + wgmma) against cuBLAS FP16, Marlin, lesson 10's and lesson 07's W4A16
    python lessons/12_hopper_wgmma/bench_12.py --steps [--m 1 16 64 128] [--exercises] [--record]   the teaching
                    kernel (w4a16_wgmma.cu) against the fast kernel, lesson 10's and cuBLAS FP16 on 8192 × 8192

The decode sizes (M ≤ 32) are also replayed from a CUDA graph (bench.graph_fn, column graph_us), as in lesson 10's
table. The notebook imports it (`import bench_12; bench_12.run(...)`); `stream_chart()` and `stream_table()` draw
the recorded read probe ("stream": what reading 8-134 MB costs). With --record the rows go to
build/results/12.json ("table" or "steps"; results/12.json with COURSE_RECORD=1). --exercises times your
kernels/ file (the teaching kernel); the fast kernel and lessons 07's and 10's always come from solutions/.
--check checks the timed lesson-12 kernel on the odd shapes first.
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
BASIC = results.register("w4a16_wgmma_basic", "(12) teaching kernel: 64-token tiles, mbarrier ring",
                         "12 teaching kernel")
FAST = "w4a16_wgmma_fast"  # the fast kernel's file: solutions/ only
STEPS_KN = [(8192, 8192)]
TEN = results.register("w4a16_pipe_mma", "(10) W4A16, mma.sync", "10 W4A16 (mma.sync)")

VIEWS = {
    "main": {"columns": [CUBLAS, MARLIN, W4A16_07, TEN, OURS],
             "derived": [["tflops", OURS], ["vs", OURS, CUBLAS], ["vs", OURS, TEN], ["vs", OURS, MARLIN]]},
    "graph": {"kernels": {OURS: "12 W4A16"}, "vs": {"cuBLAS FP16": CUBLAS, "Marlin": MARLIN, "lesson 07": W4A16_07,
                                                    "lesson 10": TEN}},
    "headline": {"ours": OURS, "base": CUBLAS, "shape": [128, 8192, 8192]},
}
STEPS_VIEWS = {"main": {"columns": [CUBLAS, TEN, BASIC, OURS],
                        "derived": [["vs", BASIC, CUBLAS], ["vs", OURS, BASIC]]}}


def run(ms=(1, 16, 32, 64, 128, 256), *, kns=None, solution: bool = True, record: bool = False, check_first=False,
        verbose: bool = True) -> list:
    """Time every route on every shape in one run; returns the rows (results.Row), recorded with record=True. The
    fast kernel has no stub: `solution` is accepted for the notebook's call and changes nothing."""
    p, pf = catalog.W4A16, catalog.W4A16_FRAG
    ours = pf.bind(build.load(12, FAST, solution=True).linear_w4a16_wgmma, results.name(OURS))
    if check_first:
        res = check.check(pf, ours)
        print(res, flush=True)
        if not res.ok:
            raise RuntimeError("lesson 12's kernel fails its check: not timed")
    routes = {OURS: (pf, ours),  # other lessons' kernels from their solutions
              TEN: (pf, pf.bind(build.load(10, "w4a16_pipe_fast", solution=True).linear_w4a16_frag)),
              W4A16_07: (p, p.bind(build.load(7, "w4a16_fast", solution=True).linear_w4a16))}
    bw = roofline.bandwidth(roofline.ceilings())[0]
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
                             pct_bw=round(100 * nbytes / bw / 1e3 / t.median_us, 1),
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


def run_steps(ms=(1, 16, 64, 128), *, kns=None, solution: bool = True, record: bool = False,
              check_first: bool = False, verbose: bool = True) -> list:
    """The teaching kernel (your kernels/ file with solution=False) against the fast kernel, lesson 10's and cuBLAS
    FP16, on the same weights in the same run; returns the rows, recorded as section "steps" with record=True."""
    pf = catalog.W4A16_FRAG
    basic = pf.bind(build.load(12, "w4a16_wgmma", solution=solution).linear_w4a16_wgmma_basic, results.name(BASIC))
    if check_first:
        res = check.check(pf, basic)
        print(res, flush=True)
        if not res.ok:
            raise RuntimeError("lesson 12's teaching kernel fails its check: not timed")
    routes = {TEN: pf.bind(build.load(10, "w4a16_pipe_fast", solution=True).linear_w4a16_frag), BASIC: basic,
              OURS: pf.bind(build.load(12, FAST, solution=True).linear_w4a16_wgmma)}
    rows = []
    for K, N in kns or STEPS_KN:
        for M in ms:
            shape = (M, N, K)
            sets, frags, w16 = weight_sets(shape)
            graph = M <= GRAPH_MAX_M
            tf = lambda op, s: bench.time_fn(op, s, reps=50, graph=graph)  # noqa: E731
            timed = {CUBLAS: tf(lambda x, q, s: torch.nn.functional.linear(x, w16[id(q)]), sets)}
            timed.update({route: tf(op, frags) for route, op in routes.items()})
            del sets, frags, w16
            for route, t in timed.items():
                nbytes = catalog.FP16.bytes(shape) if route == CUBLAS else pf.bytes(shape)
                rows.append(results.Row.measured(route, shape, t.median_us, t.graph_us if graph else None, nbytes,
                                                 pf.flops(shape), CUBLAS,
                                                 tflops=round(pf.flops(shape) / t.median_us / 1e6, 2)))
            if verbose:
                print(f"M={M} K={K} N={N}: {len(timed)} routes timed", flush=True)
    if record:
        print("recorded in", results.record(12, "steps", rows, views=STEPS_VIEWS).relative_to(build.ROOT))
    return rows


def stream_best(rows=None) -> dict:
    """The recorded read probe per weight size (bytes): the fastest plain read per call and in a CUDA graph, cuBLAS
    FP16 at M = 1 per call, in µs (the best over the probe's grids, loads in flight and ring depths)."""
    rows = rows if rows is not None else results.load(12, "stream", prefer_local=False)["rows"]
    out = {}
    for n in sorted({r["bytes"] for r in rows}):
        here = [r for r in rows if r["bytes"] == n]
        plain = [r for r in here if not r["variant"].startswith("cuBLAS") and "PDL" not in r["variant"]]
        out[n] = {"read, per call": min(r["per_call_us"] for r in plain),
                  "read, in a graph": min(r["graph_us"] for r in plain if r.get("graph_us")),
                  "cuBLAS FP16 M = 1, per call": min(r["per_call_us"] for r in here if r["variant"].startswith("cuBLAS"))}
    return out


def stream_table() -> str:
    """The recorded read probe as a Markdown table (harness.results.stream_markdown)."""
    return results.stream_markdown()


def stream_chart(ax=None):
    """What reading 8-134 MB costs (recorded): µs against MB, the fastest plain read per call and in a CUDA graph,
    cuBLAS at M = 1, the read-bandwidth floor, and the line t = a + bytes / B fitted to the per-call reads."""
    import matplotlib.pyplot as plt
    sec = results.load(12, "stream", prefer_local=False)
    best, bw = stream_best(sec["rows"]), results.floor_GBps(sec)
    a, B = results.stream_fit(sec["rows"], "per_call_us")
    if ax is None:
        _, ax = plt.subplots(figsize=(7, 4))
    mb = [n / 1e6 for n in best]
    for key, style in (("cuBLAS FP16 M = 1, per call", "s--"), ("read, per call", "o-"), ("read, in a graph", "^-")):
        ax.plot(mb, [best[n][key] for n in best], style, label=key)
    ax.plot(mb, [n / bw / 1e3 for n in best], "k:", label=f"floor: bytes at the {results.bw_kind(sec)} bandwidth ({bw:,.0f} GB/s)")
    ax.plot(mb, [a + n / (B * 1e6) for n in best], color="grey", lw=0.8,
            label=f"t = {a:.1f} µs + bytes / {B:.2f} TB/s (per call)")
    ax.set(xlabel="weights read (MB)", ylabel="µs per read", title=f"What reading the weights costs ({sec['env']['gpu']}, recorded)")
    ax.grid(alpha=0.3)
    ax.legend(fontsize=8)
    return ax


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--m", type=int, nargs="+")
    ap.add_argument("--kn", type=int, nargs=2, action="append", help="K N (default: the four lesson shapes)")
    ap.add_argument("--steps", action="store_true", help="the teaching kernel against the fast kernel (8192 × 8192)")
    ap.add_argument("--exercises", action="store_true", help="with --steps: time your kernels/ file, not the solution")
    ap.add_argument("--check", action="store_true", help="check the timed lesson-12 kernel on the odd shapes first")
    ap.add_argument("--record", action="store_true")
    a = ap.parse_args(argv)
    kns = [tuple(kn) for kn in a.kn] if a.kn else None
    try:
        if a.steps:
            rows = run_steps(a.m or (1, 16, 64, 128), kns=kns, solution=not a.exercises, record=a.record,
                             check_first=a.check)
        else:
            rows = run(a.m or (1, 16, 32, 64, 128, 256), kns=kns, record=a.record, check_first=a.check)
    except RuntimeError as e:
        print(e)
        sys.exit(1)
    section, views = ("steps", STEPS_VIEWS) if a.steps else (SECTION, VIEWS)
    print("\n" + results.view_markdown(12, section, sec=results.this_run(rows, views)))


if __name__ == "__main__":
    main()
