"""Lesson 05 exercises: three quantization formats in PyTorch.

Each function must reproduce the course's reference in harness/quant.py exactly (same rounding, same bit
order): the CUDA kernels of lessons 06–09 are checked against that reference, so it is the contract.
`quant.check_formats(build.load_python(5, "formats"))` checks all three and says what differs.
"""
import torch

from harness.quant import NF4


def quantize_int8_groupwise(W: torch.Tensor, group: int) -> tuple[torch.Tensor, torch.Tensor]:
    """W [N, K] float → (q int8 [N, K], scale fp16 [N, K / group]); symmetric, one scale per `group`
    consecutive weights of a row: scale = absmax / 127 (rounded to fp16), q = round(w / scale) in [-127, 127].
    Divide by the fp16-rounded scale (as the reference does), so that q · scale is what a kernel computes."""
    # BEGIN EXERCISE 05.a: group-wise symmetric INT8
    #> # TODO (roughly 6 lines): return q and scale as the docstring defines them. Work on whole groups at once
    #> # (no Python loop over groups); an all-zero group must not divide by zero. Hints: lesson 05, step 2.
    #> raise NotImplementedError("exercise 05.a: quantize_int8_groupwise is not written yet")
    N, K = W.shape
    g = W.float().reshape(N, K // group, group)
    scale = (g.abs().amax(dim=-1) / 127).to(torch.float16)
    s = scale.float()
    s = torch.where(s == 0, torch.ones_like(s), s)[..., None]  # an all-zero group: codes 0, no 0 / 0
    q = torch.round(g / s).clamp(-127, 127).to(torch.int8)
    return q.reshape(N, K), scale
    # END EXERCISE


def pack_int4(q: torch.Tensor) -> torch.Tensor:
    """q [N, K] integers in [-8, 7] → int32 [N, K / 8]: weight k goes to word k // 8, bits 4·(k % 8) to
    4·(k % 8) + 3 (the low nibble holds the first of the eight), as its 4-bit two's complement (q & 0xF)."""
    # BEGIN EXERCISE 05.b: INT4 packing
    #> # TODO (roughly 3 lines): put each run of eight weights into one int32 in the docstring's bit order, with
    #> # tensor operations (no Python loop). A word whose top bit is set is stored as a negative int32.
    #> # Hints: lesson 05, step 3.
    #> raise NotImplementedError("exercise 05.b: pack_int4 is not written yet")
    nib = (q.to(torch.int64) & 0xF).reshape(q.shape[0], -1, 8)
    words = (nib << torch.arange(0, 32, 4, dtype=torch.int64, device=q.device)).sum(dim=-1)
    return torch.where(words >= 2**31, words - 2**32, words).to(torch.int32)
    # END EXERCISE


def nf4_index(x: torch.Tensor) -> torch.Tensor:
    """x: float32 values already divided by their block's absmax (so in [-1, 1]) → uint8 index of the nearest of
    the 16 NF4 values (harness.quant.NF4, sorted ascending). A value exactly halfway between two codes gets the
    smaller index, as in bitsandbytes (its quantizer moves up a code only when x is greater than the midpoint)."""
    # BEGIN EXERCISE 05.c: nearest NF4 code
    #> # TODO (roughly 2 lines): return the index of the nearest NF4 value for every element of x, ties to the
    #> # smaller index, with tensor operations (no Python loop). Hints: lesson 05, step 4.
    #> raise NotImplementedError("exercise 05.c: nf4_index is not written yet")
    mid = (NF4[1:] + NF4[:-1]).to(x.device) / 2
    return torch.bucketize(x, mid).to(torch.uint8)
    # END EXERCISE
