"""Machine-readable results, one file per lesson, written by the benchmark code itself; and the tables made from them.

Every measured row is stored with the GPU, driver, torch and nvcc versions and the date, so no number in a
notebook or in docs/results.md is typed by hand: `python -m harness.results docs` rebuilds the generated tables
(every `<!-- table:NAME -->` block of docs/results.md and README.md) from these files.

A benchmark row is a `Row`, keyed by its route id (the `route` key in the JSON); the display name of a route is
registered once (`register`) by the module that owns the route, and copied into each row (`op`) when it is
recorded, so the tables render from the stored files alone. A section stores the views its lesson's benchmark
module asks for (`views`: which routes are the columns, which ratios follow them): `view_markdown` renders any of
them with one generic table, `chart` draws one generic chart.

Each section stores the ceilings of the GPU it was measured on (`ceilings`: its copy bandwidth, peaks, SM count and
clock), and every percentage, floor or roofline point made from its rows divides by those: never by another GPU's.

Where results go, one folder per GPU: `build/results/<gpu>/` by default (your own runs); `results/<gpu>/` (the
recordings shipped with the course: the reference GPU's, roofline.REFERENCE_GPU, and any other GPU recorded) only
when COURSE_RECORD=1, so a learner's run never overwrites them. `load` reads your run on this GPU if you made one,
else the recording of this GPU, else the reference GPU's; each table names the GPU its rows come from.
"""
from __future__ import annotations

import dataclasses
import json
import os
import re
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

from . import bench, build, nsight, roofline, toolchain

RECORDED = roofline.RESULTS  # results/<gpu>/NN.json
LOCAL = roofline.LOCAL  # build/results/<gpu>/NN.json
DOCS = build.ROOT / "docs" / "results.md"

# ----------------------------------------------------------------------------------------------
# The row type and the route names

ROUTES: dict[str, tuple[str, str]] = {}  # route id -> (display name, short name for a table's header)


def register(route: str, name: str, short: str | None = None) -> str:
    """Register a route's display name (and a shorter one for table headers); returns the route id. Registering
    the same id with another name is an error: one route, one name."""
    if not re.fullmatch(r"[a-z0-9_.]+", route):
        raise ValueError(f"route id {route!r}: use lower-case letters, digits, '_' and '.'")
    new = (name, short or name)
    if ROUTES.get(route, new) != new:
        raise ValueError(f"route {route!r} is already registered as {ROUTES[route]}, not {new}")
    ROUTES[route] = new
    return route


def name(route: str) -> str:
    if route not in ROUTES:
        raise KeyError(f"route {route!r} is not registered (results.register)")
    return ROUTES[route][0]


# The library routes every decode lesson compares with.
CUBLAS_FP16 = register("cublas_fp16", "cuBLAS FP16 (FP16 weights)", "cuBLAS FP16")

_FIELDS = ("route", "op", "shape", "us", "graph_us", "bytes", "flops", "baseline")


@dataclass
class Row:
    """One measurement: a route on a shape. `us`: median µs per call (CUDA events around each call, after warm-up);
    `graph_us`: per call replayed from a CUDA graph (None where not timed so); `bytes`/`flops`: the fewest the
    problem must move and compute (None in rows recorded before they were stored); `baseline`: the route id of the
    baseline measured in the same run; `extra`: anything else a lesson stores (derived columns, sizes, ...)."""
    route: str
    op: str  # the display name, copied from the registry when measured
    shape: tuple
    us: float
    graph_us: float | None = None
    bytes: float | None = None
    flops: float | None = None
    baseline: str | None = None
    extra: dict = field(default_factory=dict)

    @classmethod
    def measured(cls, route: str, shape, us: float, graph_us=None, bytes=None, flops=None, baseline=None,
                 **extra) -> "Row":
        """A row from a timing, the route's registered name as its label."""
        return cls(route, name(route), tuple(shape), round(us, 2), graph_us and round(graph_us, 2),
                   bytes, flops, baseline, extra)

    @classmethod
    def from_dict(cls, d: dict) -> "Row":
        missing = [k for k in ("route", "op", "shape", "us") if k not in d]
        if missing:
            raise ValueError(f"a benchmark row needs {missing}: {d}")
        known = {k: d.get(k) for k in _FIELDS}
        known["shape"] = tuple(d["shape"])
        return cls(**known, extra={k: v for k, v in d.items() if k not in _FIELDS})

    def to_dict(self) -> dict:
        d = {k: getattr(self, k) for k in _FIELDS if getattr(self, k) is not None or k == "graph_us"}
        d["shape"] = list(self.shape)
        return d | self.extra

    @property
    def gbs(self) -> float | None:
        """GB/s: the problem's bytes over the median time (as stored where the bytes were not)."""
        return self.bytes / self.us / 1e3 if self.bytes else self.extra.get("gbs")

    @property
    def tflops(self) -> float | None:
        return self.flops / self.us / 1e6 if self.flops else self.extra.get("tflops", self.extra.get("tops"))


def rows_of(sec: dict) -> list[Row]:
    """A stored section's benchmark rows as Row."""
    return [Row.from_dict(r) for r in sec["rows"]]


# ----------------------------------------------------------------------------------------------
# Files

def _shown(p: Path) -> str:
    """A path as a message shows it: relative to the course root where it is inside it."""
    return str(p.relative_to(build.ROOT)) if p.is_relative_to(build.ROOT) else str(p)


def recording() -> bool:
    """COURSE_RECORD=1: a maintainer's recording run, whose results go to results/<gpu>/."""
    return os.environ.get("COURSE_RECORD", "") not in ("", "0")


def _gpu_dir(root: Path, gpu: str | None) -> Path:
    return root / (roofline.gpu_slug(gpu) if gpu else "no_gpu")


def _dir() -> Path:
    """Where this process's results go: results/<this GPU>/ when recording, else build/results/<this GPU>/. What
    runs without a GPU (lesson 05's CPU tables) is filed under the GPU whose ceilings it used, the reference's."""
    return _gpu_dir(RECORDED if recording() else LOCAL, roofline.this_gpu() or roofline.REFERENCE_GPU)


