"""Draw lesson 09's pictures into this folder:  python lessons/09_w4a8/figures/draw.py

two_level.png     a weight row → level 1 (float scale per row, INT8 codes c) → level 2 (per group of 128: integer
                  gscale, gzero and 4-bit codes u), and what the INT8 mma then sums
unpack_bits.png   one packed word and the two registers it becomes, 128 + c in each byte (an example word; how
                  to compute them is exercise 09.a)
k_renaming.png    which weights of a group lane t loads, and which mma step and K slots each packed word feeds
"""
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parents[2]))  # the course root, for harness.diagrams

from harness.diagrams import PALETTE, arrow, box, figure, grid, matrix_view, save  # noqa: E402

LO, HI, C = "#55A868", "#DD8452", "#C9B3E6"  # low nibbles, high nibbles, the constant c


def two_level():
    """Three rows of boxes: W (FP16) → level 1 → level 2, with the formulas beside the arrows."""
    fig, ax = figure(10, 3.6)
    box(ax, 0, 0, 12, 1, color=PALETTE["memory"], text="a row n of W, K weights (FP16)", fontsize=9)
    arrow(ax, (6, 1), (6, 2.2), text="level 1: scale[n] = absmax / 112 (float, one per row)",
          text_offset=(0.3, 0), ha="left")
    for g in range(3):  # three groups of 128 along K
        box(ax, 4 * g, 2.2, 4 * g + 4, 3.2, color=PALETTE["sm"], edge=PALETTE["accent"], lw=1.8,
            text=f"group {g}: 128 c", fontsize=8.5)
        box(ax, 4 * g, 4.4, 4 * g + 4, 5.4, color=LO if g % 2 == 0 else "#9FD3A8", lw=1.2,
            text="gscale, gzero, 128 u", fontsize=8.5)
    arrow(ax, (2, 3.2), (2, 4.4), text="level 2, per group of 128 c: integer gscale (1 … 15), gzero (0 … 15)",
          text_offset=(0.3, 0), ha="left")
    ax.text(12.3, 4.9, "4-bit codes u, c ≈ (u − gzero) · gscale", ha="left", va="center", fontsize=8.5)
    ax.text(12.3, 2.7, "c = round(w / scale[n]): one integer in −112 … 112 per weight", ha="left", va="center", fontsize=8.5)
    ax.text(12.3, 0.5, "16 bits per weight", ha="left", va="center", fontsize=8.5)
    ax.text(0, 6.2, "Ŵ[n, k] = scale[n] · (u − gzero) · gscale: the mma sums the integers (u − gzero) · gscale · xq "
            "over all of K in INT32;", ha="left", va="center", fontsize=8.5, color=PALETTE["accent"])
    ax.text(0, 6.8, "scale[n] and the token's sx[m] are applied once per output, in the epilogue.", ha="left",
            va="center", fontsize=8.5, color=PALETTE["accent"])
    matrix_view(ax, 0, 0, 21, 6.8, pad=0.4)
    save(fig, HERE / "two_level.png")


