"""Draw lesson 02's pictures into this folder:  python lessons/02_smem_tiling/figures/draw.py

tile_sliding.png  a block's output tile, and the x and W tiles it copies to shared memory, step by step along K
banks.png         which of the 32 shared-memory banks each lane of a warp reads, without and with one float of pad
"""
from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt
from matplotlib.patches import FancyArrowPatch, Rectangle

HERE = Path(__file__).resolve().parent
BLUE, ORANGE, GREEN, GREY, RED = "#4C72B0", "#DD8452", "#55A868", "#D9D9D9", "#C44E52"


def save(fig, name):
    # no software version or date in the file, so that a redraw of an unchanged picture is byte-identical
    fig.savefig(HERE / name, dpi=110, metadata={"Software": None})
    plt.close(fig)


def tile_sliding():
    """x is M×K, W is N×K, y is M×N, in tiles of 32. Block (by, bx) owns y's tile; at step s it copies
    tile (by, s) of x and tile (bx, s) of W, and every thread adds 32 products to its output."""
    KT, MT, NT = 6, 4, 5          # K, M, N in tiles
    by, bx, step = 1, 3, 2        # the block drawn and the step it is at
    fig, axes = plt.subplots(1, 3, figsize=(12, 4.4), gridspec_kw={"width_ratios": [KT, KT, NT]})
    panels = ((axes[0], "x  [M, K]", MT, KT, by, ORANGE, "xs"), (axes[1], "W  [N, K]", NT, KT, bx, GREEN, "ws"))
    for ax, title, rows, cols, r, colour, name in panels:
        for i in range(rows):
            for k in range(cols):
                ax.add_patch(Rectangle((k, rows - 1 - i), 1, 1, fc="white", ec="0.75", lw=0.8))
        for k in range(cols):
            fc = colour if k == step else ("0.85" if k < step else "white")
            ax.add_patch(Rectangle((k, rows - 1 - r), 1, 1, fc=fc, ec="0.3", lw=1.2))
            ax.text(k + 0.5, rows - 1 - r + 0.5, f"{'done' if k < step else ('k0 = ' + str(32 * k) if k == step else '')}",
                    ha="center", va="center", fontsize=8, color="black")
        ax.add_patch(FancyArrowPatch((0.1, rows - r + 0.25), (cols - 0.1, rows - r + 0.25), arrowstyle="-|>",
                                     mutation_scale=14, color="0.2", lw=1.2, clip_on=False))
        ax.text(cols / 2, rows - r + 0.45, "one step of 32 along K at a time", ha="center", va="bottom", fontsize=8.5)
        ax.text(step + 0.5, -0.35, f"copied to {name}\n(32×32 floats)", ha="center", va="top", fontsize=8.5, color=colour,
                fontweight="bold")
        ax.set_title(title, fontsize=11)
        ax.set_xlim(-0.2, cols + 0.2); ax.set_ylim(-1.3, rows + 1.0)
        ax.set_aspect("equal"); ax.axis("off")
    ax = axes[2]
    for i in range(MT):
        for j in range(NT):
            ours = (i, j) == (by, bx)
            ax.add_patch(Rectangle((j, MT - 1 - i), 1, 1, fc=BLUE if ours else "white", ec="0.3" if ours else "0.75",
                                   lw=1.2 if ours else 0.8))
    ax.text(bx + 0.5, MT - 1 - by + 0.5, "this\nblock", ha="center", va="center", fontsize=8.5, color="white")
    ax.text(NT / 2, -0.35, "y tile += xs · wsᵀ\n(each thread: 32 products per step)", ha="center", va="top", fontsize=8.5,
            color=BLUE, fontweight="bold")
    ax.set_title("y  [M, N]", fontsize=11)
    ax.set_xlim(-0.2, NT + 0.2); ax.set_ylim(-1.3, MT + 1.0)
    ax.set_aspect("equal"); ax.axis("off")
    fig.suptitle("A block walks along K: at each step it loads one tile of x and one of W, then all its threads use them",
                 fontsize=11)
    fig.tight_layout()
    save(fig, "tile_sliding.png")