def _search(prefer_local: bool, gpu: str | None) -> list[Path]:
    """The folders `load` reads, first match wins."""
    if gpu is not None:
        return [_gpu_dir(RECORDED, gpu)]
    ref = _gpu_dir(RECORDED, roofline.REFERENCE_GPU)
    if not prefer_local:
        return [ref]
    this = roofline.this_gpu()
    dirs = (([] if recording() else [_gpu_dir(LOCAL, this or roofline.REFERENCE_GPU)])
            + ([_gpu_dir(RECORDED, this)] if this else []) + [ref])
    return list(dict.fromkeys(dirs))


def _file(lesson: int | str, d: Path) -> Path:
    return d / f"{int(lesson):02d}.json"


def record(lesson: int | str, section: str, rows: list, *, views: dict | None = None, ceilings: dict | None = None,
           **extra) -> Path:
    """Store `rows` (Row or dict) as `section` of lesson `lesson`'s results (other sections are kept), with the
    views its tables are rendered by, the short names of its routes, and the ceilings its rows are compared with:
    this GPU's (roofline.ceilings()) unless the rows were computed against others (`ceilings`)."""
    rows = [r.to_dict() if isinstance(r, Row) else r for r in rows]
    d = _dir()
    d.mkdir(parents=True, exist_ok=True)
    f = _file(lesson, d)
    data = json.loads(f.read_text()) if f.exists() else {"lesson": f"{int(lesson):02d}", "sections": {}}
    sec = {"env": toolchain.describe(), "date": time.strftime("%Y-%m-%d %H:%M:%S UTC", time.gmtime()),
           "ceilings": roofline.compact(ceilings or roofline.ceilings()), "rows": rows}
    if views:
        short = {r["route"]: ROUTES[r["route"]][1] for r in rows if r.get("route") in ROUTES}
        sec.update(views=views, short=short)
    data["sections"][section] = sec | extra
    f.write_text(json.dumps(data, indent=1))
    return f


def load(lesson: int | str, section: str | None = None, *, prefer_local: bool = True, gpu: str | None = None):
    """Results of a lesson. prefer_local: your own run on this GPU if there is one, else this GPU's recording, else
    the reference GPU's (a recording run, COURSE_RECORD=1, shows what it records, never an older local result);
    prefer_local=False: the reference GPU's recording, the same on every machine; gpu: that GPU's recording."""
    for d in _search(prefer_local, gpu):
        f = _file(lesson, d)
        if f.exists():
            data = json.loads(f.read_text())
            if section is None:
                return data
            if section in data["sections"]:
                return data["sections"][section]
    raise FileNotFoundError(f"no results for lesson {int(lesson):02d}" + (f", section {section!r}" if section else "")
                            + f" in {', '.join(_shown(d) for d in _search(prefer_local, gpu))}")


def local_runs(lesson: int | str) -> list[dict]:
    """Your own runs of a lesson, one per GPU you ran it on (build/results/<gpu>/NN.json), in folder-name order."""
    return [json.loads(f.read_text()) for f in sorted(LOCAL.glob(f"*/{int(lesson):02d}.json"))]


def env_line(sec: dict) -> str:
    e = sec["env"]
    return (f"{e.get('gpu')}, driver {e.get('driver')}, torch {e.get('torch')} (CUDA {e.get('torch_cuda')}), "
            f"nvcc {e.get('nvcc')}, {sec['date'][:10]}")


def show(lesson: int | str, section: str, *, prefer_local: bool = True) -> str:
    """The stored table of a section with the line saying where and with what it was measured."""

    sec = load(lesson, section, prefer_local=prefer_local)
    return f"Measured on {env_line(sec)}:\n{bench.table(sec['rows'])}"


def this_run(rows: list, views: dict) -> dict:
    """A section made of rows measured in this process (not stored), for view_markdown(sec=...) and chart(sec=...)."""
    rows = [r.to_dict() if isinstance(r, Row) else r for r in rows]
    return {"env": toolchain.describe(), "date": "this run", "ceilings": roofline.compact(roofline.ceilings()),
            "rows": rows, "views": views,
            "short": {r["route"]: ROUTES[r["route"]][1] for r in rows if r.get("route") in ROUTES}}


def display(lesson: int, section: str, views=("main",), *, sec: dict | None = None, chart_view: str | None = "main",
            prefer_local: bool = True):
    """In a notebook: a section's views as Markdown tables (your run if you made one, else the recorded one), then
    the generic chart of `chart_view`, saved to build/plots/NN_<section>.png."""
    from IPython.display import Markdown
    from IPython.display import display as show_
    sec = sec or load(lesson, section, prefer_local=prefer_local)
    for view in views:
        show_(Markdown(view_markdown(lesson, section, view, sec=sec)))
    if chart_view:
        fig = chart(lesson, section, chart_view, sec=sec)
        save_figure(fig, lesson, section)
        show_(fig)
        import matplotlib.pyplot as plt
        plt.close(fig)


def save_figure(fig, lesson: int | str, name: str) -> Path:
    """Write a figure to build/plots/<lesson>_<name>.png (for slides and the course report)."""
    d = build.ROOT / "build" / "plots"
    d.mkdir(parents=True, exist_ok=True)
    p = d / f"{int(lesson):02d}_{name}.png"
    fig.savefig(p, dpi=130, bbox_inches="tight")
    return p


# ----------------------------------------------------------------------------------------------
# The generic table and chart

def _bandwidth(sec: dict) -> tuple[float, str]:
    c = roofline.of_section(sec)
    if sec.get("bandwidth") == "copy":  # kernels that write as many bytes as they read (a dequantize to FP16)
        return c["copy_GBps"], "copy"
    return roofline.bandwidth(c)


def floor_GBps(sec: dict) -> float:
    """The bandwidth of the GPU a section was measured on that its percentages divide by, as the section stores it:
    the read bandwidth (roofline.bandwidth; the copy bandwidth in a section measured before the read's was, or in
    one recorded with bandwidth="copy": kernels that write what they read)."""
    return _bandwidth(sec)[0]


