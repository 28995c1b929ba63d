"""Classroom demo of one lesson, and a one-page report of the whole course.

    python -m harness.report demo LESSON   run the lesson's solutions: checks, benchmark table, and plots for
                                           a projector (roofline, speedup chart, error heatmap of a buggy
                                           variant) in build/demo/
    python -m harness.report course        build/report/REPORT.md: every lesson's results, with figures,
                                           from your runs where you made them, else the reference GPU's recording
"""
from __future__ import annotations

import sys
from pathlib import Path

import torch

from . import bench, build, catalog, check, results, roofline, toolchain
from .problems import Linear, ScaleAdd

def speedup_chart(rows: list[dict], title: str, ax=None):
    """Horizontal bars: each kernel's % of the baseline at one shape."""
    import matplotlib.pyplot as plt
    if ax is None:
        _, ax = plt.subplots(figsize=(7, 0.45 * len(rows) + 1))
    labels = [r["op"] for r in rows]
    vals = [r["pct_baseline"] or 0 for r in rows]
    ax.barh(labels, vals, color=["0.6" if r.get("route", r["op"]) == r["baseline"] else "C0" for r in rows])
    for i, v in enumerate(vals):
        ax.text(v + 1, i, f"{v:.1f}%", va="center", fontsize=8)
    ax.invert_yaxis()
    base = next((r["op"] for r in rows if r.get("route", r["op"]) == rows[0]["baseline"]), rows[0]["baseline"])
    ax.set_xlabel(f"% of {base} (same run)")
    ax.set_title(title, fontsize=9)
    ax.set_xlim(0, max(110, max(vals) * 1.15))
    return ax


def _problem_of(rows: list[dict], lesson: int):
    """The catalog problem a benchmark section's rows were measured on (by the kernels' labels)."""
    labels = {r["op"] for r in rows}
    for k in catalog.kernels(lesson):
        if k.label in labels:
            return k.problem
    return ScaleAdd() if lesson == 0 else catalog.FP32


def _lesson_figures(lesson: int, rows: list[dict], out: Path, name: str = "", c: dict | None = None) -> list[Path]:
    """Roofline and speedup chart at the largest shape of one benchmark section (rows from bench.compare), on the
    roofline of the ceilings c of the GPU the rows were measured on."""
    import matplotlib.pyplot as plt
    prob = _problem_of(rows, lesson)
    big = max((tuple(r["shape"]) for r in rows), key=lambda s: prob.flops(s))
    at = [r for r in rows if tuple(r["shape"]) == big]
    stem = f"{lesson:02d}{'_' + name if name else ''}"
    files = []
    ax = roofline.plot(roofline.points_from_rows(at, prob), kinds=(prob.ceiling,), c=c,
                       title=f"Lesson {lesson:02d} on the roofline ({prob.describe(big)})")
    files.append(out / f"{stem}_roofline.png")
    ax.figure.savefig(files[-1], dpi=110, bbox_inches="tight")
    plt.close(ax.figure)
    ax = speedup_chart(at, f"Lesson {lesson:02d}, {prob.describe(big)}")
    files.append(out / f"{stem}_speedup.png")
    ax.figure.savefig(files[-1], dpi=110, bbox_inches="tight")
    plt.close(ax.figure)
    return files


def _save(fig, path: Path) -> Path:
    import matplotlib.pyplot as plt
    fig.savefig(path, dpi=110, bbox_inches="tight")
    plt.close(fig)
    return path


def _renderer(lesson: int):
    """The `render(section, sec) -> (text, figures)` of a lesson's benchmark module, for sections that are neither
    bench.compare rows nor stored views (lesson 05's tables); None where it has none."""
    try:
        return getattr(bench.lesson_module(lesson), "render", None)
    except FileNotFoundError:
        return None


def _decode_chart(sec: dict):
    """Lesson 11: tokens per second of the decode step in a CUDA graph, a bar per weight format, a group per batch."""
    import matplotlib.pyplot as plt
    rows = sec["rows"]
    labels = list(dict.fromkeys(r["label"] for r in rows))
    batches = list(dict.fromkeys(r["batch"] for r in rows))
    w = 0.8 / len(labels)
    fig, ax = plt.subplots(figsize=(9, 3.8))
    for i, label in enumerate(labels):
        at = [(batches.index(r["batch"]) + i * w, r["tok_s"]) for r in rows if r["label"] == label]
        ax.bar([x for x, _ in at], [y for _, y in at], w, label=label, color=f"C{i % 10}")
    ax.set_xticks([j + 0.4 - w / 2 for j in range(len(batches))], [f"batch {b}" for b in batches])
    ax.set_ylabel("tok/s (CUDA graph, higher is better)")
    ax.grid(axis="y", lw=0.3)
    ax.legend(fontsize=7, ncol=2)
    ax.set_title(f"Lesson 11: the decode step per weight format ({results.env_line(sec)})", fontsize=8)
    return fig


