"""Lesson 09's benchmark. Section "table": the fast W4A8 kernel (two-level 4-bit weights, per-token INT8 activations)
against cuBLAS FP16, PyTorch's W8A8 route (quantize + torch._int_mm + scale), lesson 06's W8A8 and lesson 07's W4A16,
at M = 16 … 256, weights rotated past L2. Every route includes its own activation quantization where it has one; each
is timed twice and the lower median kept. The decode sizes (M ≤ 32) are also replayed from a CUDA graph (graph_us).
Section "teach": the teaching kernel (w4a8.cu, the one you write in) against the fast kernel (w4a8_fast.cu) on the
same shapes.

    python lessons/09_w4a8/bench_09.py [--m 16 32 64 128 256] [--section table teach] [--exercises] [--record]

The notebook imports it (`import bench_09; bench_09.run(...)`, `bench_09.run_teach(...)`). With --record the rows go to
build/results/09.json (results/09.json with COURSE_RECORD=1). --exercises times your kernels/ file for the teaching
kernel; the fast kernel and lessons 06's and 07's kernels always come from solutions/.
"""
import argparse

from harness import bench, build, catalog, problems, results, roofline

SECTION = "table"
SHAPES_KN = [(4096, 14336), (14336, 4096), (8192, 8192)]
GRAPH_MAX_M = 32  # the decode sizes: timed in a CUDA graph too
CUBLAS = results.CUBLAS_FP16
TORCH_W8A8 = results.register("torch.w8a8", "torch W8A8 (quantize + _int_mm + scale)", "torch W8A8 (`_int_mm`)")
W8A8_06 = results.register("w8a8_06", "(06) W8A8", "06 W8A8")
W4A16_07 = bench.lesson_module(7).W4A16_07
OURS = results.register("w4a8", "(09) W4A8", "09 W4A8")
TEACH = results.register("w4a8.simple", "(09) W4A8 teaching kernel", "09 teaching")
TEACH_MS = (16, 64, 256)

VIEWS = {
    "table": {
        "main": {"columns": [CUBLAS, TORCH_W8A8, W8A8_06, W4A16_07, OURS],
                 "derived": [["vs", OURS, CUBLAS], ["vs", OURS, W4A16_07], ["vs", OURS, W8A8_06]],
                 "note": "µs, median; weights rotated past L2; every quantized route includes its activation quantization."},
        "graph": {"kernels": {OURS: "09 W4A8"}, "vs": {"cuBLAS FP16": CUBLAS, "lesson 07": W4A16_07,
                                                       "lesson 06 W8A8": W8A8_06, "torch W8A8": TORCH_W8A8}},
        "headline": {"ours": OURS, "base": CUBLAS, "shape": [64, 8192, 8192]},
    },
    "teach": {
        "main": {"columns": [TEACH, OURS], "derived": [["vs", OURS, TEACH]],
                 "note": "µs, median; weights rotated past L2; both routes include the activations' quantization. "
                         "The fast kernel: cp.async ring through shared memory, 32 weight rows per warp, 64-token "
                         "tiles past M = 32, split-K."}},
}


