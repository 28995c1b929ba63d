"""Weight and activation quantization formats: the PyTorch reference every quantized kernel is checked against.

Weights are [N, K] (nn.Linear's layout); groups run along K, the reduction dimension, so one scale covers
`group` consecutive weights of one output channel and a GEMM can apply it once per group.

| format | stored | dequantized value |
|---|---|---|
| INT8 symmetric, per channel or group | q int8 in [-127, 127]; scale fp16 [N, K/g] | q · scale |
| INT4 symmetric, group | q in [-8, 7], packed 8 per int32; scale fp16 | q · scale |
| INT4 asymmetric, group | q in [0, 15], packed 8 per int32; scale fp16, zero uint8 | (q − zero) · scale |
| NF4, block 64 (bitsandbytes) | 4-bit codebook index, 2 per uint8; absmax fp32 per block | NF4[idx] · absmax |
| INT4 in mma fragment order (lesson 10) | q + 8 packed per lane and mma step (`to_fragments`); scale fp16 [K/g, N] | q · scale |
| W4A8 two-level (lesson 09) | u in [0, 15], packed 8 per int32 (own order); scale fp16 [N, 1]; gscale, gzero uint8 [N, K/g] | scale · gscale · (u − gzero) |
| INT8 per-token activations | q int8 [M, K]; scale fp32 [M] | q · scale |

INT4 bit order (documented once, used by every kernel): weight k of a row lives in int32 word k // 8, bits
4·(k % 8) to 4·(k % 8) + 3: the low nibble holds the first of the eight. Signed values are stored as their
4-bit two's complement (q & 0xF). NF4 follows bitsandbytes: two indices per byte, the first in the high nibble.
"""
from __future__ import annotations

import os
from dataclasses import dataclass

import torch

from . import build

INT8_MAX, INT4_MIN, INT4_MAX = 127, -8, 7


def _check_weight(W: torch.Tensor, group: int, what: str):
    if not isinstance(W, torch.Tensor) or W.dim() != 2:
        raise ValueError(f"{what}: W must be a 2-D [N, K] tensor, got {getattr(W, 'shape', type(W).__name__)}")
    if not W.is_floating_point():
        raise TypeError(f"{what}: W must be floating point, got {W.dtype}")
    if group <= 0 or W.shape[1] % group:
        raise ValueError(f"{what}: K = {W.shape[1]} is not a multiple of the group size {group}; "
                         f"pad K to a multiple of {group} (with zero weights) or choose a group that divides it")
    if not torch.isfinite(W).all():
        raise ValueError(f"{what}: W contains NaN or inf; a scale computed from it would poison its whole group")


def _divisor(scale: torch.Tensor) -> torch.Tensor:
    """An FP16 scale as the divisor that quantizes with it: the scale itself, subnormal ones included (weights of
    magnitude ~1e-3 give INT8 scales below FP16's smallest normal, 6.1e-5: clamping to it would quantize with one
    scale and dequantize with another), and 1 for an all-zero group, whose codes are then 0."""
    s = scale.float()
    return torch.where(s == 0, torch.ones_like(s), s)


