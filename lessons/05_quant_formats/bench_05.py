"""Lesson 05's measurements: what each weight format costs in memory (and so in decode time, at the read bandwidth),
and what it costs in accuracy as the group size grows. Both run on the CPU with the reference formats of
harness/quant.py; no GPU is timed.

    python lessons/05_quant_formats/bench_05.py [--record]

`memory` quantizes one 8192 × 8192 weight matrix into each format and counts its bits per weight, scales and zero
points included, and the floor of a decode GEMV that must read them at lesson 00's recorded read bandwidth.
`error_vs_group` quantizes a 512 × 4096 matrix with eight outlier input channels per format and group size, and
measures ‖W − Ŵ‖/‖W‖ and the error of y = x·Wᵀ for 16 tokens. The random matrices come from torch's generator (the
notebook seeds it once at its top and its cells draw in order; run as a script, the generator is seeded with 0).
The notebook imports this module (`import bench_05`). With --record the rows go to build/results/05.json, sections
"memory" and "error_vs_group" (results/05.json with COURSE_RECORD=1).
"""
from __future__ import annotations

import argparse
import sys

from harness import quant, results, roofline

SECTIONS = ("memory", "error_vs_group")
GROUPS = (32, 64, 128, 256, 512, 1024, 4096)


def memory(N: int = 8192, K: int = 8192, *, generator=None, record: bool = False) -> list[dict]:
    """Bits per weight, MB and the decode floor (µs to read the weights once at the recorded read bandwidth) of an
    N × K matrix in each format: FP16, INT8 per channel and group 128, INT4 symmetric and asymmetric group 128, NF4
    block 64."""
    import torch
    c = roofline.recorded()  # the reference GPU's: the table is the same on every machine
    bw = roofline.bandwidth(c)[0] * 1e9
    W = torch.randn(N, K, generator=generator) / K ** 0.5
    made = {"FP16": None, "INT8 per channel": quant.quantize_int8(W), "INT8 group 128": quant.quantize_int8(W, 128),
            "INT4 sym group 128": quant.quantize_int4(W, 128),
            "INT4 asym group 128": quant.quantize_int4(W, 128, False), "NF4 block 64": quant.quantize_nf4(W)}
    rows = []
    for name, qw in made.items():
        bits = 16.0 if qw is None else quant.bits_per_weight(qw, W.numel())
        mb = bits / 8 * W.numel() / 1e6
        rows.append(dict(format=name, bits_per_weight=round(bits, 4), MB=round(mb, 2),
                         floor_us=round(mb * 1e6 / bw * 1e6, 2)))
    if record:
        results.record(5, "memory", rows, ceilings=c)
    return rows


def memory_table(rows: list[dict], shape: str = "8192×8192") -> str:
    """The memory rows as a fixed-width table, with the ceilings the floors were computed from."""
    c = roofline.recorded()
    bw, kind = roofline.bandwidth(c)
    out = [f"{'format':<22}{'bits/weight':>12}{'MB':>9}{'floor µs':>10}   ({shape}, {kind} bandwidth {bw:,.0f} GB/s "
           f"measured on {c['gpu']})"]
    for r in rows:
        out.append(f"{r['format']:<22}{r['bits_per_weight']:>12.3f}{r['MB']:>9.1f}{r['floor_us']:>10.1f}")
    return "\n".join(out)


def error_vs_group(N: int = 512, K: int = 4096, M: int = 16, groups=GROUPS, *, generator=None,
                   record: bool = False) -> list[dict]:
    """Weight and output error of INT8, INT4 (symmetric, asymmetric) and NF4 per group size, on an N × K matrix
    whose eight random input channels are ten times larger (as real weight matrices have a few), for M tokens."""
    import torch
    W = torch.randn(N, K, generator=generator) / K ** 0.5
    W[:, torch.randperm(K, generator=generator)[:8]] *= 10
    x = torch.randn(M, K, generator=generator)
    y = x @ W.T
    fmts = {"INT8 sym": lambda g: quant.quantize_int8(W, g), "INT4 sym": lambda g: quant.quantize_int4(W, g),
            "INT4 asym": lambda g: quant.quantize_int4(W, g, symmetric=False),
            "NF4": lambda g: quant.quantize_nf4(W, g)}
    rows = []
    for name, f in fmts.items():
        for g in groups:
            if K % g:
                raise ValueError(f"group {g} does not divide K = {K}")
            qw = f(g)
            Wd = qw.dequantize()
            rows.append(dict(format=name, group=g, bits_per_weight=round(quant.bits_per_weight(qw, W.numel()), 4),
                             weight_rel_error=quant.rel_error(Wd, W), output_rel_error=quant.rel_error(x @ Wd.T, y)))
    if record:
        results.record(5, "error_vs_group", rows)
    return rows


def error_table(rows: list[dict]) -> str:
    """‖y − ŷ‖/‖y‖ per format (rows) and group size (columns)."""
    groups = list(dict.fromkeys(r["group"] for r in rows))
    fmts = list(dict.fromkeys(r["format"] for r in rows))
    out = [f"{'format':<10}" + "".join(f"{g:>10}" for g in groups)]
    for name in fmts:
        out.append(f"{name:<10}" + "".join(f"{r['output_rel_error']:>10.2e}" for r in rows if r["format"] == name))
    return "\n".join(out)


def error_chart(rows: list[dict]):
    """The output error against the group size and against the bits per weight, a line per format (a figure)."""
    import matplotlib.pyplot as plt
    fig, axes = plt.subplots(1, 2, figsize=(10, 3.6))
    for name in dict.fromkeys(r["format"] for r in rows):
        rs = [r for r in rows if r["format"] == name]
        axes[0].plot([r["group"] for r in rs], [r["output_rel_error"] for r in rs], "o-", label=name)
        axes[1].plot([r["bits_per_weight"] for r in rs], [r["output_rel_error"] for r in rs], "o-", label=name)
    for ax, xl in zip(axes, ("group size (weights per scale; 4096 = per channel)", "bits per weight, scales included")):
        ax.set_xscale("log", base=2); ax.set_yscale("log"); ax.set_xlabel(xl); ax.grid(alpha=0.3)
    axes[0].set_ylabel("‖y − ŷ‖ / ‖y‖"); axes[0].legend(fontsize=8)
    fig.suptitle("Quantization error of y = x·Wᵀ (K = 4096, outlier channels)")
    return fig


def render(section: str, sec: dict) -> tuple[str, list]:
    """A stored section as (its table with the line saying what computed it, its figures), for the course report."""
    e = sec.get("env", {})
    where = f"Computed with torch {e.get('torch')} on {e.get('gpu') or 'the CPU'}, {sec.get('date', '')[:10]}:\n"
    if section == "memory":
        return where + memory_table(sec["rows"]), []
    if section == "error_vs_group":
        return where + error_table(sec["rows"]), [error_chart(sec["rows"])]
    raise KeyError(f"lesson 05 has no section {section!r} (it has {SECTIONS})")


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--record", action="store_true")
    a = ap.parse_args(argv)
    import torch
    torch.manual_seed(0)
    print(memory_table(memory(record=a.record)))
    print()
    torch.manual_seed(0)
    print(error_table(error_vs_group(record=a.record)))
    if a.record:
        print("recorded: sections memory and error_vs_group of lesson 05 (build/results/05.json; results/05.json "
              "with COURSE_RECORD=1)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
