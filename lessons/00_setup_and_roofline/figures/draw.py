"""Lesson 00's pictures. Run `python lessons/00_setup_and_roofline/figures/draw.py` to redraw them all here.

The numbers in them come from the reference GPU's recorded files (results/H200/ceilings.json, results/H200/00.json),
never typed in.
"""
import json
import sys
from pathlib import Path

import numpy as np

HERE = Path(__file__).resolve().parent
ROOT = HERE.parents[2]
sys.path.insert(0, str(ROOT))
from harness import diagrams as d  # noqa: E402

P = d.PALETTE


def recorded():
    """The reference GPU's ceilings and lesson 00's bench rows at n = 2^26."""
    ref = ROOT / "results" / "H200"  # harness.roofline.recording_dir(): the reference GPU's
    c = json.loads((ref / "ceilings.json").read_text())
    rows = json.loads((ref / "00.json").read_text())["sections"]["bench"]["rows"]
    at = {r["op"]: r for r in rows if r["shape"] == [1 << 26]}
    return c, at


def threads_to_elements():
    """One thread per element: blocks of threads laid over the array, the last block hanging past n."""
    n, bdim, nblocks = 10, 4, 3
    fig, ax = d.figure(7.4, 2.6)
    shades = [P["thread"], P["warp"], P["block"]]
    for b in range(nblocks):
        x0 = b * bdim
        d.grid(ax, 1, bdim, x0=x0, y0=0, color=shades[b], edge=P["line"],
               label=lambda r, c, b=b: f"t={c}", fontsize=8, text_color="white" if b == 0 else "black")
        ax.text(x0 + bdim / 2, -0.35, f"block {b}", ha="center", va="bottom", fontsize=9)
    for i in range(nblocks * bdim):
        inside = i < n
        if inside:
            d.arrow(ax, (i + 0.5, 1.05), (i + 0.5, 1.95))
        else:
            ax.text(i + 0.5, 1.5, "idle", ha="center", va="center", fontsize=7.5, color=P["accent"])
    d.grid(ax, 1, n, x0=0, y0=2, color=P["memory"], edge=P["line"], label=lambda r, c: f"{c}", fontsize=8)
    d.grid(ax, 1, nblocks * bdim - n, x0=n, y0=2, color="white", edge=P["grid"], lw=0.6)
    ax.text(n + 1, 2.5, "past n", ha="center", va="center", fontsize=7.5, color=P["accent"])
    ax.text(-0.3, 0.5, "threadIdx.x", ha="right", va="center", fontsize=9)
    ax.text(-0.3, 2.5, "elements i", ha="right", va="center", fontsize=9)
    ax.text(6, 3.45, f"n = {n}, blockDim.x = {bdim}: {nblocks} blocks = {nblocks * bdim} threads; "
            f"the last {nblocks * bdim - n} must not store", ha="center", va="center", fontsize=8.5)
    d.matrix_view(ax, -2.4, -0.9, nblocks * bdim, 3.8, pad=0.1)
    return fig


