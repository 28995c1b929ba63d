"""Lesson 11: the decode step of a Llama-shaped model, built from the course's kernels.

A decoder layer (Llama 3 / Mistral shape: pre-norm, grouped-query attention with RoPE, SwiGLU MLP):

    residual += delta;  x = RMSNorm(residual)             add_rmsnorm   (lesson 11)
    qkv = x · Wqkvᵀ                                       linear        (cuBLAS, or lesson 06/07/08/10)
    attn = attention(RoPE(q), cache ← RoPE(k), v)         attention     (lesson 11)
    delta = attn · Woᵀ                                    linear
    residual += delta;  x = RMSNorm(residual)             add_rmsnorm
    gate_up = x · Wguᵀ;  act = silu(gate) · up            linear, silu_mul (lesson 11)
    delta = act · Wdownᵀ                                  linear

The four linear layers of each layer, and the LM head, are what a weight format replaces (`FORMATS`; `BASELINES`:
Marlin and bitsandbytes, third-party kernels on the same INT4 and NF4 weights, for comparison); everything else is
the same for every format, so the comparison between formats is the comparison between GEMM kernels.
Weights are random (no checkpoint is downloaded): speed depends only on the shapes, and the check against the FP16
model measures what quantization and our kernels change, not the quality of a trained model.

`DecodeModel.step(tokens, pos)` runs one token per sequence; `DecodeGraph` captures a step as a CUDA graph (the
position lives in device memory, so one graph serves every step). `reference_forward` is an independent
full-sequence implementation in PyTorch (causal attention over the whole prompt, no cache) that the step-by-step
model must agree with: the CPU tests check the plumbing (cache, positions, grouped heads) with it.
"""
from __future__ import annotations

import contextlib
import gc
import math
from dataclasses import dataclass, replace

import warnings

import torch
from torch.profiler import ProfilerActivity, profile

from . import build, catalog, quant, roofline
from .baselines import bnb, marlin
from .decode_math import apply_rope, attention_reference, rms_norm, rope_table  # noqa: F401 (also harness.decode's)
from .decode_math import torch_add_rmsnorm, torch_attention, torch_silu_mul


@dataclass(frozen=True)
class Config:
    """Llama-3-8B's shape by default (Meta's config.json: hidden 4096, MLP 14336, 32 q heads, 8 kv heads of 128,
    vocabulary 128256, RoPE θ 500000, RMSNorm ε 1e-5); `n_layers` can be lowered to fit a smaller GPU."""
    hidden: int = 4096
    intermediate: int = 14336
    n_heads: int = 32
    n_kv_heads: int = 8
    head_dim: int = 128
    n_layers: int = 32
    vocab: int = 128256
    rope_theta: float = 500000.0
    eps: float = 1e-5

    def __post_init__(self):
        if self.head_dim != 128:
            raise ValueError("the course's attention kernel holds a 128-wide head in a warp: head_dim must be 128")
        if self.n_heads % self.n_kv_heads:
            raise ValueError(f"n_heads ({self.n_heads}) must be a multiple of n_kv_heads ({self.n_kv_heads})")
        if self.hidden % 128 or self.intermediate % 128:
            raise ValueError("hidden and intermediate must be multiples of 128 (the formats' group along K)")

    @property
    def qkv_out(self) -> int:
        return (self.n_heads + 2 * self.n_kv_heads) * self.head_dim

    def linears(self) -> list[tuple[str, int, int]]:
        """(name, N, K) of one layer's linear layers, fused as the model runs them."""
        return [("qkv", self.qkv_out, self.hidden), ("o", self.hidden, self.n_heads * self.head_dim),
                ("gate_up", 2 * self.intermediate, self.hidden), ("down", self.hidden, self.intermediate)]

    def linear_params(self) -> int:
        """Weights of every linear layer, the LM head included."""
        return self.n_layers * sum(n * k for _, n, k in self.linears()) + self.vocab * self.hidden


LLAMA3_8B = Config()
TINY = Config(hidden=256, intermediate=384, n_heads=2, n_kv_heads=1, n_layers=2, vocab=1000)


# ----------------------------------------------------------------------------------------------
# The model's small ops: PyTorch's (the math of harness.decode_math) or the lesson's kernels

@dataclass
class Ops:
    """The model's non-GEMM ops, with the signatures of the problems they solve (harness/problems.py)."""
    add_rmsnorm: object
    attention: object
    silu_mul: object
    label: str
    module: object = None  # the compiled kernel file (its set_pdl), None for PyTorch's ops


def torch_ops(eps: float = 1e-5) -> Ops:
    """The same ops in PyTorch, for any device and float dtype (computed in float32, stored in the inputs' dtype)."""

    def add_rmsnorm(h, delta, w, out=None, eps=eps):
        return torch_add_rmsnorm(h, delta, w, out, eps)

    return Ops(add_rmsnorm, torch_attention, torch_silu_mul, "PyTorch")


def cuda_ops(solution: bool | None = None, teaching: bool = False) -> Ops:
    """Lesson 11's kernels. Running the solutions (solution=True, or COURSE_SOLUTIONS=1 with None): the fast ones the
    recorded step runs (solutions/11_decode/decode_ops_fast.cu); otherwise the teaching file with your exercises
    (kernels/11_decode/decode_ops.cu). teaching=True: the teaching file, from solutions/ or kernels/ by `solution`."""
    fast = not teaching and (build.use_solutions() if solution is None else solution)
    if fast:
        mod = build.load(11, "decode_ops_fast", solution=True)
        return Ops(catalog.ADD_RMSNORM.bind(mod.add_rmsnorm_fast, "add_rmsnorm"),
                   catalog.ATTENTION.bind(mod.decode_attention_fast, "decode_attention"),
                   catalog.SILU_MUL.bind(mod.silu_mul_fast, "silu_mul"), "lesson 11", mod)
    mod = build.load(11, "decode_ops", solution=solution)
    return Ops(catalog.ADD_RMSNORM.bind(mod.add_rmsnorm, "add_rmsnorm"),
               catalog.ATTENTION.bind(mod.decode_attention, "decode_attention"),
               catalog.SILU_MUL.bind(mod.silu_mul, "silu_mul"), "lesson 11 (teaching)", mod)


