"""Lesson 07's benchmark: W4A16 (INT4 weights, group 128) against cuBLAS FP16, dequantize + cuBLAS, PyTorch's
tinygemm INT4 kernel, Marlin and lesson 06's INT8 kernel, at decode and small-batch shapes, weights rotated past L2,
every route in the same run. At M <= 16 it also times the GEMV on the same weights stored in 16-row tiles (repacked
before timing, as a serving engine does at load time) against the row-major GEMV, and every route replayed from a
CUDA graph too (bench.graph_fn: a decode step as a serving engine runs it), column graph_us.

tinygemm (torch._weight_int4pack_mm) takes bf16 activations and its own packed layout with scales and zeros as
[K/128, N, 2]: it is timed on random weights of that layout, the same sizes; its values are not compared. Marlin
runs on each input set's own weights, packed into its layout before timing (tests/test_marlin.py checks its results).

    python lessons/07_fused_int4/bench_07.py [--m 1 4 16 64 256] [--exercises] [--record]

The notebook imports it (`import bench_07; bench_07.run(...)`). With --record the rows go to build/results/07.json
(results/07.json with COURSE_RECORD=1). The teaching kernels (w4a16.cu: dequant_int4, gemv_int4) come from your
kernels/ file with --exercises, else from solutions/; the fast kernels (w4a16_fast.cu) have no stub. With --exercises
only lesson 07's kernels and the libraries are timed (lesson 06's INT8 kernel is left out).
"""
import argparse
import itertools
import math

import torch

from harness import bench, build, catalog, quant, results, roofline
from harness.baselines import marlin

SECTION = "table"
SHAPES_KN = [(4096, 4096), (4096, 14336), (14336, 4096), (8192, 8192)]
CUBLAS = results.CUBLAS_FP16
DEQ = results.register("w4a16.dequant_cublas", "dequantize + cuBLAS")
FUSED = results.register("w4a16.fused", "(07) fused W4A16", "07 fused W4A16")
TINYGEMM = results.register("tinygemm", "tinygemm (_weight_int4pack_mm, bf16)", "tinygemm (bf16)")
MARLIN = results.register("marlin", marlin.OP)
GEMV = results.register("w4a16.gemv", "(07) GEMV, row-major", "GEMV, row-major")
GEMV_TILES = results.register("w4a16.gemv_tiles", "(07) GEMV, 16-row tiles", "GEMV, 16-row tiles")
FUSED_ZP = results.register("w4a16.fused_zp", "(07) fused W4A16, zero points", "07 with zero points")
W8A16_06 = results.register("w8a16.fused_06", "(06) fused W8A16 (INT8 weights)", "06 fused W8A16")
W4A16_07 = results.register("w4a16_07", "(07) W4A16", "07 W4A16")  # lesson 07's kernel in lessons 09, 10 and 12
TEACH = results.register("w4a16.teach_gemv", "(07) teaching GEMV (gemv_int4), scale after the mma", "teaching GEMV")

VIEWS = {
    "main": {"columns": [CUBLAS, DEQ, TINYGEMM, MARLIN, W8A16_06, FUSED, FUSED_ZP],
             "derived": [["pct", FUSED], ["vs", FUSED, CUBLAS], ["vs", FUSED, TINYGEMM], ["vs", FUSED, MARLIN]]},
    "tiles": {"only": GEMV_TILES, "columns": [CUBLAS, TINYGEMM, MARLIN, GEMV, GEMV_TILES],
              "derived": [["pct", GEMV], ["pct", GEMV_TILES], ["vs", GEMV_TILES, GEMV], ["vs", GEMV_TILES, CUBLAS],
                          ["vs", GEMV_TILES, TINYGEMM], ["vs", GEMV_TILES, MARLIN]],
              "note": "µs, median; weights rotated past L2; the two GEMVs are the same kernel, same arithmetic, on the "
                      "same bytes in two orders (on tiles at M ≤ 8, where a shape has more units of 32 outputs than "
                      "blocks fit at once, one generation of blocks computes them all: lesson 07, section 5)."},
    "graph": {"kernels": {GEMV_TILES: "07 W4A16"},
              "vs": {"cuBLAS FP16": CUBLAS, "dequantize + cuBLAS": DEQ, "tinygemm": TINYGEMM, "Marlin": MARLIN}},
    "headline": {"ours": GEMV_TILES, "base": CUBLAS, "shape": [1, 8192, 8192]},
    "teach": {"only": TEACH, "columns": [CUBLAS, TEACH, GEMV, GEMV_TILES],
              "derived": [["pct", TEACH], ["pct", GEMV_TILES], ["vs", TEACH, CUBLAS], ["vs", GEMV, TEACH],
                          ["vs", GEMV_TILES, TEACH]],
              "note": "µs, median; weights rotated past L2; the teaching GEMV (w4a16.cu) against the fast kernel's "
                      "GEMV on the same row-major weights and on 16-row tiles (w4a16_fast.cu)."},
}
SHAPES_MNK = [(M, N, K) for K, N in SHAPES_KN for M in (1, 16)]