def recorded_sections(lesson: int, *, prefer_local: bool, progress=None, data: dict | None = None,
                      tag: str = "") -> list[tuple[str, str, list[Path]]]:
    """(section, text, figures) for every recorded section of a lesson: bench.compare tables with their roofline and
    speedup charts; a benchmark module's stored views as Markdown tables, each with the generic chart
    (results.chart); sections the lesson's benchmark module renders itself (lesson 05's tables and chart); lessons
    11's and 12's own tables. progress, if given, is called with a line before each section is drawn. data: a
    lesson's results to draw (one of results.local_runs) instead of results.load's; tag: a prefix for the figures'
    file names, so two GPUs' figures do not overwrite each other."""
    out = build.ROOT / "build" / ("report" if prefer_local else "demo")
    out.mkdir(parents=True, exist_ok=True)
    try:
        data = data or results.load(lesson, prefer_local=prefer_local)
    except FileNotFoundError:
        return []
    found = []
    for name, sec in data["sections"].items():
        if progress:
            progress(f"  lesson {lesson:02d}, section {name}")
        rows = sec.get("rows") or []
        if rows and "pct_baseline" in rows[0]:
            found.append((name, f"Measured on {results.env_line(sec)}:\n{bench.table(rows)}",
                          _lesson_figures(lesson, rows, out, tag + ("" if name == "bench" else name),
                                          roofline.of_section(sec))))
        elif sec.get("views"):  # a lesson benchmark module's section: its stored views, a generic table and chart each
            views = [v for v in sec["views"] if v not in ("graph", "headline")]
            text = "\n\n".join(results.view_markdown(lesson, name, v, sec=sec) for v in views)
            figs = []
            for v in views:
                if progress and len(views) > 1:
                    progress(f"    view {v}")
                figs.append(_save(results.chart(lesson, name, v, sec=sec), out / f"{lesson:02d}_{tag}{name}_{v}.png"))
            found.append((name, text, figs))
        elif lesson == 4 and name == "mma_peak":
            ab = data["sections"].get("ablate")
            found.append((name, results.mma_peak_markdown(prefer_local, sec=sec, ab=ab), []))
        elif lesson == 11 and name == "decode":
            found.append((name, results.decode_markdown(prefer_local, sec=sec),
                          [_save(_decode_chart(sec), out / f"11_{tag}decode.png")]))
        elif lesson == 11 and name == "accuracy":
            found.append((name, results.decode_accuracy_markdown(prefer_local, sec=sec), []))
        elif lesson == 12 and name == "stream":
            found.append((name, results.stream_markdown(sec), []))
        elif (render := _renderer(lesson)) is not None:
            text, figs = render(name, sec)
            found.append((name, text,
                          [_save(f, out / f"{lesson:02d}_{tag}{name}{f'_{i}' if i else ''}.png")
                           for i, f in enumerate(figs)]))
        elif timed := [r for r in rows if {"op", "shape", "us"} <= set(r)]:  # timings without a view: a plain table
            body = "\n".join(f"| {r['op']} | {' × '.join(map(str, r['shape']))} | {r['us']:,.2f} |" for r in timed)
            rest = "".join(f"\n- {', '.join(f'{k} {v}' for k, v in r.items())}" for r in rows if r not in timed)
            found.append((name, f"| route | shape | µs |\n|---|---|---:|\n{body}\n{rest}\n\nMeasured on "
                          f"{results.env_line(sec)}.", []))
    return found


