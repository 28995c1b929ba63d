"""The FP32 GEMM ladder (lessons 01–03): every step checked, then timed against cuBLAS in one run.

    python -m harness.ladder [--sizes 1024 2048 4096] [--lessons 1 2 3] [--exercises] [--record]

Prints each kernel's GFLOP/s and its percentage of cuBLAS FP32 (TF32 off), like SGEMM_CUDA's runner.
A kernel that fails its check is reported and not timed. --exercises runs your kernels/ files instead
of the solutions; --record stores the rows as the lessons' results (see harness.results).
"""
from __future__ import annotations

import argparse
import sys

import torch

from . import bench, catalog, check, results, toolchain


def cublas_fp32():
    def op(x, W, out=None):
        return torch.nn.functional.linear(x, W)
    op.__name__ = "cuBLAS FP32"
    return op


def run(lessons=(1, 2, 3), sizes=(1024, 2048, 4096), solution=True, record=False, reps=50) -> list[dict]:
    torch.backends.cuda.matmul.allow_tf32 = False  # the baseline is true FP32 on CUDA cores
    prob = catalog.FP32
    ops, by_lesson = {"cuBLAS FP32": cublas_fp32()}, {}
    for k in catalog.kernels():
        if k.lesson not in lessons:
            continue
        op = catalog.op(k, solution=solution)
        res = check.check(prob, op)
        print(("PASS " if res.ok else "FAIL ") + k.label)
        if not res.ok:
            print(str(res.first_failure()))
            continue
        ops[k.label] = op
        by_lesson[k.label] = k.lesson
    rows = []
    for n in sizes:
        # The naive kernels take seconds at 4096³: time them on fewer repetitions.
        rows += bench.compare(prob, ops, [(n, n, n)], baseline="cuBLAS FP32", reps=reps)
    if record:
        for lesson in lessons:
            mine = [r for r in rows if by_lesson.get(r["op"]) == lesson or r["op"] == "cuBLAS FP32"]
            results.record(lesson, "bench", mine)
    return rows


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--sizes", type=int, nargs="+", default=[1024, 2048, 4096])
    ap.add_argument("--lessons", type=int, nargs="+", default=[1, 2, 3])
    ap.add_argument("--exercises", action="store_true", help="time your kernels/ files, not the solutions")
    ap.add_argument("--record", action="store_true")
    a = ap.parse_args(argv)
    if not toolchain.gpu_available():
        print(f"The ladder {toolchain.NO_GPU_REASON}. Recorded on the reference GPU:\n")
        for lesson in a.lessons:
            try:
                print(results.show(lesson, "bench", prefer_local=False) + "\n")
            except FileNotFoundError as e:
                print(e)
        return 0
    rows = run(a.lessons, a.sizes, solution=not a.exercises, record=a.record)
    print("\nSummary (% of cuBLAS FP32):")
    print(bench.table(rows))
    return 0


if __name__ == "__main__":
    sys.exit(main())