def floors(c: dict | None = None) -> str:
    """Bytes a linear layer must move in INT4, INT8 and FP16 weights, and the floor they set at the read bandwidth
    of the ceilings c (the reference GPU's recording unless given: the same on every machine). No GPU needed."""
    c = c or roofline.recorded()
    bw, kind = roofline.bandwidth(c)
    out = [f"{kind} bandwidth {bw:,.0f} GB/s ({c['gpu']}, measured {c['date'][:10]})",
           f"{'K × N':<13} {'M':>3} {'INT4 MB':>8} {'INT8 MB':>8} {'FP16 MB':>8} {'floor INT4 µs':>14} "
           f"{'floor FP16 µs':>14}"]
    for M, N, K in SHAPES_MNK:
        b4, b8, b16 = (p.bytes((M, N, K)) for p in (catalog.W4A16, catalog.W8A16, catalog.FP16))
        out.append(f"{K:>5} × {N:<5} {M:>3} {b4 / 1e6:>8.1f} {b8 / 1e6:>8.1f} {b16 / 1e6:>8.1f} "
                   f"{b4 / bw / 1e3:>14.1f} {b16 / bw / 1e3:>14.1f}")
    return "\n".join(out)


def budget(c: dict | None = None, shape=(1, 8192, 8192)) -> str:
    """What the INT4 floor leaves for arithmetic: weights each SM must take in per cycle, and the lane-instructions
    per weight that allows (an SM issues at most 4 warp instructions, 128 lane-instructions, per cycle). The read
    bandwidth, SM count and SM clock under load are those the ceilings c were measured with (the reference GPU's
    recording unless given). No GPU needed."""
    c = c or roofline.recorded()
    M, N, K = shape
    if not c.get("sms") or not c.get("clock_MHz"):
        raise roofline.NoCeilings(f"the ceilings of the {c['gpu']} ({c['date'][:10]}) record no SM count or clock")
    sms, clock_ghz = c["sms"], c["clock_MHz"] / 1e3
    floor = catalog.W4A16.bytes(shape) / roofline.bandwidth(c)[0] / 1e3
    per_cycle = N * K / (sms * floor * 1e3 * clock_ghz)
    return (f"{N} × {K} at M = {M} on the {c['gpu']}: floor {floor:.1f} µs on {sms} SMs at {clock_ghz:.3f} GHz\n"
            f"each SM must take in {per_cycle:.1f} weights per cycle\n"
            f"at 100% issue: {128 / per_cycle:.1f} lane-instructions per weight, everything included; at 50%: "
            f"{64 / per_cycle:.1f}")


def teach_table(prefer_local: bool = True) -> str:
    """View "teach" (the teaching GEMV, gemv_int4, beside the fast kernel's GEMVs) as Markdown, from your own
    run if there is one, else the recorded table. Where neither holds a row of the teaching GEMV, a note that says
    so and where the measured times are, instead of an empty table. No GPU needed."""
    sec = results.load(7, SECTION, prefer_local=prefer_local)
    if any(r.route == TEACH for r in results.rows_of(sec)):
        return results.view_markdown(7, SECTION, "teach", sec=sec)
    return ("**No row of the teaching GEMV (`gemv_int4`) is recorded yet** (results/07.json): this table fills "
            "once `bench_07.run(record=True)` has run on a GPU (section 4's cell does). Its times at M = 1, 4 and 16 "
            "on 8192 × 8192, measured on the H100, are in the output of the check cell of exercise 07.b (section 3), "
            "beside the INT4 floor and cuBLAS; the fast kernel's GEMV on the same shapes is the column "
            "\"GEMV, row-major\" of section 5's table.")


