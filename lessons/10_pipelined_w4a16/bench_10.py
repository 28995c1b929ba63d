"""Lesson 10's benchmark, weights rotated past L2, every route on the same weights in the same run.

    python lessons/10_pipelined_w4a16/bench_10.py --steps [--m 1 16 128] [--record]   the teaching kernel's five steps,
                                                        each against the one before, then the fast kernel and Marlin
    python lessons/10_pipelined_w4a16/bench_10.py --ladder [--m 16 128] [--record]   the fast kernel's ladder
    python lessons/10_pipelined_w4a16/bench_10.py [--m 1 16 32 64 128 256] [--record]  lesson 10's kernel against
                                                        cuBLAS FP16, tinygemm, Marlin and lesson 07's W4A16
    python lessons/10_pipelined_w4a16/bench_10.py --block-cost [--record]  what one block costs: a fixed part and a
                                                        part per K tile, and split-K's fix-up

The table's decode sizes (M ≤ 32) are also replayed from a CUDA graph (bench.graph_fn, column graph_us). The notebook
imports it (`import bench_10; bench_10.run(...)`). With --record the rows go to build/results/10.json ("ladder",
"table", "steps" or "block_cost"; results/10.json with COURSE_RECORD=1). --exercises times your kernels/w4a16_pipe.cu
(the teaching steps); the fast kernel (w4a16_pipe_fast.cu) and lesson 07's always come from solutions/.
"""
import argparse

import torch

from harness import bench, build, catalog, quant, results, roofline
from harness.baselines import marlin

SHAPES_KN = [(4096, 4096), (4096, 14336), (14336, 4096), (8192, 8192)]
LADDER_KN = [(8192, 8192), (4096, 14336)]  # the notebook's ladder
GRAPH_MAX_M = 32  # the decode sizes: timed in a CUDA graph too
STEPS = ["gemm_w4a16_writeback", "gemm_w4a16_writeback_padded", "gemm_w4a16_frag", "gemm_w4a16_frag_pipe",
         "gemm_w4a16_frag_split", "linear_w4a16_frag"]
_L07 = bench.lesson_module(7)
CUBLAS, TINYGEMM, MARLIN, W4A16_07 = results.CUBLAS_FP16, _L07.TINYGEMM, _L07.MARLIN, _L07.W4A16_07
FAST = "w4a16_pipe_fast"  # the fast kernel's file: solutions/ only
# route ids: file.launcher, as catalog.kernels(10) names them
LADDER = {results.register(f"{k.file}.{k.launcher}", k.label): k for k in catalog.kernels(10) if k.launcher in STEPS}
TEACH = {results.register(f"{k.file}.{k.launcher}", k.label): k
         for k in catalog.kernels(10) if k.file == "w4a16_pipe"}  # the teaching file's five steps
OURS = results.register("w4a16_pipe", "(10) W4A16, fragment order", "10 W4A16")

VIEWS = {
    "ladder": {"main": {"columns": [CUBLAS, *LADDER], "cell": "us_steps", "steps": list(LADDER),
                        "derived": [["vs", list(LADDER)[-1], CUBLAS]],
                        "note": "µs, median (in brackets: speedup over the step before); weights rotated past L2."}},
    "steps": {"main": {"columns": [CUBLAS, *TEACH], "cell": "us_steps", "steps": list(TEACH),
                       "derived": [["vs", list(TEACH)[-1], CUBLAS]],
                       "note": "µs, median (in brackets: speedup over the step before); weights rotated past L2."},
              "fast": {"columns": [CUBLAS, list(TEACH)[-1], MARLIN, OURS],
                       "derived": [["vs", OURS, list(TEACH)[-1]], ["vs", OURS, MARLIN], ["vs", OURS, CUBLAS]],
                       "note": "µs, median, per call; weights rotated past L2."}},
    "table": {
        "main": {"columns": [CUBLAS, TINYGEMM, MARLIN, W4A16_07, OURS],
                 "derived": [["pct", OURS], ["vs", OURS, CUBLAS], ["vs", OURS, W4A16_07], ["vs", OURS, MARLIN]]},
        "graph": {"kernels": {OURS: "10 W4A16"}, "vs": {"cuBLAS FP16": CUBLAS, "tinygemm": TINYGEMM, "Marlin": MARLIN,
                                                        "lesson 07": W4A16_07}},
        "headline": {"ours": OURS, "base": CUBLAS, "shape": [16, 8192, 8192]}},
}


