"""Draw lesson 06's pictures into this folder:  python lessons/06_fused_int8/figures/draw.py

four_routes.png    the four implementations as the kernels each runs, every box as wide as the bytes per weight it
                   moves through DRAM (so as long as it takes at full bandwidth): bench_06.KERNELS_PER_WEIGHT
int8_to_fp16.png   the 0x6400 trick on one weight, bit by bit
byte_perm.png      __byte_perm turning one word of four weights into two half2 words
gemv_lanes.png     the teaching GEMV: a warp per output, lanes taking 16-weight pieces of the row in turn, then the
                   butterfly of __shfl_xor_sync that adds the 32 partial sums
w8a8_scales.png    W8A8: where each scale goes in (per token, per output channel) and where both come out
"""
import struct
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parents[2]))  # the course root, for harness.diagrams
sys.path.insert(0, str(HERE.parent))      # the lesson folder, for bench_06's table of bytes

import bench_06  # noqa: E402
from harness.diagrams import PALETTE, arrow, box, figure, grid, save  # noqa: E402

READ, WRITE = PALETTE["used"], PALETTE["wasted"]
SIGN, EXP, MANT = "#C44E52", "#DD8452", PALETTE["thread"]


def four_routes():
    routes = list(bench_06.KERNELS_PER_WEIGHT.items())
    fig, ax = figure(11, 4.4)
    for i, (route, kernels) in enumerate(routes):
        y = 1.6 * i
        ax.text(-0.4, y + 0.5, route, ha="right", va="center", fontsize=9)
        x = 0.0
        for name, r, w in kernels:
            box(ax, x, y, x + r, y + 1, color=READ, lw=0.8)
            if w:
                box(ax, x + r, y, x + r + w, y + 1, color=WRITE, lw=0.8)
            if r + w >= 5:  # above the bar: inside, the label would straddle the read / write edge
                ax.text(x + (r + w) / 2, y - 0.05, f"{name}: read {r}, write {w}", ha="center", va="bottom",
                        fontsize=7)
            x += r + w
        total = sum(r + w for _, r, w in kernels)
        label = f"{total} B per weight" if total >= 5 else f"{kernels[0][0]}: {total} B per weight"
        ax.text(x + 0.3, y + 0.5, label, ha="left", va="center", fontsize=8.5,
                color=PALETTE["accent"] if total == 1 else "black")
    box(ax, 0, -1.6, 1, -1.0, color=READ, lw=0.8)
    ax.text(1.2, -1.3, "bytes read", ha="left", va="center", fontsize=8)
    box(ax, 4, -1.6, 5, -1.0, color=WRITE, lw=0.8)
    ax.text(5.2, -1.3, "bytes written (a copy of W that the next kernel reads back)", ha="left", va="center", fontsize=8)
    ax.set_xlim(-8.5, 27)
    ax.set_ylim(1.6 * len(routes) + 0.2, -2.0)
    ax.set_title("DRAM bytes per weight, kernel by kernel (width = bytes = time at full bandwidth)", fontsize=10)
    save(fig, HERE / "four_routes.png")


def _bits(ax, value, nbits, x0, y0, colour, label=None):
    """nbits cells of `value`, most significant bit on the left, colour(i) for bit i counted from the left."""
    grid(ax, 1, nbits, x0=x0, y0=y0, color=colour, label=lambda r, c: str((value >> (nbits - 1 - c)) & 1),
         fontsize=8, text_color="white")
    if label:
        ax.text(x0 - 0.4, y0 + 0.5, label, ha="right", va="center", fontsize=8.5)


