"""Draw lesson 07's pictures into this folder:  python lessons/07_fused_int4/figures/draw.py

lop3_unpack.png  one packed word (harness/quant.py's nibble order) and the four half2 of q that dequant8 returns
gemv_lanes.png   which weights and which x a lane of the decode GEMV loads in one K block, and the mma they feed
"""
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parents[2]))  # the repository root, for harness
from harness import diagrams as d  # noqa: E402
from harness.diagrams import PALETTE as P  # noqa: E402

# one colour per pair of weights that one output word holds: (q0, q4), (q1, q5), (q2, q6), (q3, q7)
PAIR = ["#C44E52", "#4C72B0", "#55A868", "#8172B3"]


def _word(ax, y, cells, colours, x0=0.0):
    """A 32-bit word as 8 nibble cells, bits 31 … 28 on the left, bits 3 … 0 on the right."""
    for i, (text, fc) in enumerate(zip(cells, colours)):
        d.box(ax, x0 + i, y, x0 + i + 1, y + 1, color=fc, lw=0.8, text=text, fontsize=8)
    d.box(ax, x0, y, x0 + 8, y + 1, lw=1.4)
    ax.plot([x0 + 4, x0 + 4], [y, y + 1], color=P["line"], lw=1.6)  # the two halves of a half2


def lop3_unpack():
    """State, not steps: the packed word as quant.pack_int4 lays it out, and the four half2 words dequant8 must
    return. How to get from one to the other (the masks, the constants, the shift) is exercise 07.a's."""
    fig, ax = d.figure(11.5, 4.6)
    pair_of = lambda n: PAIR[n % 4]
    # the packed word: nibble n holds weight n (quant.pack_int4: weight k in bits 4·(k % 8))
    _word(ax, 0, [f"q{n}" for n in range(7, -1, -1)], [pair_of(n) for n in range(7, -1, -1)])
    for n in range(8):
        ax.text(7 - n + 0.5, -0.25, f"{4 * n + 3}…{4 * n}", ha="center", va="bottom", fontsize=6.5)
    ax.text(0, -0.9, "bits", fontsize=7)
    ax.text(8.4, 0.5, "the packed word: weight qi in nibble i, a 4-bit two's complement −8 … 7", va="center",
            fontsize=8.5)
    # the four output words, each a half2: high half | low half, both FP16 numbers equal to the weights
    for i in range(4):
        x0, y = 4.6 * i, 2.6
        for h, (q, x) in enumerate(((i + 4, x0), (i, x0 + 2))):
            d.box(ax, x, y, x + 2, y + 1, color=PAIR[i], lw=0.8, text=f"q{q}", fontsize=8)
        d.box(ax, x0, y, x0 + 4, y + 1, lw=1.4)
        ax.text(x0 + 2, y + 1.5, f"w[{i}]: half2 (q{i}, q{i + 4})", ha="center", va="center", fontsize=8)
    ax.text(0, 4.7, "dequant8 returns four half2: low half qi, high half qi+4, each the FP16 number equal to the weight "
            "(exactly)", fontsize=8.5)
    ax.text(0, 5.5, "nibbles i and i + 4 are 16 bits apart, as the two halves of a half2 are", fontsize=8.5,
            color=P["accent"])
    d.matrix_view(ax, 0, -1.0, 19.5, 5.7, pad=0.3)
    return fig


def gemv_lanes():
    fig, (ax, bx) = d.figure(12, 5.4, ncols=2, gridspec_kw={"width_ratios": [1, 1]})
    # weights of one block and one K block: 16 output rows × 16 packed words (128 weights, one scale group)
    g, t = 2, 1  # the lane drawn: lane 4g + t
    col = lambda r, c: (P["accent"] if r in (g, g + 8) and c // 4 == t else
                        P["warp"] if c // 4 == t else P["block"])
    d.grid(ax, 16, 16, 0, 0, 1, color=col)
    for c in range(0, 16, 4):
        ax.text(c + 2, -0.5, f"t = {c // 4}", ha="center", fontsize=8)
    for r in (0, 8, 15):
        ax.text(-0.3, r + 0.5, f"{r}", ha="right", va="center", fontsize=7.5)
    ax.text(8, -1.6, "W: 16 output rows × 128 weights (16 packed words)", ha="center", fontsize=9)
    ax.text(8, 17.1, f"lane (g, t) = ({g}, {t}): one 16-byte load from row g, one from g + 8", ha="center", fontsize=8.5)
    ax.text(8, 18.1, "words 4t … 4t + 3 = weights 32t … 32t + 31", ha="center", fontsize=8.5)
    d.matrix_view(ax, -1.5, -2.2, 16.5, 18.6, pad=0.2)
    # x of the block's 8 tokens at the same 128 k, 8 halves per cell
    colx = lambda r, c: P["accent"] if r == g and c // 4 == t else P["warp"] if c // 4 == t else P["block"]
    d.grid(bx, 8, 16, 0, 4, 1, color=colx)
    bx.text(8, 2.4, "x: 8 tokens × 128 k (16 pieces of 8 halves)", ha="center", fontsize=9)
    for r in (0, 7):
        bx.text(-0.3, 4 + r + 0.5, f"{r}", ha="right", va="center", fontsize=7.5)
    bx.text(8, 13.1, "the same lane loads x of token g at the same k,", ha="center", fontsize=8.5)
    bx.text(8, 14.1, "paired (x0, x4) (x1, x5) … like its weights", ha="center", fontsize=8.5)
    bx.text(8, 15.6, "8 × mma.m16n8k16: Σ q·x over the K block for 16 rows × 8 tokens,", ha="center", fontsize=8.5)
    bx.text(8, 16.6, "then × each row's scale, once per K block", ha="center", fontsize=8.5)
    d.matrix_view(bx, -1.5, 1.8, 16.5, 17.2, pad=0.2)
    return fig


if __name__ == "__main__":
    for name, draw in (("lop3_unpack.png", lop3_unpack), ("gemv_lanes.png", gemv_lanes)):
        print(d.save(draw(), HERE / name))
