"""Lesson 08 measurements: the four NF4 dequantize kernels (codebook in global memory, decision tree, shared
memory, registers with shuffles) against PyTorch's lookup (harness.quant) and the copy bandwidth, N × K weights
rotated past L2. With --record the rows go to results/08.json (COURSE_RECORD=1 for the shipped file).

    python tools/bench_nf4.py [--exercises] [--record]
"""
import argparse

from harness import bench, build, catalog, quant, results, roofline

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
    rows = []
    for shape in SHAPES:
        # the packed input is 0.56 of the 2.56 bytes per weight bytes() counts: rotate enough of it past L2
        sets = bench.input_sets(prob, shape, l2_multiple=14)
        timed = {"PyTorch (harness.quant)": bench.time_fn(torch_nf4, sets, reps=50)}
        timed.update({name: bench.time_fn(op, sets, reps=50) for name, op in ops.items()})
        base = timed["08 NF4 dequantize, codebook in global memory"].median_us
        print(f"\nN={shape[0]} K={shape[1]}: {prob.bytes(shape) / 1e6:.1f} MB, floor {prob.bytes(shape) / bw / 1e3:.1f} µs")
        for name, t in timed.items():
            rows.append(dict(op=name, shape=list(shape), desc=prob.describe(shape), us=round(t.median_us, 2),
                             gbs=round(prob.bytes(shape) / t.median_us / 1e3, 1),
                             pct_copy_bw=round(100 * prob.bytes(shape) / bw / 1e3 / t.median_us, 1),
                             speedup_vs_global=round(base / t.median_us, 2)))
            r = rows[-1]
            print(f"  {name:<52} {r['us']:>8.1f} µs {r['gbs']:>7,.0f} GB/s {r['pct_copy_bw']:>6.1f}% of copy bw "
                  f"{r['speedup_vs_global']:>5.2f}× vs global")
    if a.record:
        results.record(8, "dequant", rows)


if __name__ == "__main__":
    main()