def int8_to_fp16():
    b = -3                                   # the weight drawn
    byte = b & 0xFF
    u = byte ^ 0x80                          # b + 128 as an unsigned byte
    h = 0x6400 | u
    value = struct.unpack("<e", struct.pack("<H", h))[0]
    assert u == b + 128 and value == 1024 + u and value - 1152 == b, "the trick drawn must hold"
    fig, a1 = figure(8, 3.6)
    _bits(a1, byte, 8, 8, 0, PALETTE["thread"], f"int8 b = {b} (0x{byte:02X})")
    _bits(a1, u, 8, 8, 2, lambda r, c: SIGN if c == 0 else PALETTE["thread"], f"b ^ 0x80 = 0x{u:02X} = b + 128")
    _bits(a1, h, 16, 0, 4.5, lambda r, c: SIGN if c == 0 else (EXP if c < 6 else MANT),
          f"half 0x{h:04X}")
    a1.text(0.5, 4.4, "sign", ha="center", va="bottom", fontsize=7.5, color=SIGN)
    a1.text(3.5, 5.6, "exponent\n11001: 2¹⁰", ha="center", va="top", fontsize=7.5, color=EXP)
    a1.text(11, 5.6, "mantissa: 00, then the byte\n(steps of 1 at this exponent)", ha="center", va="top",
            fontsize=7.5, color=MANT)
    arrow(a1, (12, 3.05), (12, 4.45))
    a1.text(16.4, 1.0, "flip the sign bit", ha="left", va="center", fontsize=8)
    a1.text(16.4, 3.2, "put 0x64 above it", ha="left", va="center", fontsize=8)
    a1.text(8, 7.9, f"= 1024 + {u} = {value:g};   {value:g} − 1152 = {b};   then × the group's scale",
            ha="center", va="center", fontsize=9, color=PALETTE["accent"])
    a1.set_title("one weight: no int → float instruction", fontsize=10)
    a1.set_xlim(-9, 24)
    a1.set_ylim(8.6, -1.2)
    save(fig, HERE / "int8_to_fp16.png")


def byte_perm():
    """Four weights in one 32-bit word → two half2 words with __byte_perm: the word in the middle, the low half2
    above it and the high one below, an arrow from each byte of u to the place it takes (the 0x64 bytes come from
    the second operand)."""
    fig, a2 = figure(8, 3.9)
    names = ["u.3", "u.2", "u.1", "u.0"]                                     # byte 3 on the left, as written
    centre = {n: 3 + 2 * c for c, n in enumerate(names)}                     # x of each byte's box in the row of u
    U = 3.5                                                                  # top of u's row
    grid(a2, 1, 4, x0=2, y0=U, cell=2, color=PALETTE["thread"], label=lambda r, c: names[c], fontsize=8,
         text_color="white")
    a2.text(1.6, U + 1, "u = word ^ 0x80808080", ha="right", va="center", fontsize=8)
    # the selectors are exercise 06.a's to find: the picture names them only
    for j, (sel, picks, y) in enumerate((("sel_lo", ["0x64", "u.1", "0x64", "u.0"], 0),
                                         ("sel_hi", ["0x64", "u.3", "0x64", "u.2"], 7))):
        grid(a2, 1, 4, x0=2, y0=y, cell=2, color=lambda r, c, p=picks: EXP if p[c] == "0x64" else PALETTE["thread"],
             label=lambda r, c, p=picks: p[c], fontsize=8, text_color="white")
        a2.text(1.6, y + 1, f"__byte_perm(u, 0x64646464, {sel})", ha="right", va="center", fontsize=8)
        a2.text(10.4, y + 1, f"half2: weights {2 * j + 1}, {2 * j}", ha="left", va="center", fontsize=8)
        for c, name in enumerate(picks):                                     # every byte that moves
            if name != "0x64":
                start = (centre[name], U - 0.05) if y < U else (centre[name], U + 2.05)
                end = (3 + 2 * c, 2.05) if y < U else (3 + 2 * c, y - 0.05)
                arrow(a2, start, end)
    a2.text(6, 10.2, "then per half2: one HSUB2 (− 1152), one HMUL2 (× scale)", ha="center", va="center", fontsize=9,
            color=PALETTE["accent"])
    a2.set_title("four weights: two byte permutes make two half2 words", fontsize=10)
    a2.set_xlim(-9.5, 16)
    a2.set_ylim(11, -0.8)
    save(fig, HERE / "byte_perm.png")