# ----------------------------------------------------------------------------------------------
# Weights

def random_weights(cfg: Config, seed: int = 0, device="cuda", dtype=torch.float16) -> dict:
    """Random weights of `cfg`'s shape, scaled so activations stay O(1) through any depth: projections into a layer
    ~ N(0, 1/K) (unit-variance outputs from normalised inputs; 0.016 at K = 4096, about the spread of trained Llama
    projections), the two that write into the residual stream (o, down) also divided by sqrt(2 · n_layers) (GPT-2's
    residual scaling), norm weights near 1, a unit-variance embedding. The scaling matters to the accuracy check:
    32 random layers with more gain amplify any perturbation of the weights into the logits (lessons/11_decode_capstone/notes.md),
    and the comparison with the FP16 model would then measure the random network, not the format."""
    g = torch.Generator(device=device).manual_seed(seed)

    def w(n, k, scale=1.0):
        return (torch.randn(n, k, generator=g, device=device) * (scale / math.sqrt(k))).to(dtype)

    def norm():
        return (1 + 0.1 * torch.randn(cfg.hidden, generator=g, device=device)).to(dtype)

    res = 1 / math.sqrt(2 * cfg.n_layers)
    layers = []
    for _ in range(cfg.n_layers):
        layers.append({"attn_norm": norm(), "qkv": w(cfg.qkv_out, cfg.hidden),
                       "o": w(cfg.hidden, cfg.n_heads * cfg.head_dim, res), "mlp_norm": norm(),
                       "gate_up": w(2 * cfg.intermediate, cfg.hidden), "down": w(cfg.hidden, cfg.intermediate, res)})
    return {"embed": torch.randn(cfg.vocab, cfg.hidden, generator=g, device=device).to(dtype), "layers": layers,
            "final_norm": norm(), "lm_head": w(cfg.vocab, cfg.hidden)}


# ----------------------------------------------------------------------------------------------
# Linear layers: one class per weight format, all called as layer(x [M, K], out [M, N])