def _groups(W: torch.Tensor, group: int) -> torch.Tensor:
    """[N, K] → [N, K/group, group] in float32."""
    N, K = W.shape
    return W.float().reshape(N, K // group, group)


# ----------------------------------------------------------------------------------------------
# INT8, symmetric

@dataclass
class Int8Weight:
    q: torch.Tensor       # int8 [N, K]
    scale: torch.Tensor   # fp16 [N, K / group]
    group: int

    def dequantize(self) -> torch.Tensor:
        N, K = self.q.shape
        return (_groups(self.q, self.group) * self.scale.float()[..., None]).reshape(N, K)

    def nbytes(self) -> int:
        return self.q.numel() + self.scale.numel() * 2


def quantize_int8(W: torch.Tensor, group: int | None = None) -> Int8Weight:
    """Symmetric INT8: per output channel (group=None: one scale per row) or per `group` weights along K.
    scale = absmax / 127, q = round(w / scale), so the largest weight of a group maps to ±127 exactly."""
    group = W.shape[1] if group is None and isinstance(W, torch.Tensor) and W.dim() == 2 else group
    _check_weight(W, group, "quantize_int8")
    g = _groups(W, group)
    scale = (g.abs().amax(dim=-1) / INT8_MAX).to(torch.float16)
    s = _divisor(scale)[..., None]
    q = torch.round(g / s).clamp(-INT8_MAX, INT8_MAX).to(torch.int8)
    return Int8Weight(q.reshape(W.shape), scale, group)


TILE_ROWS, TILE_K = 16, 64  # lesson 06's tiled layout: 16 output rows × 64-wide K blocks (1 KB of INT8)
TILE_K4 = 128                # lesson 07's, INT4: 16 rows × 128-wide K blocks (one group: 1 KB packed)


def _tile_rows(t: torch.Tensor, block: int) -> torch.Tensor:
    """[n, C] → [ceil(n/16), C/block, 16, block]: tile, column block, row in the tile, column (zero rows past n)."""
    n, cols = t.shape
    tiles = -(-n // TILE_ROWS)
    padded = torch.zeros(tiles * TILE_ROWS, cols, dtype=t.dtype, device=t.device)
    padded[:n] = t
    return padded.reshape(tiles, TILE_ROWS, cols // block, block).permute(0, 2, 1, 3).contiguous()


def _untile_rows(t: torch.Tensor, n: int) -> torch.Tensor:
    """The inverse of _tile_rows: [tiles, C/block, 16, block] → [n, C]."""
    tiles, blocks, rows, block = t.shape
    return t.permute(0, 2, 1, 3).reshape(tiles * rows, blocks * block)[:n]


@dataclass
class Int8Tiles:
    """Int8Weight's q in 16-row tiles, the order lesson 06's tiled GEMV reads it (`gemv_w8a16_tiles`).
    q:     int8 [ceil(n/16), K/64, 16, 64]: tile, K block, row in the tile, weight; rows past n are 0.
    scale: fp16 [n, K / group], as Int8Weight's."""
    q: torch.Tensor
    scale: torch.Tensor
    n: int
    group: int = 128

    @property
    def k(self) -> int:
        return self.q.shape[1] * TILE_K

    def codes(self) -> torch.Tensor:
        """q back in row-major order, int8 [n, K] (the inverse of to_tiles)."""
        return _untile_rows(self.q, self.n)

    def dequantize(self) -> torch.Tensor:
        return Int8Weight(self.codes(), self.scale, self.group).dequantize()

    def nbytes(self) -> int:
        return self.q.numel() + self.scale.numel() * 2


# ----------------------------------------------------------------------------------------------
# INT4: packing, symmetric and asymmetric

def pack_int4(q: torch.Tensor) -> torch.Tensor:
    """[N, K] integers in [-8, 15] → int32 [N, K/8]; weight k in bits 4·(k % 8) of word k // 8."""
    if q.dim() != 2 or q.shape[1] % 8:
        raise ValueError(f"pack_int4: need [N, K] with K a multiple of 8, got {tuple(q.shape)}")
    if q.numel() and (int(q.min()) < INT4_MIN or int(q.max()) > 15):
        raise ValueError("pack_int4: values must fit in 4 bits (signed -8..7 or unsigned 0..15)")
    nib = (q.to(torch.int64) & 0xF).reshape(q.shape[0], -1, 8)
    shifts = torch.arange(0, 32, 4, dtype=torch.int64, device=q.device)
    words = (nib << shifts).sum(dim=-1)  # disjoint bits: the sum is the bitwise or
    return torch.where(words >= 2**31, words - 2**32, words).to(torch.int32)


def unpack_int4(packed: torch.Tensor, signed: bool = True) -> torch.Tensor:
    """int32 [N, K/8] → int8 [N, K]: the inverse of pack_int4 (sign-extended when signed)."""
    shifts = torch.arange(0, 32, 4, dtype=torch.int64, device=packed.device)
    nib = (packed.to(torch.int64)[..., None] >> shifts) & 0xF
    if signed:
        nib = torch.where(nib >= 8, nib - 16, nib)
    return nib.reshape(packed.shape[0], -1).to(torch.int8)


@dataclass
class Int4Weight:
    packed: torch.Tensor              # int32 [N, K / 8]
    scale: torch.Tensor               # fp16 [N, K / group]
    group: int
    zero: torch.Tensor | None = None  # uint8 [N, K / group] for the asymmetric format

    @property
    def symmetric(self) -> bool:
        return self.zero is None

    def dequantize(self) -> torch.Tensor:
        q = unpack_int4(self.packed, signed=self.symmetric).float()
        N, K = q.shape
        g = q.reshape(N, K // self.group, self.group)
        if self.zero is not None:
            g = g - self.zero.float()[..., None]
        return (g * self.scale.float()[..., None]).reshape(N, K)

    def nbytes(self) -> int:
        return self.packed.numel() * 4 + self.scale.numel() * 2 + (0 if self.zero is None else self.zero.numel())


def quantize_int4(W: torch.Tensor, group: int = 128, symmetric: bool = True) -> Int4Weight:
    """INT4 per `group` weights along K.
    symmetric: scale = absmax / 7, q = clamp(round(w / scale), -8, 7);
    asymmetric: with lo = min(min, 0) and hi = max(max, 0) (the range always holds 0), scale = (hi − lo) / 15,
    zero = round(−lo / scale), q = clamp(round(w / scale) + zero, 0, 15),
    which spends all 16 levels on the group's actual range."""
    _check_weight(W, group, "quantize_int4")
    if group % 8:
        raise ValueError(f"quantize_int4: the group size ({group}) must be a multiple of 8, one int32 word")
    g = _groups(W, group)
    if symmetric:
        scale = (g.abs().amax(dim=-1) / INT4_MAX).to(torch.float16)
        q = torch.round(g / _divisor(scale)[..., None]).clamp(INT4_MIN, INT4_MAX)
        return Int4Weight(pack_int4(q.reshape(W.shape).to(torch.int8)), scale, group)
    lo, hi = g.amin(dim=-1).clamp(max=0), g.amax(dim=-1).clamp(min=0)  # the range always contains 0
    scale = ((hi - lo) / 15).to(torch.float16)
    s = _divisor(scale)
    zero = torch.round(-lo / s).clamp(0, 15)
    q = (torch.round(g / s[..., None]) + zero[..., None]).clamp(0, 15)
    return Int4Weight(pack_int4(q.reshape(W.shape).to(torch.int16)), scale, group, zero.to(torch.uint8))


@dataclass
class Int4Tiles:
    """Int4Weight (group 128) in 16-row tiles, the order lesson 07's tiled GEMV reads it (`gemv_w4a16_tiles`):
    packed: int32 [ceil(n/16), K/128, 16, 16]: tile, K block (one group), row in the tile, word;
    scale:  fp16 [ceil(n/16), K/128, 16] and zero (asymmetric) uint8, the same order; rows past n are 0."""
    packed: torch.Tensor
    scale: torch.Tensor
    n: int
    group: int = 128
    zero: torch.Tensor | None = None

    @property
    def k(self) -> int:
        return self.packed.shape[1] * TILE_K4

    @property
    def symmetric(self) -> bool:
        return self.zero is None

    def rows(self) -> Int4Weight:
        """The row-major Int4Weight (the inverse of to_tiles)."""
        def back(t):
            return None if t is None else _untile_rows(t[..., None], self.n)
        return Int4Weight(_untile_rows(self.packed, self.n), back(self.scale), self.group, back(self.zero))

    def dequantize(self) -> torch.Tensor:
        return self.rows().dequantize()

    def nbytes(self) -> int:
        return self.packed.numel() * 4 + self.scale.numel() * 2 + (0 if self.zero is None else self.zero.numel())


def to_tiles(qw):
    """Row-major INT8, packed INT4 or NF4 → 16-row tiles of 64 bytes per row and K block (64 INT8 or 128 4-bit weights).
    The same bytes in another order (plus zero rows up to a multiple of 16), done once, offline, as a serving engine
    repacks weights at load time. INT8 scales keep their row-major layout; INT4 scales (and zero points) and NF4 absmax
    are tiled too, 16 rows per K block, so that the kernel reaches a row and the row 8 below it from one pointer."""
    if isinstance(qw, Int8Weight):
        K = qw.q.shape[1]
        if K % TILE_K:
            raise ValueError(f"to_tiles: K = {K} must be a multiple of {TILE_K}")
        return Int8Tiles(_tile_rows(qw.q, TILE_K), qw.scale, qw.q.shape[0], qw.group)
    if isinstance(qw, Int4Weight):
        if qw.group != TILE_K4:
            raise ValueError(f"to_tiles: INT4 tiles hold one group of {TILE_K4} per K block; these weights have "
                             f"groups of {qw.group}")
        def per_row(t):  # one value per row and group → [tiles, K/128, 16], the weights' order
            return None if t is None else _tile_rows(t, 1)[..., 0].contiguous()
        return Int4Tiles(_tile_rows(qw.packed, TILE_K4 // 8), per_row(qw.scale), qw.packed.shape[0], qw.group,
                         per_row(qw.zero))
    if isinstance(qw, NF4DQWeight):
        if qw.block2 != 256:
            raise ValueError(f"to_tiles: the tiled kernel reads absmax2 per 256 blocks; these weights have {qw.block2}")
        t = to_tiles(NF4Weight(qw.packed, qw.qabsmax, qw.shape, qw.block))  # the codes in the absmax's places,
        tiles, items = t.absmax.shape[0], t.absmax.shape[1] // 2             # then a lane's four per K item together
        q = t.absmax.reshape(tiles, items, 2, 2, 8).permute(0, 1, 4, 2, 3).contiguous()
        return NF4DQTiles(t.packed, q, qw.absmax2, qw.offset, qw.code, t.n, t.codebook, qw.block, qw.block2)
    if isinstance(qw, NF4Weight):
        if len(qw.shape) != 2 or qw.shape[1] % TILE_K4 or qw.block != 64:
            raise ValueError(f"to_tiles: NF4 tiles need a 2-D weight with K a multiple of {TILE_K4} and blocks of 64; "
                             f"got shape {tuple(qw.shape)}, block {qw.block}")
        N, K = qw.shape
        return NF4Tiles(_tile_rows(qw.packed.view(N, K // 2), 64),
                        _tile_rows(qw.absmax.view(N, K // 64), 1)[..., 0].contiguous(), N, NF4.to(qw.packed.device))
    raise TypeError(f"to_tiles: takes a quant.Int8Weight, Int4Weight, NF4Weight or NF4DQWeight, got {type(qw).__name__}")


# ----------------------------------------------------------------------------------------------
# INT4 in mma fragment order (lesson 10): the layout is chosen offline so that each lane's 16-byte load holds
# exactly its own A fragments of four mma.m16n8k16 steps, and the INT4 → FP16 trick of lesson 07 (nibbles i and
# i + 4 of a word land in one half2) yields them in the order the instruction wants: no shared-memory
# write-back of dequantized weights, no permutation of x.

FRAG_ROWS, FRAG_K = 16, 64  # an m16 tile of output rows; four k16 steps per lane word group


def _frag_positions(device=None) -> tuple[torch.Tensor, torch.Tensor]:
    """(row, col) inside a 16 × 16 A tile of nibble i of lane l's word, as [32, 8] tensors. Found from the elements'
    side: each of the tile's 256 elements goes to the lane, register and half that hold it in mma.m16n8k16's A
    fragment (PTX ISA, "Matrix Fragments for mma.m16n8k16", the table read from the element), and from the half to
    the nibble that becomes it (nibbles_to_q: register j's low half is nibble j, its high half nibble j + 4)."""
    r, c = (x.reshape(-1) for x in torch.meshgrid(torch.arange(16), torch.arange(16), indexing="ij"))
    lane = 4 * (r % 8) + (c % 8) // 2   # groupID: the row within its 8-row half; threadID_in_group: the column pair
    reg = r // 8 + 2 * (c // 8)         # which of the four 8 × 8 quarters
    nibble = reg + 4 * (c % 2)          # the second column of a pair is the register's high half
    row = torch.full((32, 8), -1, dtype=torch.int64)
    col = row.clone()
    row[lane, nibble], col[lane, nibble] = r, c
    assert (row >= 0).all(), "every (lane, nibble) holds one element: 32 × 8 = 256"
    return row.to(device), col.to(device)


@dataclass
class Int4Fragments:
    """Symmetric INT4 weights of an [n, K] layer in fragment order.
    packed: int32 [ceil(n/16), K/64, 32, 4]: m16 tile, 64-wide K chunk, lane, k16 step; each word holds the lane's
            8 weights of one mma step as unsigned nibbles q + 8 (nibble order: _frag_positions). Rows past n are 0.
    scale:  fp16 [K/group, ceil(n/16)·16], the group scales transposed (a block's scales for one K tile are then
            contiguous and travel through cp.async with its weights); 0 past n."""
    packed: torch.Tensor
    scale: torch.Tensor
    n: int
    group: int = 128

    @property
    def k(self) -> int:
        return self.packed.shape[1] * FRAG_K

    def codes(self) -> torch.Tensor:
        """The signed codes q, int8 [n, K] (the inverse of the packing)."""
        tiles, chunks = self.packed.shape[:2]
        shifts = torch.arange(0, 32, 4, dtype=torch.int64, device=self.packed.device)
        nib = (self.packed.to(torch.int64)[..., None] >> shifts) & 0xF  # [tiles, chunks, lane, step, i]
        row, col = _frag_positions(self.packed.device)
        u = torch.zeros(tiles, 16, chunks, 4, 16, dtype=torch.int64, device=self.packed.device)
        u[:, row, :, :, col] = nib.permute(2, 4, 0, 1, 3)  # [lane, i, tiles, chunks, step] → (tile, row, chunk, step, col)
        return (u.reshape(tiles * 16, chunks * FRAG_K)[: self.n] - 8).to(torch.int8)

    def dequantize(self) -> torch.Tensor:
        q = self.codes().float()
        s = self.scale[:, : self.n].float().t()  # [n, K/group]
        return (q.reshape(self.n, -1, self.group) * s[..., None]).reshape(self.n, -1)

    def nbytes(self) -> int:
        return self.packed.numel() * 4 + self.scale.numel() * 2


_REORDER = {}  # solution: lesson 10's fragment_words, loaded once


def fragment_words_fn(solution: bool = True):
    """Lesson 10's fragment_words (exercise 10.a): the solution's, or yours in kernels/ (solution=False)."""
    if not solution:
        return build.load_python(10, "reorder", solution=False).fragment_words
    if "fn" not in _REORDER:
        _REORDER["fn"] = build.load_python(10, "reorder", solution=True).fragment_words
    return _REORDER["fn"]


def to_fragments(qw: Int4Weight, solution: bool = True) -> Int4Fragments:
    """Lesson 07's packed INT4 (symmetric, [N, K/8]) → fragment order. Done once, offline, like any weight
    conversion a serving engine does at load time. The reorder itself is lesson 10's exercise 10.a (reorder.py's
    fragment_words): the solution's by default, yours with solution=False."""
    if not qw.symmetric:
        raise ValueError("to_fragments: only the symmetric format (no zero points) has a fragment-order layout here")
    if qw.group % FRAG_K:
        raise ValueError(f"to_fragments: the group ({qw.group}) must be a multiple of {FRAG_K}")
    q = unpack_int4(qw.packed, signed=True).to(torch.int64)
    N, K = q.shape
    if K % FRAG_K:
        raise ValueError(f"to_fragments: K = {K} must be a multiple of {FRAG_K}")
    tiles = -(-N // FRAG_ROWS)
    u = torch.full((tiles * FRAG_ROWS, K), 8, dtype=torch.int64, device=q.device)
    u[:N] = q + 8
    packed = fragment_words_fn(solution)(u)
    want = (tiles, K // FRAG_K, 32, 4)
    if not isinstance(packed, torch.Tensor) or packed.dtype != torch.int32 or tuple(packed.shape) != want:
        raise ValueError(f"fragment_words must return int32 {list(want)}, got "
                         f"{getattr(packed, 'dtype', type(packed).__name__)} {list(getattr(packed, 'shape', []))}")
    packed = packed.contiguous()
    scale = torch.zeros(K // qw.group, tiles * FRAG_ROWS, dtype=torch.float16, device=q.device)
    scale[:, :N] = qw.scale.t()
    return Int4Fragments(packed, scale, N, qw.group)


# ----------------------------------------------------------------------------------------------
# NF4 (QLoRA's 4-bit NormalFloat, bitsandbytes' layout)

def nf4_codebook(offset: float = 0.9677083) -> torch.Tensor:
    """The 16 NF4 values, built as in Dettmers et al., QLoRA (2023), section 3 and bitsandbytes'
    create_normal_map: 8 positive and 7 negative quantiles of N(0, 1), an exact zero, normalised to
    [-1, 1]. `offset` is the outermost quantile bitsandbytes uses. Within a few float32 steps of NF4 below."""
    pos = torch.special.ndtri(torch.linspace(offset, 0.5, 9, dtype=torch.float64)[:-1])
    neg = -torch.special.ndtri(torch.linspace(offset, 0.5, 8, dtype=torch.float64)[:-1])
    v = torch.cat([pos, torch.zeros(1, dtype=torch.float64), neg]).sort().values
    return (v / v.abs().max()).float()


# The table bitsandbytes stores (functional.py, get_4bit_type("nf4"); the QLoRA paper's values), which its kernels
# decode with. nf4_codebook() computes the same quantiles, but 10 of its 16 float32 values differ from these by 1 to
# 6 float32 steps, enough to change the FP16 result of about one weight in 1,600. With the stored table the course's
# NF4 is bitsandbytes' to the bit (tests/test_bnb.py compares bytes and dequantized values with the library itself).
NF4 = torch.tensor([-1.0, -0.6961928009986877, -0.5250730514526367, -0.39491748809814453, -0.28444138169288635,
                    -0.18477343022823334, -0.09105003625154495, 0.0, 0.07958029955625534, 0.16093020141124725,
                    0.24611230194568634, 0.33791524171829224, 0.44070982933044434, 0.5626170039176941,
                    0.7229568362236023, 1.0], dtype=torch.float32)


@dataclass
class NF4Weight:
    packed: torch.Tensor   # uint8 [N·K / 2]: two indices per byte, the first in the high nibble
    absmax: torch.Tensor   # fp32 [N·K / block]
    shape: tuple
    block: int = 64

    def indices(self) -> torch.Tensor:
        return torch.stack([self.packed >> 4, self.packed & 0xF], dim=-1).reshape(-1)

    def dequantize(self) -> torch.Tensor:
        v = NF4.to(self.packed.device)[self.indices().long()].reshape(-1, self.block)
        return (v * self.absmax[:, None]).reshape(self.shape)

    def nbytes(self) -> int:
        return self.packed.numel() + self.absmax.numel() * 4


def quantize_nf4(W: torch.Tensor, block: int = 64) -> NF4Weight:
    """NF4 with one absmax per `block` consecutive weights (of the flattened row-major W, as bitsandbytes
    does; with K a multiple of `block` a block never crosses a row): index = the nearest codebook value
    to w / absmax, computed as bitsandbytes does (w times 1 / absmax, clamped to [-1, 1]), so that a weight on a
    decision boundary gets bitsandbytes' index too."""
    _check_weight(W, block, "quantize_nf4")
    b = W.float().reshape(-1, block)
    absmax = b.abs().amax(dim=-1)
    x = (b * (1.0 / absmax.clamp_min(1e-38))[:, None]).clamp(-1, 1)
    cb = NF4.to(W.device)
    mid = (cb[1:] + cb[:-1]) / 2  # decision boundaries between neighbouring codebook values
    idx = torch.bucketize(x.reshape(-1), mid).to(torch.uint8)
    packed = (idx[0::2] << 4) | idx[1::2]
    return NF4Weight(packed, absmax, tuple(W.shape), block)


@dataclass
class NF4Tiles:
    """NF4Weight (2-D, block 64) in 16-row tiles, the order lesson 08's tiled GEMV reads it (`gemv_nf4_tiles`):
    packed: uint8 [ceil(n/16), K/128, 16, 64]: tile, K item (two absmax blocks), row in the tile, byte;
    absmax: fp32 [ceil(n/16), K/64, 16], the same order; rows past n are 0. codebook: the 16 values (NF4), on the
    weights' device, so that a call needs no copy."""
    packed: torch.Tensor
    absmax: torch.Tensor
    n: int
    codebook: torch.Tensor
    block: int = 64

    @property
    def k(self) -> int:
        return self.packed.shape[1] * TILE_K4

    def rows(self) -> NF4Weight:
        """The row-major NF4Weight (bitsandbytes' layout; the inverse of to_tiles)."""
        return NF4Weight(_untile_rows(self.packed, self.n).reshape(-1), _untile_rows(self.absmax[..., None], self.n)
                         .reshape(-1), (self.n, self.k), self.block)

    def dequantize(self) -> torch.Tensor:
        return self.rows().dequantize()

    def nbytes(self) -> int:
        return self.packed.numel() + self.absmax.numel() * 4


# Double quantization (Dettmers et al., QLoRA (2023), section 3; bitsandbytes' quantize_4bit(compress_statistics=True)):
# an FP32 absmax per 64 weights is half a bit per weight. Quantized again, minus their mean, with 8-bit codes of a
# dynamic map and one FP32 scale per 256 of them, they cost 8.1 bits per 64 weights: 4.127 bits per weight instead of
# 4.5, 8% fewer bytes for a decode GEMV to read.

def dynamic_map() -> torch.Tensor:
    """bitsandbytes' signed 8-bit dynamic map (Dettmers, "8-bit approximations for parallelism in deep learning",
    2016; its functional.create_dynamic_map(), the default code of quantize_blockwise): for e = 0 … 6, 2^e values
    in the decade 10^(e−6)·[0.1, 1] (the midpoints of 2^e equal steps), both signs, then 0 and 1; 256 float32
    values, sorted. tests/test_bnb.py checks it equals the library's."""
    vals = [torch.zeros(1), torch.ones(1)]
    for e in range(7):
        edges = torch.linspace(0.1, 1, 2 ** e + 1)
        mid = (edges[:-1] + edges[1:]) / 2.0 * 10.0 ** (e - 6)
        vals += [mid, -mid]
    return torch.cat(vals).sort().values


@dataclass
class NF4DQWeight:
    """NF4 with double-quantized absmax (bitsandbytes' layout with compress_statistics=True): the absmax of block b is
    code[qabsmax[b]] · absmax2[b // block2] + offset, in FP32, the multiply and the add each rounded (as bitsandbytes'
    dequantize_blockwise and its `+ offset`)."""
    packed: torch.Tensor   # uint8 [N·K / 2], as NF4Weight
    qabsmax: torch.Tensor  # uint8 [N·K / block]
    absmax2: torch.Tensor  # fp32 [ceil(N·K / block / block2)]
    offset: torch.Tensor   # fp32 [1]: the mean of the absmax values, taken out before quantizing them
    code: torch.Tensor     # fp32 [256]: dynamic_map()
    shape: tuple
    block: int = 64
    block2: int = 256

    def absmax_values(self) -> torch.Tensor:
        b = torch.arange(self.qabsmax.numel(), device=self.qabsmax.device) // self.block2
        return self.code[self.qabsmax.long()] * self.absmax2[b] + self.offset

    def rows(self) -> NF4Weight:
        """The NF4Weight these bytes decode to (FP32 absmax)."""
        return NF4Weight(self.packed, self.absmax_values(), self.shape, self.block)

    def dequantize(self) -> torch.Tensor:
        return self.rows().dequantize()

    def nbytes(self) -> int:  # the code, like the NF4 codebook, is a constant shared by every layer: not counted
        return self.packed.numel() + self.qabsmax.numel() + self.absmax2.numel() * 4 + 4


def double_quantize(qw: NF4Weight, block2: int = 256) -> NF4DQWeight:
    """qw's absmax values quantized as bitsandbytes' quantize_4bit(compress_statistics=True) does: minus their mean,
    then per `block2` consecutive values an FP32 absmax2 and the nearest dynamic_map() code to v · (1 / absmax2),
    clamped to [−1, 1] (its quantize_blockwise). The weights' bytes are kept."""
    if not isinstance(qw, NF4Weight):
        raise TypeError(f"double_quantize: takes a quant.NF4Weight (quantize_nf4), got {type(qw).__name__}")
    a = qw.absmax.float()
    offset = a.mean().reshape(1)
    v = a - offset
    n = v.numel()
    pad = torch.zeros((-n) % block2, device=v.device)  # the last group may be short; its padding is not stored
    g = torch.cat([v, pad]).reshape(-1, block2)
    absmax2 = g.abs().amax(dim=-1)
    scaled = (g * (1.0 / absmax2.clamp_min(1e-38))[:, None]).clamp(-1, 1).reshape(-1)[:n]
    code = dynamic_map().to(v.device)
    q = torch.bucketize(scaled, (code[:-1] + code[1:]) / 2).to(torch.uint8)
    return NF4DQWeight(qw.packed, q, absmax2, offset, code, qw.shape, qw.block, block2)


@dataclass
class NF4DQTiles:
    """NF4DQWeight (2-D, block 64) in 16-row tiles (`gemv_nf4_tiles_dq`): packed as NF4Tiles; qabsmax: uint8
    [ceil(n/16), K/128, 8, 2, 2]: tile, K item (two blocks), row g of the tile's first 8, the item's block, row g or
    g + 8 (rows past n are 0), so that the four codes an mma lane needs for an item are one 32-bit word; absmax2,
    offset and code as in NF4DQWeight (bitsandbytes' order: the kernel finds a block's absmax2 from its row and K
    block); codebook: NF4."""
    packed: torch.Tensor
    qabsmax: torch.Tensor
    absmax2: torch.Tensor
    offset: torch.Tensor
    code: torch.Tensor
    n: int
    codebook: torch.Tensor
    block: int = 64
    block2: int = 256

    @property
    def k(self) -> int:
        return self.packed.shape[1] * TILE_K4

    def rows(self) -> NF4DQWeight:
        q = self.qabsmax.permute(0, 1, 3, 4, 2).reshape(self.qabsmax.shape[0], -1, 16)  # [tiles, K/64, 16]
        return NF4DQWeight(_untile_rows(self.packed, self.n).reshape(-1), _untile_rows(q[..., None], self.n).reshape(-1),
                           self.absmax2, self.offset, self.code, (self.n, self.k), self.block, self.block2)

    def dequantize(self) -> torch.Tensor:
        return self.rows().dequantize()

    def nbytes(self) -> int:
        return self.packed.numel() + self.qabsmax.numel() + self.absmax2.numel() * 4 + 4


# ----------------------------------------------------------------------------------------------
# W4A8 two-level (lesson 09): 4-bit codes whose dequantized value is an INT8 integer
#
# An INT8 tensor-core GEMM accumulates in INT32 over all of K, so a group's scale cannot be a float applied
# inside the loop without leaving the tensor core for every group (convert, multiply, add). Two levels keep the
# float out: a per-channel float scale turns W into INT8 codes (level 1), and each group of those is coded in
# 4 bits with a small integer scale and zero point (level 2), so (u − gzero) · gscale is again an integer in
# INT8 range. After QServe's progressive group quantization (Lin et al., 2024) and LiquidGEMM's LiquidQuant (Hu
# et al., 2025), both of which restrict level 1 to a "protective" range so that level 2 cannot overflow INT8.
# Ours: level 1 in ±112, so gscale = ceil(range / 15) ≤ 15 and the kernel's byte arithmetic, 128 + (u − gzero)
# · gscale, stays in 0..255 for every u (tests/test_quant.py: test_w4a8_unpack_is_overflow_free).
W4A8_LEVEL1 = 112


def pack_w4a8(u: torch.Tensor) -> torch.Tensor:
    """[N, K] in [0, 15] → int32 [N, K/8] in lesson 09's order: word j holds weights 8j … 8j+7, weight 8j + i
    in bits 8i … 8i+3 and weight 8j + 4 + i in bits 8i+4 … 8i+7 (i < 4). Masking the word with 0x0F0F0F0F then
    gives weights 8j … 8j+3 one per byte, in order, and 0xF0F0F0F0 gives 8j+4 … 8j+7 (times 16)."""
    if u.dim() != 2 or u.shape[1] % 8:
        raise ValueError(f"pack_w4a8: need [N, K] with K a multiple of 8, got {tuple(u.shape)}")
    if u.numel() and (int(u.min()) < 0 or int(u.max()) > 15):
        raise ValueError("pack_w4a8: values must be unsigned 4-bit codes, 0..15")
    v = u.to(torch.int64).reshape(u.shape[0], -1, 2, 4)  # [..., half, i]: weight 8j + 4·half + i
    shifts = torch.arange(0, 32, 8, dtype=torch.int64, device=u.device)
    words = ((v[..., 0, :] | (v[..., 1, :] << 4)) << shifts).sum(dim=-1)
    return torch.where(words >= 2**31, words - 2**32, words).to(torch.int32)


def unpack_w4a8(packed: torch.Tensor) -> torch.Tensor:
    """The inverse of pack_w4a8: int32 [N, K/8] → uint8 [N, K]."""
    b = (packed.to(torch.int64)[..., None] >> torch.arange(0, 32, 8, device=packed.device)) & 0xFF  # [N, K/8, 4]
    return torch.cat([b & 0xF, b >> 4], dim=-1).reshape(packed.shape[0], -1).to(torch.uint8)


@dataclass
class W4A8Weight:
    packed: torch.Tensor   # int32 [N, K / 8], pack_w4a8's order
    scale: torch.Tensor    # fp16 [N, 1]: level 1, per output channel
    gscale: torch.Tensor   # uint8 [N, K / group], 1..15: level 2
    gzero: torch.Tensor    # uint8 [N, K / group], 0..15
    group: int

    def codes(self) -> torch.Tensor:
        """The INT8 values (u − gzero) · gscale that the kernel feeds the tensor core (as 128 + that)."""
        u = unpack_w4a8(self.packed).to(torch.int32)
        N, K = u.shape
        g = u.reshape(N, K // self.group, self.group)
        return ((g - self.gzero.to(torch.int32)[..., None]) * self.gscale.to(torch.int32)[..., None]).reshape(N, K)

    def dequantize(self) -> torch.Tensor:
        return self.codes().float() * self.scale.float()

    def nbytes(self) -> int:
        return self.packed.numel() * 4 + self.scale.numel() * 2 + self.gscale.numel() + self.gzero.numel()


def w4a8_unpack_like_the_gpu(qw: W4A8Weight) -> torch.Tensor:
    """Lesson 09's unpack as the kernel's 32-bit registers see it: four consecutive weights' bytes 128 + (u − gzero)
    · gscale are one 32-bit integer, byte i worth 256^i, summed modulo 2^32, so a byte outside 0..255 carries into
    (or borrows from) the next. Returns the bytes [N, K] in K order; they equal 128 + codes() exactly when no byte
    carried."""
    N, K = qw.packed.shape[0], qw.packed.shape[1] * 8
    u = unpack_w4a8(qw.packed).long()
    s = qw.gscale.long().repeat_interleave(qw.group, dim=1)
    z = qw.gzero.long().repeat_interleave(qw.group, dim=1)
    place = 256 ** torch.arange(4, device=u.device)
    word = ((128 + (u - z) * s).reshape(N, K // 4, 4) * place).sum(dim=-1) % 2**32
    return (word[..., None] // place % 256).reshape(N, K)


def quantize_w4a8(W: torch.Tensor, group: int = 128) -> W4A8Weight:
    """Two-level W4A8 weights. Level 1: scale = absmax(row) / 112, c = round(w / scale) in ±112. Level 2, per
    `group` codes c along K: gscale = max(1, ceil((max − min) / 15)), gzero = round(−min / gscale) kept where
    (u − gzero) · gscale stays in −128..127 for all 16 u, u = clamp(round(c / gscale) + gzero, 0, 15)."""
    _check_weight(W, group, "quantize_w4a8")
    if group % 8:
        raise ValueError(f"quantize_w4a8: the group size ({group}) must be a multiple of 8, one int32 word")
    N, K = W.shape
    scale = (W.float().abs().amax(dim=1, keepdim=True) / W4A8_LEVEL1).to(torch.float16)
    c = torch.round(W.float() / _divisor(scale))
    g = c.clamp(-W4A8_LEVEL1, W4A8_LEVEL1).reshape(N, K // group, group)
    lo, hi = g.amin(dim=-1).clamp(max=0), g.amax(dim=-1).clamp(min=0)  # the range always contains 0
    gs = torch.ceil((hi - lo) / 15).clamp(1, 15)
    # (15 − z)·gs ≤ 127 and z·gs ≤ 128: the byte 128 + (u − z)·gs never leaves 0..255
    zmin, zmax = torch.ceil(15 - 127 / gs), torch.floor(128 / gs)
    gz = torch.round(-lo / gs).clamp(min=0, max=15)
    gz = torch.maximum(torch.minimum(gz, zmax), zmin)
    u = (torch.round(g / gs[..., None]) + gz[..., None]).clamp(0, 15)
    return W4A8Weight(pack_w4a8(u.reshape(N, K).to(torch.int16)), scale, gs.to(torch.uint8), gz.to(torch.uint8), group)


# ----------------------------------------------------------------------------------------------
# Activations: per-token INT8 (the A in W8A8)

def quantize_per_token_int8(x: torch.Tensor, exact: bool = True) -> tuple[torch.Tensor, torch.Tensor]:
    """x [M, K] → (q int8 [M, K], scale fp32 [M]): one scale per row (token), computed at run time,
    scale = absmax(row) / 127 and q = round-half-even(x / scale), both divisions IEEE float32, as the kernels do.

    exact=False is PyTorch's plain route (the W8A8 baseline): on the GPU torch divides by the Python number 127 as
    a multiplication by its reciprocal, which is off by one bit now and then (3 of 33 tokens in one check of lesson
    09), and a code at a rounding boundary then moves by one. exact=True divides in float64 and rounds to float32:
    the float64 error (even through a reciprocal) is far below the distance from absmax / 127 to the nearest float32
    rounding boundary, so the result is the correctly rounded float32 quotient."""
    if not isinstance(x, torch.Tensor) or x.dim() != 2 or not x.is_floating_point():
        raise ValueError(f"quantize_per_token_int8: x must be a 2-D floating-point [M, K] tensor, got "
                         f"{getattr(x, 'dtype', type(x).__name__)} {tuple(getattr(x, 'shape', ()))}")
    xf = x.float()
    amax = xf.abs().amax(dim=1)
    scale = (amax.double() / INT8_MAX).float() if exact else amax / INT8_MAX
    q = torch.round(xf / scale.clamp_min(torch.finfo(torch.float32).tiny)[:, None]).clamp(-INT8_MAX, INT8_MAX)
    return q.to(torch.int8), scale


# ----------------------------------------------------------------------------------------------
# Measuring a format

def rel_error(approx: torch.Tensor, exact: torch.Tensor) -> float:
    """‖approx − exact‖ / ‖exact‖ in float64."""
    a, e = approx.double(), exact.double()
    return float((a - e).norm() / e.norm())


def bits_per_weight(qw, numel: int) -> float:
    """Storage of a quantized weight, scales and zero points included, in bits per weight."""
    return 8 * qw.nbytes() / numel


# ----------------------------------------------------------------------------------------------
# Checking lesson 05's exercises against the reference

@dataclass
class FormatCheck:
    exercise: str
    ok: bool
    message: str

    def __str__(self):
        return f"{'PASS' if self.ok else 'FAIL'}  {self.exercise}: {self.message}"


def _first_diff(got: torch.Tensor, want: torch.Tensor) -> str:
    if got.shape != want.shape:
        return f"shape {tuple(got.shape)}, expected {tuple(want.shape)}"
    if got.dtype != want.dtype:
        return f"dtype {got.dtype}, expected {want.dtype}"
    bad = (got != want).nonzero()
    n = bad.shape[0]
    i = tuple(bad[0].tolist())
    return f"{n:,} of {got.numel():,} values differ; first at {list(i)}: got {got[i].item()}, expected {want[i].item()}"


def check_fragments(mod, seed: int | None = None) -> list[FormatCheck]:
    """Check lesson 10's exercise 10.a (`mod.fragment_words`) on fresh random codes: every word, read back through
    Int4Fragments.codes() (the kernel's view of the layout), must give the codes it was made from."""
    gen = torch.Generator().manual_seed(int.from_bytes(os.urandom(4), "little") if seed is None else seed)
    u = torch.randint(0, 16, (48, 256), dtype=torch.int64, generator=gen)
    try:
        got = mod.fragment_words(u.clone())
        if not isinstance(got, torch.Tensor) or got.dtype != torch.int32 or tuple(got.shape) != (3, 4, 32, 4):
            return [FormatCheck("10.a fragment_words", False, "must return int32 [3, 4, 32, 4] for u [48, 256], got "
                                f"{getattr(got, 'dtype', type(got).__name__)} {list(getattr(got, 'shape', []))}")]
        back = Int4Fragments(got, torch.zeros(2, 48, dtype=torch.float16), 48).codes().to(torch.int64) + 8
        if not torch.equal(back, u):
            r, c = (back != u).nonzero()[0].tolist()
            return [FormatCheck("10.a fragment_words", False, f"W[{r}][{c}] (block row {r % 16}, column {c % 16} of "
                                f"its 16 × 16 block) reads back as {back[r, c].item()}, not {u[r, c].item()}: check "
                                "which lane and nibble hold that element")]
        return [FormatCheck("10.a fragment_words", True, "every word reads back as the codes it came from")]
    except NotImplementedError as e:
        return [FormatCheck("10.a fragment_words", False, f"not implemented yet ({e})")]
    except Exception as e:  # a learner's bug: report it
        return [FormatCheck("10.a fragment_words", False, f"raised {type(e).__name__}: {e}")]


def check_formats(mod, seed: int | None = None) -> list[FormatCheck]:
    """Check lesson 05's exercise functions (module `mod`) against this module, on fresh random inputs
    (outlier columns, an all-zero group, K = 384 so groups of 128 are not the whole row)."""
    gen = torch.Generator().manual_seed(int.from_bytes(os.urandom(4), "little") if seed is None else seed)
    W = torch.randn(48, 384, generator=gen)
    W[:, ::37] *= 8  # outlier columns, as real weight matrices have
    W[3, 128:256] = 0.0
    out = []

    def run(ex, fn):
        try:
            msg = fn()
            out.append(FormatCheck(ex, msg is None, msg or "matches the reference exactly"))
        except NotImplementedError as e:
            out.append(FormatCheck(ex, False, f"not implemented yet ({e})"))
        except Exception as e:  # a learner's bug: report it, keep checking the others
            out.append(FormatCheck(ex, False, f"raised {type(e).__name__}: {e}"))

    def int8():
        ref = quantize_int8(W, 128)
        q, scale = mod.quantize_int8_groupwise(W, 128)
        if not torch.equal(scale, ref.scale):
            return "scales: " + _first_diff(scale, ref.scale)
        if not torch.equal(q, ref.q):
            return "q: " + _first_diff(q, ref.q)

    def int4():
        q = torch.randint(INT4_MIN, INT4_MAX + 1, (16, 64), dtype=torch.int8, generator=gen)
        got, want = mod.pack_int4(q), pack_int4(q)
        if not torch.equal(got, want):
            return _first_diff(got, want) + " (check the nibble order and the sign wrap)"

    def nf4():
        x = torch.cat([torch.rand(4000, generator=gen) * 2 - 1, NF4, (NF4[1:] + NF4[:-1]) / 2])
        got = mod.nf4_index(x)
        want = torch.bucketize(x, (NF4[1:] + NF4[:-1]) / 2).to(torch.uint8)
        if not torch.equal(got, want):
            return _first_diff(got, want) + " (check values exactly halfway between two codes: they take the smaller)"

    run("05.a quantize_int8_groupwise", int8)
    run("05.b pack_int4", int4)
    run("05.c nf4_index", nf4)
    return out
