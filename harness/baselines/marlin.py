"""Marlin as a W4A16 baseline (lessons 07, 10, 11 and 12): where its kernel comes from, its weight layout, and a launcher.

Marlin (Frantar et al., IST-DASLab, 2024) is the W4A16 kernel vLLM serves GPTQ and AWQ models with, the kernel the
course's INT4 kernels are compared with besides cuBLAS and PyTorch's tinygemm. It is not course code: its CUDA
source comes from the optimum-quanto package (requirements.txt), which ships a copy with one change, a scaled zero
point added after the scale (Ŵ = u · s + sz, u = 0..15). With sz = −8 · s, exact in FP16, that is the course's
symmetric INT4 format (the one packed here; with zero points, sz = −zero · s would be rounded to FP16, and the
reference would no longer be the course's). `marlin_baseline.cu`, beside this file, wraps it in the course's launcher
form; `W4A16MarlinLinear` (`PROBLEM`) is the problem its launcher solves.

Marlin's layout (what `pack` builds, written here from the layout its packer documents):
- weights: 16 × 16 tiles of [k][n]; four tiles side by side along N (1,024 weights) are reordered so that lane l's
  16-byte load holds the B fragments (mma.m16n8k16) it needs for the four tiles: k = 2(l % 4) + {0, 1, 8, 9} of
  columns l / 4 and l / 4 + 8, 8 per tile; within each 8, the order 0 2 4 6 1 3 5 7 (lesson 06's pairing: one LOP3
  turns nibbles i and i + 4 into a half2); then 8 nibbles per int32, low first. int32 [K/16, 2N].
- scales and scaled zeros: fp16 [K/128, N], each 64 columns in the order (i + 8j).
"""
from __future__ import annotations

import functools
from dataclasses import dataclass
from importlib import metadata
from pathlib import Path

import torch

from .. import build, quant
from ..problems import W4A16Linear, _bind_repacked, _Repacked

PACKAGE, VERSION = "optimum-quanto", "0.2.7"
OP = "Marlin"  # its rows' name in results/07.json, 10.json and 12.json
KERNEL = "optimum/quanto/library/extensions/cuda/marlin/marlin_cuda_kernel.cu"
GROUP = 128
N_MULTIPLE = 256  # Marlin's block tile is 256 outputs wide past 16 tokens (128 up to 16)


class MarlinUnavailable(RuntimeError):
    pass


def kernel_dir() -> Path:
    """The folder of Marlin's CUDA source in the installed optimum-quanto (found without importing the package)."""
    try:
        dist = metadata.distribution(PACKAGE)
    except metadata.PackageNotFoundError:
        raise MarlinUnavailable(f"Marlin's source comes from the {PACKAGE} package, which is not installed: "
                                f"pip install {PACKAGE}=={VERSION} (requirements.txt has it)") from None
    if dist.version != VERSION:
        raise MarlinUnavailable(f"{PACKAGE} {dist.version} is installed; the course is pinned to {VERSION}, whose "
                                f"Marlin layout harness/baselines/marlin.py packs for (pip install {PACKAGE}=={VERSION})")
    path = Path(dist.locate_file(KERNEL))
    if not path.is_file():
        raise MarlinUnavailable(f"{PACKAGE} {VERSION} is installed but {path} is missing")
    return path.parent


def unavailable() -> str | None:
    """Why Marlin cannot be built here, or None."""
    try:
        kernel_dir()
    except MarlinUnavailable as e:
        return str(e)
    return None


SOURCE = Path(__file__).with_name("marlin_baseline.cu")


def load():
    """The compiled launcher module (marlin_baseline.cu, Marlin's source on the include path)."""
    flags = [f"-I{kernel_dir()}", "-DMARLIN_FROM_QUANTO_" + VERSION.replace(".", "_")]  # the version in the cache key
    return build.load_file(SOURCE, solution=True, extra_cuda_flags=flags)


@functools.cache
def _weight_order() -> torch.Tensor:
    """Position i of a packed 1,024-weight chunk holds weight _weight_order()[i] of the chunk before reordering
    (four 16 × 16 [k][n] tiles, one after the other)."""
    order = []
    for lane in range(32):
        n, k = lane // 4, 2 * (lane % 4)
        frag = [16 * kk + n + 8 * half for half in (0, 1) for kk in (k, k + 1, k + 8, k + 9)]
        for tile in range(4):
            order += [i + 256 * tile for i in frag]
    return torch.tensor(order).reshape(-1, 8)[:, [0, 2, 4, 6, 1, 3, 5, 7]].reshape(-1)


@functools.cache
def _scale_order() -> torch.Tensor:
    return torch.tensor([i + 8 * j for i in range(8) for j in range(8)])