def _by_rows(W: torch.Tensor, fn, max_elems: int = 1 << 25) -> list:
    """fn applied to blocks of W's rows (a multiple of 16 rows each): quantizing a 0.5 G-weight LM head at once
    would need several GB of int64 temporaries."""
    rows = max(16, (max_elems // W.shape[1]) // 16 * 16)
    return [fn(W[i:i + rows]) for i in range(0, W.shape[0], rows)]


def _kernel_op(lesson: int, launcher: str, solution):
    """The launcher bound to its problem, and its compiled kernel file (for set_pdl)."""
    k = next(k for k in catalog.kernels(lesson) if k.launcher == launcher)
    return catalog.op(k, solution=solution), build.load(k.lesson, k.file, solution=True if not k.stub else solution)


class DenseLinear:
    """FP16 weights, cuBLAS through torch.mm: the baseline every format is measured against."""

    module = None  # cuBLAS: nothing of ours to launch with PDL

    def __init__(self, W: torch.Tensor, solution=None):
        self.W, self.n, self.k = W, W.shape[0], W.shape[1]

    def __call__(self, x, out):
        return torch.mm(x, self.W.t(), out=out)

    def nbytes(self) -> int:
        return self.W.numel() * self.W.element_size()

    def dequantized(self) -> torch.Tensor:
        return self.W


class W8A16Layer:
    """INT8 group-128 weights in 16-row tiles, lesson 06's GEMV on tiles (`gemv_w8a16_tiles`; a decode step has
    M ≤ 16: the batch)."""

    def __init__(self, W, solution=None):
        parts = _by_rows(W, lambda w: quant.quantize_int8(w, 128))
        self.w = quant.to_tiles(quant.Int8Weight(torch.cat([p.q for p in parts]), torch.cat([p.scale for p in parts]),
                                                 128))
        self.n, self.k = W.shape
        self.op, self.module = _kernel_op(6, "gemv_w8a16_tiles", solution)

    def __call__(self, x, out):
        return self.op(x, self.w, out=out)

    def nbytes(self):
        return self.w.nbytes()

    def dequantized(self):
        q = self.w.codes()
        return torch.cat([quant.Int8Weight(q[i:i + 4096], self.w.scale[i:i + 4096], 128).dequantize().half()
                          for i in range(0, self.n, 4096)])


class W4A16FragLayer:
    """INT4 group-128 weights in mma fragment order, lesson 10's linear_w4a16_frag (its kernel for every M)."""

    def __init__(self, W, solution=None):
        parts = _by_rows(W, lambda w: quant.to_fragments(quant.quantize_int4(w, 128)))
        self.w = quant.Int4Fragments(torch.cat([p.packed for p in parts]), torch.cat([p.scale for p in parts], 1),
                                     W.shape[0], 128)
        self.n, self.k = W.shape
        self.op, self.module = _kernel_op(10, "linear_w4a16_frag", solution)

    def __call__(self, x, out):
        return self.op(x, self.w, out=out)

    def nbytes(self):
        return self.w.nbytes()

    def dequantized(self):
        tiles = self.w.packed.shape[0]
        step = 256  # m16 tiles per block of rows
        out = []
        for t in range(0, tiles, step):
            part = quant.Int4Fragments(self.w.packed[t:t + step], self.w.scale[:, 16 * t:16 * (t + step)],
                                       min(self.n - 16 * t, 16 * step), 128)
            out.append(part.dequantize().half())
        return torch.cat(out)


class W4A16Layer:
    """INT4 group-128 weights in lesson 07's packing, in 16-row tiles: lesson 07's GEMV on tiles
    (`gemv_w4a16_tiles`; a decode step has M ≤ 16: the batch)."""

    def __init__(self, W, solution=None):
        parts = _by_rows(W, lambda w: quant.quantize_int4(w, 128))
        self.w = quant.to_tiles(quant.Int4Weight(torch.cat([p.packed for p in parts]),
                                                 torch.cat([p.scale for p in parts]), 128))
        self.n, self.k = W.shape
        self.op, self.module = _kernel_op(7, "gemv_w4a16_tiles", solution)

    def __call__(self, x, out):
        return self.op(x, self.w, out=out)

    def nbytes(self):
        return self.w.nbytes()

    def dequantized(self):
        w = self.w.rows()
        return torch.cat([quant.Int4Weight(w.packed[i:i + 4096], w.scale[i:i + 4096], 128).dequantize().half()
                          for i in range(0, self.n, 4096)])


def _nf4_dequantized(w: quant.NF4Weight) -> torch.Tensor:
    """Row-major NF4 weights in FP16, 4096 rows at a time (the LM head at once would need GBs of temporaries)."""
    n, k = w.shape
    packed, absmax = w.packed.view(n, k // 2), w.absmax.view(n, k // w.block)
    return torch.cat([quant.NF4Weight(packed[i:i + 4096].reshape(-1), absmax[i:i + 4096].reshape(-1),
                                      (min(4096, n - i), k), w.block).dequantize().half() for i in range(0, n, 4096)])


class NF4Layer:
    """NF4 weights (bitsandbytes' quantization, block 64) repacked into 16-row tiles, lesson 08's GEMV on tiles
    (`gemv_nf4_tiles`)."""

    launcher = "gemv_nf4_tiles"

    def __init__(self, W, solution=None):
        parts = _by_rows(W, lambda w: quant.quantize_nf4(w, 64))
        self.n, self.k = W.shape
        self.w = self._tiles(quant.NF4Weight(torch.cat([p.packed for p in parts]),
                                             torch.cat([p.absmax for p in parts]), (self.n, self.k), 64))
        self.op, self.module = _kernel_op(8, self.launcher, solution)

    @staticmethod
    def _tiles(w: quant.NF4Weight):
        return quant.to_tiles(w)

    def __call__(self, x, out):
        return self.op(x, self.w, out=out)

    def nbytes(self):
        return self.w.nbytes()

    def dequantized(self):
        return _nf4_dequantized(self.w.rows())


class NF4DQLayer(NF4Layer):
    """NF4Layer's weights with their absmax double-quantized (`quant.double_quantize`, bitsandbytes'
    compress_statistics=True: an 8-bit code per 64 weights, an FP32 absmax2 per 256 codes), lesson 08's
    `gemv_nf4_tiles_dq`. The whole layer's absmax values share one offset, as bitsandbytes' do."""

    launcher = "gemv_nf4_tiles_dq"

    @staticmethod
    def _tiles(w: quant.NF4Weight):
        return quant.to_tiles(quant.double_quantize(w))

    def dequantized(self):
        return _nf4_dequantized(self.w.rows().rows())


class MarlinLayer:
    """A baseline, not course code: the same symmetric INT4 group-128 weights in Marlin's layout (harness.baselines.marlin), run
    by Marlin, the kernel vLLM serves 4-bit models with. Marlin needs N a multiple of 256: other N are padded with zero
    rows and the step copies the real outputs out of a buffer (Llama-3-8B's layers need no padding). Launched
    without PDL, as cuBLAS is."""

    module = None

    def __init__(self, W, solution=None):
        self.n, self.k = W.shape
        parts = _by_rows(W, lambda w: quant.quantize_int4(w, 128))
        pad = -self.n % marlin.N_MULTIPLE
        packed, scale = torch.cat([p.packed for p in parts]), torch.cat([p.scale for p in parts])
        if pad:
            packed = torch.cat([packed, packed.new_zeros(pad, packed.shape[1])])
            scale = torch.cat([scale, scale.new_zeros(pad, scale.shape[1])])
        self.source = quant.Int4Weight(packed, scale, 128)
        # packed in blocks of 4096 rows (Marlin's layout keeps each block's columns together), joined along N
        blocks = [marlin.pack(quant.Int4Weight(packed[i:i + 4096], scale[i:i + 4096], 128))
                  for i in range(0, packed.shape[0], 4096)]
        n = packed.shape[0]
        self.w = marlin.MarlinWeight(torch.cat([b.packed for b in blocks], 1), torch.cat([b.scale for b in blocks], 1),
                                     torch.cat([b.zero for b in blocks], 1),
                                     torch.zeros(n // 128 * 16, dtype=torch.int32, device=W.device), self.source, n,
                                     self.k)
        self.op = marlin.op()
        self.buf = None

    def __call__(self, x, out):
        if self.w.n == self.n:
            return self.op(x, self.w, out=out)
        if self.buf is None or self.buf.shape[0] < x.shape[0]:
            self.buf = torch.empty(x.shape[0], self.w.n, dtype=out.dtype, device=out.device)
        self.op(x, self.w, out=self.buf[:x.shape[0]])
        return out.copy_(self.buf[:x.shape[0], :self.n])

    def nbytes(self):
        return self.w.packed.numel() * 4 + self.w.scale.numel() * 2 + self.w.zero.numel() * 2

    def dequantized(self):
        w = self.source
        return torch.cat([quant.Int4Weight(w.packed[i:i + 4096], w.scale[i:i + 4096], 128).dequantize().half()
                          for i in range(0, self.n, 4096)])[:self.n]


class BnbNF4Layer:
    """A baseline, not course code: the same NF4 weights as NF4Layer (block 64, bitsandbytes' own bytes), row-major as
    bitsandbytes keeps them, run by `bitsandbytes.matmul_4bit` as a `Linear4bit` layer runs at inference
    (harness.baselines.bnb; which of its kernels runs, or whether it dequantizes and calls cuBLAS, is the library's
    choice per shape and GPU).
    It returns a new tensor, as a layer does: the step reads each layer's result where the layer put it, so no copy
    into the step's buffer is timed. Launched without PDL."""

    module = None

    def __init__(self, W, solution=None):
        parts = _by_rows(W, lambda w: quant.quantize_nf4(w, 64))
        self.n, self.k = W.shape
        self.w = quant.NF4Weight(torch.cat([p.packed for p in parts]), torch.cat([p.absmax for p in parts]),
                                 (self.n, self.k), 64)
        self.state = bnb.state(self.w)  # made once, as a Linear4bit holds its quant_state

    def __call__(self, x, out):
        return bnb.linear(x, self.w, st=self.state)

    def nbytes(self):
        return self.w.packed.numel() + self.w.absmax.numel() * 4

    def dequantized(self):
        return _nf4_dequantized(self.w)


@dataclass(frozen=True)
class Format:
    name: str
    label: str
    layer: type
    bits: float  # stored bits per weight, scales included
    # the stated tolerances on ‖Δ logits‖ / ‖logits‖ (lesson 11, section 5; tests/test_decode.py): against an FP16
    # model holding the format's own dequantized weights (the kernels), and against the FP16 weights (quantization)
    tolerance: tuple = (5e-3, 0.2)

    def weight_bytes(self, cfg: Config) -> float:
        return cfg.linear_params() * self.bits / 8


FORMATS = {f.name: f for f in [
    Format("fp16", "FP16 (cuBLAS)", DenseLinear, 16),
    Format("w8a16", "W8A16 (lesson 06)", W8A16Layer, 8 + 16 / 128, (5e-3, 0.02)),
    Format("w4a16", "W4A16 (lesson 10)", W4A16FragLayer, 4 + 16 / 128),
    Format("w4a16_07", "W4A16 (lesson 07)", W4A16Layer, 4 + 16 / 128),
    Format("nf4", "NF4 (lesson 08)", NF4Layer, 4 + 32 / 64),
    # an 8-bit code per 64 weights and an FP32 absmax2 per 256 codes (the one offset per layer is not counted)
    Format("nf4dq", "NF4 DQ (lesson 08)", NF4DQLayer, 4 + 8 / 64 + 32 / (64 * 256)),
]}
# Third-party kernels on the same weights, for comparison (not in the lesson's run by default):
# tools/bench_decode.py --formats fp16 w4a16 marlin nf4 nf4_bnb. Marlin reads a scaled zero point per group too.
BASELINES = {f.name: f for f in [Format("marlin", "W4A16 (Marlin)", MarlinLayer, 4 + 32 / 128),
                                 Format("nf4_bnb", "NF4 (bitsandbytes)", BnbNF4Layer, 4 + 32 / 64)]}
ALL_FORMATS = {**FORMATS, **BASELINES}


# ----------------------------------------------------------------------------------------------
# The model

@dataclass
class _Buffers:
    delta: torch.Tensor   # [B, H]: the embedding, then each attention / MLP output added to the residual
    hn: torch.Tensor      # [2, B, H]: the residual stream and its normalised copy (add_rmsnorm's output)
    qkv: torch.Tensor
    attn: torch.Tensor
    gu: torch.Tensor
    act: torch.Tensor
    logits: torch.Tensor


def pdl_supported(device=None) -> bool:
    """Programmatic dependent launch needs compute capability 9.0 (Hopper) or newer."""
    return torch.cuda.is_available() and torch.cuda.get_device_capability(device) >= (9, 0)


class DecodeModel:
    """A Llama-shaped decoder with its linear layers in weight format `fmt` (a key of FORMATS). Holds its KV cache
    (max_batch sequences of max_seq positions) and, for each batch size used, static activation buffers, so a step
    allocates nothing and can be captured in a CUDA graph.

    pdl: launch the course's kernels of a step with programmatic dependent launch, so that each may start (and
    begin reading its weights) while the kernel before it finishes. None: where the GPU supports it (sm_90+).
    cuBLAS's GEMMs (the FP16 model) and PyTorch's kernels launch as usual."""

    def __init__(self, cfg: Config, weights: dict, fmt: str = "fp16", *, max_batch: int = 1, max_seq: int = 1024,
                 ops: Ops | None = None, solution: bool | None = None, pdl: bool | None = None):
        if not isinstance(fmt, Format) and fmt not in ALL_FORMATS:  # a Format of its own: harness.real_model's W4A8
            raise ValueError(f"unknown format {fmt!r}; have {list(ALL_FORMATS)}")
        self.format = fmt if isinstance(fmt, Format) else ALL_FORMATS[fmt]
        self.cfg, self.fmt = cfg, self.format.name
        self.embed = weights["embed"]
        dev, dt = self.embed.device, self.embed.dtype
        self.ops = ops or (cuda_ops(solution) if dev.type == "cuda" else torch_ops(cfg.eps))
        make = lambda W: self.format.layer(W, solution=solution)  # noqa: E731
        self.layers = [{"attn_norm": L["attn_norm"], "qkv": make(L["qkv"]), "o": make(L["o"]),
                        "mlp_norm": L["mlp_norm"], "gate_up": make(L["gate_up"]), "down": make(L["down"])}
                       for L in weights["layers"]]
        self.final_norm, self.lm_head = weights["final_norm"], make(weights["lm_head"])
        self.max_batch, self.max_seq = max_batch, max_seq
        self.cache = torch.zeros(cfg.n_layers, 2, max_batch, cfg.n_kv_heads, max_seq, cfg.head_dim, dtype=dt,
                                 device=dev)
        self.rope = rope_table(max_seq, cfg.head_dim, cfg.rope_theta, dev)
        self._bufs: dict[int, _Buffers] = {}
        mods = [self.ops.module] + [getattr(l, "module", None) for l in self.linears()]
        self._modules = list({id(m): m for m in mods if m is not None}.values())
        can = dev.type == "cuda" and pdl_supported(dev)
        if pdl and not can:
            raise ValueError("pdl=True needs a GPU of compute capability 9.0 or newer (programmatic dependent launch)")
        self.pdl = can if pdl is None else bool(pdl)

    @contextlib.contextmanager
    def without_pdl(self):
        """Within: the model launches as if pdl=False (timing the difference; kernel durations that mean something)."""
        was = self.pdl
        self.pdl = False
        try:
            yield
        finally:
            self.pdl = was

    @contextlib.contextmanager
    def _launches(self):
        """The step's kernels launch with PDL if self.pdl (a setting of each kernel file, restored after)."""
        if not self.pdl:
            yield
            return
        for m in self._modules:
            m.set_pdl(1)
        try:
            yield
        finally:
            for m in self._modules:
                m.set_pdl(0)

    def linears(self):
        for L in self.layers:
            yield from (L["qkv"], L["o"], L["gate_up"], L["down"])
        yield self.lm_head

    def weight_bytes(self) -> int:
        """Everything the model reads from its weights: the linear layers, the embedding table and the norms."""
        norms = sum(L["attn_norm"].numel() + L["mlp_norm"].numel() for L in self.layers) + self.final_norm.numel()
        return sum(l.nbytes() for l in self.linears()) + (self.embed.numel() + norms) * self.embed.element_size()

    def buffers(self, B: int) -> _Buffers:
        if not 1 <= B <= self.max_batch:
            raise ValueError(f"batch {B} is outside 1 … max_batch = {self.max_batch} (the KV cache's size)")
        if B not in self._bufs:
            c, dev, dt = self.cfg, self.embed.device, self.embed.dtype
            e = lambda *s: torch.zeros(*s, dtype=dt, device=dev)  # noqa: E731
            self._bufs[B] = _Buffers(e(B, c.hidden), e(2, B, c.hidden), e(B, c.qkv_out), e(B, c.n_heads * c.head_dim),
                                     e(B, 2 * c.intermediate), e(B, c.intermediate), e(B, c.vocab))
        return self._bufs[B]

    def step(self, tokens: torch.Tensor, pos: torch.Tensor) -> torch.Tensor:
        """One token per sequence: tokens int64 [B], pos int32 [B] (the new tokens' positions, on the device).
        Appends to the KV cache and returns the logits [B, vocab] (a buffer the next step overwrites)."""
        with self._launches():
            return self._step(tokens, pos)

    def _step(self, tokens, pos):
        B = tokens.shape[0]
        bf, ops, eps = self.buffers(B), self.ops, self.cfg.eps
        torch.index_select(self.embed, 0, tokens, out=bf.delta)
        bf.hn[0].zero_()
        delta = bf.delta
        # A linear layer returns the tensor it wrote: the step's buffer, or (bitsandbytes) one of its own.
        for i, L in enumerate(self.layers):
            ops.add_rmsnorm(bf.hn[0], delta, L["attn_norm"], out=bf.hn, eps=eps)
            qkv = L["qkv"](bf.hn[1], bf.qkv)
            ops.attention(qkv, self.cache[i, 0, :B], self.cache[i, 1, :B], pos, self.rope, out=bf.attn)
            delta = L["o"](bf.attn, bf.delta)
            ops.add_rmsnorm(bf.hn[0], delta, L["mlp_norm"], out=bf.hn, eps=eps)
            gu = L["gate_up"](bf.hn[1], bf.gu)
            ops.silu_mul(gu, out=bf.act)
            delta = L["down"](bf.act, bf.delta)
        ops.add_rmsnorm(bf.hn[0], delta, self.final_norm, out=bf.hn, eps=eps)
        return self.lm_head(bf.hn[1], bf.logits)

    def gemms_only(self, B: int):
        """The step's linear layers alone, on the same buffers (timing the GEMMs' share of a step)."""
        bf = self.buffers(B)
        with self._launches():
            for L in self.layers:
                L["qkv"](bf.hn[1], bf.qkv)
                L["o"](bf.attn, bf.delta)
                L["gate_up"](bf.hn[1], bf.gu)
                L["down"](bf.act, bf.delta)
            self.lm_head(bf.hn[1], bf.logits)

    def dequantized_twin(self) -> "DecodeModel":
        """An FP16 (cuBLAS) model whose weights are this model's dequantized weights: comparing the two isolates
        what the kernels compute differently from what quantization changed."""
        c = self.cfg
        w = {"embed": self.embed, "final_norm": self.final_norm, "lm_head": self.lm_head.dequantized(),
             "layers": [{"attn_norm": L["attn_norm"], "mlp_norm": L["mlp_norm"],
                         **{k: L[k].dequantized() for k in ("qkv", "o", "gate_up", "down")}} for L in self.layers]}
        twin = DecodeModel(c, w, "fp16", max_batch=self.max_batch, max_seq=self.max_seq, ops=self.ops, pdl=self.pdl)
        twin.rope = self.rope  # a model may run its own table (harness.real_model's padded heads)
        return twin


class DecodeGraph:
    """One decode step captured as a CUDA graph: replay() runs embed → layers → logits and then pos += 1 (and, with
    greedy=True, tokens = argmax(logits): replaying it again generates the next token), all without the CPU.

    Split-K workspaces (lessons 06 and 10) grow on demand and free the old buffer; a graph holds their address. The
    eager warm-up here reserves what this batch needs before capture; do not run larger shapes through those
    kernels between capturing a graph and replaying it."""

    def __init__(self, model: DecodeModel, batch: int, greedy: bool = True):
        dev = model.embed.device
        self.model = model
        self.tokens = torch.zeros(batch, dtype=torch.int64, device=dev)
        self.pos = torch.zeros(batch, dtype=torch.int32, device=dev)
        s = torch.cuda.Stream(dev)
        s.wait_stream(torch.cuda.current_stream(dev))
        with torch.cuda.stream(s):  # lazy initialisation and workspaces happen outside the capture
            for _ in range(2):
                model.step(self.tokens, self.pos)
        torch.cuda.current_stream(dev).wait_stream(s)
        self.graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(self.graph):
            self.logits = model.step(self.tokens, self.pos)
            if greedy:
                torch.argmax(self.logits, dim=-1, out=self.tokens)
            self.pos.add_(1)

    def replay(self) -> torch.Tensor:
        self.graph.replay()
        return self.logits


def teacher_forced_logits(model: DecodeModel, tokens: torch.Tensor, graph: bool = True) -> torch.Tensor:
    """Feed tokens [B, T] one position at a time from position 0; the logits of every step, float32 [T, B, vocab]."""
    B, T = tokens.shape
    if T > model.max_seq:
        raise ValueError(f"{T} tokens do not fit the model's cache of {model.max_seq} positions")
    out = torch.empty(T, B, model.cfg.vocab, dtype=torch.float32, device=tokens.device)
    if graph:
        g = DecodeGraph(model, B, greedy=False)
        g.pos.zero_()
        for t in range(T):
            g.tokens.copy_(tokens[:, t])
            out[t] = g.replay().float()
        return out
    pos = torch.zeros(B, dtype=torch.int32, device=tokens.device)
    for t in range(T):
        out[t] = model.step(tokens[:, t].contiguous(), pos).float()
        pos += 1
    return out


def compare_logits(got: torch.Tensor, ref: torch.Tensor) -> dict:
    """How far logits [T, B, V] are from a reference's: ‖got − ref‖ / ‖ref‖ (over everything, and the worst step
    and sequence), the smallest cosine similarity, and how often the two agree on the most likely token."""
    g, r = got.double(), ref.double()
    if not (torch.isfinite(g).all() and torch.isfinite(r).all()):
        return {"rel_err": float("inf"), "worst_rel_err": float("inf"), "min_cos": float("nan"), "top1": 0.0}
    per = (g - r).norm(dim=-1) / r.norm(dim=-1)
    cos = torch.nn.functional.cosine_similarity(g, r, dim=-1)
    return {"rel_err": ((g - r).norm() / r.norm()).item(), "worst_rel_err": per.max().item(),
            "min_cos": cos.min().item(), "top1": (g.argmax(-1) == r.argmax(-1)).double().mean().item()}


def reference_forward(cfg: Config, weights: dict, tokens: torch.Tensor, compute=torch.float64,
                      act=None) -> torch.Tensor:
    """An independent full-sequence forward pass (no cache, causal attention over all positions at once, grouped
    heads by repetition), in `compute` precision: logits [B, T, vocab]. What the step-by-step model must equal.
    act: applied to every linear layer's input (W4A8's per-token activation quantization, harness.real_model)."""
    B, T = tokens.shape
    f = lambda t: t.to(compute)  # noqa: E731
    a = act or (lambda t: t)  # noqa: E731
    x = f(weights["embed"][tokens])
    cs = rope_table(T, cfg.head_dim, cfg.rope_theta, tokens.device).to(compute)[None, :, None]  # [1, T, 1, d/2, 2]
    nh, nkv, hd = cfg.n_heads, cfg.n_kv_heads, cfg.head_dim
    causal = torch.ones(T, T, dtype=torch.bool, device=tokens.device).tril()
    for L in weights["layers"]:
        h = a(rms_norm(x, f(L["attn_norm"]), cfg.eps)) @ f(L["qkv"]).T
        q = apply_rope(h[..., :nh * hd].reshape(B, T, nh, hd), cs)
        k = apply_rope(h[..., nh * hd:(nh + nkv) * hd].reshape(B, T, nkv, hd), cs)
        v = h[..., (nh + nkv) * hd:].reshape(B, T, nkv, hd)
        k, v = (t.repeat_interleave(nh // nkv, dim=2) for t in (k, v))
        s = torch.einsum("bqhd,bkhd->bhqk", q, k) / math.sqrt(hd)
        o = torch.einsum("bhqk,bkhd->bqhd", torch.softmax(s.masked_fill(~causal, float("-inf")), dim=-1), v)
        x = x + a(o.reshape(B, T, nh * hd)) @ f(L["o"]).T
        gu = a(rms_norm(x, f(L["mlp_norm"]), cfg.eps)) @ f(L["gate_up"]).T
        x = x + a(torch.nn.functional.silu(gu[..., :cfg.intermediate]) * gu[..., cfg.intermediate:]) @ f(L["down"]).T
    return a(rms_norm(x, f(weights["final_norm"]), cfg.eps)) @ f(weights["lm_head"]).T


# ----------------------------------------------------------------------------------------------
# What a step must move: the floor on its time

def step_bytes(cfg: Config, fmt: str, batch: int, ctx: int) -> float:
    """Bytes one decode step must read at least: every linear weight once (in the format), the KV cache of `ctx`
    positions per sequence, the norms and the batch's embedding rows."""
    kv = batch * ctx * cfg.n_layers * 2 * cfg.n_kv_heads * cfg.head_dim * 2
    small = 2 * ((2 * cfg.n_layers + 1) * cfg.hidden + batch * cfg.hidden)
    return (fmt if isinstance(fmt, Format) else ALL_FORMATS[fmt]).weight_bytes(cfg) + kv + small


def fit_layers(cfg: Config, free_bytes: float, formats=("fp16",), headroom: float = 0.6) -> Config:
    """`cfg` with as many layers (up to its own) as fit `headroom` of `free_bytes` with the FP16 weights, one model per
    format in `formats` (its weights and a 1 k-position cache for 16 sequences) and one more FP16 copy (the
    dequantized twin of the accuracy check)."""
    copies = 2 + sum(ALL_FORMATS[f].bits / 16 for f in formats)  # in units of the FP16 weights
    per_layer = sum(n * k for _, n, k in cfg.linears())
    fixed = 2 * cfg.vocab * cfg.hidden * (1 + copies)  # the embedding table, and the LM head in every copy
    layer_bytes = 2 * per_layer * copies + len(formats) * 16 * 1024 * 2 * cfg.n_kv_heads * cfg.head_dim * 2
    n = int((headroom * free_bytes - fixed) // layer_bytes)
    return replace(cfg, n_layers=max(1, min(cfg.n_layers, n)))


def step_flops(cfg: Config, batch: int, ctx: int) -> float:
    """Multiply-adds ×2 of a step: every linear weight once per sequence, plus attention over ctx positions."""
    return 2 * batch * cfg.linear_params() + 4 * batch * cfg.n_layers * cfg.n_heads * cfg.head_dim * (ctx + 1)


# ----------------------------------------------------------------------------------------------
# Timing a decode loop

def time_calls(fn, calls: int, reps: int = 5) -> float:
    """Median over `reps` of the CUDA-event time of `calls` back-to-back fn() calls, per call, in µs (consecutive
    calls, as a decode loop runs them: one step's tail may overlap the next step's start)."""
    fn()
    torch.cuda.synchronize()
    times = []
    for _ in range(reps):
        s, e = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        s.record()
        for _ in range(calls):
            fn()
        e.record()
        e.synchronize()
        times.append(s.elapsed_time(e) * 1000 / calls)
    return sorted(times)[len(times) // 2]


def measure(model: DecodeModel, batch: int, ctx: int, steps: int = 64, eager_steps: int = 8) -> dict:
    """Decode speed at `batch` sequences of `ctx` cached positions (random cache contents: speed does not depend on
    them): a step as a CUDA graph, the same step launched from Python (eager), and the step's GEMMs alone (a graph).
    Greedy decoding in the graph; positions are reset before each timed run so the context stays ctx … ctx + steps.
    With model.pdl, the step's graph is also captured and timed without PDL (us_graph_nopdl)."""
    if ctx + steps + 2 > model.max_seq:
        raise ValueError(f"ctx {ctx} + {steps} steps do not fit the cache of {model.max_seq} positions")
    cfg = model.cfg
    model.cache.normal_()

    def time_graph():
        g = DecodeGraph(model, batch)
        g.tokens.random_(0, cfg.vocab)

        def run_graph():
            g.pos.fill_(ctx)
            for _ in range(steps):
                g.graph.replay()

        return time_calls(run_graph, 1) / steps, g  # the fill_ is one tiny kernel in `steps` replays

    us_nopdl = None
    if model.pdl:
        with model.without_pdl():
            us_nopdl, g = time_graph()
        del g
    us_graph, g = time_graph()
    tokens, pos = g.tokens.clone(), torch.full((batch,), ctx, dtype=torch.int32, device=g.pos.device)
    us_eager = time_calls(lambda: model.step(tokens, pos), eager_steps, reps=3)
    gg = torch.cuda.CUDAGraph()
    with torch.cuda.graph(gg):
        model.gemms_only(batch)
    us_gemm = time_calls(gg.replay, steps // 4)
    del g, gg
    floor = step_bytes(cfg, model.format, batch, ctx)
    return {"format": model.fmt, "label": model.format.label, "layers": cfg.n_layers, "batch": batch, "ctx": ctx,
            "pdl": model.pdl, "us_graph_nopdl": us_nopdl,
            "us_graph": us_graph, "us_eager": us_eager, "us_gemm": us_gemm, "tok_s": batch * 1e6 / us_graph,
            "tok_s_eager": batch * 1e6 / us_eager, "step_bytes": floor, "step_flops": step_flops(cfg, batch, ctx),
            "weight_gb": model.weight_bytes() / 1e9, "kv_gb_per_1k_ctx": batch * 1024 * cfg.n_layers * 2
            * cfg.n_kv_heads * cfg.head_dim * 2 / 1e9}


# Kernel names → kind. Everything else is a linear layer (cuBLAS's and our GEMM kernels, cuBLAS's split-K reduction).
KERNEL_KINDS = (("decode_attention", "attention"), ("add_rmsnorm", "add + RMSNorm"), ("silu_mul", "SiLU · up"),
                ("index", "embedding, argmax, position"), ("fill", "embedding, argmax, position"),
                ("argmax", "embedding, argmax, position"), ("vectorized_elementwise", "embedding, argmax, position"),
                ("unrolled_elementwise", "embedding, argmax, position"))


def kernel_breakdown(model: DecodeModel, batch: int, ctx: int, steps: int = 4, counts: dict | None = None) -> dict:
    """GPU time per step by kind of kernel (the linear layers, attention, add + RMSNorm, SiLU · up, the rest), in µs,
    from the PyTorch profiler over `steps` replays of the step's CUDA graph: kernel durations only, no gaps. Captured
    without PDL: a kernel launched early would count the time it waits for the one before it. counts: a dict that
    receives the kernels per step of each kind."""
    model.cache.normal_()
    with model.without_pdl():
        g = DecodeGraph(model, batch)
    g.tokens.random_(0, model.cfg.vocab)
    g.pos.fill_(ctx)
    g.replay()
    torch.cuda.synchronize()
    with warnings.catch_warnings():
        # torch warns (on leaving the profiler or reading it) that each profiling cycle drops the last one's events:
        # one cycle here, nothing to drop
        warnings.filterwarnings("ignore", message=".*Profiler clears events.*")
        with profile(activities=[ProfilerActivity.CUDA]) as prof:
            g.pos.fill_(ctx)
            for _ in range(steps):
                g.replay()
            torch.cuda.synchronize()
        events = prof.key_averages()
    out: dict[str, float] = {}
    for e in events:
        t = getattr(e, "device_time_total", None)
        t = e.cuda_time_total if t is None else t
        if not t or "memcpy" in e.key.lower():
            continue
        name = e.key.lower()
        kind = next((k for pat, k in KERNEL_KINDS if pat in name), "linear layers")
        out[kind] = out.get(kind, 0.0) + t / steps
        if counts is not None:
            counts[kind] = counts.get(kind, 0) + e.count / steps
    return out


def run_benchmark(cfg: Config, formats=tuple(FORMATS), batches=(1, 4, 16), ctx: int = 512, steps: int = 64,
                  accuracy: bool = True, solution: bool | None = None, seed: int = 0, log=print):
    """Every format on the same random weights in one run: `measure` and `kernel_breakdown` at each batch size, and
    (accuracy) the logits of 2 sequences × 32 teacher-forced tokens against the FP16 model and against the FP16
    model of the format's own dequantized weights, and (with PDL) against the same model without PDL, which must
    give the same bits. Returns (speed rows, accuracy rows)."""
    w = random_weights(cfg, seed=seed)
    tokens = torch.randint(0, cfg.vocab, (2, 32), device="cuda", generator=torch.Generator("cuda").manual_seed(seed + 1))
    copy = roofline.bandwidth(roofline.ceilings())[0]  # a step reads its weights and cache: the read bandwidth
    rows, acc, ref = [], [], None
    for fmt in ["fp16"] + [f for f in formats if f != "fp16"]:
        model = DecodeModel(cfg, w, fmt, max_batch=max(list(batches) + [2]), max_seq=ctx + steps + 8,
                            solution=solution)
        for b in batches:
            r = measure(model, b, ctx, steps)
            r["breakdown_us"] = kernel_breakdown(model, b, ctx)
            r["floor_us"] = r["step_bytes"] / (copy * 1e3)
            r["pct_floor"] = 100 * r["floor_us"] / r["us_graph"]
            base = next(x for x in rows + [r] if x["format"] == "fp16" and x["batch"] == b)
            r["speedup_vs_fp16"] = base["us_graph"] / r["us_graph"]
            r["speedup_vs_fp16_nopdl"] = (base["us_graph_nopdl"] / r["us_graph_nopdl"]
                                          if r["us_graph_nopdl"] and base["us_graph_nopdl"] else None)
            rows.append(r)
            log(f"{r['label']:<20} B={b:<3} {r['tok_s']:8.1f} tok/s ({r['us_graph']:7.1f} µs/step, "
                f"{r['speedup_vs_fp16']:.2f}× FP16, {r['pct_floor']:.0f}% of the floor"
                + (f"; no PDL {r['us_graph_nopdl']:7.1f} µs" if r["us_graph_nopdl"] else "")
                + f") | eager {r['us_eager']:8.1f} µs "
                f"| GEMMs alone {r['us_gemm']:7.1f} µs | weights {r['weight_gb']:.2f} GB")
        if accuracy:
            logits = teacher_forced_logits(model, tokens)
            if model.pdl:  # launched with PDL, every kernel must still see what the one before it wrote: same bits
                with model.without_pdl():
                    same = torch.equal(logits, teacher_forced_logits(model, tokens))
                for r in rows:
                    if r["format"] == fmt:
                        r["pdl_identical"] = same
                log(f"{'':<20} logits with PDL {'identical to' if same else 'DIFFERENT FROM'} those without")
            if fmt == "fp16":
                ref = logits
            else:
                twin = model.dequantized_twin()
                e_twin = compare_logits(logits, teacher_forced_logits(twin, tokens))
                del twin
                e = compare_logits(logits, ref)
                acc.append({"format": fmt, "label": model.format.label, "layers": cfg.n_layers,
                            "tokens": list(tokens.shape), **{f"vs_fp16_{k}": v for k, v in e.items()},
                            **{f"vs_twin_{k}": v for k, v in e_twin.items()}})
                log(f"{'':<20} logits against FP16: {e['rel_err']:.4f} (worst step {e['worst_rel_err']:.4f}), "
                    f"top-1 {100 * e['top1']:.1f}% | against its own weights in FP16: {e_twin['rel_err']:.1e}")
        del model
        gc.collect()
        torch.cuda.empty_cache()
    return rows, acc
