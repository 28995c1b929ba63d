"""Poison and guard bands: the memory a check hands a kernel.

The poison is a quiet NaN with a payload the GPU never computes itself, so an element a kernel never wrote is told
apart from a NaN it computed. A Guarded tensor sits inside a larger poisoned allocation, so a write before or past
it shows. scratch() is how a launcher asks for memory it writes besides its output (a quantized x, a split-K
workspace): plain torch memory, or guarded memory while check.check runs inside guarded_scratch().

Below problems (whose launchers call scratch) and check (which reads what was written); imports only torch.
"""
from __future__ import annotations

import contextlib
import math

import torch

# Bit patterns for the poison: quiet NaNs with a payload the GPU never produces itself
# (CUDA's arithmetic returns the canonical NaN 0x7fffffff / 0x7fff).
POISON_BITS = {torch.float32: (torch.int32, 0x7FC0DEAD), torch.float16: (torch.int16, 0x7E5A),
               torch.bfloat16: (torch.int16, 0x7FDA), torch.int32: (torch.int32, -0x5EAD5EAD)}


def poisoned(shape, dtype, device="cuda") -> torch.Tensor:
    """A tensor every element of which is the poison value for `dtype`."""
    if dtype not in POISON_BITS:
        raise TypeError(f"no poison value defined for {dtype}; known: {list(POISON_BITS)}")
    idt, bits = POISON_BITS[dtype]
    return torch.full(tuple(shape), bits, dtype=idt, device=device).view(dtype)


def is_poison(t: torch.Tensor) -> torch.Tensor:
    idt, bits = POISON_BITS[t.dtype]
    return t.view(idt) == bits


# Guard bands: bytes before and after an output. A multiple of 128 bytes, so the output keeps the alignment of the
# allocation (torch's is 512 bytes) for 16-byte vector stores and the copy engine's 128-byte boxes; at least one row
# of the output, so a row written past the end lands in the band whole.
GUARD_MIN_BYTES, GUARD_MAX_BYTES = 4096, 1 << 20
# The fill of guard bands: the poison, and for the byte types of scratch (a quantized x) a fixed byte. A kernel that
# happens to write exactly it is not seen; a row written past the end is.
GUARD_BITS = {**POISON_BITS, torch.int8: (torch.int8, 0x5A), torch.uint8: (torch.uint8, 0xA5)}


def _filled(n, dtype, device):
    idt, bits = GUARD_BITS[dtype]
    return torch.full((n,), bits, dtype=idt, device=device).view(dtype)


def _is_fill(t):
    idt, bits = GUARD_BITS[t.dtype]
    return t.view(idt) == bits


def guard_bytes(shape, dtype) -> int:
    """The size of each guard band for an output of `shape`: one row (its last dimension) of it, at least 4 KiB and
    at most 1 MiB, rounded up to a multiple of 128 bytes."""
    item = torch.empty((), dtype=dtype).element_size()
    row = (tuple(shape)[-1] if len(shape) else 1) * item
    b = min(max(row, GUARD_MIN_BYTES), GUARD_MAX_BYTES)
    return -(-b // 128) * 128


class Guarded:
    """A poisoned tensor of `shape` inside a larger poisoned allocation: `guard` elements before and after it.
    `tensor` is the contiguous view a kernel gets; `overrun()` says what was written outside it."""

    def __init__(self, shape, dtype, device="cuda", name="y", zero=False):
        if dtype not in GUARD_BITS:
            raise TypeError(f"no guard fill defined for {dtype}; known: {list(GUARD_BITS)}")
        self.shape, self.dtype, self.name = tuple(shape), dtype, name
        n = math.prod(self.shape)
        self.guard = guard_bytes(self.shape, dtype) // torch.empty((), dtype=dtype).element_size()
        self.buf = _filled(self.guard + n + self.guard, dtype, device)
        self.tensor = self.buf[self.guard:self.guard + n].view(self.shape)
        if zero:
            self.tensor.zero_()

    def repoison(self):
        """Poison the output (not the bands, where a write must stay visible until overrun() reads it)."""
        idt, bits = GUARD_BITS[self.dtype]
        self.tensor.view(idt).fill_(bits)

    def overrun(self, max_offsets: int = 5) -> list[str]:
        """One message per guard band the kernel wrote into: how many elements, and the first offsets."""
        out = []
        before = ~_is_fill(self.buf[:self.guard])
        after = ~_is_fill(self.buf[self.guard + self.tensor.numel():])
        if before.any():
            # offsets counted back from the first element: -1 is the element just before it
            offs = (before.nonzero().flatten() - self.guard).flip(0)[:max_offsets].tolist()
            out.append(f"wrote {_elements(int(before.sum()))} before the start of {self.name} (offsets {offs} from its "
                       "first element): check your bounds guard and your index arithmetic")
        if after.any():
            offs = after.nonzero().flatten()[:max_offsets].tolist()
            out.append(f"wrote {_elements(int(after.sum()))} past the end of {self.name}: check your bounds guard "
                       f"(offsets past the end: {offs}"
                       + (f", i.e. row {self.shape[0]} and on" if len(self.shape) == 2 and self.shape[1] else "") + ")")
        return out


def _elements(n):
    return f"{n:,} element{'s' if n != 1 else ''}"


_scratch: list | None = None  # while a check runs: the Guarded scratch handed out so far


def scratch(shape, dtype, device, zero: bool = False, name: str = "scratch") -> torch.Tensor:
    """Scratch memory a launcher writes (a bound op's quantized copy of x, a split-K workspace): torch.empty (or
    zeros), or, while a check runs, a poisoned tensor inside guard bands that the check looks at after each run."""
    if _scratch is None or dtype not in GUARD_BITS:
        return (torch.zeros if zero else torch.empty)(tuple(shape), dtype=dtype, device=device)
    g = Guarded(shape, dtype, device, name=f"{name} (scratch)", zero=zero)
    _scratch.append(g)
    return g.tensor


@contextlib.contextmanager
def guarded_scratch():
    """While the block runs, scratch() hands out guarded tensors; yields the list of them (Guarded) to inspect."""
    global _scratch
    saved, _scratch = _scratch, []
    try:
        yield _scratch
    finally:
        _scratch = saved
