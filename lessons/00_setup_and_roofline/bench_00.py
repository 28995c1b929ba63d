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


def chart(rows: list[dict], n: int = 1 << 26):
    """Both routes on the roofline at n elements (a figure): both have the problem's intensity, far left of the
    ridge, so the floor is the copy bandwidth's."""
    at = [r for r in rows if list(r["shape"]) == [n]]
    if not at:
        raise ValueError(f"no rows at n = {n} (sizes measured: {sorted({r['shape'][0] for r in rows})})")
    ax = roofline.plot(roofline.points_from_rows(at, ScaleAdd()),
                       title=f"Lesson 00: scale_add on the roofline (n = 2^{n.bit_length() - 1})")
    return ax.figure


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