def steps_markdown(view: str = "main", *, prefer_local: bool = True) -> str:
    """Section 6's tables: the teaching steps' "steps" section (your run's, else the recorded one), view "main" (each
    step against the one before) or "fast" (step 5 beside the fast kernel and Marlin). Where no run of the steps
    exists yet, it says so; "main" then shows the fast kernel's own recorded ladder (the same five ideas), labelled
    as such, and "fast" points at the recorded table of the fast kernel against the libraries."""
    try:
        return results.view_markdown(10, "steps", view, prefer_local=prefer_local)
    except FileNotFoundError:
        pass
    why = ("**No run of the teaching steps is recorded yet** (the timing cell of section 6 on a GPU, or "
           "`python lessons/10_pipelined_w4a16/bench_10.py --steps --record`).")
    if view == "main":
        return (why + " In its place, **the fast kernel's own ladder**, recorded: the same five ideas in "
                "`w4a16_pipe_fast.cu` (10.1 to 10.5), then 10.6, the kernel that also runs a decode GEMV at "
                "M ≤ 8 (see \"Going further\").\n\n"
                + results.view_markdown(10, "ladder", "main", prefer_local=prefer_local))
    return why + (" Without it your step 5 has nothing to stand beside; the fast kernel against cuBLAS FP16, "
                  "tinygemm, Marlin and lesson 07's kernel is in the recorded table below.")


def weight_sets(shape):
    """Input sets in lesson 07's format, the same weights in fragment order, and their FP16 dequantization."""
    sets = bench.input_sets(catalog.W4A16, shape)
    frags = [(x, quant.to_fragments(quant.Int4Weight(q, s, 128))) for x, q, s in sets]
    w16 = {id(q): quant.Int4Weight(q, s, 128).dequantize().half() for _, q, s in sets}
    return sets, frags, w16


def block_cost(*, solution: bool = True, record: bool = False) -> list[dict]:
    """One wave of 8 blocks (N = 1024: 8 tiles of 128 outputs, far fewer than the SMs), so the time is one block's:
    step 10.4 (no split) at K = 128 … 4096 fits time = fixed + per K tile · K tiles; step 10.5 at K = 4096 splits each
    tile 8 ways (its rule allows one split per 4 K tiles), 64 blocks of 4 K tiles and the fix-up that adds them; and
    the floor of any call timed this way, a one-element fill."""
    import numpy as np
    mod = build.load(10, FAST, solution=True)
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
        print("recorded in", results.record(10, "block_cost", rows).relative_to(build.ROOT))
    return rows