def bw_kind(sec: dict) -> str:
    """"read" or "copy": which bandwidth a section's percentages divide by."""
    return _bandwidth(sec)[1]


def _pct(row: Row, sec: dict) -> float:
    """A row's GB/s as % of the read bandwidth of the GPU its section was measured on."""
    return 100 * row.gbs / floor_GBps(sec)


def ceilings_line(sec: dict) -> str:
    """What a section's percentages divide by, for a table's footnote."""
    c = roofline.of_section(sec)
    bw, kind = _bandwidth(sec)
    how = "a kernel that only reads" if kind == "read" else "a device-to-device copy, bytes read + written"
    return f"% of the {c['gpu']}'s {kind} bandwidth, {bw:,.0f} GB/s ({how}), as measured {c['date'][:10]}"


def _shape_key(s: tuple) -> tuple[str, ...]:
    """The table's first cells for a shape: (K × N, M) for a linear layer's (M, N, K), else the sizes joined."""
    return (f"{s[2]} × {s[1]}", str(s[0])) if len(s) == 3 else (" × ".join(map(str, s)),)


def _cell(r: Row | None, fmt: str, sec: dict, prev: Row | None = None) -> str:
    if r is None:
        return "–"
    if fmt == "us_pct":
        return f"{r.us:,.1f} ({_pct(r, sec):.0f}%)"
    if fmt == "us_steps" and prev is not None:
        return f"{r.us:,.1f} ({prev.us / r.us:.2f}×)"
    return f"{r.us:,.1f}"


def view_markdown(lesson: int, section: str, view: str = "main", *, sec: dict | None = None,
                  prefer_local: bool = False) -> str:
    """One stored view of a section as a Markdown table: a line per shape, µs of each of the view's routes, then
    its derived columns: ["pct", route] (% of the read bandwidth of the GPU the section was measured on), ["tflops", route], ["vs", ours, base]
    (base's time over ours: how many times faster ours is). A view may keep only the shapes where route `only`
    ran, or the M in `ms`; `cell` "us_pct" writes % read bandwidth beside each time, "us_steps" each column's
    speedup over the one before it from the second of `steps` on."""
    sec = sec or load(lesson, section, prefer_local=prefer_local)
    views = sec.get("views") or {}
    if view not in views:
        raise KeyError(f"lesson {int(lesson):02d}, section {section!r} stores no view {view!r} (has {list(views)})")
    v, short = views[view], sec.get("short", {})
    rows = rows_of(sec)
    label = lambda route: short.get(route) or next((r.op for r in rows if r.route == route), route)
    by: dict[tuple, dict[str, Row]] = {}
    for r in rows:
        if v.get("ms") and r.shape[0] not in v["ms"]:
            continue
        by.setdefault(r.shape, {})[r.route] = r
    if v.get("only"):
        by = {s: c for s, c in by.items() if v["only"] in c}
    cols, derived = v["columns"], v.get("derived", [])
    head = ["K × N", "M"] if len(next(iter(by), (0, 0, 0))) == 3 else [v.get("shape_header", "N × K")]
    head += [label(c) for c in cols]
    for d in derived:
        head.append({"pct": lambda: f"{label(d[1])} % {bw_kind(sec)} bw", "tflops": lambda: f"{label(d[1])} TFLOP/s",
                     "vs": lambda: f"{label(d[1])} vs {label(d[2])}"}[d[0]]())
    out = ["| " + " | ".join(head) + " |", "|" + "---|" * (len(head) - len(cols) - len(derived))
           + "---:|" * (len(cols) + len(derived))]
    steps = v.get("steps", [])
    for s, c in by.items():
        cells = list(_shape_key(s))
        for i, route in enumerate(cols):
            prev = c.get(cols[i - 1]) if route in steps[1:] else None
            cells.append(_cell(c.get(route), v.get("cell", "us"), sec, prev))
        for d in derived:
            a, b = c.get(d[1]), c.get(d[2]) if len(d) > 2 else None
            if a is None or (d[0] == "vs" and b is None):
                cells.append("–")
            elif d[0] == "pct":
                cells.append(f"{_pct(a, sec):.1f}%")
            elif d[0] == "tflops":
                cells.append(f"{a.tflops:,.0f}" if a.tflops is not None else "–")
            else:
                cells.append(f"{b.us / a.us:.2f}×")
        out.append("| " + " | ".join(cells) + " |")
    pct = any(d[0] == "pct" for d in derived) or v.get("cell") == "us_pct"
    out.append(f"\n{v.get('note', 'µs, median; weights rotated past L2.')} "
               + (f"{ceilings_line(sec)}. " if pct else "") + f"Measured on {env_line(sec)}.")
    return "\n".join(out)


def chart(lesson: int, section: str, view: str = "main", *, sec: dict | None = None, prefer_local: bool = True,
          ax=None):
    """The generic chart of a view: µs against M (log-log), a panel per K × N, a line per route, the view's first
    `vs` route (ours) drawn solid. Shapes without an M (dequantize kernels) get horizontal bars per shape."""
    import matplotlib.pyplot as plt
    sec = sec or load(lesson, section, prefer_local=prefer_local)
    v = sec["views"][view]
    rows = [r for r in rows_of(sec) if r.route in v["columns"]]
    ours = next((d[1] for d in v.get("derived", []) if d[0] == "vs"), v["columns"][-1])
    if all(len(r.shape) == 3 for r in rows):
        kns = list(dict.fromkeys(r.shape[1:] for r in rows))
        fig, axs = plt.subplots(1, len(kns), figsize=(4.5 * len(kns), 3.8), sharey=True, squeeze=False)
        for a, (N, K) in zip(axs[0], kns):
            for i, route in enumerate(v["columns"]):
                pts = sorted((r.shape[0], r.us) for r in rows if r.route == route and r.shape[1:] == (N, K))
                if pts:
                    a.plot(*zip(*pts), "o-" if route == ours else "x:", color=f"C{i}",
                           label=next(r.op for r in rows if r.route == route))
            ms = sorted({r.shape[0] for r in rows})
            a.set(xscale="log", yscale="log", xticks=ms, xticklabels=ms, xlabel="M (tokens)", title=f"K = {K}, N = {N}")
            a.grid(True, lw=0.3)
        axs[0][0].set_ylabel("µs (lower is better)")
        axs[0][0].legend(fontsize=7)
        return fig
    shapes = list(dict.fromkeys(r.shape for r in rows))
    fig, a = plt.subplots(figsize=(8, 0.3 * len(rows) + 1)) if ax is None else (ax.figure, ax)
    y = 0
    for s in shapes:
        for i, route in enumerate(v["columns"]):
            r = next((r for r in rows if r.shape == s and r.route == route), None)
            if r:
                a.barh(y, r.us, color=f"C{i}", label=r.op if s == shapes[0] else None)
                y += 1
        y += 1
    a.invert_yaxis()
    a.set_yticks([])
    a.set_xlabel("µs (lower is better); groups: " + ", ".join(" × ".join(map(str, s)) for s in shapes))
    a.legend(fontsize=7, loc="lower right")
    return fig