def banks():
    """The inner loop reads ws[tx][k] (lane tx, one k for the whole warp). Word address = tx·stride + k,
    bank = address % 32. Top: where the first rows of ws sit in the banks. Bottom: which bank each lane hits."""
    k = 0
    fig, axes = plt.subplots(2, 2, figsize=(12, 8.6), gridspec_kw={"height_ratios": [1, 2.6]})
    for col, (stride, title) in enumerate(((32, "ws[32][32]: rows of 32 floats"),
                                           (33, "ws[32][33]: one float of pad per row"))):
        # top: shared memory as lines of 32 words (one word per bank), the first 5 rows of the tile
        ax = axes[0, col]
        lines = 6
        for line in range(lines):
            for b in range(32):
                addr = line * 32 + b
                row, kk = divmod(addr, stride)
                if row >= 5:
                    fc, txt = "white", ""
                elif kk == 32:
                    fc, txt = GREY, "pad"
                elif kk == k:
                    fc, txt = RED, str(row)
                else:
                    fc, txt = ("#E8EEF7" if row % 2 == 0 else "#F7F0E8"), ""
                ax.add_patch(Rectangle((b, lines - 1 - line), 1, 1, fc=fc, ec="0.7", lw=0.5, hatch="//" if kk == 32 and row < 5 else None))
                if txt:
                    ax.text(b + 0.5, lines - 1 - line + 0.5, txt, ha="center", va="center", fontsize=6.5,
                            color="white" if fc == RED else "0.3")
        ax.set_xlim(0, 32); ax.set_ylim(0, lines); ax.set_aspect("equal")
        ax.set_xticks([b + 0.5 for b in range(0, 32, 4)], [str(b) for b in range(0, 32, 4)], fontsize=8)
        ax.set_yticks([])
        ax.set_xlabel("bank", fontsize=9)
        ax.set_title(f"{title}\nred: ws[row][0] (number = row), shaded: rows 0–4", fontsize=9.5)
        for s in ax.spines.values():
            s.set_visible(False)
        # bottom: lane × bank, the warp reading ws[tx][0]
        ax = axes[1, col]
        per_bank = [0] * 32
        for lane in range(32):
            bank = (lane * stride + k) % 32
            per_bank[bank] += 1
            ax.add_patch(Rectangle((bank, 31 - lane), 1, 1, fc=RED, ec="white", lw=0.3))
        for b in range(33):
            ax.axvline(b, color="0.9", lw=0.5, zorder=0)
        ax.set_xlim(0, 32); ax.set_ylim(0, 32); ax.set_aspect("equal")
        ax.set_xticks([b + 0.5 for b in range(0, 32, 4)], [str(b) for b in range(0, 32, 4)], fontsize=8)
        ax.set_yticks([31 - l + 0.5 for l in range(0, 32, 4)], [str(l) for l in range(0, 32, 4)], fontsize=8)
        ax.set_xlabel("bank", fontsize=9); ax.set_ylabel("lane tx", fontsize=9)
        busiest = max(per_bank)
        ax.set_title(f"lane tx reads ws[tx][0] from bank (tx·{stride}) % 32\n"
                     f"{sum(1 for n in per_bank if n)} bank(s) used, up to {busiest} lane(s) per bank → "
                     f"{busiest} wavefront{'s' if busiest > 1 else ''}", fontsize=9.5)
    fig.suptitle("32 banks of 4 bytes: a warp is served in one pass only if its lanes hit different banks", fontsize=11)
    fig.tight_layout()
    save(fig, "banks.png")


if __name__ == "__main__":
    tile_sliding()
    banks()
    print("drew", ", ".join(sorted(p.name for p in HERE.glob("*.png"))))