def demo(lesson: int) -> int:
    """Checks, benchmark table and projector plots for one lesson's solutions."""
    import matplotlib
    matplotlib.use("Agg")

    out = build.ROOT / "build" / "demo"
    out.mkdir(parents=True, exist_ok=True)
    ks = catalog.kernels(lesson)
    if not ks:
        print(f"lesson {lesson} has no CUDA kernels to demo (lesson 05's exercises are Python: run its notebook)")
        return 2
    why = None if toolchain.gpu_available() else f"The demo {toolchain.NO_GPU_REASON}"
    if why is None:
        cap = torch.cuda.get_device_capability()
        for m in {build.load(k.lesson, k.file, solution=True) for k in ks}:
            if m.exact and cap != (int(m.min_capability), 0):
                why = (f"{m.path.name} runs on compute capability {m.min_capability} only (sm_90a); this GPU "
                       f"({torch.cuda.get_device_name()}) is sm_{cap[0]}{cap[1]}")
    if why is not None:
        print(f"{why}. Recorded results instead:\n")
        secs = recorded_sections(lesson, prefer_local=False)
        if not secs:
            print(f"(lesson {lesson:02d} has no recorded results yet)")
        files = []
        for name, text, figs in secs:
            print(f"[{name}]\n{text}\n")
            files += figs
        if files:
            print("figures: " + ", ".join(str(f.relative_to(build.ROOT)) for f in files))
        return 0
    torch.backends.cuda.matmul.allow_tf32 = False
    files = []
    groups = {}  # kernels grouped by the problem they solve, each group timed against its library baseline
    for k in ks:
        groups.setdefault(id(k.problem), []).append(k)
    for group in groups.values():
        prob = group[0].problem
        label, base = prob.baseline()
        ops = {label: base}
        for k in group:
            op = catalog.op(k, solution=True)
            res = check.check(k.problem, op)
            print(("PASS  " if res.ok else "FAIL  ") + k.label)
            if res.ok and k.stub_check == "check":
                ops[k.label] = op
        rows = bench.compare(prob, ops, catalog.demo_shapes(lesson, prob), baseline=label)
        files += _lesson_figures(lesson, rows, out, getattr(prob, "name", ""))
    # A buggy variant for the heatmap: the first kernel launched as if the last partial tile of rows
    # (or of elements) did not exist: the classic missing bounds-guard/grid-rounding mistake.
    prob = ks[0].problem
    first = getattr(build.load(lesson, ks[0].file, solution=True), ks[0].launcher)
    buggy = None
    if lesson == 0:
        buggy = prob.bind(lambda x, b, o, a, n: first(x, b, o, a, n - n % 256 or n), "rounds n down to 256")
    elif type(prob) is Linear:
        buggy = prob.bind(lambda x, W, y, M, N, K: first(x, W, y, M - M % 32 or M, N, K), "rounds M down to 32")
    if buggy is not None:
        rep = check.check(prob, buggy, [prob.check_shapes[2]]).reports[0]
        print("\n" + str(rep) + "\n")
        ax = rep.heatmap(tile=None if lesson == 0 else (32, 32))
        files.append(out / f"{lesson:02d}_heatmap_buggy.png")
        ax.figure.savefig(files[-1], dpi=110, bbox_inches="tight")
    print("figures: " + ", ".join(str(f.relative_to(build.ROOT)) for f in files))
    return 0


def course_report(progress=None) -> Path:
    """A Markdown page with every lesson's recorded (or your) results and figures: each section's tables and charts,
    then the figures the lesson's notebook saved (build/plots/NN_*.png, results.save_figure) where it has been run.
    progress, if given, is called with a line as each lesson and section is drawn."""
    import time

    import matplotlib
    matplotlib.use("Agg")
    say = progress or (lambda line: None)
    out = build.ROOT / "build" / "report"
    out.mkdir(parents=True, exist_ok=True)
    plots = build.ROOT / "build" / "plots"
    lines = ["# Course report", "", "Every number below was measured by the course's own benchmark code; each "
             "table says on which GPU and with which versions, and each percentage divides by that GPU's ceilings. "
             f"Per lesson: your own runs (build/results/<gpu>/), then the recording of the reference GPU "
             f"({roofline.REFERENCE_GPU}) to compare them with.", "", "## Ceilings", "", results.ceilings_markdown(), ""]
    lessons = sorted(int(p.name[:2]) for p in (build.ROOT / "lessons").glob("[0-9][0-9]_*") if p.is_dir())
    for lesson in lessons:
        t0 = time.perf_counter()
        say(f"lesson {lesson:02d} ...")
        lines += [f"## Lesson {lesson:02d}", ""]
        runs = [(f"your run on the {next(iter(d['sections'].values()))['env'].get('gpu') or 'machine without a GPU'}",
                 d, f"{i}_") for i, d in enumerate(results.local_runs(lesson))]
        try:
            runs.append((f"the reference recording ({roofline.REFERENCE_GPU})", results.load(lesson, prefer_local=False),
                         ""))
        except FileNotFoundError:
            pass
        if not runs:
            lines += ["(no results yet)", ""]
        secs = []
        for who, data, tag in runs:
            found = recorded_sections(lesson, prefer_local=True, progress=say, data=data, tag=tag)
            secs += found
            for name, text, figs in found:
                body = text if text.startswith("|") or "\n|" in text[:400] else "```\n" + text + "\n```"
                lines += [f"### {name}: {who}", "", body, ""] + [f"![{f.stem}]({f.name})" for f in figs] + [""]
        saved = sorted(plots.glob(f"{lesson:02d}_*.png"))
        if saved:
            lines += ["### Figures from the notebook", "", "As the notebook last drew them (run it to redraw them).",
                      ""] + [f"![{f.stem}](../plots/{f.name})" for f in saved] + [""]
        n = sum(len(figs) for _, _, figs in secs) + len(saved)
        say(f"lesson {lesson:02d}: {len(secs)} sections, {n} figures ({time.perf_counter() - t0:.1f} s)")
    lines += ["## The FP32 ladder at 4096³", "", results.TABLES["ladder"](), ""]
    p = out / "REPORT.md"
    p.write_text("\n".join(lines))
    return p


def main(argv=None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if len(argv) == 2 and argv[0] == "demo":
        return demo(int(argv[1]))
    if argv[:1] == ["course"]:
        print("drawing every lesson's tables and charts into build/report/ ...", flush=True)
        p = course_report(progress=lambda line: print(line, flush=True))
        print(f"wrote {p.relative_to(build.ROOT)}")
        return 0
    print(__doc__)
    return 2


if __name__ == "__main__":
    sys.exit(main())