def teaching_ops(solution: bool | None = None) -> dict:
    """The teaching kernels of w4a16.cu (yours, or the solution), bound to their problems with the catalog's shape
    rules: {launcher: op}."""
    return {k.launcher: catalog.op(k, solution=solution) for k in catalog.kernels(7) if k.stub}


def unpack_step(solution: bool | None = None, shape=(8192, 8192)) -> str:
    """dequant_int4 (exercise 07.a, unscaled unpack plus one multiply) at N × K, weights rotated past L2, against the
    floor of its bytes: N·K/2 read, 2·N·K written, the scales read."""
    op = teaching_ops(solution)["dequant_int4"]
    prob = catalog.DEQUANT_W4
    t = bench.time_fn(op, bench.input_sets(prob, shape), reps=50)
    nbytes, bw = prob.bytes(shape), roofline.ceilings()["copy_GBps"]  # it writes FP16: the copy's floor
    return (f"dequant_int4 {shape[0]} × {shape[1]}: {t.median_us:.1f} µs for {nbytes / 1e6:.1f} MB, floor "
            f"{nbytes / bw / 1e3:.1f} µs: {100 * nbytes / bw / 1e3 / t.median_us:.0f}% of the copy bandwidth")


def gemv_step(ms=(1, 4, 16), kn=(8192, 8192), solution: bool | None = None) -> str:
    """The teaching GEMV (exercise 07.b) against cuBLAS FP16 on the same weights, and the INT4 floor, at K × N."""
    import torch
    op, prob = teaching_ops(solution)["gemv_int4"], catalog.W4A16
    bw = roofline.bandwidth(roofline.ceilings())[0]
    dequant = catalog.DEQUANT_W4.bind(build.load(7, "w4a16_fast", solution=True).dequant_w4)
    out = [f"{'K × N':<13} {'M':>3} {'floor µs':>9} {'gemv_int4 µs':>12} {'% read bw':>10} {'cuBLAS FP16 µs':>15}"]
    for M in ms:
        shape = (M, kn[1], kn[0])
        sets = bench.input_sets(prob, shape)
        w16 = {id(s[1]): dequant(s[1], s[2]) for s in sets}
        mine = bench.time_fn(op, sets, reps=50).median_us
        cub = bench.time_fn(lambda x, q, s: torch.nn.functional.linear(x, w16[id(q)]), sets, reps=50).median_us
        floor = prob.bytes(shape) / bw / 1e3
        out.append(f"{kn[0]:>5} × {kn[1]:<5} {M:>3} {floor:>9.1f} {mine:>12.1f} {100 * floor / mine:>9.0f}% {cub:>15.1f}")
        del sets, w16
    return "\n".join(out)


def tinygemm_op(N, K, group=128, inner_k_tiles=8, l2_multiple=3.0):
    """A bf16 x → tinygemm call on random INT4 weights of shape [N, K], rotating through enough copies to
    defeat L2 as bench.input_sets does, or the reason it cannot run here."""
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