def run(ms=(16, 32, 64, 128, 256), *, record: bool = False, verbose: bool = True) -> list:
    """Time every route of section "table" on every shape in one run; returns the rows (results.Row), recorded with
    record=True."""
    mod = build.load(9, "w4a8_fast", solution=True)  # the fast kernel: solutions/ only
    p, p88, p416, f16 = catalog.W4A8, catalog.W8A8, catalog.W4A16, catalog.FP16
    routes = {  # route: (problem, op); other lessons' kernels from their solutions
        CUBLAS: (f16, problems.torch_linear),
        TORCH_W8A8: (p88, problems.torch_w8a8),
        W8A8_06: (p88, p88.bind(build.load(6, "w8a16_fast", solution=True).linear_w8a8)),
        W4A16_07: (p416, p416.bind(build.load(7, "w4a16_fast", solution=True).linear_w4a16)),
        OURS: (p, p.bind(mod.linear_w4a8)),
    }
    bw = roofline.bandwidth(roofline.ceilings())[0]
    rows = []
    for K, N in SHAPES_KN:
        for M in ms:
            shape = (M, N, K)
            timed, graph = {}, M <= GRAPH_MAX_M
            for route, (prob, op) in routes.items():
                if route == TORCH_W8A8 and M <= 16:
                    continue  # torch._int_mm refuses M ≤ 16
                # the better of two timings: a route launching several kernels from Python can be delayed by
                # a host hiccup inside a timed batch
                sets = bench.input_sets(prob, shape)
                timed[route] = (prob, min((bench.time_fn(op, sets, reps=50, graph=graph) for _ in range(2)),
                                          key=lambda t: t.median_us))
            base, ours = timed[CUBLAS][1].median_us, timed[OURS][1].median_us
            for route, (prob, t) in timed.items():
                nbytes = prob.bytes(shape)
                rows.append(results.Row.measured(
                    route, shape, t.median_us, t.graph_us if graph else None, nbytes, p.flops(shape), CUBLAS,
                    desc=p.describe(shape), gbs=round(nbytes / t.median_us / 1e3, 1),
                    pct_bw=round(100 * nbytes / bw / 1e3 / t.median_us, 1),
                    speedup_vs_cublas=round(base / t.median_us, 2), w4a8_speedup=round(t.median_us / ours, 2),
                    tops=round(p.flops(shape) / t.median_us / 1e6, 1)))
                if t.graph_error:
                    print(f"  {results.name(route)}: not timed in a CUDA graph: {t.graph_error}")
            if verbose:
                print(f"M={M} K={K} N={N}: {len(timed)} routes timed", flush=True)
    if record:
        print("recorded in", results.record(9, SECTION, rows, views=VIEWS[SECTION]).relative_to(build.ROOT))
    return rows


def run_teach(ms=TEACH_MS, *, solution: bool = True, record: bool = False, verbose: bool = True) -> list:
    """The teaching kernel (your kernels/ file with solution=False) against the fast kernel, per call, on the three
    shapes; returns the rows, recorded in section "teach" with record=True."""
    p = catalog.W4A8
    routes = {TEACH: p.bind(build.load(9, "w4a8", solution=solution).linear_w4a8_simple),
              OURS: p.bind(build.load(9, "w4a8_fast", solution=True).linear_w4a8)}
    rows = []
    for K, N in SHAPES_KN:
        for M in ms:
            shape, sets = (M, N, K), bench.input_sets(p, (M, N, K))
            timed = {route: min((bench.time_fn(op, sets, reps=50) for _ in range(2)), key=lambda t: t.median_us)
                     for route, op in routes.items()}
            for route, t in timed.items():
                rows.append(results.Row.measured(
                    route, shape, t.median_us, None, p.bytes(shape), p.flops(shape), OURS, desc=p.describe(shape),
                    speedup_vs_teach=round(timed[TEACH].median_us / t.median_us, 2)))
            if verbose:
                print(f"M={M} K={K} N={N}: teaching {timed[TEACH].median_us:.1f} µs, fast {timed[OURS].median_us:.1f} µs",
                      flush=True)
    if record:
        print("recorded in", results.record(9, "teach", rows, views=VIEWS["teach"]).relative_to(build.ROOT))
    return rows


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--m", type=int, nargs="+", default=None, help="token counts (default: each section's own)")
    ap.add_argument("--section", nargs="+", choices=("table", "teach"), default=["table", "teach"])
    ap.add_argument("--exercises", action="store_true", help="time your kernels/ file for the teaching kernel")
    ap.add_argument("--record", action="store_true")
    a = ap.parse_args(argv)
    if "table" in a.section:
        rows = run(a.m or (16, 32, 64, 128, 256), record=a.record)
        print("\n" + results.view_markdown(9, SECTION, sec=results.this_run(rows, VIEWS[SECTION])))
    if "teach" in a.section:
        rows = run_teach(a.m or TEACH_MS, solution=not a.exercises, record=a.record)
        print("\n" + results.view_markdown(9, "teach", sec=results.this_run(rows, VIEWS["teach"])))


if __name__ == "__main__":
    main()
