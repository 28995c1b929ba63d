"""Draw lesson 03's pictures into this folder:  python lessons/03_register_tiling/figures/draw.py

register_tiles.png  what one thread reads from shared memory per k, and what it computes: 1-D (8×1) and 2-D (8×8)
vector_loads.png    a 128×8 tile copied with one float4 per thread, stored transposed as As[k][m]
warp_tiling.png     block tile → warp tile → thread tile: where a thread's 8×8 outputs sit, steps 2-3 against 4-5
double_buffer.png   one buffer (load, wait, compute, wait) against two (the next tile's loads fly during the FMAs)
"""
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parents[2]))  # the course root, for harness.diagrams

from harness.diagrams import PALETTE, arrow, box, figure, grid, matrix_view, save  # noqa: E402

X, W, ACC = "#DD8452", "#55A868", PALETTE["thread"]


def register_tiles():
    """Per k: 1-D reads 8 x values (a broadcast) and 1 W value for 8 FMAs; 2-D reads 8 + 8 for 64."""
    fig, (a1, a2) = figure(10, 4.2, ncols=2)
    for ax, tn, title in ((a1, 1, "step 1: 8×1 per thread"), (a2, 8, "step 2: 8×8 per thread")):
        grid(ax, 1, tn, x0=2, y0=0, color=W)                       # W values: Ws[k][n ...]
        grid(ax, 8, 1, x0=0, y0=2, color=X)                        # x values: As[k][m ...]
        grid(ax, 8, tn, x0=2, y0=2, color=ACC)                     # the accumulators
        ax.text(2 + tn / 2, -0.5, f"{tn} value{'s' if tn > 1 else ''} of W", ha="center", va="bottom", fontsize=8)
        ax.text(-0.4, 6, "8 values of x", ha="right", va="center", fontsize=8, rotation=90)
        ax.text(2 + tn / 2, 10.6, f"{8 * tn} FMAs from {8 + tn} loads", ha="center", va="top", fontsize=9,
                color=PALETTE["accent"])
        ax.set_title(title, fontsize=10)
        matrix_view(ax, -2.2, -1.6, 11, 11.4)
    save(fig, HERE / "register_tiles.png")


