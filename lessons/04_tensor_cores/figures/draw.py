"""Draw lesson 04's pictures into this folder:  python lessons/04_tensor_cores/figures/draw.py

fragment_layout.png  which lane holds which element of mma.sync m16n8k16's A (16×16), B (16×8) and C (16×8)
ldmatrix.png         ldmatrix.x4 on a 16×16 FP16 tile of x: the four matrices and the registers they fill, matrix 0's lanes
ldmatrix_b.png       B's side: 16 rows of W's tile, the 8×8 piece behind b0 and b1 of each of two n8 tiles
swizzle.png          the 8 rows one ldmatrix phase reads, in plain, padded and swizzled 128-byte rows
pipeline.png         one stage (copy, wait, multiply) against two (tile k + 1 copies while tile k is multiplied)
"""
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parents[2]))  # the course root, for harness.diagrams

from harness.diagrams import PALETTE, arrow, box, figure, grid, matrix_view, save  # noqa: E402

# one colour per register of a fragment (a0..a3, b0..b1, c0..c3 share them by index)
REG = ["#8FB3E0", "#F2C7A5", "#A8D5B0", "#E3B5D9"]
X, W = "#DD8452", "#55A868"


def _key(ax, x0, y, names, fontsize=7.5):
    """A colour key: one swatch per register, REG[i] for names[i], left to right from x0 at height y."""
    for i, name in enumerate(names):
        box(ax, x0 + 2.2 * i, y, x0 + 2.2 * i + 0.8, y + 0.8, color=REG[i], edge=PALETTE["grid"], lw=0.6)
        ax.text(x0 + 2.2 * i + 1.0, y + 0.4, name, ha="left", va="center", fontsize=fontsize)