def run(ms=(1, 4, 16, 64, 256), *, solution: bool = True, record: bool = False, verbose: bool = True) -> list:
    """Time every route on every shape in one run; returns the rows (results.Row), recorded with record=True."""
    mod = build.load(7, "w4a16_fast", solution=True)  # the fast kernels have no stub
    teach = teaching_ops(solution)["gemv_int4"]  # the teaching GEMV: yours with solution=False
    mod6 = build.load(6, "w8a16_fast", solution=True)  # lesson 06's kernel: the solution, whatever lesson 07 runs
    prob, asym, p8 = catalog.W4A16, catalog.W4A16_ASYM, catalog.W8A16
    # what a model calls: the GEMV up to M = 16, the tiled kernel past it
    fused, fused_asym = prob.bind(mod.linear_w4a16), asym.bind(mod.linear_w4a16_asym)
    gemv, gemv_tiles = prob.bind(mod.gemv_w4a16), catalog.W4A16_TILES.bind(mod.gemv_w4a16_tiles)
    dequant = catalog.DEQUANT_W4.bind(mod.dequant_w4)
    int8 = p8.bind(mod6.linear_w8a16) if mod6 else None
    bw = roofline.bandwidth(roofline.ceilings())[0]
    no_marlin = marlin.unavailable()
    if no_marlin:
        print(f"Marlin is not timed: {no_marlin}")
    rows = []
    for K, N in SHAPES_KN:
        tiny, why = tinygemm_op(N, K)
        if why:
            print(f"tinygemm is not timed: {why}")
        for M in ms:
            shape = (M, N, K)
            sets = bench.input_sets(prob, shape)
            w16 = {id(s[1]): dequant(s[1], s[2]) for s in sets}  # FP16 weights for the cuBLAS baseline, made first
            tf = lambda op, sets: bench.time_fn(op, sets, reps=50, graph=M <= 16)  # decode M: in a CUDA graph too
            timed = {CUBLAS: tf(lambda x, q, s: torch.nn.functional.linear(x, w16[id(q)]), sets),
                     DEQ: tf(lambda x, q, s: torch.nn.functional.linear(x, dequant(q, s)), sets),
                     FUSED: tf(fused, sets)}
            if tiny:
                timed[TINYGEMM] = tf(tiny, sets)
            if not no_marlin:
                timed[MARLIN] = tf(marlin.bench_op(sets), sets)
            if M <= 16:  # the GEMV on row-major weights, then on the same weights in tiles (each set's own)
                tw = {id(s[1]): quant.to_tiles(quant.Int4Weight(s[1], s[2], prob.group)) for s in sets}
                timed[GEMV] = tf(gemv, sets)
                timed[TEACH] = tf(teach, sets)
                timed[GEMV_TILES] = tf(lambda x, q, s: gemv_tiles(x, tw[id(q)]), sets)
                del tw
            del sets, w16
            timed[FUSED_ZP] = tf(fused_asym, bench.input_sets(asym, shape))
            if int8:
                timed[W8A16_06] = tf(int8, bench.input_sets(p8, shape))
            base = timed[CUBLAS].median_us
            tiny_us = timed[TINYGEMM].median_us if TINYGEMM in timed else None
            marlin_us = timed[MARLIN].median_us if MARLIN in timed else None
            by = {FUSED_ZP: asym.bytes(shape), W8A16_06: p8.bytes(shape), CUBLAS: catalog.FP16.bytes(shape)}
            for route, t in timed.items():
                nbytes = by.get(route, prob.bytes(shape))
                rows.append(results.Row.measured(
                    route, shape, t.median_us, t.graph_us, nbytes, prob.flops(shape), CUBLAS,
                    desc=prob.describe(shape), gbs=round(nbytes / t.median_us / 1e3, 1),
                    pct_bw=round(100 * nbytes / bw / 1e3 / t.median_us, 1),
                    speedup_vs_cublas=round(base / t.median_us, 2),
                    speedup_vs_tinygemm=round(tiny_us / t.median_us, 2) if tiny_us else None,
                    speedup_vs_marlin=round(marlin_us / t.median_us, 2) if marlin_us else None,
                    tflops=round(prob.flops(shape) / t.median_us / 1e6, 3)))
                if t.graph_error:
                    print(f"  {results.name(route)}: not timed in a CUDA graph: {t.graph_error}")
            if verbose:
                print(f"M={M} K={K} N={N}: {len(timed)} routes timed", flush=True)
    if record:
        print("recorded in", results.record(7, SECTION, rows, views=VIEWS).relative_to(build.ROOT))
    return rows


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--m", type=int, nargs="+", default=[1, 4, 16, 64, 256])
    ap.add_argument("--exercises", action="store_true", help="time your kernels/ file for lesson 07, not the solution")
    ap.add_argument("--record", action="store_true")
    a = ap.parse_args(argv)
    rows = run(a.m, solution=not a.exercises, record=a.record)
    for view in ("main", "tiles", "teach"):
        print("\n" + results.view_markdown(7, SECTION, view, sec=results.this_run(rows, VIEWS)))


if __name__ == "__main__":
    main()
