"""Lesson 08's benchmark, inputs rotated past L2: the NF4 dequantize kernels of the teaching file (codebook in global
memory, decision tree, shared memory, registers with shuffles, a table of pairs, the table of pairs once per bank)
against PyTorch's lookup (harness.quant), bitsandbytes' own kernel (harness.baselines.bnb, on the same bytes), a
kernel that moves the same bytes without decoding them (stream_probe.cu: the floor of the lesson's loop) and the copy
bandwidth; then the GEMVs: the teaching file's warp-per-output GEMV and the fast kernel's fused GEMV (nf4_fast.cu:
on bitsandbytes' row-major bytes, on the same bytes in 16-row tiles, repacked before timing, and on those tiles with
the absmax double-quantized) against cuBLAS FP16, dequantize + cuBLAS, bitsandbytes' matmul_4bit and lesson 07's
W4A16 GEMV, each call timed on its own and replayed from a CUDA graph (column graph_us). With --record the rows go to
build/results/08.json (results/08.json with COURSE_RECORD=1), sections "dequant" and "gemv".
--exercises times your kernels/ file for lesson 08 (the fast kernel has no exercise: always the solution) and leaves
out lesson 07's GEMV, so that only lesson 08's kernels are timed.

    python lessons/08_nf4/bench_08.py [--exercises] [--record]
"""
import argparse

import torch

from harness import bench, build, catalog, quant, results, roofline
from harness.baselines import bnb

SHAPES = [(4096, 4096), (14336, 4096), (8192, 8192)]  # N × K
CUBLAS = results.CUBLAS_FP16
TORCH = results.register("nf4.torch", "PyTorch (harness.quant)")
KERNELS = {results.register(f"nf4.{k.launcher}", k.label, k.label.replace("08 NF4 dequantize, ", "")): k
           for k in catalog.kernels(8) if k.problem is catalog.DEQUANT_NF4}
GLOBAL, TREE, SMEM = "nf4.dequant_nf4_global", "nf4.dequant_nf4_branchy", "nf4.dequant_nf4_smem"
BNB_DEQUANT = results.register("bnb.dequantize_4bit", bnb.DEQUANT_OP)
FLOOR = results.register("nf4.floor", "the same bytes, no decoding (floor)")
DEQ = results.register("nf4.dequant_cublas", "dequantize NF4 + cuBLAS")
GEMV_WARP = results.register("nf4.gemv_warp", "(08) NF4 GEMV, a warp per output (teaching kernel)")
GEMV = results.register("nf4.gemv", "(08) fused NF4 GEMV")
GEMV_TILES = results.register("nf4.gemv_tiles", "(08) fused NF4 GEMV, 16-row tiles")
GEMV_DQ = results.register("nf4.gemv_tiles_dq", "(08) fused NF4 GEMV, tiles, double-quantized absmax")
W4A16 = results.register("w4a16_07_int4", "(07) fused W4A16 (INT4 weights)")
BNB_LINEAR = results.register("bnb.matmul_4bit", bnb.LINEAR_OP)

VIEWS = {
    "dequant": {
        "main": {"columns": [TORCH, *KERNELS, BNB_DEQUANT, FLOOR], "cell": "us_pct",
                 "derived": [["vs", SMEM, BNB_DEQUANT], ["vs", SMEM, TREE], ["vs", FLOOR, TREE]],
                 "note": "NF4 → FP16, µs (% of copy bandwidth); packed input rotated past L2; bitsandbytes' kernel on "
                         "the same bytes; the floor moves the same bytes through the same loop with no decoding, so no "
                         "kernel of this loop is faster than the tree by more than the last column."}},
    "gemv": {
        "main": {"columns": [CUBLAS, DEQ, GEMV_WARP, GEMV, GEMV_TILES, GEMV_DQ, W4A16, BNB_LINEAR],
                 "derived": [["vs", GEMV, CUBLAS], ["vs", GEMV_TILES, GEMV_WARP], ["vs", GEMV_TILES, GEMV], ["vs", GEMV_TILES, CUBLAS],
                             ["pct", GEMV_TILES], ["vs", GEMV_TILES, BNB_LINEAR], ["vs", GEMV_DQ, CUBLAS]],
                 "note": "µs, median; weights rotated past L2; the two NF4 GEMVs are the same arithmetic on the same "
                         "bytes in two orders; the teaching GEMV decodes the same bytes on CUDA cores, a warp per "
                         "output; "
                         "bitsandbytes' matmul_4bit runs the kernel the library picks for the shape and GPU; "
                         "double-quantized: the same weights with each absmax an 8-bit code (bitsandbytes' "
                         "compress_statistics), 4.13 bits per weight instead of 4.5."},
        "graph": {"kernels": {GEMV_WARP: "08 NF4, teaching", GEMV_TILES: "08 NF4", GEMV_DQ: "08 NF4, double-quantized"},
                  "vs": {"cuBLAS FP16": CUBLAS, "dequantize + cuBLAS": DEQ, "bitsandbytes": BNB_LINEAR}},
        "headline": {"ours": GEMV_TILES, "base": CUBLAS, "shape": [1, 8192, 8192]}},
}