def unpack_bits():
    """An example word (weights u = 3, 12, 0, 15, 7, 1, 9, 4), gscale 9, gzero 8: the packed word, and the two
    registers it must become, each byte 128 + (u − gzero)·gscale (state only: how to get there is exercise 09.a)."""
    u = [3, 12, 0, 15, 7, 1, 9, 4]
    gs, gz = 9, 8
    byte = [128 + (v - gz) * gs for v in u]  # the target, by its definition
    assert all(0 <= b <= 255 for b in byte)

    fig, ax = figure(11, 4.4)
    cw = 1.5  # one nibble

    def nibbles(y, vals, colors, title):
        """Eight nibble cells, byte 3 on the left (as a 32-bit number is written), byte 0 on the right."""
        for b in range(4):
            for half in range(2):  # high nibble left of low
                x = (3 - b) * 2 * cw + (1 - half) * cw
                box(ax, x, y, x + cw, y + 0.8, color=colors[b][half], edge=PALETTE["grid"], lw=0.8,
                    text=f"{vals[b][half]}", fontsize=8)
            box(ax, (3 - b) * 2 * cw, y, (4 - b) * 2 * cw, y + 0.8, lw=1.4)
        ax.text(-0.3, y + 0.4, title, ha="right", va="center", fontsize=8.5)

    def bytes_row(y, vals, names, title, col):
        for b in range(4):
            x = (3 - b) * 2 * cw
            box(ax, x, y, x + 2 * cw, y + 0.8, color=col, lw=1.4, text=f"{vals[b]}", fontsize=8.5)
            ax.text(x + cw, y + 0.95, names[b], ha="center", va="top", fontsize=6.5)
        ax.text(-0.3, y + 0.4, title, ha="right", va="center", fontsize=8.5)

    for b in range(4):
        ax.text((3 - b) * 2 * cw + cw, -0.35, f"byte {b}", ha="center", va="bottom", fontsize=8)
    nibbles(0, [(u[b], u[4 + b]) for b in range(4)], [(LO, HI)] * 4, "packed word: u of weights")
    for b in range(4):
        ax.text((3 - b) * 2 * cw + 0.5 * cw, 0.95, f"w{4 + b}", ha="center", va="top", fontsize=6.5)
        ax.text((3 - b) * 2 * cw + 1.5 * cw, 0.95, f"w{b}", ha="center", va="top", fontsize=6.5)
    bytes_row(2.0, byte[:4], [f"w{b}" for b in range(4)], "register a[j][h]: the low nibbles", LO)
    bytes_row(3.5, byte[4:], [f"w{4 + b}" for b in range(4)], "register a[j][h + 2]: the high nibbles", HI)
    x1 = 8 * cw + 0.4
    ax.text(x1, 0.4, f"gscale = {gs}, gzero = {gz}", ha="left", va="center", fontsize=8.5)
    ax.text(x1, 2.4, "each byte: 128 + (u − gzero) · gscale of its weight", ha="left", va="center",
            fontsize=8.5)
    ax.text(x1, 3.9, "the same for weights 4 … 7", ha="left", va="center", fontsize=8.5)
    ax.text(x1, 4.9, "the format keeps every such byte in 0 … 255, for every code u", ha="left", va="center",
            fontsize=8.5, color=PALETTE["accent"])
    matrix_view(ax, -6.2, -0.8, 27, 5.1, pad=0.3)
    save(fig, HERE / "unpack_bits.png")


def k_renaming():
    """Top: one weight row's group of 128, coloured by the lane t that loads it (32 weights = 4 words each).
    Bottom: mma step j's 32 K slots: lane t's word j, low nibbles in slots 4t … 4t+3, high in 16+4t …."""
    lane_col = ["#4C72B0", "#DD8452", "#55A868", "#C44E52"]
    fig, ax = figure(12, 4.4)
    cell = 0.25
    grid(ax, 1, 128, x0=0, y0=0, cell=cell, color=lambda r, c: lane_col[c // 32], edge="white", lw=0.3)
    for t in range(4):
        ax.text((32 * t + 16) * cell, -0.3, f"lane t = {t}: k = {32 * t} … {32 * t + 31} (4 words)",
                ha="center", va="bottom", fontsize=8)
        for j in range(4):
            box(ax, (32 * t + 8 * j) * cell, 0, (32 * t + 8 * j + 8) * cell, cell, lw=0.8)
    ax.text(-0.3, 0.12, "a group of 128 weights, one row", ha="right", va="center", fontsize=8)
    # mma step j = 1: 32 slots; slot 4t+i ← weight 32t+8j+i (lo), slot 16+4t+i ← 32t+8j+4+i (hi)
    j, y = 1, 2.2
    sc = 0.9
    for s in range(32):
        t, i = (s % 16) // 4, s % 4
        k = 32 * t + 8 * j + i + (4 if s >= 16 else 0)
        box(ax, s * sc, y, (s + 1) * sc, y + sc, color=lane_col[t], edge="white", lw=0.6,
            text=f"{k}", fontsize=5.5)
    ax.text(8 * sc, y + sc + 0.15, "slots 0 … 15: the words' low nibbles (register a[0], a[1])", ha="center",
            va="top", fontsize=8)
    ax.text(24 * sc, y + sc + 0.15, "slots 16 … 31: their high nibbles (a[2], a[3])", ha="center", va="top",
            fontsize=8)
    ax.text(-0.3, y + sc / 2, f"mma step j = {j}: K slot → weight k", ha="right", va="center", fontsize=8)
    for t in range(4):  # where lane t's word j sits in the group, and where it goes
        arrow(ax, ((32 * t + 8 * j + 4) * cell, cell), (4 * t * sc + 2 * sc, y), color=lane_col[t], lw=0.9)
    ax.text(0, y + 1.9, "x needs the same k in the same slot of B: lane t's x[32t + 8j … 32t + 8j + 7],"
            " eight bytes as they lie in memory", ha="left", va="center", fontsize=8.5, color=PALETTE["accent"])
    matrix_view(ax, -7.5, -0.8, 32 * sc, y + 2.1, pad=0.3)
    save(fig, HERE / "k_renaming.png")


if __name__ == "__main__":
    two_level()
    unpack_bits()
    k_renaming()
    print("drew", ", ".join(p.name for p in sorted(HERE.glob("*.png"))))