def pure_read(nbytes: float, sec: dict, tolerance: float = 0.015) -> tuple[float, float] | None:
    """The floor of a decode kernel that reads `nbytes`: lesson 12's read probe on the GPU `sec` was measured on, its
    fastest plain read (no PDL, not cuBLAS) of a size within `tolerance` of `nbytes` (the probe's sizes are the
    weights of the course's decode shapes), as (µs per call, µs in a CUDA graph). None where that GPU's recording
    has no probe or no such size."""
    gpu = sec.get("env", {}).get("gpu")
    try:
        rows = load(12, "stream", gpu=gpu)["rows"] if gpu else []
    except (FileNotFoundError, KeyError, LookupError):
        return None
    near = [r for r in rows if abs(r["bytes"] - nbytes) <= tolerance * nbytes
            and not r["variant"].startswith("cuBLAS") and "PDL" not in r["variant"]]
    if not near:
        return None
    graphs = [r["graph_us"] for r in near if r.get("graph_us")]
    return min(r["per_call_us"] for r in near), (min(graphs) if graphs else None)


def graph_markdown(lessons=(6, 7, 8), ms=None, shapes=None, secs: dict | None = None) -> str:
    """The decode kernels of several lessons timed two ways in one run, each with its baselines: every call between
    its own events (the course's tables), and replayed from a CUDA graph as a serving engine runs a decode step
    (bench.graph_fn). Each lesson's section stores a "graph" view: {"section", "kernels": {route: name},
    "vs": {column: route}}. Cells read "per call → graph"."""
    specs = []
    for lesson in lessons:
        sec = secs[lesson] if secs else None
        if sec is None:
            sec = next(load(lesson, s, prefer_local=False) for s in load(lesson, prefer_local=False)["sections"]
                       if "graph" in (load(lesson, s, prefer_local=False).get("views") or {}))
        specs.append((sec, sec["views"]["graph"]))
    cols = list(dict.fromkeys(c for _, g in specs for c in g["vs"]))
    two = lambda a, b, f: f"{f(a)} → {f(b)}"
    kinds = "/".join(dict.fromkeys(bw_kind(sec) for sec, _ in specs))
    out = [f"| kernel | K × N | M | µs | % {kinds} bw | % of a pure read | " + " | ".join(f"vs {c}" for c in cols) + " |",
           "|---|---|---:|---:|---:|---:|" + "---:|" * len(cols)]
    for sec, g in specs:
        rows = {(r.route, r.shape): r for r in rows_of(sec)}
        for (route, s), r in rows.items():
            if route not in g["kernels"] or not r.graph_us or (ms and s[0] not in ms) or (
                    shapes and (s[2], s[1]) not in [tuple(x) for x in shapes]):
                continue
            cells = []
            for c in cols:
                b = rows.get((g["vs"].get(c), s))
                cells.append(two(b.us / r.us, b.graph_us / r.graph_us, lambda v: f"{v:.2f}×") if b and b.graph_us else "–")
            floor = pure_read(r.bytes, sec) if r.bytes else None
            read = (two(100 * floor[0] / r.us, 100 * floor[1] / r.graph_us, lambda v: f"{v:.0f}%")
                    if floor and floor[1] else "–")
            out.append(f"| {g['kernels'][route]} | {s[2]} × {s[1]} | {s[0]} | {two(r.us, r.graph_us, lambda v: f'{v:,.1f}')} | "
                       f"{two(_pct(r, sec), _pct(r, sec) * r.us / r.graph_us, lambda v: f'{v:.1f}%')} | {read} | "
                       + " | ".join(cells) + " |")
    if len(out) == 2:
        return "(no graph timings recorded yet: each lesson's bench_NN.py --record records them)"
    envs = list(dict.fromkeys(env_line(sec) for sec, _ in specs))
    out.append(f"\nµs, median, per call → in a CUDA graph of 20 or more calls (`bench.graph_fn`); weights rotated past L2; "
               f"each baseline timed both ways in the same run; "
               + "; ".join(dict.fromkeys(ceilings_line(sec) for sec, _ in specs))
               + ". % of a pure read: the time of lesson 12's read probe on the same GPU, its fastest plain read of the "
               "same bytes within 1.5% (per call, and in a graph), over the kernel's time; – where the probe has no such size" + f". Measured on {'; '.join(envs)}.")
    return "\n".join(out)


# ----------------------------------------------------------------------------------------------
# Tables the generic one cannot make

def bench_markdown(lesson: int, section: str) -> str:
    """Every row of a bench.compare section (lessons 00-04): shape, kernel, time, TFLOP/s, % of its baseline."""
    sec = load(lesson, section, prefer_local=False)
    rows = rows_of(sec)
    base = next((r.op for r in rows if r.route == rows[0].baseline), rows[0].baseline)
    out = [f"| shape | kernel | µs | TFLOP/s (TOP/s) | % of {base} |", "|---|---|---:|---:|---:|"]
    for r in rows:
        out.append(f"| {r.extra['desc']} | {r.op} | {r.us:,.1f} | {r.tflops:,.1f} | {r.extra['pct_baseline']:.1f}% |")
    out.append(f"\nMeasured on {env_line(sec)}.")
    return "\n".join(out)


