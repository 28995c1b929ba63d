"""Lesson 02's benchmark: the shared-memory tiled GEMM with its bank conflicts and padded, against cuBLAS FP32
(TF32 off), in one run.

    python lessons/02_smem_tiling/bench_02.py [--sizes 1024 2048 4096] [--exercises] [--record]

Each kernel is checked first (on the odd shapes of the FP32 problem) and timed only if it passes; the table gives each
route's time, TFLOP/s, its % of cuBLAS measured in the same run and its % of the roofline's floor. The notebook imports
it (`import bench_02`). With --record the rows go to build/results/02.json, section "bench" (results/02.json with
COURSE_RECORD=1). The race exercise (race_demo.cu) is not timed: compute-sanitizer is its test.
"""
from __future__ import annotations

import argparse
import sys

from harness import bench, catalog, check, results, roofline

SECTION = "bench"
CUBLAS = "cuBLAS FP32"
SIZES = (1024, 2048, 4096)


def ops(solution: bool | None = None) -> dict:
    """label -> op: cuBLAS, then the lesson's tiled kernels in the catalog's order (kernels/, or solutions/ with
    solution=True or COURSE_SOLUTIONS=1)."""
    import torch

    def cublas(x, W, out=None):
        return torch.nn.functional.linear(x, W)
    found = {CUBLAS: cublas}
    for k in catalog.kernels(2):
        if k.stub_check == "check":  # the race exercise is checked by compute-sanitizer, not timed
            found[k.label] = catalog.op(k, solution=solution)
    return found


def run(sizes=SIZES, *, solution: bool | None = None, record: bool = False, reps: int = 30) -> list[dict]:
    """Check both kernels, then time those that pass and cuBLAS at every size³ in one run (rows of bench.compare)."""
    import torch
    torch.backends.cuda.matmul.allow_tf32 = False  # the baseline is true FP32 on CUDA cores
    timed = {}
    for label, op in ops(solution).items():
        if label != CUBLAS:
            res = check.check(catalog.FP32, op)
            print(("PASS " if res.ok else "FAIL ") + label)
            if not res.ok:
                print(res.first_failure())
                continue
        timed[label] = op
    rows = bench.compare(catalog.FP32, timed, [(n, n, n) for n in sizes], baseline=CUBLAS, reps=reps, verbose=False)
    if record:
        results.record(2, SECTION, rows)
    return rows


def table(rows: list[dict]) -> str:
    """The rows as one fixed-width table: µs, TFLOP/s, GB/s, % of cuBLAS (same run), % of the roofline's floor."""
    return bench.table(rows)


def ladder(n: int = 4096, *, prefer_local: bool = True) -> list[dict]:
    """The ladder so far at n³: lesson 01's kernels, then this lesson's rows with cuBLAS (each lesson's stored
    section: your run where you made one, else the recorded one)."""
    first = [r for r in results.load(1, SECTION, prefer_local=prefer_local)["rows"]
             if r["shape"] == [n, n, n] and r["op"] != CUBLAS]
    return first + [r for r in results.load(2, SECTION, prefer_local=prefer_local)["rows"] if r["shape"] == [n, n, n]]


def chart(rows: list[dict], n: int = 4096, c: dict | None = None):
    """The rows at n³ on the FP32 roofline (a figure); give it ladder(n) for lessons 01 and 02 together. c: the
    ceilings of the GPU the rows were measured on (a stored section's: roofline.of_section(sec)); this GPU's by
    default."""
    at = [r for r in rows if list(r["shape"]) == [n, n, n]]
    if not at:
        raise ValueError(f"no rows at {n}³ (sizes measured: {sorted({r['shape'][0] for r in rows})})")
    ax = roofline.plot(roofline.points_from_rows(at, catalog.FP32), kinds=("fp32",), c=c,
                       title=f"The ladder so far, {n}³")
    return ax.figure


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--sizes", type=int, nargs="+", default=list(SIZES))
    ap.add_argument("--exercises", action="store_true", help="time your kernels/ file instead of the solution")
    ap.add_argument("--record", action="store_true")
    a = ap.parse_args(argv)
    from harness import toolchain
    if not toolchain.gpu_available():
        print(f"The benchmark {toolchain.NO_GPU_REASON}.")
        return 0
    rows = run(a.sizes, solution=not a.exercises, record=a.record)
    print(table(rows))
    return 0


if __name__ == "__main__":
    sys.exit(main())
