"""Classroom demo of one lesson, and a one-page report of the whole course.

    python -m harness.report demo LESSON   run the lesson's solutions: checks, benchmark table, and plots for
                                           a projector (roofline, speedup chart, error heatmap of a buggy
                                           variant) in build/demo/
    python -m harness.report course        build/report/REPORT.md: every lesson's results, with figures,
                                           from your runs where you made them, else the recorded H100 runs
"""
from __future__ import annotations

import sys
from pathlib import Path

from . import build, catalog, results, roofline, toolchain
from .problems import ScaleAdd

DEMO_SHAPES = {0: [(1 << 24,), (1 << 26,)], 1: [(1024, 1024, 1024), (2048, 2048, 2048)],
               2: [(1024, 1024, 1024), (2048, 2048, 2048), (4096, 4096, 4096)],
               3: [(1024, 1024, 1024), (2048, 2048, 2048), (4096, 4096, 4096)]}


def speedup_chart(rows: list[dict], title: str, ax=None):
    """Horizontal bars: each kernel's % of the baseline at one shape."""
    import matplotlib.pyplot as plt
    if ax is None:
        _, ax = plt.subplots(figsize=(7, 0.45 * len(rows) + 1))
    labels = [r["op"] for r in rows]
    vals = [r["pct_baseline"] or 0 for r in rows]
    ax.barh(labels, vals, color=["0.6" if r["op"] == r["baseline"] else "C0" for r in rows])
    for i, v in enumerate(vals):
        ax.text(v + 1, i, f"{v:.1f}%", va="center", fontsize=8)
    ax.invert_yaxis()
    ax.set_xlabel(f"% of {rows[0]['baseline']} (same run)")
    ax.set_title(title, fontsize=9)
    ax.set_xlim(0, max(110, max(vals) * 1.15))
    return ax


def _lesson_figures(lesson: int, rows: list[dict], out: Path) -> list[Path]:
    import matplotlib.pyplot as plt
    prob = ScaleAdd() if lesson == 0 else catalog.FP32
    big = max((tuple(r["shape"]) for r in rows), key=lambda s: prob.flops(s))
    at = [r for r in rows if tuple(r["shape"]) == big]
    files = []
    ax = roofline.plot(roofline.points_from_rows(at, prob), kinds=("fp32",),
                       title=f"Lesson {lesson:02d} on the roofline ({prob.describe(big)})")
    files.append(out / f"{lesson:02d}_roofline.png")
    ax.figure.savefig(files[-1], dpi=110, bbox_inches="tight")
    plt.close(ax.figure)
    ax = speedup_chart(at, f"Lesson {lesson:02d}, {prob.describe(big)}")
    files.append(out / f"{lesson:02d}_speedup.png")
    ax.figure.savefig(files[-1], dpi=110, bbox_inches="tight")
    plt.close(ax.figure)
    return files


def demo(lesson: int) -> int:
    """Checks, benchmark table and projector plots for one lesson's solutions."""
    import matplotlib
    matplotlib.use("Agg")
    import torch
    from . import bench, check

    out = build.ROOT / "build" / "demo"
    out.mkdir(parents=True, exist_ok=True)
    ks = catalog.kernels(lesson)
    if not ks:
        print(f"lesson {lesson} has no kernels in the catalog")
        return 2
    if not toolchain.gpu_available():
        print(f"The demo {toolchain.NO_GPU_REASON}. Recorded results instead:\n")
        print(results.show(lesson, "bench", prefer_local=False))
        files = _lesson_figures(lesson, results.load(lesson, "bench", prefer_local=False)["rows"], out)
        print("\nfigures: " + ", ".join(str(f.relative_to(build.ROOT)) for f in files))
        return 0
    torch.backends.cuda.matmul.allow_tf32 = False
    prob = ks[0].problem
    ops = ({"torch.add(b, x, alpha=a)": lambda x, b: torch.add(b, x, alpha=prob.a)} if lesson == 0 else
           {"cuBLAS FP32": lambda x, W: torch.nn.functional.linear(x, W)})
    for k in ks:
        op = catalog.op(k, solution=True)
        res = check.check(k.problem, op)
        print(("PASS  " if res.ok else "FAIL  ") + k.label)
        if res.ok and k.stub_check == "check":
            ops[k.label] = op
    # A buggy variant for the heatmap: the first kernel launched as if the last partial tile of rows
    # (or of elements) did not exist: the classic missing bounds-guard/grid-rounding mistake.
    first = getattr(build.load(lesson, ks[0].file, solution=True), ks[0].launcher)
    if lesson == 0:
        buggy = prob.bind(lambda x, b, o, a, n: first(x, b, o, a, n - n % 256 or n), "rounds n down to 256")
    else:
        buggy = prob.bind(lambda x, W, y, M, N, K: first(x, W, y, M - M % 32 or M, N, K), "rounds M down to 32")
    rep = check.check(prob, buggy, [prob.check_shapes[2]]).reports[0]
    print("\n" + str(rep) + "\n")
    ax = rep.heatmap(tile=None if lesson == 0 else (32, 32))
    ax.figure.savefig(out / f"{lesson:02d}_heatmap_buggy.png", dpi=110, bbox_inches="tight")
    rows = bench.compare(prob, ops, DEMO_SHAPES.get(lesson, DEMO_SHAPES[1]), baseline=next(iter(ops)))
    files = _lesson_figures(lesson, rows, out) + [out / f"{lesson:02d}_heatmap_buggy.png"]
    print("figures: " + ", ".join(str(f.relative_to(build.ROOT)) for f in files))
    return 0


def course_report() -> Path:
    """A Markdown page with every lesson's recorded (or your) results and figures."""
    import matplotlib
    matplotlib.use("Agg")
    out = build.ROOT / "build" / "report"
    out.mkdir(parents=True, exist_ok=True)
    lines = ["# Course report", "", "Every number below was measured by the course's own benchmark code; each "
             "table says on which GPU and with which versions.", "", "## Ceilings", "", results.ceilings_markdown(), ""]
    lessons = sorted({k.lesson for k in catalog.kernels()})
    for lesson in lessons:
        try:
            sec = results.load(lesson, "bench")
        except FileNotFoundError:
            lines += [f"## Lesson {lesson:02d}", "", "(no results yet)", ""]
            continue
        figs = _lesson_figures(lesson, sec["rows"], out)
        from .bench import table
        lines += [f"## Lesson {lesson:02d}", "", f"Measured on {results.env_line(sec)}.", "", "```",
                  table(sec["rows"]), "```", ""] + [f"![{f.stem}]({f.name})" for f in figs] + [""]
    lines += ["## The FP32 ladder at 4096³", "", results.README_TABLES["ladder"](), ""]
    p = out / "REPORT.md"
    p.write_text("\n".join(lines))
    return p


def main(argv=None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if len(argv) == 2 and argv[0] == "demo":
        return demo(int(argv[1]))
    if argv[:1] == ["course"]:
        print(f"wrote {course_report().relative_to(build.ROOT)}")
        return 0
    print(__doc__)
    return 2


if __name__ == "__main__":
    sys.exit(main())