def vector_loads():
    """An 8-row excerpt of the 128×8 x tile: thread t loads row t/2, k = 4·(t%2) .. +3 as one float4, and stores the
    four values down a column of As[k][m]."""
    fig, (a1, a2) = figure(9, 4.4, ncols=2)
    rows = 8
    grid(a1, rows, 8, color=lambda r, c: X if (r * 2 + c // 4) % 2 == 0 else "#F2C7A5",
         label=lambda r, c: f"t{2 * r + c // 4}" if c % 4 == 0 else None, fontsize=6.5)
    a1.set_title("x tile: row m, k = 0..7\n(one float4 per thread)", fontsize=9)
    a1.text(4, rows + 0.6, "k →", ha="center", va="top", fontsize=8)
    matrix_view(a1, -0.6, -0.4, 8.6, rows + 1.6)
    grid(a2, 8, rows, color=lambda k, m: X if (2 * m + k // 4) % 2 == 0 else "#F2C7A5",
         label=lambda k, m: f"t{2 * m + k // 4}" if k % 4 == 0 else None, fontsize=6)
    a2.set_title("As[k][m]: stored transposed\n(a thread's 4 values go down one column)", fontsize=9)
    a2.text(rows / 2, 8.6, "m →", ha="center", va="top", fontsize=8)
    a2.text(-0.5, 4, "k ↓", ha="right", va="center", fontsize=8)
    matrix_view(a2, -1.6, -0.4, rows + 0.4, 9.6)
    save(fig, HERE / "vector_loads.png")


def warp_tiling():
    """The 128×128 block tile in cells of 4×4 outputs (32×32 cells). Left: steps 2-3, thread t owns the 2×2 cells at
    (2·(t/16), 2·(t%16)). Right: steps 4-5, 2×4 warps of 16×8 cells; lane l owns cells (l%8 + {0, 8}, l/8 + {0, 4})."""
    fig, (a1, a2) = figure(11, 5.6, ncols=2)
    n = 32

    def contiguous(r, c):
        t = (r // 2) * 16 + c // 2
        return ACC if t == 0 else ("#DD8452" if t == 1 else (PALETTE["warp"] if t < 32 else PALETTE["block"]))
    grid(a1, n, n, color=contiguous, lw=0.2)
    a1.set_title("steps 2-3: a thread's 8×8 is one block", fontsize=9.5)

    def warped(r, c):
        warp = (r // 16) * 4 + c // 8
        if warp != 0:
            return PALETTE["block"]
        lane = (r % 8) + 8 * (c % 4)
        return ACC if lane == 0 else ("#DD8452" if lane == 1 else PALETTE["warp"])
    grid(a2, n, n, color=warped, lw=0.2)
    for wr in range(2):
        for wc in range(4):
            box(a2, wc * 8, wr * 16, wc * 8 + 8, wr * 16 + 16, lw=1.4)
            a2.text(wc * 8 + 4, wr * 16 + 12, f"warp {wr * 4 + wc}", ha="center", va="center", fontsize=7)
    a2.set_title("steps 4-5: 2×4 warps of 64×32; a thread's 8×8\nis four 4×4 pieces, 32 rows and 16 columns apart",
                 fontsize=9.5)
    for ax in (a1, a2):
        ax.text(n / 2, n + 0.8, "block tile 128×128 (each cell: 4×4 outputs)", ha="center", va="top", fontsize=8)
        ax.text(0, n + 2.6, "■ thread 0   ", color=ACC, ha="left", va="top", fontsize=8)
        ax.text(9, n + 2.6, "■ thread 1   ", color="#DD8452", ha="left", va="top", fontsize=8)
        ax.text(18, n + 2.6, "■ the rest of warp 0", color=PALETTE["warp"], ha="left", va="top", fontsize=8)
        matrix_view(ax, 0, 0, n, n + 4.4)
    save(fig, HERE / "warp_tiling.png")


def double_buffer():
    """Time runs left to right. One buffer: every tile's global loads are waited for before its FMAs. Two: tile t+1's
    loads are issued before tile t's FMAs and only stored to the other buffer after them."""
    fig, ax = figure(10, 3.4)
    load, comp, wait = "#F6E8C3", ACC, PALETTE["idle"]
    t = 0.0
    for tile in range(3):  # one buffer
        box(ax, t, 0, t + 2.2, 1, color=load, text=f"load {tile}", fontsize=7.5)
        box(ax, t + 2.2, 0, t + 2.5, 1, color=wait)
        box(ax, t + 2.5, 0, t + 5.0, 1, color=comp, text=f"FMAs {tile}", fontsize=7.5)
        box(ax, t + 5.0, 0, t + 5.3, 1, color=wait)
        t += 5.3
    ax.text(-0.3, 0.5, "one buffer", ha="right", va="center", fontsize=9)
    box(ax, 0, 2, 2.2, 3, color=load, text="load 0", fontsize=7.5)
    box(ax, 2.2, 2, 2.5, 3, color=wait)
    t = 2.5
    for tile in range(5):  # two buffers: the FMAs run back to back, the next loads fly underneath
        box(ax, t, 2, t + 2.5, 3, color=comp, text=f"FMAs {tile}, buf {tile % 2}", fontsize=6.5)
        box(ax, t + 0.1, 3.15, t + 2.3, 3.55, color=load, text=f"load {tile + 1} in flight", fontsize=6.5)
        box(ax, t + 2.5, 2, t + 2.8, 3, color=wait)
        t += 2.8
    ax.text(-0.3, 2.6, "two buffers", ha="right", va="center", fontsize=9)
    arrow(ax, (0, 4.3), (16, 4.3), text="time", text_offset=(0, -0.35))
    ax.text(16.2, 0.5, "grey: __syncthreads", ha="left", va="center", fontsize=8)
    ax.set_xlim(-3.5, 19.5)
    ax.set_ylim(4.8, -0.6)
    save(fig, HERE / "double_buffer.png")


if __name__ == "__main__":
    register_tiles()
    vector_loads()
    warp_tiling()
    double_buffer()
    print("drew", ", ".join(p.name for p in sorted(HERE.glob("*.png"))))
