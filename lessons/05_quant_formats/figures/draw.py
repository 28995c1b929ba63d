"""Draw lesson 05's pictures into this folder:  python lessons/05_quant_formats/figures/draw.py

int4_packing.png  eight INT4 weights in one int32 word, in the bit order harness/quant.py documents
group_scale.png   a row of weights split into groups, each with its own scale (and zero point)
"""
import sys
from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt
import torch
from matplotlib.patches import FancyArrowPatch, Rectangle

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parents[2]))  # the repository root, for harness
from harness import quant  # noqa: E402  (the reference decides the bit order drawn here)

COLOURS = ["#4C72B0", "#DD8452", "#55A868", "#C44E52", "#8172B3", "#937860", "#DA8BC3", "#8C8C8C"]


def save(fig, name):
    # no software version or date in the file, so that a redraw of an unchanged picture is byte-identical
    fig.savefig(HERE / name, dpi=110, metadata={"Software": None})
    plt.close(fig)


def int4_packing():
    q = torch.tensor([[1, 2, 3, 4, 5, 6, 7, -8]], dtype=torch.int8)
    word = quant.pack_int4(q).item() & 0xFFFFFFFF        # drawn from the reference, not from this script
    back = quant.unpack_int4(quant.pack_int4(q))[0].tolist()
    assert back == q[0].tolist(), "the reference's unpack must invert its pack"
    fig, ax = plt.subplots(figsize=(12, 4.6))
    # the weights, in row order k .. k+7
    for i, v in enumerate(q[0].tolist()):
        x = 4.2 + i * 4
        ax.add_patch(Rectangle((x, 7), 3.6, 1.2, fc=COLOURS[i], ec="0.2"))
        ax.text(x + 1.8, 7.6, f"w[k+{i}] = {v}", ha="center", va="center", fontsize=8.5, color="white", fontweight="bold")
    ax.text(2.2, 7.6, "weights of\none row, k % 8 = 0", ha="right", va="center", fontsize=9)
    # the word, bit 31 on the left as it is written
    for bit in range(32):
        x = 36 - (bit + 1)                               # bit 31 at x = 4, bit 0 at x = 35
        i = bit // 4                                     # nibble i holds weight k + i
        val = (word >> bit) & 1
        ax.add_patch(Rectangle((x, 2), 1, 1.2, fc=COLOURS[i], ec="white", lw=1, alpha=0.9))
        ax.text(x + 0.5, 2.6, str(val), ha="center", va="center", fontsize=9, color="white", fontweight="bold")
        if bit % 4 == 0 or bit % 4 == 3:
            ax.text(x + 0.5, 1.6, str(bit), ha="center", va="center", fontsize=7.5, color="0.3")
    for i in range(8):
        lo = 36 - 4 * i - 4                              # left edge of nibble i
        nib = (word >> (4 * i)) & 0xF
        ax.text(lo + 2, 0.9, f"nibble {i}: 0x{nib:X}", ha="center", va="center", fontsize=8)
        ax.add_patch(FancyArrowPatch((4.2 + i * 4 + 1.8, 6.95), (lo + 2, 3.3), arrowstyle="-|>", mutation_scale=10,
                                     color=COLOURS[i], lw=1.2))
    ax.text(2.2, 2.6, f"int32 word k // 8\n= 0x{word:08X}", ha="right", va="center", fontsize=9)
    ax.text(20, 0.1, "bit index (31 … 0): weight k + i sits in bits 4i … 4i + 3 — the low nibble holds the first weight; "
            "negative values as 4-bit two's complement (−8 → 0x8)", ha="center", va="center", fontsize=8.5)
    ax.set_xlim(-8, 37); ax.set_ylim(-0.4, 8.6); ax.axis("off")
    ax.set_title("INT4 packing: eight weights to an int32, low nibble first", fontsize=11)
    fig.tight_layout()
    save(fig, "int4_packing.png")


def group_scale():
    gen = torch.Generator().manual_seed(5)
    G, groups = 8, 4
    W = torch.randn(1, G * groups, generator=gen) * 0.5
    W[0, 13] = 2.4                                        # one outlier: only its own group's step grows
    W[0, 24:32] = W[0, 24:32].abs() + 0.3                 # a one-sided group: where a zero point helps
    sym, asym = quant.quantize_int4(W, G), quant.quantize_int4(W, G, symmetric=False)
    Ws, Wa = sym.dequantize()[0], asym.dequantize()[0]
    w = W[0]
    fig, axes = plt.subplots(2, 1, figsize=(12, 6.6), sharex=True)
    for ax, qw, Wd, title in ((axes[0], sym, Ws, "symmetric: scale = absmax / 7, levels −8 … 7 around zero"),
                              (axes[1], asym, Wa, "asymmetric: scale = (max − min) / 15, zero point shifts 0 … 15 onto the range")):
        ax.axhline(0, color="0.6", lw=0.8)
        for g in range(groups):
            lo, hi = g * G - 0.5, (g + 1) * G - 0.5
            ax.axvspan(lo, hi, color=COLOURS[g], alpha=0.08, lw=0)
            s = qw.scale[0, g].float().item()
            z = 0 if qw.zero is None else int(qw.zero[0, g])
            levels = (torch.arange(-8, 8) if qw.zero is None else torch.arange(0, 16) - z) * s
            for lv in levels.tolist():
                ax.hlines(lv, lo + 0.1, hi - 0.1, color=COLOURS[g], lw=0.6, alpha=0.5)
            label = f"group {g}\nscale {s:.3f}" + ("" if qw.zero is None else f", zero {z}")
            ax.text((lo + hi) / 2, 3.05, label, ha="center", va="bottom", fontsize=8.5, color=COLOURS[g])
        idx = torch.arange(w.numel())
        ax.plot(idx, w, "o", color="black", ms=4, label="weight w")
        ax.plot(idx, Wd, "_", color="#C44E52", ms=12, mew=2, label="dequantized (q − zero) · scale")
        ax.set_ylim(-2.9, 3.9); ax.set_ylabel("value")
        ax.set_title(title, fontsize=10, loc="left")
        ax.legend(fontsize=8, loc="lower left", ncol=2, frameon=True)
    axes[1].set_xlabel("k (position along the row; 8 weights per group here, 128 in the course's formats)")
    fig.suptitle("One row, four groups: each group's own scale sets its step (thin lines: its 16 levels)", fontsize=11)
    fig.tight_layout()
    save(fig, "group_scale.png")


if __name__ == "__main__":
    torch.use_deterministic_algorithms(True)
    int4_packing()
    group_scale()
    print("drew", ", ".join(sorted(p.name for p in HERE.glob("*.png"))))