def fragment_layout():
    """A: lane 4g + t holds rows g, g + 8 and columns 2t, 2t + 1 (+8). B: rows (k) 2t, 2t + 1 (+8) of column g.
    C: rows g, g + 8, columns 2t, 2t + 1. Each cell shows the lane that holds it; its colour, the register (the key
    under each panel)."""
    fig, (aa, ab, ac) = figure(14, 6.8, ncols=3, gridspec_kw={"width_ratios": [16, 8.6, 8.6]})

    def a_reg(r, c):
        return (r >= 8) + 2 * (c >= 8)
    grid(aa, 16, 16, color=lambda r, c: REG[a_reg(r, c)], label=lambda r, c: str(4 * (r % 8) + (c % 8) // 2),
         fontsize=6.5)
    grid(ab, 16, 8, color=lambda r, c: REG[r >= 8], label=lambda r, c: str(4 * c + (r % 8) // 2), fontsize=6.5)
    grid(ac, 16, 8, color=lambda r, c: REG[2 * (r >= 8) + c % 2], label=lambda r, c: str(4 * (r % 8) + c // 2),
         fontsize=6.5)
    for ax, cols, title, xl, yl, regs in ((aa, 16, "A (16 × 16, x)", "k", "row m", ["a0", "a1", "a2", "a3"]),
                                          (ab, 8, "B (16 × 8, Wᵀ)", "column n", "k", ["b0", "b1"]),
                                          (ac, 8, "C (16 × 8)", "column n", "row m", ["c0", "c1", "c2", "c3"])):
        ax.set_title(title, fontsize=9)
        ax.text(cols / 2, 16.8, xl + " →", ha="center", va="top", fontsize=8)
        ax.text(-0.5, 8, yl + " ↓", ha="right", va="center", fontsize=8, rotation=90)
        _key(ax, 0, 18.0, regs)
        matrix_view(ax, -1.2, -0.4, cols, 19.0)
    fig.text(0.5, 0.02, "number = lane (g = lane / 4, t = lane % 4); colour = register (key under each matrix); each "
             "A and B register holds two neighbouring halves, each C register one float", ha="center", fontsize=8)
    save(fig, HERE / "fragment_layout.png")


def ldmatrix():
    """Left: a 16-row × 32-byte piece of x's shared tile split into the four 8×8 matrices of one ldmatrix.x4 for A,
    coloured by the register each fills; only matrix 0's lanes are drawn (lane L points at row L % 8 of matrix
    L / 8: the rest is exercise 04.b's). Right: what one 8×8 matrix delivers: lane L gets row L / 4, halves
    2·(L % 4), +1, in register r[q]."""
    fig, (al, ar) = figure(11, 5.6, ncols=2, gridspec_kw={"width_ratios": [1, 1.25]})
    for r in range(16):
        for c in range(2):
            q = (r >= 8) + 2 * c
            box(al, 3 * c, r, 3 * c + 3, r + 1, color=REG[q], edge=PALETTE["grid"], lw=0.6,
                text=f"lane {r}" if q == 0 else None, fontsize=7)
    for q in range(4):
        r0, c = 8 * (q % 2), q // 2
        al.text(6.3 if c else -0.3, r0 + 4, f"matrix {q} → a{q}", ha="left" if c else "right", va="center",
                fontsize=8)
    al.text(3, -0.6, "16 rows of x's tile × 2 chunks (32 bytes of K)", ha="center", va="bottom", fontsize=8)
    al.text(3, 16.4, "lane L points at row L % 8 of matrix L / 8\n(matrix 0's lanes drawn)", ha="center", va="top",
            fontsize=8)
    matrix_view(al, -3.2, -1.6, 9.4, 17.6)
    grid(ar, 8, 4, x0=0, y0=0, color=REG[0], label=lambda r, c: str(4 * r + c), fontsize=7, cell=1.4)
    ar.text(2.8, -0.4, "one 8 × 8 matrix: 8 rows × 16 bytes", ha="center", va="bottom", fontsize=8)
    for c in range(4):
        ar.text(1.4 * c + 0.7, 11.6, f"halves {2 * c},{2 * c + 1}", ha="center", va="center", fontsize=6.5,
                rotation=90)
    ar.text(6.2, 3, "lane 4·row + j\nreceives halves 2j, 2j + 1\nof its row in r[q]:\nmma's layout, no shuffle",
            ha="left", va="center", fontsize=8)
    matrix_view(ar, -0.4, -1.4, 11.5, 12.6)
    save(fig, HERE / "ldmatrix.png")


def ldmatrix_b():
    """B's side of ldmatrix.x4: 16 rows of W's shared tile (16 columns n of Wᵀ, two n8 tiles) × the 2 chunks of one
    k16 step. Each 8×8 piece is one register of one n8 tile's B fragment: b0 holds k 0-7 of the step, b1 k 8-15, and
    a row of W is a column of Wᵀ, so no .trans. Which matrix of the instruction each piece is, and so which lane
    points where, is exercise 04.b's to choose."""
    fig, (al, ar) = figure(11, 5.4, ncols=2, gridspec_kw={"width_ratios": [1, 1.1]})
    for r in range(16):
        for c in range(2):
            box(al, 3 * c, r, 3 * c + 3, r + 1, color=REG[c], edge=PALETTE["grid"], lw=0.6,
                text=f"W row {r}" if c == 0 else None, fontsize=7)
    for tile in range(2):
        for c in range(2):
            al.text(6.3 if c else -0.3, 8 * tile + 4, f"n8 tile {tile}: b{c}", ha="left" if c else "right",
                    va="center", fontsize=8)
    al.text(3, -0.6, "16 rows of W's tile × 2 chunks (one k16 step)", ha="center", va="bottom", fontsize=8)
    al.text(1.5, 16.4, "chunk 2s:\nk 0-7", ha="center", va="top", fontsize=7.5)
    al.text(4.5, 16.4, "chunk 2s + 1:\nk 8-15", ha="center", va="top", fontsize=7.5)
    matrix_view(al, -3.6, -1.6, 9.8, 17.6)
    grid(ar, 8, 4, x0=0, y0=0, color=REG[0], label=lambda r, c: str(4 * r + c), fontsize=7, cell=1.4)
    ar.text(2.8, -0.4, "the piece (rows 0-7, chunk 2s): b0 of n8 tile 0", ha="center", va="bottom", fontsize=8)
    for c in range(4):
        ar.text(1.4 * c + 0.7, 11.6, f"k {2 * c},{2 * c + 1}", ha="center", va="center", fontsize=6.5, rotation=90)
    ar.text(6.2, 3.5, "row g of W = column g of Wᵀ:\nlane 4g + t receives k 2t, 2t + 1\nof it, which is b0 of lane\n"
            "(g, t) in the fragment: any\nmatrix of the ldmatrix.x4\ncan fill it", ha="left", va="center", fontsize=8)
    matrix_view(ar, -0.4, -1.4, 12.5, 12.6)
    save(fig, HERE / "ldmatrix_b.png")


def swizzle():
    """8 rows × 8 chunks of 16 bytes; the shaded cells are chunk 0 of rows 0..7 (one ldmatrix phase). The number in
    each cell is its bank group (which 4 of the 32 banks it occupies)."""
    fig, axes = figure(13.5, 4.4, ncols=3)
    for ax, layout, title in zip(axes, ("plain", "padded", "swizzled"),
                                 ("128-byte rows: 8-way conflict", "144-byte rows (+16 padding)",
                                  "swizzled: chunk c at c XOR row")):
        cols = 9 if layout == "padded" else 8
        for r in range(8):
            for p in range(cols):
                if layout == "padded" and p == 8:
                    box(ax, p, r, p + 1, r + 1, color=PALETTE["idle"], edge=PALETTE["grid"], lw=0.6)
                    continue
                logical = p ^ (r % 8) if layout == "swizzled" else p
                bank = ((r * 144 + p * 16) // 16 % 8) if layout == "padded" else p
                hit = logical == 0
                box(ax, p, r, p + 1, r + 1, color=PALETTE["accent"] if hit else PALETTE["block"],
                    edge=PALETTE["grid"], lw=0.6)
                ax.text(p + 0.5, r + 0.5, f"c{logical}\ng{bank}", ha="center", va="center", fontsize=6,
                        color="white" if hit else "black")
        passes = 8 if layout == "plain" else 1
        ax.set_title(title, fontsize=9)
        ax.text(cols / 2, 8.3, f"chunk 0 of rows 0-7: {passes} pass{'es' if passes > 1 else ''}", ha="center",
                va="top", fontsize=8, color=PALETTE["accent"])
        matrix_view(ax, 0, 0, 9, 9.2, pad=0.3)
    fig.text(0.5, 0.02, "c = which 16-byte chunk of K it holds, g = bank group (banks 4g .. 4g + 3); "
             "grey: padding", ha="center", fontsize=8)
    save(fig, HERE / "swizzle.png")


def pipeline():
    """Time runs right. One stage: copy tile k, wait, multiply, and again. Two stages: the copy of tile k + 1 starts
    before the multiply of tile k, so the tensor cores wait only for the first tile."""
    fig, ax = figure(11, 3.4)
    copy, mult = 1.6, 2.2
    t = 0.0
    for k in range(3):
        box(ax, t, 0, t + copy, 0.8, color=PALETTE["memory"], text=f"copy {k}", fontsize=7.5)
        box(ax, t + copy, 0, t + copy + mult, 0.8, color=PALETTE["thread"], text=f"mma {k}", fontsize=7.5)
        t += copy + mult
    ax.text(-0.3, 0.4, "1 stage", ha="right", va="center", fontsize=8.5)
    box(ax, 0, 1.6, copy, 2.4, color=PALETTE["memory"], text="copy 0", fontsize=7.5)
    t = copy
    for k in range(3):
        box(ax, t, 1.6, t + mult, 2.4, color=PALETTE["thread"], text=f"mma {k}", fontsize=7.5)
        if k < 2:
            box(ax, t, 2.6, t + copy, 3.4, color=PALETTE["memory"], text=f"copy {k + 1}", fontsize=7.5)
        t += mult
    ax.text(-0.3, 2.5, "2 stages", ha="right", va="center", fontsize=8.5)
    arrow(ax, (t, 4.0), (3 * (copy + mult), 4.0), text="time saved", both=True, text_offset=(0, -0.35))
    ax.text(0, -0.5, "time →", ha="left", va="center", fontsize=8)
    ax.set_xlim(-2.2, 3 * (copy + mult) + 0.4)
    ax.set_ylim(4.6, -0.9)
    save(fig, HERE / "pipeline.png")


if __name__ == "__main__":
    for draw in (fragment_layout, ldmatrix, ldmatrix_b, swizzle, pipeline):
        draw()
        print("drew", draw.__name__)