def ladder_markdown(lesson_sections: list[tuple[int, str]], shape_desc: str) -> str:
    """The FP32 ladder across lessons at one shape: each kernel's GFLOP/s and % of the baseline of its own run."""
    rows, env, base = [], None, None
    for lesson, section in lesson_sections:
        sec = load(lesson, section, prefer_local=False)
        env = env or env_line(sec)
        rows += [(lesson, r) for r in rows_of(sec) if r.extra.get("desc") == shape_desc]
    seen, out = set(), []
    base = next(r.op for _, r in rows if r.route == r.baseline)
    out.append(f"| lesson | kernel | {shape_desc} GFLOP/s | % of {base} |")
    out.append("|---|---|---:|---:|")
    for lesson, r in rows:
        if r.route in seen:
            continue
        seen.add(r.route)
        out.append(f"| {lesson:02d} | {r.op} | {r.tflops * 1000:,.0f} | {r.extra['pct_baseline']:.1f}% |")
    out.append(f"\nMeasured on {env}.")
    return "\n".join(out)


def mma_peak_markdown(prefer_local: bool = False, sec: dict | None = None, ab: dict | None = None) -> str:
    """Lesson 04: what the tensor-core instructions can do alone (the register-only probe), the GEMMs against that,
    both kernels on either pipeline, and what each part of the mma.sync kernel's K loop costs (the ablations)."""
    sec = sec or load(4, "mma_peak", prefer_local=prefer_local)
    out = ["| instruction, issued from registers alone | best T(FL)OP/s | ops per SM per clock | at ILP, warps per SM |",
           "|---|---:|---:|---|"]
    for kind, b in sec["best"].items():
        out.append(f"| {kind} | {b['tops']:,.1f} | {b['ops_per_clk_per_sm']:,} | {b['ilp']}, {b['warps_per_sm']} |")
    out += ["", "| GEMM, same run | n³ | T(FL)OP/s | % of its instruction's best |", "|---|---:|---:|---:|"]
    for r in sec["gemms"]:
        out.append(f"| {r['op']} | {r['n']} | {r['tops']:,.1f} | {r['pct_of_probe']:.1f}% of {r['probe_kind']} |")
    out.append(f"\ncuBLAS FP16 issues Hopper's `wgmma` (HGMMA: lessons/04_tensor_cores/notes.md), not `mma.sync`: its percentage compares it "
               f"with the `mma.sync` ceiling. Measured on {env_line(sec)}.")
    try:
        ab = ab or load(4, "ablate", prefer_local=prefer_local)
    except FileNotFoundError:
        return "\n".join(out)
    rows = rows_of(ab)
    names = {r.route: r.op for r in rows}
    out += ["", "| both kernels on the two pipelines, then the mma.sync kernel with parts of its K loop switched off "
            "(wrong results, timed only) | n³ | µs | % of baseline |", "|---|---:|---:|---:|"]
    for r in rows:
        out.append(f"| {r.op} | {r.shape[0]} | {r.us:,.1f} | {r.extra['pct_baseline']:.1f}% of {names.get(r.baseline, r.baseline)} |")
    out.append(f"\nMeasured on {env_line(ab)}.")
    return "\n".join(out)


# Datasheet figures, leads beside the measured ceilings (dense tensor-core rates, no sparsity; vendor's datasheets:
# NVIDIA H100 Tensor Core GPU datasheet, SXM5 column; NVIDIA H200 Tensor Core GPU datasheet, SXM column).
DATASHEET = {
    "NVIDIA H100 80GB HBM3": {"memory_TBps": 3.35, "fp32_TFLOPs": 67, "tf32_TFLOPs": 494.5, "fp16_TFLOPs": 989.5,
                              "int8_TOPs": 1979},
    "NVIDIA H200": {"memory_TBps": 4.8, "fp32_TFLOPs": 67, "tf32_TFLOPs": 494.5, "fp16_TFLOPs": 989.5,
                    "int8_TOPs": 1979},
}


def ceilings_markdown(gpus: list[str] | None = None) -> str:
    """Each recorded GPU's measured ceilings side by side (the reference first), the datasheet's figure beside each."""
    cs = [roofline.recorded(g) for g in (gpus or roofline.recorded_gpus())]
    sheet = lambda c, k, fmt: (f" ({fmt.format(DATASHEET[c['gpu']][k])})" if k in DATASHEET.get(c["gpu"], {}) else "")
    lines = [("copy bandwidth (read + write), GB/s", "copy_GBps", "{:,.0f}", "memory_TBps", "datasheet {:g} TB/s"),
             ("read bandwidth (a kernel that only reads), GB/s", "read_GBps", "{:,.0f}", "memory_TBps", "datasheet {:g} TB/s"),
             ("FP32, CUDA cores (cuBLAS, TF32 off), TFLOP/s", "fp32_TFLOPs", "{:g}", "fp32_TFLOPs", "{:g}"),
             ("TF32 tensor cores (cuBLAS), TFLOP/s", "tf32_TFLOPs", "{:g}", "tf32_TFLOPs", "{:g}"),
             ("FP16 tensor cores (cuBLAS), TFLOP/s", "fp16_TFLOPs", "{:g}", "fp16_TFLOPs", "{:g}"),
             ("INT8 tensor cores (torch._int_mm), TOP/s", "int8_TOPs", "{:g}", "int8_TOPs", "{:g}")]
    out = ["| ceiling (datasheet in brackets) | " + " | ".join(c["gpu"] + (" (reference)" if c["gpu"] ==
                                                                      roofline.REFERENCE_GPU else "") for c in cs) + " |",
           "|---|" + "---:|" * len(cs)]
    for label, key, fmt, skey, sfmt in lines:
        out.append(f"| {label} | " + " | ".join(fmt.format(c[key]) + sheet(c, skey, sfmt) if key in c else "not measured"
                                                 for c in cs) + " |")
    out.append("| ridge point, FP16 (FLOP per byte) | " + " | ".join(f"{c['fp16_TFLOPs'] * 1e3 / c['copy_GBps']:,.0f}"
                                                                 for c in cs) + " |")
    out.append("| SMs; SM clock under load, MHz | " + " | ".join(
        f"{c.get('sms', c['env'].get('sms'))}; " + (f"{c['clock_MHz']:,.0f}" if c.get("clock_MHz") else "not recorded")
        for c in cs) + " |")
    out.append("\n" + "; ".join(f"{c['gpu']}: measured {c['date'][:10]}, driver {c['env'].get('driver')}, torch "
                                 f"{c['env'].get('torch')}, nvcc {c['env'].get('nvcc')}" for c in cs)
               + ". Datasheet: NVIDIA's H100 (SXM5) and H200 (SXM) datasheets, dense rates.")
    return "\n".join(out)


