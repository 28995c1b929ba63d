"""Draw lesson 12's pictures into this folder:  python lessons/12_hopper_wgmma/figures/draw.py

tma_box.png        the copy engine's box: 64 K × 64 tokens of x cut out of the matrix (rows past M as zeros), and
                   how the 128-byte swizzle (the one layout of 128-byte rows wgmma reads) lays out one 8-row atom
                   (step 2)
mbarrier_ring.png  the ring: a stage's full barrier counting bytes, its empty barrier counting threads, and the
                   parity of each use of a stage (exercise 12.a)
wgmma_tile.png     one wgmma of a warpgroup: A from the 4 warps' registers, B from shared memory, D in registers
                   (exercise 12.b)
"""
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parents[2]))  # the repository root, for harness
from harness import diagrams as d  # noqa: E402
from harness.diagrams import PALETTE as P  # noqa: E402

PIECES = ["#4C72B0", "#DD8452", "#55A868", "#C44E52", "#8172B3", "#937860", "#DA8BC3", "#8C8C8C"]


def swizzled_piece(r, p):
    """Where 16-byte piece p of row r of a box lands within its 128-byte row (CU_TENSOR_MAP_SWIZZLE_128B)."""
    return p ^ (r % 8)


def tma_box():
    fig, ax = d.figure(12, 5.6)
    # left: x in global memory, tokens down, K across in 16-byte pieces (8 halves each); M = 5 tokens
    rows, cols, M = 10, 20, 5
    d.grid(ax, rows, cols, 0, 0, color=lambda r, c: P["memory"] if r < M else P["idle"])
    d.box(ax, 4, 0, 12, 8, edge=P["accent"], lw=2.2)
    ax.text(0, -0.9, "x in global memory: tokens × K (a cell: 16 bytes = 8 halves of K)", fontsize=8.5)
    ax.text(8, 10.4, "the box (red): 64 of K (128 bytes) × 64 tokens,\nasked for by one thread with two coordinates",
            ha="center", va="top", fontsize=8, color=P["accent"])
    ax.text(-0.3, 2.5, f"M = {M} tokens", ha="right", va="center", fontsize=8)
    ax.text(-0.3, 7, "past M:\nzeros in the box", ha="right", va="center", fontsize=8)
    # right: one 8-row atom of the box in shared memory, swizzled
    x0 = 26
    d.grid(ax, 8, 8, x0, 0, color=lambda r, c: PIECES[swizzled_piece(r, c)],
           label=lambda r, c: str(swizzled_piece(r, c)), text_color="white", fontsize=8)
    ax.text(x0, -0.9, "one 1,024-byte atom in shared memory (the number: piece p of K)", fontsize=8.5)
    for c in range(8):
        ax.text(x0 + c + 0.5, 8.45, f"{16 * c}", ha="center", fontsize=6.5)
    ax.text(x0 + 4, 9.3, "byte within the 128-byte row", ha="center", fontsize=8)
    for r in range(8):
        ax.text(x0 - 0.25, r + 0.5, f"row {r}", ha="right", va="center", fontsize=7)
    ax.text(x0 + 8.4, 1.6, "piece p of row r is stored\nat position p XOR (r mod 8):", fontsize=8, va="center")
    ax.text(x0 + 8.4, 3.6, "wgmma reads 128-byte rows\nonly in this layout (its\n128-byte swizzle mode);\n"
            "wgmma undoes the XOR\nas it reads a k16 step\n(pieces 2j, 2j+1)", fontsize=8, va="top")
    d.arrow(ax, (12.3, 2), (x0 - 2.4, 2), "copy engine\n(TMA)", text_offset=(0, -1.0))
    d.matrix_view(ax, -3.2, -1.5, x0 + 14.5, 12.0, pad=0.3)
    return fig