@dataclass
class MarlinWeight:
    """INT4 weights (group 128) in Marlin's layout, with the quant.Int4Weight they came from (the reference's
    weights: a packing mistake then shows up as a wrong result, not as a matching one)."""
    packed: torch.Tensor  # int32 [K/16, 2N]
    scale: torch.Tensor   # fp16 [K/128, N], Marlin's column order
    zero: torch.Tensor    # fp16 [K/128, N]: −8 · scale, the same order
    locks: torch.Tensor   # int32 [N/128 · 16], zero: Marlin's inter-block barriers (it leaves them zero)
    source: object        # quant.Int4Weight
    n: int
    k: int
    group: int = GROUP

    def dequantize(self) -> torch.Tensor:
        return self.source.dequantize()


def pack(w) -> MarlinWeight:
    """quant.Int4Weight (symmetric, group 128) → MarlinWeight, on w's device."""
    if not isinstance(w, quant.Int4Weight):
        raise TypeError(f"marlin.pack: w must be a quant.Int4Weight (quantize_int4), got {type(w).__name__}")
    N, K = w.packed.shape[0], w.packed.shape[1] * 8
    if not w.symmetric:
        raise ValueError("marlin.pack: only the symmetric format (quantize_int4(W, symmetric=True)) is packed for Marlin")
    if w.group != GROUP:
        raise ValueError(f"marlin.pack: Marlin reads groups of {GROUP} weights along K; these have {w.group}")
    if N % N_MULTIPLE or K % GROUP:
        raise ValueError(f"marlin.pack: Marlin needs N a multiple of {N_MULTIPLE} (its block tile) and K of {GROUP}; "
                         f"got N = {N}, K = {K}")
    u = quant.unpack_int4(w.packed, signed=True).to(torch.int64) + 8  # 0..15, the zero point 8
    t = u.t().reshape(K // 16, 16, N // 16, 16).permute(0, 2, 1, 3).reshape(-1, 1024)
    t = t[:, _weight_order().to(t.device)].reshape(K // 16, 2 * N, 8)
    words = (t << torch.arange(0, 32, 4, device=t.device)).sum(-1)
    packed = torch.where(words >= 2**31, words - 2**32, words).to(torch.int32)

    def columns(m):  # [N, K/128] → [K/128, N] in Marlin's column order
        return m.t().reshape(-1, 64)[:, _scale_order().to(m.device)].reshape(K // GROUP, N).contiguous()
    locks = torch.zeros(N // 128 * 16, dtype=torch.int32, device=w.packed.device)
    return MarlinWeight(packed, columns(w.scale), columns(w.scale * -8), locks, w, N, K)


@dataclass
class W4A16MarlinLinear(_Repacked, W4A16Linear):
    """W4A16Linear's symmetric problem with the weights in Marlin's layout: `op(x, w, out=None)` with w a MarlinWeight
    (`pack`). Launcher: `fn(x, packed, scale, zero, locks, y, M, N, K)` (marlin_baseline.cu). Marlin takes N a multiple
    of 256 and K of 128, so the odd shapes are odd in M."""
    name: str = "w4a16_marlin"
    check_shapes: tuple = ((1, 256, 128), (2, 512, 384), (5, 768, 256), (16, 1024, 1152), (17, 256, 640),
                           (31, 512, 256), (64, 768, 512), (100, 256, 384), (127, 512, 1024), (256, 1024, 256),
                           (1, 4096, 4096))

    def make_inputs(self, shape, gen: torch.Generator | None = None, device="cuda"):
        x, packed, scale = W4A16Linear.make_inputs(self, shape, gen, device)
        return x, pack(quant.Int4Weight(packed, scale, self.group))

    def bind(self, launcher, name: str | None = None):
        return _bind_repacked(self, launcher, name, "w4a16_marlin_op", MarlinWeight,
                              "marlin.pack(quantize_int4(W))", lambda w, K: [
                                  (w.packed, torch.int32, (K // 16, 2 * w.n), "w.packed (Marlin's layout)"),
                                  (w.scale, torch.float16, (K // self.group, w.n), "w.scale (Marlin's order)"),
                                  (w.zero, torch.float16, (K // self.group, w.n), "w.zero (−8 · scale)"),
                                  (w.locks, torch.int32, (w.n // 128 * 16,), "w.locks")])


PROBLEM = W4A16MarlinLinear()


def op():
    """Marlin's launcher bound to PROBLEM (`op(x, w, out=None)`, w from `pack`)."""
    return PROBLEM.bind(load().marlin_w4a16, "marlin")


def bench_op(sets):
    """For bench.time_fn over W4A16 input sets (x, q, scale): op(x, q, scale) runs Marlin on that set's weights,
    packed here, before any timing, as a serving engine repacks weights when it loads them."""
    run = op()
    packed = {id(q): pack(quant.Int4Weight(q, s, GROUP)) for _, q, s in sets}
    return lambda x, q, s: run(x, packed[id(q)])