def stream_fit(rows: list[dict], key: str) -> tuple[float, float]:
    """Lesson 12's read probe: t = a + bytes / B through the two largest sizes' fastest plain reads (no PDL, not
    cuBLAS) by `key` ("per_call_us", "chain_us" or "graph_us"). Returns (a in µs, B in TB/s): what of each call is
    not bytes, and the bandwidth the bytes move at."""
    best = {}
    for r in rows:
        if r["variant"].startswith("cuBLAS") or "PDL" in r["variant"] or not r.get(key):
            continue
        best[r["bytes"]] = min(best.get(r["bytes"], float("inf")), r[key])
    if len(best) < 2:
        raise ValueError(f"stream_fit: plain reads of two sizes needed, found {len(best)}")
    (n1, t1), (n2, t2) = sorted(best.items())[-2:]
    if t2 <= t1:
        raise ValueError(f"stream_fit: the larger read ({n2} B, {t2} µs) is not slower than the smaller ({n1} B, {t1} µs)")
    B = (n2 - n1) / (t2 - t1) / 1e6  # bytes per µs → TB/s
    return t2 - n2 / (B * 1e6), B


def stream_markdown(sec: dict | None = None) -> str:
    """Lesson 12's read probe: the fastest way found to read each weight size, per call, in a chain of calls and in
    a CUDA graph."""
    sec = sec or load(12, "stream", prefer_local=False)
    bw = floor_GBps(sec)
    pct = lambda nbytes, us: f"{us:,.1f} ({100 * nbytes / bw / 1e3 / us:.0f}%)"
    out = [f"| weights read | floor at {bw_kind(sec)} bw | cuBLAS FP16, M = 1 | best `ld.global` | best bulk copy (TMA) "
           "| cuBLAS, chain | best plain, chain | best with PDL, chain | cuBLAS, graph | best plain, graph "
           "| best with PDL, graph |", "|---|---:|" + "---:|" * 9]
    for size in dict.fromkeys(r["size"] for r in sec["rows"]):
        rows = [r for r in sec["rows"] if r["size"] == size]
        n = rows[0]["bytes"]
        best = lambda f, key: min((r for r in rows if f(r["variant"])), key=lambda r: r[key])
        cub = best(lambda v: v.startswith("cuBLAS"), "per_call_us")
        ldg = best(lambda v: v.startswith("ldg") and "PDL" not in v, "per_call_us")
        blk = best(lambda v: v.startswith("bulk") and "PDL" not in v, "per_call_us")
        plain = best(lambda v: not v.startswith("cuBLAS") and "PDL" not in v, "chain_us")
        pdl = best(lambda v: "PDL" in v, "chain_us")
        g = lambda f: min((r["graph_us"] for r in rows if f(r["variant"]) and r.get("graph_us")), default=None)
        cell = lambda us: pct(n, us) if us else "–"  # "–": no variant of the kind could be captured
        out.append(f"| {size} ({n / 1e6:.1f} MB) | {n / bw / 1e3:.1f} | {pct(n, cub['per_call_us'])} | "
                   f"{pct(n, ldg['per_call_us'])} | {pct(n, blk['per_call_us'])} | {pct(n, cub['chain_us'])} | "
                   f"{pct(n, plain['chain_us'])} | {pct(n, pdl['chain_us'])} | {cell(g(lambda v: v.startswith('cuBLAS')))} | "
                   f"{cell(g(lambda v: not v.startswith('cuBLAS') and 'PDL' not in v))} | {cell(g(lambda v: 'PDL' in v))} |")
    out.append(f"\nµs (in brackets: {ceilings_line(sec)}). Kernels that only read (lesson 12's "
               "read probe), the best of each kind over grid sizes, loads in flight and ring depths. Per call: CUDA events "
               "around each call, as every table of the course; chain: 20 back-to-back calls between two events, per call; "
               "graph: 20 or more calls replayed from one CUDA graph, per call; PDL: programmatic dependent launch. "
               f"Measured on {env_line(sec)}.")
    fits = [stream_fit(sec["rows"], k) for k in ("per_call_us", "chain_us", "graph_us")]
    out.append(f"\nA line t = a + bytes / B through the two largest sizes' best plain reads: a = {fits[0][0]:.1f} µs per "
               f"call, {fits[1][0]:.1f} chained, {fits[2][0]:.1f} in a graph (what of each call is not bytes), B = "
               + " / ".join(f"{b:.2f}" for _, b in fits) + " TB/s.")
    return "\n".join(out)


