"""Draw lesson 10's pictures into this folder:  python lessons/10_pipelined_w4a16/figures/draw.py

fragment_order.png   which element of a 16 × 16 block of W each nibble of a lane's word holds (exercise 10.a)
pipeline_stages.png  the cp.async ring over time: which stage holds which K tile, in flight or computed (10.b)
split_k.png          split-K: blocks of one output tile each take a part of K; the last to finish adds the parts (10.c)
"""
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parents[2]))  # the repository root, for harness
import torch  # noqa: E402

from harness import diagrams as d, quant  # noqa: E402
from harness.diagrams import PALETTE as P  # noqa: E402

LANES = {0: P["accent"], 1: P["thread"], 4: P["used"]}  # lanes drawn, one colour each


def _position(lane, i):
    """Row and column in the 16 × 16 block of nibble i of lane's word, read back through harness.quant's decoding
    of fragment order (Int4Fragments.codes): one word with only nibble i set, in the first k16 step."""
    packed = torch.full((1, 2, 32, 4), 0x88888888 - 2**32, dtype=torch.int32)  # every nibble q = 0 …
    packed[0, 0, lane, 0] = (0x88888888 + (1 << (4 * i))) - 2**32  # … but nibble i of this lane's word: q = 1
    codes = quant.Int4Fragments(packed, torch.ones(1, 16, dtype=torch.float16), 16).codes()
    (r, c), = (codes == 1).nonzero().tolist()
    return r, c


def fragment_order():
    fig, ax = d.figure(12.0, 6.2)
    owner = {_position(l, i): (l, i) for l in LANES for i in range(8)}
    d.grid(ax, 16, 16, 0, 0, color=lambda r, c: LANES[owner[(r, c)][0]] if (r, c) in owner else P["block"],
           label=lambda r, c: str(owner[(r, c)][1]) if (r, c) in owner else None, fontsize=7, text_color="white")
    for k in range(0, 17, 8):
        ax.plot([k, k], [0, 16], color=P["line"], lw=1.2)
        ax.plot([0, 16], [k, k], color=P["line"], lw=1.2)
    ax.text(0, -0.6, "one 16 × 16 block of W (16 outputs × one k16 step); the number: which nibble of the lane's word",
            fontsize=8)
    ax.text(-0.3, 4, "rows g", ha="right", va="center", fontsize=8)
    ax.text(-0.3, 12, "rows g + 8", ha="right", va="center", fontsize=8)
    ax.text(4, 16.6, "columns 2t, 2t + 1", ha="center", fontsize=8)
    ax.text(12, 16.6, "columns 2t + 8, 2t + 9", ha="center", fontsize=8)
    # lane 0's word, nibble 7 on the left; under each nibble, the (row, col) of the block it holds
    x0, y0, bw = 18.5, 2, 1.25
    ax.text(x0, y0 - 0.7, "lane 0's word (nibble 7 … nibble 0)", fontsize=8)
    for j, i in enumerate(range(7, -1, -1)):
        r, c = _position(0, i)
        d.box(ax, x0 + j * bw, y0, x0 + (j + 1) * bw, y0 + 1, color=LANES[0], lw=0.8)
        ax.text(x0 + (j + 0.5) * bw, y0 + 0.5, str(i), ha="center", va="center", fontsize=7.5, color="white")
        ax.text(x0 + (j + 0.5) * bw, y0 + 1.4, f"{r},{c}", ha="center", va="center", fontsize=6.5)
    ax.text(x0, y0 + 2.2, "(row, col) in the block of each nibble", fontsize=7)
    ax.text(x0, y0 + 3.8, "register j of the A fragment = nibble j (low half)\n+ nibble j + 4 (high half):",
            fontsize=8)
    ax.text(x0, y0 + 5.3, "a0: row g, cols 2t, 2t+1       a1: row g+8\na2: row g, cols 2t+8, 2t+9   a3: row g+8",
            fontsize=8)
    for n, (l, colour) in enumerate(LANES.items()):
        d.box(ax, x0, y0 + 7 + n * 1.2, x0 + 0.8, y0 + 7.8 + n * 1.2, color=colour, lw=0.6)
        ax.text(x0 + 1.1, y0 + 7.4 + n * 1.2, f"lane {l} (g = {l // 4}, t = {l % 4})", va="center", fontsize=8)
    d.matrix_view(ax, -2.5, -1.0, 29.0, 17.0, pad=0.3)
    return fig


