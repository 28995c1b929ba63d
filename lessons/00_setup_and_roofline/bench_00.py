"""Lesson 00's benchmark: the scale_add kernel against torch.add on the same vectors, in one run.

    python lessons/00_setup_and_roofline/bench_00.py [--sizes 24 26 28] [--exercises] [--record]

The kernel is checked first (on the problem's odd sizes) and timed only if it passes; the table gives each route's
time, GB/s, its % of torch.add measured in the same run and its % of the roofline's floor. The notebook imports it
(`import bench_00`). With --record the rows go to build/results/00.json, section "bench" (results/00.json with
COURSE_RECORD=1). The sizes are powers of two (2^24 to 2^28 elements); the bytes and the floors need no GPU.
"""
from __future__ import annotations

import argparse
import sys

from harness import bench, build, check, results, roofline
from harness.problems import ScaleAdd

SECTION = "bench"
BASELINE = "torch.add(b, x, alpha=a)"
OURS = "ours: scale_add"
SIZES = ((1 << 24,), (1 << 26,), (1 << 28,))


def ops(solution: bool | None = None) -> dict:
    """label -> op: torch.add, then the lesson's kernel (kernels/, or solutions/ with solution=True or
    COURSE_SOLUTIONS=1)."""
    import torch
    prob = ScaleAdd()
    return {BASELINE: lambda x, b: torch.add(b, x, alpha=prob.a),
            OURS: prob.bind(build.load(0, solution=solution).scale_add, OURS)}


def run(sizes=SIZES, *, solution: bool | None = None, record: bool = False, reps: int = 100) -> list[dict]:
    """Check the kernel, then time it (if it passes) and torch.add on every size in one run (rows of
    bench.compare)."""
    prob = ScaleAdd()
    timed = {}
    for label, op in ops(solution).items():
        if label != BASELINE:
            res = check.check(prob, op)
            print(("PASS " if res.ok else "FAIL ") + label)
            if not res.ok:
                print(res.first_failure())
                continue
        timed[label] = op
    rows = bench.compare(prob, timed, [tuple(s) for s in sizes], baseline=BASELINE, reps=reps, verbose=False)
    if record:
        results.record(0, SECTION, rows)
    return rows


def table(rows: list[dict]) -> str:
    """The rows as one fixed-width table: µs, GB/s, % of torch.add (same run), % of the roofline's floor."""
    return bench.table(rows)


def chart(rows: list[dict], n: int = 1 << 26, c: dict | None = None):
    """Both routes on the roofline at n elements (a figure): both have the problem's intensity, far left of the
    ridge, so the floor is the copy bandwidth's. c: the ceilings of the GPU the rows were measured on (a stored
    section's: roofline.of_section(sec)); this GPU's by default."""
    at = [r for r in rows if list(r["shape"]) == [n]]
    if not at:
        raise ValueError(f"no rows at n = {n} (sizes measured: {sorted({r['shape'][0] for r in rows})})")
    ax = roofline.plot(roofline.points_from_rows(at, ScaleAdd()), c=c,
                       title=f"Lesson 00: scale_add on the roofline (n = 2^{n.bit_length() - 1})")
    return ax.figure


def ceilings_table(c: dict) -> str:
    """One GPU's measured ceilings, the datasheet's figure beside each where the course knows the GPU's datasheet."""
    d = results.DATASHEET.get(c["gpu"], {})
    sheet = lambda k, f=1: f"{f * d[k]:>12,.0f}" if k in d else f"{'(not known)':>12}"
    out = [f"{c['gpu']}, measured {c['date'][:10]}", f"{'':<34}{'measured':>10}{'datasheet':>12}{'measured/sheet':>16}"]
    for label, key, skey, f in (("copy bandwidth, GB/s", "copy_GBps", "memory_TBps", 1e3),
                                ("read bandwidth, GB/s", "read_GBps", "memory_TBps", 1e3),
                                ("FP32 (CUDA cores), TFLOP/s", "fp32_TFLOPs", "fp32_TFLOPs", 1),
                                ("TF32 tensor cores, TFLOP/s", "tf32_TFLOPs", "tf32_TFLOPs", 1),
                                ("FP16 tensor cores, TFLOP/s", "fp16_TFLOPs", "fp16_TFLOPs", 1),
                                ("INT8 tensor cores, TOP/s", "int8_TOPs", "int8_TOPs", 1)):
        if key not in c:  # ceilings measured before the read bandwidth was
            continue
        ratio = f"{100 * c[key] / (f * d[skey]):>15.0f}%" if skey in d else ""
        out.append(f"{label:<34}{c[key]:>10,.1f}{sheet(skey, f)}{ratio}")
    clock = f", SM clock under load {c['clock_MHz']:,.0f} MHz" if c.get("clock_MHz") else ""
    out.append(f"{c.get('sms', c['env'].get('sms'))} SMs{clock}")
    return "\n".join(out)