def mbarrier_ring(stages=4, tiles=10):
    fig, ax = d.figure(12, 6.4)
    # top: one stage's full barrier over one use
    ax.text(0, -0.9, "one use of a stage: its full barrier", fontsize=9)
    steps = [("thread 0:\narrive.expect_tx\n(24,832 bytes to come)", P["accent"]),
             ("copy engine: x, box 1\n(8,192 bytes land)", P["memory"]),
             ("x, box 2\n(8,192 bytes)", P["memory"]),
             ("weights, 8 × 1 KB\n(8,192 bytes)", P["memory"]),
             ("scales\n(256 bytes)", P["memory"]),
             ("0 bytes to come:\nthe phase completes,\nwaiters go on", P["used"])]
    w = 3.7
    for i, (text, colour) in enumerate(steps):
        d.box(ax, i * (w + 0.5), 0, i * (w + 0.5) + w, 2.2, color=colour, lw=0.8, text=text, fontsize=7)
        if i:
            d.arrow(ax, (i * (w + 0.5) - 0.5, 1.1), (i * (w + 0.5), 1.1))
    # bottom: the ring over time
    y0 = 4.2
    ax.text(0, y0 - 0.9, "the ring over time: tile i in stage i mod 4; each use of a stage is a new phase of its "
            "barriers, and waiters name its parity", fontsize=9)
    cw = 2.4
    for s in range(stages):
        ax.text(-0.3, y0 + s + 0.5, f"stage {s}", ha="right", va="center", fontsize=8)
    for i in range(tiles):
        s, use = i % stages, i // stages
        d.box(ax, i * cw, y0 + s, i * cw + cw - 0.2, y0 + s + 0.9, color=[P["warp"], P["cache"]][use % 2], lw=0.7,
              text=f"tile {i}: parity {use % 2}", fontsize=6.5)
    for i in range(1, tiles - stages + 1):
        s = (i - 1) % stages
        x = (i - 1) * cw + cw - 0.2
        d.arrow(ax, (x, y0 + s + 0.45), ((i - 1 + stages) * cw, y0 + s + 0.45), color=P["grid"], lw=0.7)
    ax.text(0, y0 + stages + 0.8, "grey arrows: in iteration i, the stage of tile i − 1 gets tile i + 3, once all 256 "
            "threads have arrived on its empty barrier", fontsize=8)
    d.matrix_view(ax, -2.0, -1.5, max(tiles * cw, len(steps) * (w + 0.5)) + 0.2, y0 + stages + 1.3, pad=0.3)
    return fig


def wgmma_tile():
    fig, ax = d.figure(11, 7.2)
    u = 0.09  # drawing units per row/column of the matrices
    warp_colours = [P["thread"], P["warp"], P["used"], P["cache"]]
    ax0, ay0 = 0, 2.4  # A: 64 outputs × 16 of K
    for w in range(4):
        d.box(ax, ax0, ay0 + 16 * w * u, ax0 + 16 * u, ay0 + 16 * (w + 1) * u, color=warp_colours[w], lw=0.6)
        ax.text(ax0 - 0.15, ay0 + (16 * w + 8) * u, f"warp {w}: rows {16 * w}-{16 * w + 15}", ha="right",
                va="center", fontsize=7.5)
    ax.text(ax0 + 8 * u, ay0 + 64 * u + 0.35, "A: 64 × 16 weights,\nin registers", ha="center", va="top",
            fontsize=8)
    bx0, by0 = 3.0, 0  # B: 16 of K × 64 tokens
    d.box(ax, bx0, by0, bx0 + 64 * u, by0 + 16 * u, color=P["memory"], lw=0.8)
    ax.text(bx0 + 64 * u + 0.2, by0 + 8 * u, "B: 16 of K × 64 tokens of x, in shared memory\n(the tensor cores "
            "read it through a descriptor)", va="center", fontsize=8)
    for w in range(4):  # D: 64 outputs × 64 tokens
        d.box(ax, bx0, ay0 + 16 * w * u, bx0 + 64 * u, ay0 + 16 * (w + 1) * u, color=warp_colours[w], lw=0.6)
    for j in range(1, 8):  # the 8-token column groups of the D layout
        ax.plot([bx0 + 8 * j * u] * 2, [ay0, ay0 + 64 * u], color=P["grid"], lw=0.5)
    ax.text(bx0 + 64 * u + 0.2, ay0 + 24 * u, "D: 64 outputs × 64 tokens, FP32,\nin registers: warp w holds rows "
            "16w … 16w+15,\n32 accumulators per thread,\nmma.m16n8's layout repeated\nfor each 8 tokens",
            va="center", fontsize=8)
    ax.text(0, ay0 + 64 * u + 1.4, "one wgmma.m64n64k16: the 4 warps of a warpgroup issue it together; the block's "
            "two warpgroups each own 64 of its 128 outputs", fontsize=8.5)
    d.matrix_view(ax, -2.8, -0.6, 12.5, ay0 + 64 * u + 1.8, pad=0.2)
    return fig


def main():
    for name, draw in (("tma_box", tma_box), ("mbarrier_ring", mbarrier_ring), ("wgmma_tile", wgmma_tile)):
        print(d.save(draw(), HERE / f"{name}.png"))


if __name__ == "__main__":
    main()
