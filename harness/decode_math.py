"""The math of a Llama decoder layer's small ops (RoPE, RMSNorm, one decode step of grouped-query attention), in any
float dtype: the float64 reference of lesson 11's kernels (harness.problems), and the same ops in PyTorch with the
kernels' signatures (torch_add_rmsnorm, torch_attention, torch_silu_mul): the decode model's PyTorch ops
(harness.decode.torch_ops) and the library baseline the demo times lesson 11's kernels against."""
from __future__ import annotations

import math

import torch


def rope_table(max_seq: int, head_dim: int = 128, theta: float = 500000.0, device=None) -> torch.Tensor:
    """fp32 [max_seq, head_dim/2, 2]: (cos, sin) of position · θ^(−2i/head_dim), computed in float64."""
    inv = theta ** (-torch.arange(0, head_dim, 2, dtype=torch.float64) / head_dim)
    ang = torch.arange(max_seq, dtype=torch.float64)[:, None] * inv[None, :]
    return torch.stack([ang.cos(), ang.sin()], dim=-1).float().to(device)


def apply_rope(x: torch.Tensor, cs: torch.Tensor) -> torch.Tensor:
    """Rotate-half RoPE (dimension i pairs with i + d/2, Hugging Face's Llama convention). x [..., d], cs [..., d/2, 2]
    broadcastable, in x's dtype."""
    d = x.shape[-1] // 2
    c, s = cs[..., 0].to(x.dtype), cs[..., 1].to(x.dtype)
    a, b = x[..., :d], x[..., d:]
    return torch.cat([a * c - b * s, b * c + a * s], dim=-1)


def rms_norm(x: torch.Tensor, w: torch.Tensor, eps: float) -> torch.Tensor:
    return x * torch.rsqrt(x.pow(2).mean(dim=-1, keepdim=True) + eps) * w


def attention_reference(qkv, k_cache, v_cache, pos, rope, compute=torch.float32) -> torch.Tensor:
    """One decode step of the attention kernel, in `compute` precision: q and k roped at their positions, the new
    k and v rounded to the cache's dtype, keys 0 … pos (cache rows below pos, then the new one). Reads the cache,
    never writes it. Returns [B, n_heads·hd] in `compute`."""
    B, nkv, _, hd = k_cache.shape
    nh = qkv.shape[1] // hd - 2 * nkv
    heads = qkv.to(compute).view(B, nh + 2 * nkv, hd)
    out = torch.empty(B, nh, hd, dtype=compute, device=qkv.device)
    for b in range(B):
        p = int(pos[b])
        cs = rope[p].to(qkv.device)
        q = apply_rope(heads[b, :nh], cs.to(compute))
        k = apply_rope(heads[b, nh:nh + nkv], cs.to(compute)).to(k_cache.dtype).to(compute)
        v = heads[b, nh + nkv:].to(v_cache.dtype).to(compute)
        keys = torch.cat([k_cache[b, :, :p].to(compute), k[:, None]], dim=1)  # [nkv, p + 1, hd]
        vals = torch.cat([v_cache[b, :, :p].to(compute), v[:, None]], dim=1)
        g = nh // nkv
        s = torch.einsum("hd,htd->ht", q, keys.repeat_interleave(g, dim=0)) / math.sqrt(hd)
        out[b] = torch.einsum("ht,htd->hd", torch.softmax(s, dim=-1), vals.repeat_interleave(g, dim=0))
    return out.reshape(B, nh * hd)


# The ops in PyTorch, for any device and float dtype: computed in float32, stored in the inputs' dtype.

def torch_add_rmsnorm(h, delta, w, out=None, eps=1e-5):
    res = (h.float() + delta.float()).to(h.dtype)
    y = rms_norm(res.float(), w.float(), eps).to(h.dtype)
    out = torch.empty(2, *h.shape, dtype=h.dtype, device=h.device) if out is None else out
    out[0].copy_(res)
    out[1].copy_(y)
    return out


def torch_attention(qkv, k_cache, v_cache, pos, rope, out=None):
    B, nkv, _, hd = k_cache.shape
    nh = qkv.shape[1] // hd - 2 * nkv
    o = attention_reference(qkv, k_cache, v_cache, pos, rope).to(qkv.dtype)
    heads = qkv.view(B, nh + 2 * nkv, hd)
    for b in range(B):  # append the new k, v as the kernel does
        p = int(pos[b])
        k_cache[b, :, p] = apply_rope(heads[b, nh:nh + nkv].float(), rope[p].to(qkv.device)).to(k_cache.dtype)
        v_cache[b, :, p] = heads[b, nh + nkv:]
    if out is None:
        return o
    out.copy_(o)
    return out


def torch_silu_mul(gate_up, out=None):
    I = gate_up.shape[1] // 2
    r = (torch.nn.functional.silu(gate_up[:, :I].float()) * gate_up[:, I:].float()).to(gate_up.dtype)
    if out is None:
        return r
    out.copy_(r)
    return out
