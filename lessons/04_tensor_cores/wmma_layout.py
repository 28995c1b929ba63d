"""Where WMMA keeps a 16×16 tile's elements (lessons/04_tensor_cores/wmma_layout.cu measures it on this GPU).

    python lessons/04_tensor_cores/wmma_layout.py

Lesson 04's WMMA kernel fills fragments with ldmatrix and writes results from registers on sm_90, assuming the layout
below: the same as mma.sync's m16n8k16 fragments (PTX ISA, "Matrix fragments for mma.m16n8k16"). This prints, for each
fragment, whether the measured layout is that one, lanes 0-4's elements as (row, column) of the tile, and which
elements mma_sync reads. tests/test_kernels.py runs measure() and expected() on every GPU test run."""
import sys
from pathlib import Path

import torch

from harness import build

KINDS = ("A FP16 row-major", "B FP16 col-major", "FP32 accumulator", "A INT8 row-major", "B INT8 col-major",
         "INT32 accumulator")
SIZES = (16, 16, 8, 8, 8, 8)  # num_elements of each fragment


def expected(kind: int, lane: int, e: int) -> tuple[int, int]:
    """(row, column) of the tile in memory that element e of `lane`'s fragment holds, in mma.sync's layout. B tiles are
    stored [n][k] (col-major K×N): row is n, column k. Element e of an FP16 operand is half q = e % 2 of register
    p = (e % 8) // 2 (x[8..15] repeat x[0..7]); of an INT8 operand, byte q = e % 4 of register p = e // 4."""
    g, t = lane // 4, lane % 4
    if kind in (0, 2, 5):  # A, and the accumulators (two n8 tiles): registers (g, lo K), (g+8, lo), (g, hi), (g+8, hi)
        p, q = (e % 8) // 2, e % 2
        return g + 8 * (p % 2), 2 * t + q + 8 * (p // 2)
    if kind == 1:  # B: b0, b1 of n8 tile 0 (n = g), then of tile 1 (n = g+8)
        p, q = (e % 8) // 2, e % 2
        return g + 8 * (p // 2), 2 * t + q + 8 * (p % 2)
    p, q = e // 4, e % 4  # INT8 A and B: rows (or n) g and g+8, bytes 4t..4t+3
    return g + 8 * p, 4 * t + q


def measure(mod=None) -> tuple[torch.Tensor, torch.Tensor]:
    """(where[kind, lane, element, 2] as (row, column), reads[operand, element]) measured on this GPU."""
    mod = mod or build.load_file(Path(__file__).with_name("wmma_layout.cu"), solution=True)
    out = torch.full((2 * 6 * 32 * 16,), -7, dtype=torch.int32, device="cuda")
    mod.wmma_layout(out)
    reads = torch.full((64,), -7, dtype=torch.int32, device="cuda")
    mod.wmma_reads(reads)
    where = out.view(2, 6, 32, 16).permute(1, 2, 3, 0).cpu()
    return where, reads.view(4, 16).cpu()


def mismatches(where: torch.Tensor) -> list[str]:
    """Every element whose measured (row, column) differs from expected()."""
    bad = []
    for kind, n in enumerate(SIZES):
        for lane in range(32):
            for e in range(n):
                got = tuple(int(v) for v in where[kind, lane, e])
                if got != expected(kind, lane, e):
                    bad.append(f"{KINDS[kind]}: lane {lane} element {e} holds {got}, expected {expected(kind, lane, e)}")
    return bad


def main():
    where, reads = measure()
    print(f"{torch.cuda.get_device_name()}, torch {torch.__version__}")
    bad = mismatches(where)
    for kind, name in enumerate(KINDS):
        n = SIZES[kind]
        ok = not any(b.startswith(name + ":") for b in bad)
        print(f"\n{name} ({n} elements per lane): {'mma.sync layout' if ok else 'NOT mma.sync layout'}")
        for lane in range(5):
            print(f"  lane {lane}: " + " ".join(f"{int(where[kind, lane, e, 0])},{int(where[kind, lane, e, 1])}"
                                                for e in range(n)))
    for i, name in enumerate(("A FP16", "B FP16", "A INT8", "B INT8")):
        print(f"mma_sync reads {name} elements:", [e for e in range(16) if reads[i, e] == 1])
    if bad:
        print("\n".join(bad[:20]))
        sys.exit(1)


if __name__ == "__main__":
    main()