def pipeline_stages(stages=4, tiles=7):
    fig, ax = d.figure(11.5, 4.2)
    w = 1.6  # one K tile's math, in drawing units
    pro = -1.6  # the prologue issues tiles 0 … STAGES − 2 before the loop starts at time 0
    for s in range(stages):
        ax.text(pro - 0.3, s + 0.5, f"stage {s}", ha="right", va="center", fontsize=8)
    for kt in range(tiles):
        s = kt % stages
        # tiles 0 … STAGES − 2 come from the prologue; tile kt ≥ STAGES − 1 is issued by iteration kt − (STAGES − 1)
        issued = pro if kt < stages - 1 else (kt - stages + 1) * w
        start = kt * w
        d.box(ax, issued, s + 0.15, start, s + 0.85, color=P["memory"], lw=0.6, text=f"copy {kt}", fontsize=7)
        d.box(ax, start, s + 0.15, start + w, s + 0.85, color=P["thread"], lw=0.6)
        ax.text(start + w / 2, s + 0.5, f"math {kt}", ha="center", va="center", fontsize=7, color="white")
    for kt in range(tiles + 1):
        ax.plot([kt * w, kt * w], [-0.1, stages + 0.1], color=P["grid"], lw=0.5, ls=":", zorder=0)
    for kt in range(tiles):
        ax.text(kt * w + w / 2, stages + 0.45, f"i = {kt}", ha="center", va="center", fontsize=7)
    ax.plot([pro, pro], [-0.1, stages + 0.1], color=P["line"], lw=1.0, zorder=0)
    ax.plot([0, 0], [-0.1, stages + 0.1], color=P["line"], lw=1.0, zorder=0)  # under the boxes
    ax.text(pro / 2, -0.45, "prologue", ha="center", va="center", fontsize=7.5)
    ax.text(tiles * w / 2, -0.45, "K loop", ha="center", va="center", fontsize=7.5)
    ax.text(pro, stages + 1.1, f"STAGES = {stages}: while one stage's tile is computed, the copies of the next "
            f"{stages - 1} tiles are in flight; a stage's next copy starts once the math on it is done", fontsize=8)
    ax.text(pro, -1.0, "time →   (light: copies in flight; dark: the math on that stage's tile)", fontsize=8)
    d.matrix_view(ax, pro - 1.6, -1.3, tiles * w + 0.2, stages + 1.4, pad=0.2)
    return fig


def split_k(parts=3, kts=9):
    fig, ax = d.figure(11.5, 4.4)
    colours = [P["thread"], P["used"], P["accent"]]
    for t in range(2):  # two output tiles, each one row of K tiles
        y = t * 2.2
        ax.text(-0.3, y + 0.5, f"output tile {t}", ha="right", va="center", fontsize=8)
        for k in range(kts):
            p = k * parts // kts
            d.box(ax, k, y, k + 1, y + 1, color=colours[p], lw=0.6)
        for p in range(parts):
            k0 = p * kts // parts
            ax.text(k0 + 1.5, y + 1.35, f"block (tile {t}, part {p})", ha="center", va="center", fontsize=7)
    ax.text(0, -0.7, "K tiles →  each block runs the ring over its own part of K and holds an FP32 partial tile",
            fontsize=8)
    x = kts + 1.2
    d.box(ax, x, 0, x + 3.2, 3.2, color=P["cache"], lw=0.8)
    ax.text(x + 1.6, 0.6, "workspace", ha="center", fontsize=8)
    ax.text(x + 1.6, 1.4, "part 0 | part 1 | part 2", ha="center", fontsize=7)
    ax.text(x + 1.6, 2.3, "counter of the tile", ha="center", fontsize=7)
    d.arrow(ax, (kts, 0.5), (x, 1.4))
    ax.text(x + 3.5, 0.8, "each block's FP32 partial tile:\nits part of the workspace", fontsize=8, va="center")
    ax.text(x + 3.5, 2.6, "the counter: how many parts\nhave arrived; the last block\nto arrive adds all of them",
            fontsize=8, va="center")
    d.matrix_view(ax, -2.6, -1.1, x + 8.8, 4.4, pad=0.2)
    return fig


def main():
    for name, fn in (("fragment_order", fragment_order), ("pipeline_stages", pipeline_stages), ("split_k", split_k)):
        print(d.save(fn(), HERE / f"{name}.png").relative_to(HERE.parents[2]))


if __name__ == "__main__":
    main()
