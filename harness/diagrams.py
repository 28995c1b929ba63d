"""Small drawing kit for the lessons' pictures (thread maps, tiles, memory): cells, arrows, a palette.

Each lesson's `lessons/NN_name/figures/draw.py` uses it and redraws that lesson's PNGs with
`python lessons/NN_name/figures/draw.py`. `save` writes deterministic files (no software tag, fixed
style and DPI) and refuses a figure whose labels overlap, so every committed picture stays readable.
"""
from __future__ import annotations

from pathlib import Path

import matplotlib
import matplotlib.text
from matplotlib.backends.backend_agg import FigureCanvasAgg
from matplotlib.figure import Figure  # not pyplot: no backend or global state, so no display needed
from matplotlib.patches import FancyArrowPatch, Rectangle

# One meaning per colour across the course.
PALETTE = {
    "thread": "#4C72B0",     # one thread / the element it owns
    "warp": "#8FB3E0",       # the rest of its warp
    "block": "#DCE6F2",      # the rest of its block
    "idle": "#EEEEEE",       # threads with nothing to do (past the end)
    "used": "#55A868",       # bytes a load asked for
    "wasted": "#F2C6C2",     # bytes moved but not used
    "memory": "#F6E8C3",     # DRAM / HBM
    "cache": "#FBF3DC",      # L2
    "sm": "#E5EEF7",         # on-chip (SM)
    "accent": "#C44E52",     # what the eye should find first
    "line": "#333333",
    "grid": "#BBBBBB",
}

STYLE = {"font.family": "DejaVu Sans", "font.size": 9, "axes.titlesize": 10, "savefig.dpi": 110,
         "figure.dpi": 110, "svg.hashsalt": "course", "path.simplify": False}


def figure(width: float, height: float, ncols: int = 1, **kw):
    """A figure of `ncols` blank panels (no axes drawn) in data units equal in x and y."""
    with matplotlib.rc_context(STYLE):
        fig = Figure(figsize=(width, height))
        FigureCanvasAgg(fig)
        axes = fig.subplots(1, ncols, **kw)
    for ax in (axes if ncols > 1 else [axes]):
        ax.set_axis_off()
        ax.set_aspect("equal")
    return fig, axes


def grid(ax, rows: int, cols: int, x0: float = 0.0, y0: float = 0.0, cell: float = 1.0, color=None,
         label=None, edge: str = PALETTE["grid"], lw: float = 0.6, fontsize: float = 7, text_color="black"):
    """Paint a rows × cols grid of square cells, row 0 at the top, its top-left corner at (x0, y0).

    color / label: a constant or a function (r, c) -> colour / text (None: leave blank). Returns the
    (x0, y0, x1, y1) box the grid covers, y growing downwards as in a matrix."""
    for r in range(rows):
        for c in range(cols):
            fc = color(r, c) if callable(color) else color
            ax.add_patch(Rectangle((x0 + c * cell, y0 + r * cell), cell, cell, facecolor=fc or "white",
                                   edgecolor=edge, lw=lw))
            t = label(r, c) if callable(label) else (label if r == c == 0 else None)
            if t:
                ax.text(x0 + (c + 0.5) * cell, y0 + (r + 0.5) * cell, t, ha="center", va="center",
                        fontsize=fontsize, color=text_color)
    return (x0, y0, x0 + cols * cell, y0 + rows * cell)


def box(ax, x0, y0, x1, y1, color="none", edge=PALETTE["line"], lw=1.2, text=None, fontsize=8, **kw):
    """A rectangle from (x0, y0) to (x1, y1), optionally with centred text."""
    ax.add_patch(Rectangle((x0, y0), x1 - x0, y1 - y0, facecolor=color, edgecolor=edge, lw=lw, **kw))
    if text:
        ax.text((x0 + x1) / 2, (y0 + y1) / 2, text, ha="center", va="center", fontsize=fontsize)


def arrow(ax, start, end, text=None, color=PALETTE["line"], lw=1.2, fontsize=7.5, text_offset=(0, 0),
          both: bool = False, ha="center", va="center"):
    """An arrow from start to end, with an optional label at its middle (shifted by text_offset)."""
    ax.add_patch(FancyArrowPatch(start, end, arrowstyle="<|-|>" if both else "-|>", mutation_scale=9,
                                 color=color, lw=lw, shrinkA=0, shrinkB=0))
    if text:
        ax.text((start[0] + end[0]) / 2 + text_offset[0], (start[1] + end[1]) / 2 + text_offset[1], text,
                ha=ha, va=va, fontsize=fontsize, color=color)


def matrix_view(ax, x0, y0, x1, y1, pad=0.6):
    """Frame the panel on a matrix-like region (y down) with `pad` units of margin."""
    ax.set_xlim(x0 - pad, x1 + pad)
    ax.set_ylim(y1 + pad, y0 - pad)


def overlapping_labels(fig) -> list[tuple[str, str]]:
    """Pairs of visible texts (titles, labels, tick labels, annotations) whose boxes overlap."""
    canvas = fig.canvas if hasattr(fig.canvas, "get_renderer") else FigureCanvasAgg(fig)
    r = canvas.get_renderer()
    fig.draw(r)
    texts = list(fig.texts)
    for ax in fig.axes:
        texts += list(ax.texts) + [ax.title, ax._left_title, ax._right_title]
        if ax.get_legend():
            texts += list(ax.get_legend().get_texts())
        if ax.axison:  # a hidden axis keeps its (invisible) tick labels
            for axis in (ax.xaxis, ax.yaxis):
                texts += [axis.label] + [t for t in axis.get_ticklabels(which="both") if t.get_visible()]
    texts = [t for t in texts if t.get_visible() and t.get_text().strip()]
    boxes = [(t.get_text(), t.get_window_extent(r)) for t in texts]
    hits = []
    for i, (a, ba) in enumerate(boxes):
        for b, bb in boxes[i + 1:]:
            # a shared point (touching boxes) is not an overlap; one pixel of tolerance for anti-aliasing
            if ba.x0 < bb.x1 - 1 and bb.x0 < ba.x1 - 1 and ba.y0 < bb.y1 - 1 and bb.y0 < ba.y1 - 1:
                hits.append((a, b))
    return hits


def save(fig, path: str | Path) -> Path:
    """Write `fig` as a PNG that is byte-identical from run to run, after checking no labels overlap."""
    path = Path(path)
    clash = overlapping_labels(fig)
    if clash:
        raise ValueError(f"{path.name}: labels overlap: " + "; ".join(f"{a!r} / {b!r}" for a, b in clash[:5]))
    path.parent.mkdir(parents=True, exist_ok=True)
    with matplotlib.rc_context(STYLE):
        fig.savefig(path, format="png", metadata={"Software": None}, bbox_inches="tight", pad_inches=0.1)
    return path