def decode_markdown(prefer_local: bool = False, sec: dict | None = None) -> str:
    """Lesson 11: tokens per second of the Llama-shaped decode step per weight format and batch, against FP16."""
    sec = sec or load(11, "decode", prefer_local=prefer_local)
    rows = sec["rows"]
    pdl = any(r.get("us_graph_nopdl") for r in rows)
    out = ["| format | batch | tok/s (CUDA graph) | µs / step | vs FP16 | % of floor | "
           + ("µs / step without PDL (vs FP16) | " if pdl else "") + "GEMMs alone, µs | "
           "the rest, µs | eager (Python launches), tok/s | weights, GB |",
           "|---|---:|---:|---:|---:|---:|" + ("---:|" if pdl else "") + "---:|---:|---:|---:|"]
    copy = floor_GBps(sec)
    for r in rows:
        nopdl = (f"{r['us_graph_nopdl']:,.0f} ({r['speedup_vs_fp16_nopdl']:.2f}×) | " if r.get("us_graph_nopdl")
                 else "– | ") if pdl else ""
        floor = 100 * r["step_bytes"] / (copy * 1e3) / r["us_graph"]
        out.append(f"| {r['label']} | {r['batch']} | {r['tok_s']:,.1f} | {r['us_graph']:,.0f} | "
                   f"{r['speedup_vs_fp16']:.2f}× | {floor:.0f}% | {nopdl}{r['us_gemm']:,.0f} | "
                   f"{r['us_graph'] - r['us_gemm']:,.0f} | {r['tok_s_eager']:,.1f} | {r['weight_gb']:.2f} |")
    c = sec.get("config", {})
    out.append(f"\n{c.get('n_layers', '?')} layers of Llama-3-8B's shape (hidden {c.get('hidden')}, MLP "
               f"{c.get('intermediate')}, {c.get('n_heads')}/{c.get('n_kv_heads')} heads, vocabulary {c.get('vocab')}), "
               f"random weights, {rows[0]['ctx']} cached positions per sequence, greedy decoding. Floor: the step's "
               f"bytes (weights in the format, KV cache) at the {bw_kind(sec)} bandwidth of the GPU measured on "
               f"({copy:,.0f} GB/s). "
               + ("The course's kernels launch with programmatic dependent launch (lesson 11, section 6); cuBLAS's "
                  "do not. " if pdl else "") + f"Measured on {env_line(sec)}.")
    return "\n".join(out)


def decode_accuracy_markdown(prefer_local: bool = False, sec: dict | None = None) -> str:
    """Lesson 11: each quantized model's logits against the FP16 model's and against its own weights in FP16."""
    sec = sec or load(11, "accuracy", prefer_local=prefer_local)
    out = ["| format | ‖Δ logits‖ / ‖logits‖ vs FP16 (worst step) | min cosine | same top-1 token | "
           "vs its own weights in FP16 (worst step) |", "|---|---:|---:|---:|---:|"]
    for r in sec["rows"]:
        out.append(f"| {r['label']} | {r['vs_fp16_rel_err']:.4f} ({r['vs_fp16_worst_rel_err']:.4f}) | "
                   f"{r['vs_fp16_min_cos']:.4f} | {100 * r['vs_fp16_top1']:.1f}% | {r['vs_twin_rel_err']:.1e} "
                   f"({r['vs_twin_worst_rel_err']:.1e}) |")
    t = sec["rows"][0]["tokens"]
    out.append(f"\n{t[0]} sequences × {t[1]} teacher-forced tokens. Measured on {env_line(sec)}.")
    return "\n".join(out)


def real_model_markdown(rows: list[dict], sec: dict | None = None) -> str:
    """Lesson 11's real model (harness.real_model.run): per format its weight bytes, perplexity against the first
    row's (FP16), speed at batch 1, and answer. sec: the recorded section the rows come from (its GPU and versions)."""
    gpu = rows[0]["device"] == "cuda"
    head = ("| format | weights, MB | perplexity | vs FP16 | tokens like FP16's | "
            + ("tok/s (graph) | tok/s (eager) | " if gpu else "tok/s | ") + "answer |")
    out = [head, "|---|---:|---:|---:|---:|" + ("---:|---:|" if gpu else "---:|") + "---|"]
    for r in rows:
        n = len(r["answer_ids"])
        speed = f"{r['tok_s']:.0f} | {r['tok_s_eager']:.0f}" if gpu else f"{r['tok_s']:.1f}"
        ans = r["answer"].replace("\n", " ").replace("|", "\\|")
        out.append(f"| {r['label']} | {r['weight_mb']:.0f} | {r['ppl']:.2f} | {100 * (r['ppl_vs_fp16'] - 1):+.1f}% | "
                   f"{r['same_tokens']} of {n} | {speed} | {ans} |")
    r = rows[0]
    out.append(f"\nPerplexity on the first {r['ppl_tokens']} tokens of the text; answers greedy, "
               f"{r['prompt_tokens']} prompt tokens. Weights: what the format stores for the model at its own shape, "
               "the FP16 embedding table included. Tokens like FP16's: how many of the answer's first tokens "
               "(<|im_end|> counted) are FP16's. " + (f"Measured on {env_line(sec)}." if sec else "")
               + ("" if gpu else f"On the CPU, {r['threads']} threads."))
    return "\n".join(out)


# ----------------------------------------------------------------------------------------------
# The lessons' headline results: one line per lesson

def _headline(lesson: int, gpu: str | None = None) -> str:
    """One lesson's headline result, from its recorded rows: a stored "headline" view ({"section", "ours", "base",
    "shape"}: ours against base at one shape) where its benchmark module stores one, else the lesson's own kind of
    result (the best kernel of a bench.compare section against its baseline, bytes per weight, tokens per second)."""
    data = load(lesson, gpu=gpu or roofline.REFERENCE_GPU)
    for name, sec in data["sections"].items():
        h = (sec.get("views") or {}).get("headline")
        if h:
            rows = {(r.route, r.shape): r for r in rows_of(sec)}
            s = tuple(h["shape"])
            o, b = rows[(h["ours"], s)], rows[(h["base"], s)]
            return (f"{o.op}: {o.us:,.1f} µs at M = {s[0]}, K × N = {s[2]} × {s[1]}, {b.us / o.us:.2f}× "
                    f"{b.op} ({_pct(o, sec):.0f}% of {bw_kind(sec)} bandwidth)")
    if lesson == 5:
        mem = {r["format"]: r for r in data["sections"]["memory"]["rows"]}
        f16, i4 = mem["FP16"], mem["INT4 sym group 128"]
        return (f"INT4 group 128: {i4['bits_per_weight']:.3f} bits per weight, {i4['MB']:.1f} MB against FP16's "
                f"{f16['MB']:.1f} for 8192 × 8192, a decode floor of {i4['floor_us']:.1f} µs against {f16['floor_us']:.1f}")
    if lesson == 11:
        rows = data["sections"]["decode"]["rows"]
        best = max((r for r in rows if r["batch"] == 1), key=lambda r: r["speedup_vs_fp16"])
        return (f"{best['label']}: {best['tok_s']:,.0f} tok/s at batch 1, {best['speedup_vs_fp16']:.2f}× FP16 "
                f"(a Llama-3-8B-shaped decode step in a CUDA graph)")
    name = next(n for n in ("bench", "steps", *data["sections"]) if n in data["sections"] and
                (n in ("bench", "steps") or n.startswith("bench")))
    rows = rows_of(data["sections"][name])
    big = max({r.shape for r in rows}, key=lambda s: (len(s), s))
    at = [r for r in rows if r.shape == big and r.route != r.baseline]
    best = max(at, key=lambda r: r.extra["pct_baseline"])
    base = next(r.op for r in rows if r.route == best.baseline)
    return f"{best.op}: {best.extra['pct_baseline']:.1f}% of {base} at {best.extra['desc']}"