def gemv_lanes():
    fig, (a1, a2) = figure(12, 4.2, ncols=2)
    lanes, steps = 8, 3                          # drawn: 8 lanes (of 32), 3 steps along K
    colours = ["#4C72B0", "#DD8452", "#55A868", "#C44E52", "#8172B3", "#937860", "#DA8BC3", "#8C8C8C"]
    grid(a1, 1, lanes * steps, x0=0, y0=0, color=lambda r, c: colours[c % lanes],
         label=lambda r, c: f"{c % lanes}", fontsize=7, text_color="white")
    for s in range(steps):
        a1.text(s * lanes + lanes / 2, 1.5, f"step {s}", ha="center", va="top", fontsize=8)
    a1.text(0, -0.4, "row n of W, k →  (a cell: 16 weights, one 16-byte load; its number: the lane; 8 lanes drawn)",
            ha="left",
            va="bottom", fontsize=8)
    a1.text(0, 3.2, "each step of the warp reads neighbouring pieces, and each lane keeps a partial sum per token;\n"
            "the warp's 32 lanes read 32 × 16 = 512 consecutive bytes of the row per step", ha="left", va="top",
            fontsize=8)
    a1.set_title("a warp per output n: the lanes split K", fontsize=10)
    a1.set_xlim(-0.5, lanes * steps + 0.5)
    a1.set_ylim(6.2, -1.6)
    # right: butterfly over 8 lanes (offsets 4, 2, 1); the warp's 32 use 16, 8, 4, 2, 1
    for level in range(4):
        y = 1.6 * level
        grid(a2, 1, lanes, x0=0, y0=y, color=PALETTE["thread"] if level == 3 else PALETTE["warp"],
             label=lambda r, c, lv=level: "Σ" if lv == 3 else (f"s{c}" if lv == 0 else None), fontsize=7,
             text_color="white" if level == 3 else "black")
        if level < 3:
            off = lanes >> (level + 1)
            for c in range(lanes):
                arrow(a2, (c + 0.5, y + 1.02), ((c ^ off) + 0.5, y + 1.58), lw=0.6, color=PALETTE["grid"])
            a2.text(lanes + 0.4, y + 1.3, f"+= shfl_xor(v, {off})", ha="left", va="center", fontsize=8)
        if 0 < level < 3:
            a2.text(-0.4, y + 0.5, f"sums of {2 ** level} lanes", ha="right", va="center", fontsize=7.5)
    a2.text(lanes / 2, 7.0, "after log₂(lanes) steps every lane holds the whole sum", ha="center", va="top",
            fontsize=8, color=PALETTE["accent"])
    a2.set_title("the warp adds its partial sums (8 lanes drawn)", fontsize=10)
    a2.set_xlim(-4.5, lanes + 5)
    a2.set_ylim(7.8, -0.6)
    save(fig, HERE / "gemv_lanes.png")


def w8a8_scales():
    fig, ax = figure(12, 3.4)
    f = 7.5
    box(ax, 0, 0, 5, 1.6, color=PALETTE["memory"], text="x (FP16) [M, K]", fontsize=f)
    box(ax, 7, 0, 15, 1.6, color=PALETTE["sm"], text="quantize per token:\nsx[m] = absmax / 127, round", fontsize=f)
    box(ax, 17, 0, 23, 1.6, color=PALETTE["memory"], text="xq (INT8), sx[m]", fontsize=f)
    box(ax, 17, 2.6, 23, 4.2, color=PALETTE["memory"], text="q (INT8), sw[n]", fontsize=f)
    box(ax, 25, 0.6, 33, 3.6, color=PALETTE["sm"], text="Σ xq · q, exact in INT32\n(__dp4a: 4 products\nper instruction)",
        fontsize=f)
    box(ax, 35, 0.6, 43, 3.6, color=PALETTE["sm"], text="epilogue:\nsum → y", fontsize=f)
    arrow(ax, (5, 0.8), (7, 0.8))
    arrow(ax, (15, 0.8), (17, 0.8))
    arrow(ax, (23, 0.8), (25, 1.4))
    arrow(ax, (23, 3.4), (25, 2.8))
    arrow(ax, (33, 2.1), (35, 2.1))
    ax.text(12, 5.2, "scales go in: one per token (at run time), one per output channel (offline)", ha="center",
            va="center", fontsize=8.5)
    ax.text(39, 4.6, "and come out once per output", ha="center", va="center", fontsize=8.5, color=PALETTE["accent"])
    ax.set_xlim(-0.5, 43.5)
    ax.set_ylim(5.8, -0.6)
    save(fig, HERE / "w8a8_scales.png")


if __name__ == "__main__":
    for draw in (four_routes, int8_to_fp16, byte_perm, gemv_lanes, w8a8_scales):
        draw()
        print("drew", draw.__name__)
