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
    raise NotImplementedError("exercise 05.a: reshape W to [N, K/group, group], take each group's absmax, "
                              "scale = absmax / 127 as fp16, q = round(w / scale) clamped to [-127, 127]")
    # END EXERCISE


def pack_int4(q: torch.Tensor) -> torch.Tensor:
    """q [N, K] integers in [-8, 7] → int32 [N, K / 8]: weight k goes to word k // 8, bits 4·(k % 8) to
    4·(k % 8) + 3 (the low nibble holds the first of the eight), as its 4-bit two's complement (q & 0xF)."""
    # BEGIN EXERCISE 05.b: INT4 packing
    raise NotImplementedError("exercise 05.b: take q & 0xF as int64, shift nibble i of each group of 8 "
                              "left by 4·i, add them up, and wrap the result into int32's range")
    # END EXERCISE


def nf4_index(x: torch.Tensor) -> torch.Tensor:
    """x: values already divided by their block's absmax (so in [-1, 1]) → uint8 index of the nearest of
    the 16 NF4 values (harness.quant.NF4, sorted ascending). A value exactly halfway between two codes gets the
    smaller index, as in bitsandbytes (its quantizer moves up a code only when x is greater than the midpoint)."""
    # BEGIN EXERCISE 05.c: nearest NF4 code
    raise NotImplementedError("exercise 05.c: the nearest code is decided by the midpoints between "
                              "neighbouring NF4 values; torch.bucketize finds which interval x falls in")
    # END EXERCISE
