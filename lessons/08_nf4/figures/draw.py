"""Draw lesson 08's pictures into this folder:  python lessons/08_nf4/figures/draw.py

nf4_codebook.png  the 16 NF4 values on the normal curve: quantiles, dense near zero, sparse in the tails
banked_table.png  the pair table once (lanes collide in a bank) and once per bank (lane l reads only bank l)
"""
import math
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parents[2]))  # the repository root, for harness

from harness import quant  # noqa: E402
from harness.diagrams import PALETTE, arrow, figure, grid, matrix_view, save  # noqa: E402


def nf4_codebook():
    """The standard normal density over [-1, 1] once the tails are scaled in (QLoRA puts the extreme quantiles at
    ±1), with the 16 codebook values as stems: equal areas between neighbours, so more values where weights are."""
    values = [float(v) for v in quant.NF4]
    sigma = 1 / 1.8481  # NF4's outermost interior quantile: Φ⁻¹(0.9677), scaled to 1
    fig, ax = figure(7.2, 2.8)
    ax.set_axis_on()
    ax.set_aspect("auto")
    xs = [i / 200 - 1.1 for i in range(441)]
    pdf = [math.exp(-0.5 * (x / sigma) ** 2) for x in xs]
    ax.plot(xs, pdf, color=PALETTE["line"], lw=1.2)
    for i, v in enumerate(values):
        h = math.exp(-0.5 * (v / sigma) ** 2)
        ax.plot([v, v], [0, h], color=PALETTE["thread"], lw=1.4)
        ax.plot([v], [h], "o", color=PALETTE["thread"], ms=3.5)
        ax.text(v, -0.09 if i % 2 == 0 else -0.19, str(i), ha="center", va="center", fontsize=7.5)
    ax.set_ylim(-0.26, 1.15)
    ax.set_xlim(-1.12, 1.12)
    ax.set_yticks([])
    ax.set_xticks([-1, -0.5, 0, 0.5, 1])
    for side in ("top", "right", "left"):
        ax.spines[side].set_visible(False)
    ax.set_title("NF4: 16 values, quantiles of a normal distribution scaled to [-1, 1] (value 7 is exactly 0)")
    ax.set_xlabel("value (its 4-bit index under each stem)", fontsize=8)
    return save(fig, HERE / "nf4_codebook.png")


def banked_table():
    """Left: 256 pair entries in 1 KB, entry b in bank b % 32; four lanes ask for bytes 3, 35, 67 and 200, and
    the first three queue on bank 3. Right: the table once per bank, a row per entry and lane l's copy in bank l (the
    word index is exercise 08.a's to derive); the same requests each land in the lane's own bank and are served
    together."""
    fig, (a, b) = figure(12, 4.2, ncols=2)
    asks = {0: 3, 1: 35, 2: 67, 3: 200}
    hit = {(byte // 32, byte % 32) for byte in asks.values()}
    lane_at = {(byte // 32, byte % 32): lane for lane, byte in asks.items()}
    box = grid(a, 8, 32, 0, 0, 1, color=lambda r, c: PALETTE["accent"] if (r, c) in hit and c == 3 else
               (PALETTE["used"] if (r, c) in hit else None),
               label=lambda r, c: f"L{lane_at[r, c]}" if (r, c) in lane_at else None, fontsize=5.5)
    for r in range(8):
        a.text(-0.6, r + 0.5, f"{32 * r}-{32 * r + 31}", ha="right", va="center", fontsize=6.5)
    a.text(0.5, -0.7, "bank 0", ha="center", va="center", fontsize=7)
    a.text(31.5, -0.7, "31", ha="center", va="center", fontsize=7)
    a.text(16, 9.4, "lanes L0-L3 ask for entries 3, 35, 67, 200: L0, L1, L2 all in bank 3, three turns", ha="center",
           va="center", fontsize=8)
    a.set_title("256 pairs, 1 KB (entry b in bank b % 32)")
    matrix_view(a, -4.5, -1.2, box[2], 10)
    entries = [0, 3, 35, 67, 200, 255]  # 6 of the 256 rows, those asked for and the two ends
    lane_of = {entries.index(byte): lane for lane, byte in asks.items()}
    box = grid(b, len(entries), 32, 0, 0, 1, color=lambda r, c: PALETTE["used"] if lane_of.get(r) == c else
               (PALETTE["block"] if c < 4 else None), label=lambda r, c: f"L{c}" if lane_of.get(r) == c else None,
               fontsize=5.5)
    for r, e in enumerate(entries):
        b.text(-0.6, r + 0.5, f"entry {e}", ha="right", va="center", fontsize=6.5)
    b.text(0.5, -0.7, "lane 0", ha="center", va="center", fontsize=7)
    b.text(31.5, -0.7, "31", ha="center", va="center", fontsize=7)
    arrow(b, (8, -0.7), (22, -0.7), "lane l's copy is bank l", fontsize=7, text_offset=(0, -0.55))
    b.text(16, 7.4, "a copy per bank (32 KB): the same four requests, each in its lane's own bank, take one turn",
           ha="center", va="center", fontsize=8)
    b.set_title("the same table once per bank (6 of its 256 rows)")
    matrix_view(b, -4.5, -1.8, box[2], 8)
    return save(fig, HERE / "banked_table.png")


if __name__ == "__main__":
    for draw in (nf4_codebook, banked_table):
        print("wrote", draw().relative_to(HERE.parents[2]))