def run(ms=None, *, ladder: bool = False, steps: bool = False, kns=None, solution: bool = True, record: bool = False,
        verbose: bool = True) -> list:
    """The teaching kernel's steps (steps=True: each against the one before, then the fast kernel and Marlin; M = 1,
    16, 128 by default), the fast kernel's ladder (ladder=True; M = 1, 16, 32, 128) or the table (lesson 10's kernel
    against cuBLAS FP16, tinygemm, Marlin and lesson 07's W4A16), every route on the same weights in one run; returns
    the rows (results.Row), recorded with record=True. solution=False times your kernels/w4a16_pipe.cu."""
    mod = build.load(10, FAST, solution=True)
    p, pf = catalog.W4A16, catalog.W4A16_FRAG
    ms = ms or ([1, 16, 128] if steps else [1, 16, 32, 128] if ladder else [1, 16, 32, 64, 128, 256])
    if steps:
        teach = build.load(10, "w4a16_pipe", solution=solution)
        routes = {route: (k.problem, k.problem.bind(getattr(teach, k.launcher))) for route, k in TEACH.items()}
        routes[OURS] = (pf, pf.bind(mod.linear_w4a16_frag))
        ladder = True  # each step against the one before; no tinygemm or lesson 07
        kns = kns or LADDER_KN
    elif ladder:
        routes = {route: (k.problem, k.problem.bind(getattr(mod, k.launcher))) for route, k in LADDER.items()}
    else:
        routes = {OURS: (pf, pf.bind(mod.linear_w4a16_frag)),
                  W4A16_07: (p, p.bind(build.load(7, "w4a16_fast", solution=True).linear_w4a16))}
    bw = roofline.bandwidth(roofline.ceilings())[0]
    no_marlin = None if ladder and not steps else marlin.unavailable()
    if no_marlin:
        print(f"Marlin is not timed: {no_marlin}")
    rows = []
    for K, N in kns or SHAPES_KN:
        tiny = None
        if not ladder:
            tiny, why = _L07.tinygemm_op(N, K)
            if why:
                print(f"tinygemm is not timed: {why}")
        for M in ms:
            shape = (M, N, K)
            sets, frags, w16 = weight_sets(shape)
            graph = not ladder and M <= GRAPH_MAX_M
            tf = lambda op, s: bench.time_fn(op, s, reps=50, graph=graph)  # noqa: E731
            timed = {CUBLAS: tf(lambda x, q, s: torch.nn.functional.linear(x, w16[id(q)]), sets)}
            if tiny:
                timed[TINYGEMM] = tf(tiny, sets)
            if (steps or not ladder) and not no_marlin:
                timed[MARLIN] = tf(marlin.bench_op(sets), sets)
            for route, (prob, op) in routes.items():
                timed[route] = tf(op, frags if prob is pf else sets)
            del sets, frags, w16
            base, prev = timed[CUBLAS].median_us, None
            for route, t in timed.items():
                nbytes = catalog.FP16.bytes(shape) if route == CUBLAS else p.bytes(shape)
                extra = dict(desc=p.describe(shape), gbs=round(nbytes / t.median_us / 1e3, 1),
                             pct_bw=round(100 * nbytes / bw / 1e3 / t.median_us, 1),
                             speedup_vs_cublas=round(base / t.median_us, 2),
                             tflops=round(p.flops(shape) / t.median_us / 1e6, 2))
                if MARLIN in timed:
                    extra["speedup_vs_marlin"] = round(timed[MARLIN].median_us / t.median_us, 2)
                if ladder and route not in (CUBLAS, MARLIN, OURS):  # each step against the one before
                    extra["speedup_vs_previous"] = round(prev / t.median_us, 2) if prev else None
                    prev = t.median_us
                rows.append(results.Row.measured(route, shape, t.median_us, t.graph_us if graph else None, nbytes,
                                                 p.flops(shape), CUBLAS, **extra))
                if t.graph_error:
                    print(f"  {results.name(route)}: not timed in a CUDA graph: {t.graph_error}")
            if verbose:
                print(f"M={M} K={K} N={N}: {len(timed)} routes timed", flush=True)
    section = "steps" if steps else "ladder" if ladder else "table"
    if record:
        print("recorded in", results.record(10, section, rows, views=VIEWS[section]).relative_to(build.ROOT))
    return rows


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--m", type=int, nargs="+", default=None)
    ap.add_argument("--kn", type=int, nargs=2, action="append", help="K N (default: the four lesson shapes)")
    ap.add_argument("--steps", action="store_true", help="time the teaching kernel's five steps, the fast kernel, Marlin")
    ap.add_argument("--ladder", action="store_true", help="time the six steps of the fast kernel's ladder")
    ap.add_argument("--block-cost", action="store_true", help="what one block costs (one wave of 8 blocks)")
    ap.add_argument("--exercises", action="store_true", help="time your kernels/w4a16_pipe.cu, not the solution")
    ap.add_argument("--record", action="store_true")
    a = ap.parse_args(argv)
    if a.block_cost:
        block_cost(solution=not a.exercises, record=a.record)
        return
    rows = run(a.m, ladder=a.ladder, steps=a.steps, kns=[tuple(kn) for kn in a.kn] if a.kn else None,
               solution=not a.exercises, record=a.record)
    section = "steps" if a.steps else "ladder" if a.ladder else "table"
    print("\n" + results.view_markdown(10, section, sec=results.this_run(rows, VIEWS[section])))


if __name__ == "__main__":
    main()