def memory_and_roofline():
    """Left: where data lives and how fast this GPU moves it. Right: the roofline those rates draw."""
    c, at = recorded()
    env = c["env"]
    copy, fp32 = c["copy_GBps"], c["fp32_TFLOPs"]
    ours, torch_add = at["ours: scale_add"], at["torch.add(b, x, alpha=a)"]
    fig = d.figure(11.5, 4.6, ncols=2, gridspec_kw={"width_ratios": [1, 1.25]})[0]
    ax, rf = fig.axes
    rf.set_axis_on()
    rf.set_aspect("auto")

    # the hierarchy, top (close to the arithmetic, small, fast) to bottom (far, big)
    d.box(ax, 0, 0, 10, 3.1, color=P["sm"])
    ax.text(5, 0.45, f"{env['sms']} SMs (streaming multiprocessors)", ha="center", fontsize=9.5, weight="bold")
    d.box(ax, 0.4, 1.0, 4.8, 2.8, color="white", lw=0.8,
          text="registers\n+ shared memory / L1\n(in each SM)", fontsize=8)
    d.box(ax, 5.2, 1.0, 9.6, 2.8, color="white", lw=0.8,
          text=f"FP32 cores:\n{fp32:g} TFLOP/s\nFP16 tensor cores:\n{c['fp16_TFLOPs']:g} TFLOP/s", fontsize=8)
    d.box(ax, 0, 4.3, 10, 5.6, color=P["cache"], text=f"L2 cache, {env['l2_mib']:g} MiB, shared by all SMs",
          fontsize=9)
    d.arrow(ax, (5, 3.15), (5, 4.25), both=True)
    d.box(ax, 0, 7.9, 10, 9.4, color=P["memory"], text=f"HBM (DRAM), {env['memory_gib']:g} GiB", fontsize=9)
    d.arrow(ax, (2.2, 5.65), (2.2, 7.85), both=True, color=P["accent"], lw=1.8)
    ax.text(2.6, 6.35, f"copy: {copy:.0f} GB/s", ha="left", va="center", fontsize=8.5, color=P["accent"],
            weight="bold")
    ax.text(2.6, 6.95, f"scale_add: {ours['gbs']:.0f} GB/s, torch.add: {torch_add['gbs']:.0f} GB/s",
            ha="left", va="center", fontsize=8)
    ax.text(2.6, 7.45, "(measured, n = 2²⁶)", ha="left", va="center", fontsize=7.5, color="0.35")
    ax.text(5, 10.1, "smaller and faster toward the top; every byte a kernel needs\n"
            "from HBM crosses the red arrow", ha="center", va="center", fontsize=8)
    d.matrix_view(ax, 0, -0.1, 10, 10.6, pad=0.15)
    ax.set_title(f"Memory of the {c['gpu']}", fontsize=10)

    # the roofline: time ≥ max(bytes / bandwidth, FLOPs / rate)
    bw = copy / 1e3  # TB/s
    ai = np.logspace(-2, 3, 200)
    rf.plot(ai, np.minimum(fp32, bw * ai), color=P["thread"], lw=2)
    ridge = fp32 / bw
    rf.axvline(ridge, color=P["grid"], lw=0.8, ls="--")
    rf.text(ridge * 1.15, 0.02, f"ridge: {ridge:.1f} FLOP/byte", fontsize=8, va="bottom")
    rf.text(3e2, fp32 * 1.25, f"FP32 ceiling {fp32:g} TFLOP/s", fontsize=8, ha="right", va="bottom")
    rf.text(0.3, bw * 0.3 * 2.2, f"bandwidth ceiling\n{copy:.0f} GB/s × intensity", fontsize=8, rotation=0,
            ha="right", va="bottom")
    intensity = 2 / 12  # scale_add: 2 FLOPs per 12 bytes
    for r, color, dy in ((torch_add, P["used"], 1.6), (ours, P["accent"], 0.55)):
        y = r["tflops"]
        rf.scatter([intensity], [y], color=color, zorder=5, s=28)
        rf.annotate(f"{r['op'].split('(')[0].replace('ours: ', '')}: {y:g} TFLOP/s", (intensity, y),
                    xytext=(intensity * 1.8, y * dy), fontsize=8, color=color,
                    arrowprops=dict(arrowstyle="-", color=color, lw=0.7))
    rf.set_xscale("log")
    rf.set_yscale("log")
    rf.set_xlim(1e-2, 1e3)
    rf.set_ylim(1e-2, fp32 * 4)
    rf.set_xlabel("arithmetic intensity (FLOP per byte of DRAM traffic)")
    rf.set_ylabel("TFLOP/s")
    rf.grid(True, which="major", lw=0.3)
    rf.set_title("The roofline those two rates draw", fontsize=10)
    return fig


if __name__ == "__main__":
    for name, draw in (("threads_to_elements", threads_to_elements), ("memory_roofline", memory_and_roofline)):
        print(d.save(draw(), HERE / f"{name}.png").relative_to(ROOT))
