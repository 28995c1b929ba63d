"""bitsandbytes as lesson 08's baseline: the library whose NF4 format the lesson reads, run on the same bytes.

bitsandbytes (Dettmers et al.) is where NF4 comes from (QLoRA, 2023) and what Hugging Face's `load_in_4bit` runs.
It is not course code and is imported only here, lazily (its import takes seconds). Lesson 08 times two of its
routes on the course's bytes, which are bitsandbytes' own (tests/test_bnb.py: `quantize_4bit` gives the same bytes
and absmax as harness.quant, and its dequantization the same FP16 values):
- `dequantize(w)`: `bitsandbytes.functional.dequantize_4bit`, its NF4 → FP16 kernel;
- `linear(x, w)`: `bitsandbytes.matmul_4bit`, the route of a `Linear4bit` layer at inference: its fused 4-bit kernels
  for small M (which kernel, and where it falls back to dequantize + `F.linear`, is the library's choice per GPU).
"""
from __future__ import annotations

import functools
from importlib import metadata

import torch

from .. import quant

PACKAGE, VERSION = "bitsandbytes", "0.50.2"
DEQUANT_OP, LINEAR_OP = "bitsandbytes dequantize_4bit", "bitsandbytes matmul_4bit"  # its rows' names in results/08.json


class BnbUnavailable(RuntimeError):
    pass


def unavailable() -> str | None:
    """Why bitsandbytes cannot be used here, or None (checked without importing it)."""
    try:
        version = metadata.version(PACKAGE)
    except metadata.PackageNotFoundError:
        return f"the {PACKAGE} package is not installed: pip install {PACKAGE}=={VERSION} (requirements.txt has it)"
    if version != VERSION:
        return f"{PACKAGE} {version} is installed; the course is pinned to {VERSION} (pip install {PACKAGE}=={VERSION})"
    return None


@functools.cache
def _lib():
    why = unavailable()
    if why:
        raise BnbUnavailable(why)
    import bitsandbytes
    import bitsandbytes.functional
    return bitsandbytes


def _check(w, what: str):
    if not isinstance(w, quant.NF4Weight):
        hint = "; NF4Tiles.rows() gives it back" if isinstance(w, quant.NF4Tiles) else ""
        raise TypeError(f"{what}: needs a harness.quant.NF4Weight (bitsandbytes' row-major layout), got "
                        f"{type(w).__name__}{hint}")
    if len(w.shape) != 2:
        raise ValueError(f"{what}: needs a 2-D weight [N, K], got shape {tuple(w.shape)}")
    if w.packed.dtype != torch.uint8 or w.absmax.dtype != torch.float32:
        raise TypeError(f"{what}: packed must be uint8 and absmax float32, got {w.packed.dtype} and {w.absmax.dtype}")
    N, K = w.shape
    if w.packed.numel() != N * K // 2 or w.absmax.numel() != N * K // w.block:
        raise ValueError(f"{what}: {w.packed.numel()} packed bytes and {w.absmax.numel()} absmax values do not fit "
                         f"[{N}, {K}] in blocks of {w.block}")
    if w.packed.device != w.absmax.device:
        raise ValueError(f"{what}: packed is on {w.packed.device} and absmax on {w.absmax.device}")


@functools.cache
def _code(device: str) -> torch.Tensor:  # made once per device: a fresh one would be a copy inside every timed call
    return _lib().functional.get_4bit_type("nf4", device=device)


def state(w: quant.NF4Weight, dtype: torch.dtype = torch.float16):
    """bitsandbytes' QuantState for the course's NF4 weights (no copy: the same absmax tensor)."""
    _check(w, "bnb.state")
    return _lib().functional.QuantState(absmax=w.absmax, shape=torch.Size(w.shape), code=_code(str(w.packed.device)),
                                        blocksize=w.block, quant_type="nf4", dtype=dtype)


def quantize(W: torch.Tensor, block: int = 64) -> quant.NF4Weight:
    """bitsandbytes' own NF4 quantization of W [N, K], as the course's NF4Weight."""
    if W.dim() != 2 or W.dtype not in (torch.float16, torch.bfloat16, torch.float32):
        raise ValueError(f"bnb.quantize: needs a 2-D float weight [N, K], got {W.dtype} {tuple(W.shape)}")
    packed, st = _lib().functional.quantize_4bit(W, blocksize=block, quant_type="nf4", compress_statistics=False)
    return quant.NF4Weight(packed.reshape(-1), st.absmax.reshape(-1), tuple(W.shape), block)


def dequantize(w: quant.NF4Weight, out: torch.Tensor | None = None) -> torch.Tensor:
    """Ŵ [N, K] in FP16 by bitsandbytes' kernel."""
    return _lib().functional.dequantize_4bit(w.packed, state(w), out=out)


def linear(x: torch.Tensor, w: quant.NF4Weight, st=None) -> torch.Tensor:
    """y = x · Ŵᵀ by `bitsandbytes.matmul_4bit` (x FP16 [M, K] on the weights' device); `st`: state(w), made once by
    a caller that calls often (as a Linear4bit layer keeps its quant_state)."""
    st = state(w) if st is None else st
    K = w.shape[1]
    if not isinstance(x, torch.Tensor) or x.dtype != torch.float16 or x.dim() != 2 or x.shape[1] != K:
        raise ValueError(f"bnb.linear: x must be a float16 tensor [M, {K}], got "
                         + (f"{x.dtype} {tuple(x.shape)}" if isinstance(x, torch.Tensor) else type(x).__name__))
    if x.device != w.packed.device:
        raise ValueError(f"bnb.linear: x is on {x.device}, the weights on {w.packed.device}")
    return _lib().matmul_4bit(x, w.packed, st)


# The same two routes in the calling forms of lesson 08's problems (catalog.DEQUANT_NF4, catalog.NF4_LINEAR), so that
# check.check and the benchmark run them on the inputs the course's kernels get (the codebook argument is unused:
# bitsandbytes decodes with its own table, which is harness.quant.NF4).
def _weight(packed, absmax):
    N, K = packed.shape[0], packed.shape[1] * 2
    return quant.NF4Weight(packed.reshape(-1), absmax.reshape(-1), (N, K), K // absmax.shape[1])


def dequant_op(packed, absmax, codebook, out=None):
    return dequantize(_weight(packed, absmax), out=out)


def linear_op(x, packed, absmax, codebook, out=None):
    y = linear(x, _weight(packed, absmax))
    return out.copy_(y) if out is not None else y


dequant_op.__name__, linear_op.__name__ = DEQUANT_OP, LINEAR_OP
