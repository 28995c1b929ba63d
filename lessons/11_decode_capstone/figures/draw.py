"""Draw lesson 11's pictures into this folder:  python lessons/11_decode_capstone/figures/draw.py

split_keys.png     decode attention: a sequence's positions cut into splits (one block each), each split's
                   positions dealt to 8 warps, each warp's online softmax state, merged twice (exercises 11.a, 11.b)
step_time.png      where the time of a decode step goes, per format and kind of kernel (from results/11.json)
tokens_per_s.png   tokens per second per format against FP16 in the same run (from results/11.json)
"""
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parents[2]))  # the repository root, for harness
sys.path.insert(0, str(HERE.parent))  # bench_11
import bench_11  # noqa: E402
from harness import diagrams as d, results  # noqa: E402
from harness.diagrams import PALETTE as P  # noqa: E402

WARP_COLORS = ("#4C72B0", "#8FB3E0", "#55A868", "#9CCB8C", "#DD8452", "#F2C6C2", "#8172B3", "#C9C1E3")


def split_keys(splits=3, per=12):
    fig, ax = d.figure(12, 5.2)
    n = splits * per  # positions 0 … p, p = n − 1 the new token
    d.grid(ax, 1, n, 0, 0, color=lambda r, c: WARP_COLORS[(c % per) % 8],
           label=lambda r, c: str((c % per) % 8), fontsize=7)
    ax.text(0, -0.5, "positions 0 … p of one (sequence, q head); the number: the warp that scores it", fontsize=8)
    ax.text(n - 0.5, 1.6, "p: the new token's\nk, v (registers)", ha="center", va="top", fontsize=7,
            color=P["accent"])
    for s in range(splits):
        x0, x1 = s * per, (s + 1) * per
        ax.plot([x0, x0], [-0.1, 1.1], color=P["line"], lw=2)
        d.box(ax, x0 + 0.5, 3.0, x1 - 0.5, 4.2, color=P["sm"], text=f"block (split {s}): 8 warp states\n"
              "merge_states (11.b)", fontsize=7.5)
        d.arrow(ax, ((x0 + x1) / 2, 1.0), ((x0 + x1) / 2, 3.0), text="online_update (11.a)" if s == 0 else None,
                text_offset=(2.9, 0), fontsize=7)
        d.arrow(ax, ((x0 + x1) / 2, 4.2), (n / 2, 6.0))
    ax.plot([n, n], [-0.1, 1.1], color=P["line"], lw=2)
    d.box(ax, n / 2 - 7, 6.0, n / 2 + 7, 7.2, color=P["cache"],
          text="the split that finishes last merges the splits' (m, l, acc)\nmerge_states (11.b) → out = acc / l", fontsize=7.5)
    ax.text(n + 0.4, 3.6, "(m, l, acc) per block,\nthrough a workspace\nin global memory", fontsize=7, va="center")
    d.matrix_view(ax, 0, -1.0, n + 6, 7.4)
    return fig


def main():
    d.save(split_keys(), HERE / "split_keys.png")
    rows = results.load(11, "decode")["rows"]
    d.save(bench_11.time_chart(rows), HERE / "step_time.png")
    d.save(bench_11.speed_chart(rows), HERE / "tokens_per_s.png")


if __name__ == "__main__":
    main()
