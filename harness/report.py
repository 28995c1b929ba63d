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

import torch

from . import bench, build, catalog, check, decode, quant, results, roofline, toolchain
from .problems import (AddRMSNorm, DecodeAttention, DequantNF4, DequantW8, Linear, NF4Linear, NF4TilesLinear, ScaleAdd,
                       SiluMul, W4A8Linear, W4A16FragLinear, W4A16Linear, W4A16TilesLinear, W8A8Linear, W8A16Linear,
                       W8A16TilesLinear, torch_int_mm, torch_linear, torch_w8a8)

DEMO_SHAPES = {0: [(1 << 24,), (1 << 26,)], 1: [(1024, 1024, 1024), (2048, 2048, 2048)],
               2: [(1024, 1024, 1024), (2048, 2048, 2048), (4096, 4096, 4096)],
               3: [(1024, 1024, 1024), (2048, 2048, 2048), (4096, 4096, 4096)],
               4: [(2048, 2048, 2048), (4096, 4096, 4096)]}
DECODE_SHAPES = [(1, 8192, 8192), (16, 8192, 8192), (64, 8192, 8192)]  # lessons 06-08: M tokens, K × N weights
DEQUANT_SHAPES = [(8192, 8192)]


def baseline_for(problem):
    """(label, op) of the library route a lesson's kernels are compared with in the demo."""
    if isinstance(problem, (AddRMSNorm, DecodeAttention, SiluMul)):
        ops = decode.torch_ops()
        return "PyTorch ops", {AddRMSNorm: ops.add_rmsnorm, DecodeAttention: ops.attention, SiluMul: ops.silu_mul}[
            type(problem)]
    if isinstance(problem, ScaleAdd):
        return "torch.add(b, x, alpha=a)", lambda x, b: torch.add(b, x, alpha=problem.a)
    if isinstance(problem, W8A8Linear):
        return "PyTorch: quantize + _int_mm + scale", torch_w8a8
    if isinstance(problem, W4A8Linear):
        def deq_w4a8(x, *w):  # the weights dequantized to FP16 (their INT8 codes × scale), then cuBLAS
            return torch.nn.functional.linear(x, problem.weight((x, *w)).dequantize().half())
        return "PyTorch: dequantize + cuBLAS", deq_w4a8
    if isinstance(problem, (W4A16FragLinear, W4A16TilesLinear, NF4TilesLinear, W8A16TilesLinear)):  # repacked weights
        return "PyTorch: dequantize + cuBLAS", lambda x, w: torch.nn.functional.linear(x, w.dequantize().half())
    if isinstance(problem, W4A16Linear):
        def deq4(x, q, s, *z):
            W = quant.Int4Weight(q, s, problem.group, z[0] if z else None).dequantize().half()
            return torch.nn.functional.linear(x, W)
        return "PyTorch: dequantize + cuBLAS", deq4
    if isinstance(problem, W8A16Linear):
        return "PyTorch: dequantize + cuBLAS", lambda x, q, s: torch.nn.functional.linear(
            x, quant.Int8Weight(q, s, problem.group).dequantize().half())
    if isinstance(problem, DequantW8):
        return "PyTorch: dequantize", lambda q, s: problem.reference((q, s)).half()
    if isinstance(problem, NF4Linear):
        nf4 = DequantNF4(block=problem.block)
        return "PyTorch: dequantize + cuBLAS", lambda x, q, a, cb: torch.nn.functional.linear(
            x, nf4.reference((q, a, cb)).half())
    if isinstance(problem, DequantNF4):
        return "PyTorch: dequantize", lambda q, a, cb: problem.reference((q, a, cb)).half()
    if problem.in_dtype == torch.int8:
        return "torch._int_mm", torch_int_mm
    if problem.in_dtype == torch.float16:
        return "cuBLAS FP16", torch_linear
    return "cuBLAS FP32", lambda x, W: torch.nn.functional.linear(x, W)


