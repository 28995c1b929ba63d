"""Lesson 01's pictures. Run `python lessons/01_naive_gemm/figures/draw.py` to redraw them all here."""
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
ROOT = HERE.parents[2]
sys.path.insert(0, str(ROOT))
from harness import diagrams as d  # noqa: E402

P = d.PALETTE
SECTOR_FLOATS = 8  # a 32-byte sector holds 8 floats


def thread_map():
    """Left: gemm_naive, one thread per y[m][n], blocks of 32 × 8. Right: gemm_coalesced, one warp per
    y[m][n], its lanes spread along K."""
    fig = d.figure(12, 4.6, ncols=2, gridspec_kw={"width_ratios": [1.35, 1]})[0]
    ax, bx = fig.axes

    # y is M = 16 rows × N = 64 columns: 2 × 2 blocks of 32 (n) × 8 (m) threads
    M, N, BX, BY, s = 16, 64, 32, 8, 0.25
    blk, ty, tx = (1, 0), 2, 5  # block (blockIdx.x, blockIdx.y), then threadIdx.y, threadIdx.x

    def color(r, c):
        inb = c // BX == blk[0] and r // BY == blk[1]
        if inb and r % BY == ty and c % BX == tx:
            return P["accent"]
        if inb and r % BY == ty:
            return P["warp"]
        return P["block"] if inb else "white"

    d.grid(ax, M, N, cell=s, color=color, lw=0.3)
    for bxi in range(N // BX):
        for byi in range(M // BY):
            d.box(ax, bxi * BX * s, byi * BY * s, (bxi + 1) * BX * s, (byi + 1) * BY * s, lw=1.4)
    for b in range(N // BX):  # which columns and rows each block covers (the learner derives the formula)
        ax.text((b + 0.5) * BX * s, -0.1, f"n = {b * BX}…{(b + 1) * BX - 1}", ha="center", va="bottom", fontsize=8)
    for b in range(M // BY):
        ax.text(-0.1, (b + 0.5) * BY * s, f"m = {b * BY}…{(b + 1) * BY - 1}", ha="right", va="center", fontsize=8)
    m, n = blk[1] * BY + ty, blk[0] * BX + tx
    cx, cy = (n + 0.5) * s, (m + 0.5) * s
    d.arrow(ax, (cx + 1.2, M * s + 0.9), (cx, cy + 0.15), color=P["accent"])
    ax.text(cx + 1.3, M * s + 1.05, f"threadIdx = ({tx}, {ty}) in block (1, 0)\n"
            f"computes y[{m}][{n}] = Σₖ x[{m}][k] · W[{n}][k]", ha="left", va="top", fontsize=8,
            color=P["accent"])
    d.arrow(ax, (2.5, M * s + 0.9), (2.0, (BY + ty + 0.5) * s), color=P["line"])
    ax.text(0.0, M * s + 1.05, "block (0, 1): 32 × 8 threads,\none per output of its tile", ha="left",
            va="top", fontsize=8)
    ax.text(N * s + 0.2, (ty + 0.5) * s, "a warp: 32\nconsecutive n,\none m", ha="left", va="center",
            fontsize=8, color=P["thread"])
    ax.set_title("gemm_naive: one thread per output of y", fontsize=10)
    d.matrix_view(ax, -1.6, -0.6, N * s + 2.2, M * s + 2.0, pad=0.1)

    # gemm_coalesced: warp w owns one y[m][n]; its lanes take k = lane, lane + 32, ...
    Mw, Nw, c, kc, K = 3, 8, 0.6, 0.2, 64
    w = 10
    wm, wn = divmod(w, Nw)
    gx = (32 * kc - Nw * c) / 2
    d.grid(bx, Mw, Nw, x0=gx, cell=c, color=lambda r, cc: P["accent"] if (r, cc) == (wm, wn) else "white",
           label=lambda r, cc: f"w{r * Nw + cc}", fontsize=7)
    bx.text(gx + Nw * c / 2, -0.25, f"y, N = {Nw}: warp w computes one output", ha="center", fontsize=8)
    y0 = Mw * c + 1.0
    shade = lambda r, k: P["thread"] if k == 0 else (P["warp"] if k % 2 else P["block"])
    for p_ in range(K // 32):
        d.grid(bx, 1, 32, y0=y0 + p_ * 0.6, cell=kc, color=shade, lw=0.2)
        bx.text(-0.1, y0 + p_ * 0.6 + kc / 2, f"W[{wn}][k], k = {p_ * 32}…{p_ * 32 + 31}", ha="right",
                va="center", fontsize=7.5)
    bx.text(kc / 2, y0 - 0.08, "lane 0", ha="left", va="bottom", fontsize=7)
    bx.text(32 * kc - kc / 2, y0 - 0.08, "lane 31", ha="right", va="bottom", fontsize=7)
    d.arrow(bx, (gx + (wn + 0.5) * c, Mw * c + 0.05), (gx + (wn + 0.5) * c, y0 - 0.3), color=P["accent"])
    bx.text(32 * kc / 2, y0 + 1.55, f"x[{wm}][k] is read the same way. Each lane sums its k,\n"
            "a shuffle adds the 32 partial sums, lane 0 stores.\n"
            "One load instruction: 32 consecutive floats.", ha="center", va="center", fontsize=8)
    bx.set_title("gemm_coalesced: one warp per output", fontsize=10)
    d.matrix_view(bx, -2.2, -0.6, 32 * kc, y0 + 2.1, pad=0.1)
    return fig


def warp_loads_w():
    """What one load instruction of a warp touches in W: 32 sectors for 128 useful bytes (naive) or 4
    sectors, all used (coalesced)."""
    rows, K, s = 8, 32, 0.4
    fig = d.figure(12, 4.2, ncols=2)[0]
    for ax, coalesced in zip(fig.axes, (False, True)):
        k_used = 3

        def color(r, k):
            if coalesced:
                return P["used"] if r == 0 else "white"
            if k == k_used:
                return P["used"]
            return P["wasted"] if k // SECTOR_FLOATS == k_used // SECTOR_FLOATS else "white"

        d.grid(ax, rows, K, cell=s, color=color, lw=0.3)
        for r in range(rows):
            for sec in range(K // SECTOR_FLOATS):
                d.box(ax, sec * SECTOR_FLOATS * s, r * s, (sec + 1) * SECTOR_FLOATS * s, (r + 1) * s, lw=1.0)
            ax.text(-0.1, (r + 0.5) * s, f"W[n+{r}]" if r else "W[n]", ha="right", va="center", fontsize=7)
        ax.text(-0.1, rows * s + 0.25, "… 24 more rows", ha="right", va="center", fontsize=7)
        for sec in range(K // SECTOR_FLOATS):
            ax.text((sec + 0.5) * SECTOR_FLOATS * s, -0.2, f"k = {sec * 8}…{sec * 8 + 7}",
                    ha="center", fontsize=7)
        if coalesced:
            title = "gemm_coalesced: lane l reads W[n][k + l]"
            note = ("32 lanes × 4 B = 128 B in 4 sectors: 128 B moved, all used\n"
                    "(each framed run of 8 floats is one 32-byte sector)")
        else:
            title = "gemm_naive: lane l reads W[n + l][k]"
            note = (f"32 lanes × 4 B = 128 B in 32 sectors: 32 × 32 B = 1,024 B moved, 1 byte in 8 used\n"
                    "(rows are K floats apart; green: the float a lane asked for, pink: the rest of its 32-byte sector)")
        ax.text(K * s / 2, rows * s + 0.75, note, ha="center", va="top", fontsize=8)
        ax.set_title(title, fontsize=10)
        d.matrix_view(ax, -1.3, -0.6, K * s, rows * s + 1.6, pad=0.05)
    return fig


if __name__ == "__main__":
    for name, draw in (("thread_map", thread_map), ("warp_loads_W", warp_loads_w)):
        print(d.save(draw(), HERE / f"{name}.png").relative_to(ROOT))