def two_gpus(gpus: list[str] | None = None, n: int = 1 << 28) -> str:
    """The recorded GPUs side by side (the reference first): each one's measured ceilings beside its datasheet's,
    the ridge points they give, and what that does to a memory-bound kernel (scale_add and torch.add at n, each
    GPU's own recording) and to a compute-bound one (cuBLAS's 8192³ GEMMs, the ceilings' own measurement). No GPU
    needed."""
    gpus = gpus or roofline.recorded_gpus()
    cs = [roofline.recorded(g) for g in gpus]
    short = [g.removeprefix("NVIDIA ") for g in gpus]
    w = max(14, *(len(x) + 2 for x in short))
    out = [f"{'':<38}" + "".join(f"{x:>{w}}" for x in short) + (f"{'ratio':>9}" if len(cs) == 2 else "")]

    def line(label, vals, fmt):
        known = all(v == v for v in vals)  # nan: not measured on that GPU
        out.append(f"{label:<38}" + "".join(f"{fmt.format(v) if v == v else '–':>{w}}" for v in vals)
                   + (f"{vals[0] / vals[1]:>8.2f}×" if len(vals) == 2 and known else ""))

    sheet = [results.DATASHEET.get(c["gpu"], {}) for c in cs]
    line("copy bandwidth, GB/s (measured)", [c["copy_GBps"] for c in cs], "{:,.0f}")
    line("read bandwidth, GB/s (measured)", [c.get("read_GBps", float("nan")) for c in cs], "{:,.0f}")
    line("  memory bandwidth, datasheet, GB/s", [1e3 * d.get("memory_TBps", float("nan")) for d in sheet], "{:,.0f}")
    line("FP32 cuBLAS 8192³, TFLOP/s (measured)", [c["fp32_TFLOPs"] for c in cs], "{:.1f}")
    line("FP16 cuBLAS 8192³, TFLOP/s (measured)", [c["fp16_TFLOPs"] for c in cs], "{:.0f}")
    line("  FP16 dense, datasheet, TFLOP/s", [d.get("fp16_TFLOPs", float("nan")) for d in sheet], "{:.0f}")
    line("ridge point FP32, FLOP/byte", [c["fp32_TFLOPs"] * 1e3 / c["copy_GBps"] for c in cs], "{:.1f}")
    line("ridge point FP16, FLOP/byte", [c["fp16_TFLOPs"] * 1e3 / c["copy_GBps"] for c in cs], "{:.0f}")
    for route in (OURS, BASELINE):
        us = []
        for g in gpus:
            rows = results.load(0, SECTION, gpu=g)["rows"]
            us.append(next(r["us"] for r in rows if r["op"] == route and r["shape"] == [n]))
        line(f"{route} at 2^{n.bit_length() - 1}, µs", us, "{:,.0f}")
    if len(cs) == 2:
        out.append(f"\n(ratio: {short[0]} ÷ {short[1]}; for a time, below 1 means the {short[0]} is faster)")
    out.append("measured: " + "; ".join(f"{c['gpu']} {c['date'][:10]}" for c in cs) + ". Datasheet: NVIDIA's H100 SXM5 "
               "and H200 SXM datasheets (dense tensor-core rates).")
    return "\n".join(out)


def two_rooflines(gpus: list[str] | None = None):
    """Each recorded GPU's FP32 and FP16 roofs on one plot (measured ceilings): the same flat roofs, a steeper
    slope on the GPU with the faster memory, so its ridge moves left. No GPU needed."""
    import matplotlib.pyplot as plt
    import numpy as np
    gpus = gpus or roofline.recorded_gpus()
    fig, ax = plt.subplots(figsize=(7, 4.2))
    ai = np.logspace(-1, 3.5, 200)
    for i, g in enumerate(gpus):
        c = roofline.recorded(g)
        bw = c["copy_GBps"] / 1e3
        for kind, ls in (("fp16", "-"), ("fp32", "--")):
            peak = roofline.rate(c, kind)
            ax.plot(ai, np.minimum(peak, bw * ai), ls, color=f"C{i}", lw=1.5,
                    label=f"{g.removeprefix('NVIDIA ')} {kind.upper()}: {peak:g} TFLOP/s, {bw:.2f} TB/s")
            ax.axvline(peak / bw, color=f"C{i}", lw=0.6, ls=":")
    ax.set(xscale="log", yscale="log", xlabel="arithmetic intensity (FLOP / byte of DRAM traffic)",
           ylabel="TFLOP/s", title="Two GPUs' rooflines (measured); dotted: their ridge points")
    ax.grid(True, which="both", lw=0.3)
    ax.legend(fontsize=7, loc="lower right")
    return fig


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--sizes", type=int, nargs="+", default=[24, 26, 28], help="log2 of the vector lengths")
    ap.add_argument("--exercises", action="store_true", help="time your kernels/ file instead of the solution")
    ap.add_argument("--record", action="store_true")
    a = ap.parse_args(argv)
    if any(not 10 <= s <= 30 for s in a.sizes):
        ap.error(f"--sizes are log2 of the length, 10 to 30, not {a.sizes}")
    from harness import toolchain
    if not toolchain.gpu_available():
        print(f"The benchmark {toolchain.NO_GPU_REASON}.")
        return 0
    rows = run([(1 << s,) for s in a.sizes], solution=not a.exercises, record=a.record)
    print(table(rows))
    return 0


if __name__ == "__main__":
    sys.exit(main())