def demo_shapes(lesson: int, problem):
    if isinstance(problem, DecodeAttention):
        return [(1, 512, 32, 8), (16, 512, 32, 8)]  # Llama-3-8B's heads, batch 1 and 16, 512 cached positions
    if isinstance(problem, AddRMSNorm):
        return [(1, 4096), (16, 4096)]
    if isinstance(problem, SiluMul):
        return [(1, 14336), (16, 14336)]
    if isinstance(problem, (DequantW8, DequantNF4)):
        return DEQUANT_SHAPES
    if isinstance(problem, NF4Linear):
        return DECODE_SHAPES[:2]
    if lesson == 12:  # the tensor-core regime is the point: up to 128 tokens
        return DECODE_SHAPES + [(128, 8192, 8192)]
    if isinstance(problem, (W8A16Linear, W4A16Linear)):
        return DECODE_SHAPES
    if isinstance(problem, (W8A8Linear, W4A8Linear)):
        return [(64, 8192, 8192), (256, 8192, 8192)]
    return DEMO_SHAPES.get(lesson, DEMO_SHAPES[1])


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


def _lesson_figures(lesson: int, rows: list[dict], out: Path, name: str = "") -> list[Path]:
    """Roofline and speedup chart at the largest shape of one benchmark section (rows from bench.compare)."""
    import matplotlib.pyplot as plt
    prob = _problem_of(rows, lesson)
    big = max((tuple(r["shape"]) for r in rows), key=lambda s: prob.flops(s))
    at = [r for r in rows if tuple(r["shape"]) == big]
    stem = f"{lesson:02d}{'_' + name if name else ''}"
    files = []
    ax = roofline.plot(roofline.points_from_rows(at, prob), kinds=(prob.ceiling,),
                       title=f"Lesson {lesson:02d} on the roofline ({prob.describe(big)})")
    files.append(out / f"{stem}_roofline.png")
    ax.figure.savefig(files[-1], dpi=110, bbox_inches="tight")
    plt.close(ax.figure)
    ax = speedup_chart(at, f"Lesson {lesson:02d}, {prob.describe(big)}")
    files.append(out / f"{stem}_speedup.png")
    ax.figure.savefig(files[-1], dpi=110, bbox_inches="tight")
    plt.close(ax.figure)
    return files


def recorded_sections(lesson: int, *, prefer_local: bool) -> list[tuple[str, str, list[Path]]]:
    """(section, text, figures) for every recorded section of a lesson: benchmark tables with their plots;
    lessons 06-09's tables as Markdown."""
    out = build.ROOT / "build" / ("report" if prefer_local else "demo")
    out.mkdir(parents=True, exist_ok=True)
    try:
        data = results.load(lesson, prefer_local=prefer_local)
    except FileNotFoundError:
        return []
    found = []
    for name, sec in data["sections"].items():
        rows = sec.get("rows") or []
        if rows and "pct_baseline" in rows[0]:
            found.append((name, f"Measured on {results.env_line(sec)}:\n{bench.table(rows)}",
                          _lesson_figures(lesson, rows, out, "" if name == "bench" else name)))
        elif sec.get("views"):  # a lesson benchmark module's section: its stored views, one generic table each
            text = "\n\n".join(results.view_markdown(lesson, name, v, sec=sec) for v in sec["views"]
                                 if v not in ("graph", "headline"))
            found.append((name, text, []))
        elif lesson == 11 and name in ("decode", "accuracy"):
            found.append((name, results.decode_markdown(prefer_local) if name == "decode"
                          else results.decode_accuracy_markdown(prefer_local), []))
        elif lesson == 12 and name == "stream":
            found.append((name, results.stream_markdown(), []))
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
        label, base = baseline_for(prob)
        ops = {label: base}
        for k in group:
            op = catalog.op(k, solution=True)
            res = check.check(k.problem, op)
            print(("PASS  " if res.ok else "FAIL  ") + k.label)
            if res.ok and k.stub_check == "check":
                ops[k.label] = op
        rows = bench.compare(prob, ops, demo_shapes(lesson, prob), baseline=label)
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
        secs = recorded_sections(lesson, prefer_local=True)
        lines += [f"## Lesson {lesson:02d}", ""]
        if not secs:
            lines += ["(no results yet)", ""]
        for name, text, figs in secs:
            body = text if text.startswith("|") or "\n|" in text[:400] else "```\n" + text + "\n```"
            lines += [f"### {name}", "", body, ""] + [f"![{f.stem}]({f.name})" for f in figs] + [""]
    lines += ["## The FP32 ladder at 4096³", "", results.TABLES["ladder"](), ""]
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
