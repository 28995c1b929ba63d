"""Lesson 10, exercise 10.a: INT4 weights into mma fragment order, once, offline.

harness.quant.to_fragments calls fragment_words (yours with solution=False, this file's otherwise) and wraps the
result with the transposed scales; `quant.check_fragments(build.load_python(10, "reorder"))` checks it and says what
differs. The kernel (w4a16_pipe.cu, mma_ktile) reads word [tile, chunk, lane, step] as lane's A fragment of mma step
`step` of the 16 × 16 block of W at rows 16·tile …, columns 64·chunk + 16·step …, and turns it into registers with
nibbles_to_q: register j = nibble j (low half) and nibble j + 4 (high half).
"""
import torch


def fragment_words(u: torch.Tensor) -> torch.Tensor:
    """u: int64 [R, K], the unsigned codes q + 8 (0 … 15) of W, R a multiple of 16, K of 64.
    Returns int32 [R/16, K/64, 32, 4]: the word lane `lane` loads for k16 step `step` of each 16 × 16 block, its
    nibble i (bits 4i … 4i + 3) the element of the block that nibbles_to_q puts into half i // 4 of register i % 4
    of that lane's A fragment (mma.m16n8k16, PTX ISA "Matrix Fragments for mma.m16n8k16": lane = 4g + t holds
    a0 = A[g][2t, 2t+1], a1 = A[g+8][2t, 2t+1], a2 = A[g][2t+8, 2t+9], a3 = A[g+8][2t+8, 2t+9])."""
    R, K = u.shape
    # BEGIN EXERCISE 10.a: the offline reorder into fragment order
    #> # TODO (roughly 10 lines): for every (lane, nibble i) find the row and column of the 16 × 16 block it holds,
    #> # gather those elements from every block at once (tensor indexing, no Python loop over blocks), pack each
    #> # lane's 8 nibbles into one word and return int32 words (a word with its top bit set is a negative int32).
    #> # Hints: lesson 10, step 3.
    #> raise NotImplementedError("exercise 10.a: fragment_words is not written yet")
    blocks = u.reshape(R // 16, 16, K // 64, 4, 16)  # tile, row, chunk, step, column
    lane, i = torch.arange(32, device=u.device)[:, None], torch.arange(8, device=u.device)[None, :]
    g, t = lane // 4, lane % 4
    row = g + 8 * (i & 1)  # registers 1 and 3 are row g + 8
    col = 2 * t + 8 * ((i >> 1) & 1) + (i >> 2)  # registers 2 and 3 are 8 columns on; the high half one more
    nib = blocks[:, row, :, :, col].permute(2, 3, 0, 4, 1)  # [lane, i, tile, chunk, step] → [tile, chunk, lane, step, i]
    words = (nib << (4 * torch.arange(8, device=u.device))).sum(dim=-1)  # disjoint bits: the sum is the or
    return torch.where(words >= 2**31, words - 2**32, words).to(torch.int32)
    # END EXERCISE