def _stream_probe():
    """The read probe's CUDA file (its kernels move bytes without decoding them)."""
    found = sorted(build.ROOT.glob("lessons/*/stream_probe.cu"))
    if len(found) != 1:
        raise FileNotFoundError(f"expected one lessons/*/stream_probe.cu, found {found}")
    return found[0]


def run(*, solution: bool = True, record: bool = False, verbose: bool = True) -> dict:
    """Time the dequantize kernels, then the GEMVs, each in one run; returns {"dequant": rows, "gemv": rows}
    (results.Row), recorded with record=True. solution=False: the teaching kernels from your kernels/ file, and no
    other lesson's kernel."""
    mod = build.load(8, "nf4", solution=solution)
    fast = build.load(8, "nf4_fast", solution=True)  # the lesson's fast kernel: solutions/ only
    prob = catalog.DEQUANT_NF4
    ops = {route: prob.bind(getattr(mod, k.launcher), k.label) for route, k in KERNELS.items()}

    def torch_nf4(packed, absmax, codebook):  # PyTorch ops: index the codebook, scale, cast
        N, K = packed.shape[0], packed.shape[1] * 2
        return quant.NF4Weight(packed.reshape(-1), absmax.reshape(-1), (N, K), prob.block).dequantize().half()

    c = roofline.ceilings()
    bw = c["copy_GBps"]  # a dequantize writes 2 bytes per weight for the half byte it reads: the copy's floor
    probe = build.load_file(_stream_probe(), solution=True)  # the floor's kernel
    sms = torch.cuda.get_device_properties(0).multi_processor_count
    no_bnb = bnb.unavailable()
    if no_bnb:
        print(f"bitsandbytes is not timed: {no_bnb}")
    rows = []
    for shape in SHAPES:
        # the packed input is 0.56 of the 2.56 bytes per weight bytes() counts: rotate enough of it past L2
        sets = bench.input_sets(prob, shape, l2_multiple=14)
        timed = {TORCH: bench.time_fn(torch_nf4, sets, reps=50)}
        timed.update({route: bench.time_fn(op, sets, reps=50) for route, op in ops.items()})
        if not no_bnb:
            timed[BNB_DEQUANT] = bench.time_fn(bnb.dequant_op, sets, reps=50)
        # The floor of the lesson's loop: the same bytes in and out with no decoding (the faster of two grid caps).
        words, out = shape[0] * shape[1] // 8, torch.empty(shape[0] * shape[1] * 2, dtype=torch.uint8, device="cuda")
        timed[FLOOR] = min(
            (bench.time_fn(lambda q, am, cb, g=min(-(-words // 1024), cap * sms): probe.expand(q, am, out, words, g),
                           sets, reps=50) for cap in (8, 16)), key=lambda t: t.median_us)
        base = timed[GLOBAL].median_us
        vs_bnb = timed.get(BNB_DEQUANT)
        for route, t in timed.items():
            extra = dict(desc=prob.describe(shape), gbs=round(prob.bytes(shape) / t.median_us / 1e3, 1),
                         pct_bw=round(100 * prob.bytes(shape) / bw / 1e3 / t.median_us, 1),
                         speedup_vs_global=round(base / t.median_us, 2))
            if vs_bnb:
                extra["speedup_vs_bnb"] = round(vs_bnb.median_us / t.median_us, 2)
            rows.append(results.Row.measured(route, shape, t.median_us, None, prob.bytes(shape), None, GLOBAL, **extra))
        if verbose:
            print(f"N={shape[0]} K={shape[1]}: {len(timed)} dequantize routes timed", flush=True)
    if record:
        print("recorded in", results.record(8, "dequant", rows, views=VIEWS["dequant"], bandwidth="copy").relative_to(build.ROOT))

    # The GEMVs against cuBLAS FP16 on FP16 weights, PyTorch's route (our dequantize, then cuBLAS) and, with the
    # solutions, lesson 07's W4A16 GEMV on INT4 weights of the same size.
    lin, p4 = catalog.NF4_LINEAR, catalog.W4A16
    bw = roofline.bandwidth(c)[0]  # a GEMV reads its weights and writes almost nothing: the read's floor
    warp = lin.bind(mod.gemv_nf4_warp)
    fused, fused_tiles = lin.bind(fast.gemv_nf4), catalog.NF4_TILES.bind(fast.gemv_nf4_tiles)
    fused_dq = catalog.NF4_TILES_DQ.bind(fast.gemv_nf4_tiles_dq)
    deq = prob.bind(mod.dequant_nf4_pairs)
    w4 = p4.bind(build.load(7, "w4a16_fast", solution=True).linear_w4a16) if solution else None
    grows = []
    for N, K in ((4096, 14336), (14336, 4096), (8192, 8192)):
        for M in (1, 4, 16):
            s = (M, N, K)
            sets = bench.input_sets(lin, s)
            tw = {id(q): quant.to_tiles(quant.NF4Weight(q.reshape(-1), am.reshape(-1), (N, K))) for _, q, am, _ in sets}
            dqw = {id(q): quant.to_tiles(quant.double_quantize(quant.NF4Weight(q.reshape(-1), am.reshape(-1), (N, K))))
                   for _, q, am, _ in sets}
            tf = lambda op, sets: bench.time_fn(op, sets, reps=50, graph=True)
            timed = {CUBLAS: tf(torch.nn.functional.linear, bench.input_sets(catalog.FP16, s)),
                     DEQ: tf(lambda x, q, am, cb: torch.nn.functional.linear(x, deq(q, am, cb)), sets),
                     GEMV_WARP: tf(warp, sets),
                     GEMV: tf(fused, sets),
                     GEMV_TILES: tf(lambda x, q, am, cb: fused_tiles(x, tw[id(q)]), sets),
                     GEMV_DQ: tf(lambda x, q, am, cb: fused_dq(x, dqw[id(q)]), sets)}
            if w4 is not None:
                timed[W4A16] = tf(w4, bench.input_sets(p4, s))
            if not no_bnb:
                timed[BNB_LINEAR] = tf(bnb.linear_op, sets)
            base = timed[CUBLAS].median_us
            vs_bnb = timed.get(BNB_LINEAR)
            for route, t in timed.items():
                nbytes = {CUBLAS: catalog.FP16.bytes(s), W4A16: p4.bytes(s), GEMV_DQ: catalog.NF4_TILES_DQ.bytes(s)}.get(
                    route, lin.bytes(s))
                extra = dict(desc=lin.describe(s), gbs=round(nbytes / t.median_us / 1e3, 1),
                             pct_bw=round(100 * nbytes / bw / 1e3 / t.median_us, 1),
                             speedup_vs_cublas=round(base / t.median_us, 2))
                if vs_bnb:
                    extra["speedup_vs_bnb"] = round(vs_bnb.median_us / t.median_us, 2)
                grows.append(results.Row.measured(route, s, t.median_us, t.graph_us, nbytes, lin.flops(s), CUBLAS, **extra))
                if t.graph_error:
                    print(f"  {results.name(route)}: not timed in a CUDA graph: {t.graph_error}")
            if verbose:
                print(f"M={M} N={N} K={K}: {len(timed)} GEMV routes timed", flush=True)
    if record:
        print("recorded in", results.record(8, "gemv", grows, views=VIEWS["gemv"]).relative_to(build.ROOT))
    return {"dequant": rows, "gemv": grows}


def chart_dequant(sec: dict | None = None):
    """The dequantize kernels against the floor: a panel per shape, µs per kernel as bars (PyTorch's decoding, an
    order of magnitude slower, is left out), the floor as a dashed line. Your run's rows if you made one."""
    from matplotlib.figure import Figure  # not pyplot: the notebook shows it once, where it asks to
    sec = sec or results.load(8, "dequant")
    rows = results.rows_of(sec)
    shapes = list(dict.fromkeys(tuple(r.shape) for r in rows))
    order = [*KERNELS, BNB_DEQUANT]
    fig = Figure(figsize=(4.2 * len(shapes), 3.2))
    axs = fig.subplots(1, len(shapes), sharey=True, squeeze=False)
    for ax, shape in zip(axs[0], shapes):
        us = {r.route: r.us for r in rows if tuple(r.shape) == shape}
        shown = [route for route in order if route in us]
        ax.barh(range(len(shown)), [us[route] for route in shown], color=["#C44E52" if route == TREE else "#4C72B0"
                                                                           for route in shown])
        if FLOOR in us:
            ax.axvline(us[FLOOR], color="#333333", ls="--", lw=1)
            ax.text(us[FLOOR], -0.95, f" floor {us[FLOOR]:.1f}", fontsize=7, va="center")
        ax.set_yticks(range(len(shown)), [results.ROUTES[route][1] for route in shown], fontsize=7.5)
        ax.set_ylim(len(shown) - 0.5, -1.3)  # first kernel on top, room above it for the floor's label
        ax.set_title(f"N = {shape[0]}, K = {shape[1]}", fontsize=9)
        ax.set_xlabel("µs (lower is better)", fontsize=8)
    fig.tight_layout()
    return fig


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--exercises", action="store_true", help="time your kernels/ file for lesson 08, not the solution")
    ap.add_argument("--record", action="store_true")
    a = ap.parse_args(argv)
    for section, rows in run(solution=not a.exercises, record=a.record).items():
        print("\n" + results.view_markdown(8, section, sec=results.this_run(rows, VIEWS[section])))


if __name__ == "__main__":
    main()
