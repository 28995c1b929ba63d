"""Lesson 08 measurements, inputs rotated past L2: the NF4 dequantize kernels (codebook in global memory, decision
tree, shared memory, registers with shuffles, a table of pairs) against PyTorch's lookup (harness.quant), bitsandbytes'
own kernel (harness.bnb, on the same bytes), a kernel that moves the same bytes without decoding them
(tools/stream_probe.cu: the floor of the lesson's loop) and the copy bandwidth; then the fused NF4 GEMV (on
bitsandbytes' row-major bytes, on the same bytes in 16-row tiles, repacked before timing, and on those tiles with the
absmax double-quantized as bitsandbytes' compress_statistics does) against cuBLAS FP16,
dequantize + cuBLAS, bitsandbytes' matmul_4bit and lesson 07's W4A16 GEMV, each call timed on its own and replayed
from a CUDA graph (bench.graph_fn, column graph_us: a decode step as a serving engine runs it). With --record the
rows go to results/08.json, sections "dequant" and "gemv" (COURSE_RECORD=1 for the shipped file).

    python tools/bench_nf4.py [--exercises] [--record]
"""
import argparse

import torch

from harness import bench, bnb, build, catalog, quant, results, roofline

SHAPES = [(4096, 4096), (14336, 4096), (8192, 8192)]  # N × K


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--exercises", action="store_true", help="time your kernels/ files, not the solutions")
    ap.add_argument("--record", action="store_true")
    a = ap.parse_args()
    mod = build.load(8, "nf4", solution=not a.exercises)
    prob = catalog.DEQUANT_NF4
    ops = {k.label: k.problem.bind(getattr(mod, k.launcher), k.label) for k in catalog.kernels(8)
           if k.problem is prob}

    def torch_nf4(packed, absmax, codebook):  # PyTorch ops: index the codebook, scale, cast
        N, K = packed.shape[0], packed.shape[1] * 2
        return quant.NF4Weight(packed.reshape(-1), absmax.reshape(-1), (N, K), prob.block).dequantize().half()

    bw = roofline.ceilings()["copy_GBps"]
    probe = build.load_file(build.ROOT / "tools" / "stream_probe.cu", solution=True)  # the floor's kernel
    sms = torch.cuda.get_device_properties(0).multi_processor_count
    no_bnb = bnb.unavailable()
    if no_bnb:
        print(f"bitsandbytes is not timed: {no_bnb}")
    rows = []
    for shape in SHAPES:
        # the packed input is 0.56 of the 2.56 bytes per weight bytes() counts: rotate enough of it past L2
        sets = bench.input_sets(prob, shape, l2_multiple=14)
        timed = {"PyTorch (harness.quant)": bench.time_fn(torch_nf4, sets, reps=50)}
        timed.update({name: bench.time_fn(op, sets, reps=50) for name, op in ops.items()})
        if not no_bnb:
            timed[bnb.DEQUANT_OP] = bench.time_fn(bnb.dequant_op, sets, reps=50)
        # The floor of the lesson's loop: the same bytes in and out with no decoding (the faster of two grid caps).
        words, out = shape[0] * shape[1] // 8, torch.empty(shape[0] * shape[1] * 2, dtype=torch.uint8, device="cuda")
        timed[results.NF4_MOVE_OP] = min(
            (bench.time_fn(lambda q, am, cb, g=min(-(-words // 1024), cap * sms): probe.expand(q, am, out, words, g),
                           sets, reps=50) for cap in (8, 16)), key=lambda t: t.median_us)
        base = timed["08 NF4 dequantize, codebook in global memory"].median_us
        vs_bnb = timed.get(bnb.DEQUANT_OP)
        print(f"\nN={shape[0]} K={shape[1]}: {prob.bytes(shape) / 1e6:.1f} MB, floor {prob.bytes(shape) / bw / 1e3:.1f} µs")
        for name, t in timed.items():
            rows.append(dict(op=name, shape=list(shape), desc=prob.describe(shape), us=round(t.median_us, 2),
                             gbs=round(prob.bytes(shape) / t.median_us / 1e3, 1),
                             pct_copy_bw=round(100 * prob.bytes(shape) / bw / 1e3 / t.median_us, 1),
                             speedup_vs_global=round(base / t.median_us, 2)))
            r = rows[-1]
            if vs_bnb:
                r["speedup_vs_bnb"] = round(vs_bnb.median_us / t.median_us, 2)
            print(f"  {name:<52} {r['us']:>8.1f} µs {r['gbs']:>7,.0f} GB/s {r['pct_copy_bw']:>6.1f}% of copy bw "
                  f"{r['speedup_vs_global']:>5.2f}× vs global" + (f" {r['speedup_vs_bnb']:>5.2f}× vs bitsandbytes" if vs_bnb else ""))
    if a.record:
        results.record(8, "dequant", rows)

    # The fused GEMV against cuBLAS FP16 on FP16 weights, PyTorch's route (our dequantize, then cuBLAS) and lesson
    # 07's W4A16 GEMV on INT4 weights of the same size.
    lin, p4 = catalog.NF4_LINEAR, catalog.W4A16
    fused, fused_tiles = lin.bind(mod.gemv_nf4), catalog.NF4_TILES.bind(mod.gemv_nf4_tiles)
    fused_dq = catalog.NF4_TILES_DQ.bind(mod.gemv_nf4_tiles_dq)
    deq = prob.bind(mod.dequant_nf4_pairs)
    w4 = p4.bind(build.load(7, "w4a16", solution=not a.exercises).linear_w4a16)
    grows = []
    for N, K in ((4096, 14336), (14336, 4096), (8192, 8192)):
        for M in (1, 4, 16):
            s = (M, N, K)
            sets = bench.input_sets(lin, s)
            tw = {id(q): quant.to_tiles(quant.NF4Weight(q.reshape(-1), am.reshape(-1), (N, K))) for _, q, am, _ in sets}
            dqw = {id(q): quant.to_tiles(quant.double_quantize(quant.NF4Weight(q.reshape(-1), am.reshape(-1), (N, K))))
                   for _, q, am, _ in sets}
            tf = lambda op, sets: bench.time_fn(op, sets, reps=50, graph=True)
            timed = {"cuBLAS FP16 (FP16 weights)": tf(torch.nn.functional.linear, bench.input_sets(catalog.FP16, s)),
                     "dequantize NF4 + cuBLAS": tf(lambda x, q, am, cb: torch.nn.functional.linear(x, deq(q, am, cb)), sets),
                     "(08) fused NF4 GEMV": tf(fused, sets),
                     results.NF4_TILES_OP: tf(lambda x, q, am, cb: fused_tiles(x, tw[id(q)]), sets),
                     results.NF4_DQ_OP: tf(lambda x, q, am, cb: fused_dq(x, dqw[id(q)]), sets),
                     "(07) fused W4A16 (INT4 weights)": tf(w4, bench.input_sets(p4, s))}
            if not no_bnb:
                timed[bnb.LINEAR_OP] = tf(bnb.linear_op, sets)
            base = timed["cuBLAS FP16 (FP16 weights)"].median_us
            vs_bnb = timed.get(bnb.LINEAR_OP)
            print(f"\nM={M} N={N} K={K}: NF4 floor {lin.bytes(s) / bw / 1e3:.1f} µs")
            for name, t in timed.items():
                nbytes = {"cuBLAS FP16 (FP16 weights)": catalog.FP16.bytes(s), "(07) fused W4A16 (INT4 weights)": p4.bytes(s),
                          results.NF4_DQ_OP: catalog.NF4_TILES_DQ.bytes(s)}.get(name, lin.bytes(s))
                grows.append(dict(op=name, shape=list(s), desc=lin.describe(s), us=round(t.median_us, 2),
                                  gbs=round(nbytes / t.median_us / 1e3, 1),
                                  pct_copy_bw=round(100 * nbytes / bw / 1e3 / t.median_us, 1),
                                  speedup_vs_cublas=round(base / t.median_us, 2), graph_us=t.graph_us and round(t.graph_us, 2)))
                r = grows[-1]
                if vs_bnb:
                    r["speedup_vs_bnb"] = round(vs_bnb.median_us / t.median_us, 2)
                g = f"   in a graph {t.graph_us:>7.1f} µs {100 * nbytes / bw / 1e3 / t.graph_us:>5.1f}%" if t.graph_us else ""
                print(f"  {name:<36} {r['us']:>8.1f} µs {r['pct_copy_bw']:>6.1f}% of copy bw {r['speedup_vs_cublas']:>5.2f}× vs cuBLAS FP16{g}")
                if t.graph_error:
                    print(f"  {name}: not timed in a CUDA graph: {t.graph_error}")
    if a.record:
        results.record(8, "gemv", grows)


if __name__ == "__main__":
    main()