def headline_markdown(lessons=range(13), gpus: list[str] | None = None) -> str:
    """The lessons table's headline column: one line per lesson with its headline result on each recorded GPU (the
    reference first), each percentage against the ceilings of the GPU it was measured on."""
    gpus = gpus or roofline.recorded_gpus()
    short = lambda g: re.sub(r"^NVIDIA\s+", "", g)
    out = ["| lesson | " + " | ".join(f"{short(g)}" + (" (reference)" if g == roofline.REFERENCE_GPU else "")
                                     for g in gpus) + " |", "|---|" + "---|" * len(gpus)]
    for lesson in lessons:
        cells = []
        for g in gpus:
            try:
                cells.append(_headline(lesson, g))
            except (FileNotFoundError, KeyError, StopIteration, ValueError) as e:
                cells.append(f"(not recorded: {e})")
        out.append(f"| {lesson:02d} | " + " | ".join(cells) + " |")
    return "\n".join(out)


# ----------------------------------------------------------------------------------------------
# The generated Markdown

TABLES = {
    "ceilings": ceilings_markdown,
    "ladder": lambda: ladder_markdown([(1, "bench"), (2, "bench"), (3, "bench")], "M=4096 N=4096 K=4096"),
    "04_steps": lambda: bench_markdown(4, "steps"),
    "04_mma_peak": mma_peak_markdown,
    "06_w8a16": lambda: view_markdown(6, "table"),
    "06_w8a16_tiles": lambda: view_markdown(6, "table", "tiles"),
    "06_w8a8": lambda: view_markdown(6, "table", "w8a8"),
    "07_w4a16": lambda: view_markdown(7, "table"),
    "07_w4a16_tiles": lambda: view_markdown(7, "table", "tiles"),
    "08_nf4": lambda: view_markdown(8, "dequant") + "\n\n" + view_markdown(8, "gemv"),
    "decode_graph": lambda: graph_markdown(ms=(1, 16), shapes=((8192, 8192), (4096, 14336), (14336, 4096))),
    "09_w4a8": lambda: view_markdown(9, "table"),
    "09_graph": lambda: graph_markdown((9,)),
    "10_ladder": lambda: view_markdown(10, "ladder"),
    "10_w4a16": lambda: view_markdown(10, "table"),
    "10_graph": lambda: graph_markdown((10,), ms=(1, 16, 32)),
    "11_decode": decode_markdown,
    "11_accuracy": decode_accuracy_markdown,
    "12_stream": stream_markdown,
    "12_wgmma": lambda: view_markdown(12, "table"),
    "12_graph": lambda: graph_markdown((12,), ms=(1, 16, 32)),
    "lessons": headline_markdown,
}


def update_markdown(path: Path = DOCS, check: bool = False) -> bool:
    """Rewrite each `<!-- table:NAME -->…<!-- /table:NAME -->` block of `path` from the recorded results. With
    check=True, only report whether the file is up to date (True: it is); else whether it changed. A block whose
    NAME has no table is an error, not a silently stale block."""
    text = path.read_text()
    unknown = set(re.findall(r"<!-- table:([^ ]+) -->", text)) - set(TABLES)
    if unknown:
        raise KeyError(f"{path.name}: no generated table named {sorted(unknown)} (harness.results.TABLES)")
    new = text
    for name, fn in TABLES.items():
        pat = re.compile(rf"(<!-- table:{name} -->).*?(<!-- /table:{name} -->)", re.S)
        if pat.search(new):
            try:
                body = fn()
            except (FileNotFoundError, KeyError, StopIteration) as e:
                body = f"(not recorded yet: {e})"
            new = pat.sub(lambda m: m.group(1) + "\n" + body + "\n" + m.group(2), new)
    if check:
        return new == text
    path.write_text(new)
    return new != text


GENERATED = (DOCS, build.ROOT / "README.md")  # the files with generated blocks


def main(argv=None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if argv[:1] != ["docs"]:
        print("usage: python -m harness.results docs [--check]   (regenerates the tables of docs/results.md and README.md)")
        return 2
    check = "--check" in argv
    ok = True
    for p in GENERATED:
        if not p.exists():
            continue
        r = update_markdown(p, check=check)
        ok &= r if check else True
        rel = p.relative_to(build.ROOT)
        print(f"{rel}: " + (("up to date" if r else "out of date") if check else ("updated" if r else "already up to date")))
    return 0 if ok else 1


def record_sass(lesson: int | str, modules: list[tuple[object, str]]) -> Path:
    """Count the SASS of (module, arch) pairs with cuobjdump and store them as section `sass` of lesson `lesson`'s
    results (COURSE_RECORD=1: results/, else build/results/), where nsight.sass_counts finds them without cuobjdump."""
    if nsight.cuobjdump_path() is None:
        raise nsight.NsightUnavailable("cuobjdump and nvdisasm are needed to record SASS counts")
    rows = [{"file": nsight._source_key(m), "arch": arch, "kernel": kern, "ops": ops}
            for m, arch in modules for kern, ops in nsight.sass_counts(m, arch).items()]
    return record(lesson, "sass", rows)


if __name__ == "__main__":
    sys.exit(main())

