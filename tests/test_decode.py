"""Lesson 11: the decode model. On the CPU: the step-by-step model (KV cache, positions, grouped heads) equals an
independent full-sequence forward pass; every format's layers hold what they claim (bytes, dequantized weights);
the ops reject bad input. On a GPU: the lesson's kernels equal the PyTorch ops, a CUDA graph equals eager
execution, and every quantized model stays within the lesson's stated tolerance of the FP16 model."""
import math

import pytest
import torch

from harness import catalog, check, decode, quant
from harness.baselines import bnb, marlin

TINY = decode.TINY
# Llama widths where they matter to the kernels (head 128, grouped heads, K a multiple of 128), two layers
SMALL = decode.Config(hidden=1024, intermediate=2816, n_heads=8, n_kv_heads=2, n_layers=2, vocab=5000)


def test_step_by_step_equals_full_sequence_forward():
    w = decode.random_weights(TINY, seed=3, device="cpu", dtype=torch.float64)
    tokens = torch.randint(0, TINY.vocab, (2, 9), generator=torch.Generator().manual_seed(1))
    model = decode.DecodeModel(TINY, w, "fp16", max_batch=2, max_seq=16)
    got = decode.teacher_forced_logits(model, tokens, graph=False)  # [T, B, V]
    ref = decode.reference_forward(TINY, w, tokens).permute(1, 0, 2)  # [B, T, V] → [T, B, V]
    err = decode.compare_logits(got, ref)
    assert err["rel_err"] < 1e-5, err  # the ops compute in float32
    assert err["top1"] == 1.0, err
    # a wrong position (here: every token at position 0) must show: the check can fail
    model2 = decode.DecodeModel(TINY, w, "fp16", max_batch=2, max_seq=16)
    pos = torch.zeros(2, dtype=torch.int32)
    wrong = torch.stack([model2.step(tokens[:, t].contiguous(), pos).clone() for t in range(tokens.shape[1])])
    assert decode.compare_logits(wrong, ref)["rel_err"] > 1e-2


def test_config_eps_reaches_the_norms():
    cfg = decode.replace(TINY, eps=1e-2)  # large enough to change the logits if it were ignored
    w = decode.random_weights(cfg, seed=3, device="cpu", dtype=torch.float64)
    tokens = torch.randint(0, cfg.vocab, (1, 4), generator=torch.Generator().manual_seed(1))
    got = decode.teacher_forced_logits(decode.DecodeModel(cfg, w, max_seq=8), tokens, graph=False)
    assert decode.compare_logits(got, decode.reference_forward(cfg, w, tokens).permute(1, 0, 2))["rel_err"] < 1e-5
    assert decode.compare_logits(got, decode.reference_forward(TINY, w, tokens).permute(1, 0, 2))["rel_err"] > 1e-4


def test_sequences_at_different_positions_are_independent():
    """Batch rows attend only to their own cache, at their own position."""
    w = decode.random_weights(TINY, seed=4, device="cpu", dtype=torch.float64)
    tokens = torch.randint(0, TINY.vocab, (2, 6), generator=torch.Generator().manual_seed(2))
    ref = decode.reference_forward(TINY, w, tokens)
    model = decode.DecodeModel(TINY, w, "fp16", max_batch=2, max_seq=8)
    pos = torch.zeros(2, dtype=torch.int32)
    for t in range(3):  # sequence 1 starts 3 steps late: its rows get token 0 until then
        toks = torch.stack([tokens[0, t], tokens[1, 0]])
        model.step(toks, pos)
        pos[0] += 1
    pos[1] = 0
    for t in range(3, 6):
        logits = model.step(torch.stack([tokens[0, t], tokens[1, t - 3]]), pos).clone()
        pos += 1
        assert torch.allclose(logits[0], ref[0, t], rtol=1e-5, atol=1e-5)
        assert torch.allclose(logits[1], ref[1, t - 3], rtol=1e-5, atol=1e-5)


def _skip_missing(fmt):
    """The third-party baselines need their packages (requirements.txt installs both)."""
    why = {"marlin": marlin.unavailable, "nf4_bnb": bnb.unavailable}.get(fmt, lambda: None)()
    if why:
        pytest.skip(why)


@pytest.mark.parametrize("fmt", [f for f in decode.ALL_FORMATS if f != "fp16"])
def test_format_layers(fmt):
    """Bytes as the format says, and dequantized() is the quantized weight (the twin model's weights)."""
    _skip_missing(fmt)
    g = torch.Generator().manual_seed(5)
    W = (torch.randn(1000, 384, generator=g) / 20).half()
    layer = decode.ALL_FORMATS[fmt].layer(W)
    bits = decode.ALL_FORMATS[fmt].bits
    # every format stores 16-row tiles, so N = 1000 is padded to 1008 rows (Marlin: to 1024, its 256-wide block
    # tile; bitsandbytes: row-major, no padding); W8A16 keeps its scales row-major
    rows = {"marlin": 1024, "nf4_bnb": 1000}.get(fmt, 1008)
    want = {"w8a16": 1008 * 384 + 1000 * 3 * 2,
            # codes for the padded rows too; absmax2 per 256 of the real rows' 6,000 codes, and the offset
            "nf4dq": 1008 * 384 // 2 + 1008 * 6 + 4 * -(-1000 * 6 // 256) + 4}.get(fmt, rows * 384 * bits / 8)
    assert layer.nbytes() == pytest.approx(want, rel=1e-9)
    assert want == pytest.approx(rows * 384 * bits / 8, rel=1e-3)  # the bits the lesson's byte floor counts
    d = layer.dequantized()
    assert d.shape == W.shape and d.dtype == torch.float16
    want = {"w8a16": lambda: quant.quantize_int8(W, 128).dequantize(),
            "w4a16": lambda: quant.quantize_int4(W, 128).dequantize(),
            "w4a16_07": lambda: quant.quantize_int4(W, 128).dequantize(),
            "marlin": lambda: quant.quantize_int4(W, 128).dequantize(),
            "nf4": lambda: quant.quantize_nf4(W, 64).dequantize(),
            "nf4dq": lambda: quant.double_quantize(quant.quantize_nf4(W, 64)).dequantize(),
            "nf4_bnb": lambda: quant.quantize_nf4(W, 64).dequantize()}[fmt]().half()
    assert torch.equal(d, want)
    assert quant.rel_error(d, W) < (0.01 if fmt == "w8a16" else 0.15)


def test_chunked_quantization_matches_whole():
    """The LM head is quantized in blocks of rows; the blocks must join into the same weights."""
    W = torch.randn(100, 256, generator=torch.Generator().manual_seed(6)).half()
    parts = decode._by_rows(W, lambda w: quant.quantize_int4(w, 128), max_elems=16 * 256)
    assert len(parts) == 7
    joined = quant.Int4Weight(torch.cat([p.packed for p in parts]), torch.cat([p.scale for p in parts]), 128)
    assert torch.equal(joined.dequantize(), quant.quantize_int4(W, 128).dequantize())


def test_weight_bytes_and_floor():
    cfg = decode.LLAMA3_8B
    assert cfg.linear_params() == 32 * (6144 * 4096 + 4096 * 4096 + 28672 * 4096 + 4096 * 14336) + 128256 * 4096
    fp16, w4 = decode.step_bytes(cfg, "fp16", 1, 0), decode.step_bytes(cfg, "w4a16", 1, 0)
    assert fp16 / w4 == pytest.approx(16 / 4.125, rel=1e-3)
    assert decode.step_bytes(cfg, "fp16", 4, 512) - decode.step_bytes(cfg, "fp16", 4, 0) == 4 * 512 * 32 * 2 * 8 * 128 * 2
    small = decode.fit_layers(cfg, 24e9, ("w4a16",))
    assert 1 <= small.n_layers < 32 and decode.fit_layers(cfg, 80e9, ("w4a16",)).n_layers == 32


def _reject(op, args, words, **kw):
    with pytest.raises((ValueError, TypeError)) as e:
        op(*args, **kw)
    assert all(w in str(e.value) for w in words), str(e.value)


def test_ops_reject_bad_input():
    calls = []
    att = catalog.ATTENTION.bind(lambda *a: calls.append(a), "att")
    B, nkv, S, nh = 2, 2, 10, 4
    qkv = torch.zeros(B, (nh + 2 * nkv) * 128, dtype=torch.float16)
    kc = torch.zeros(B, nkv, S, 128, dtype=torch.float16)
    pos = torch.zeros(B, dtype=torch.int32)
    rope = decode.rope_table(S)
    _reject(att, (qkv, kc[..., :64], kc, pos, rope), ["k_cache", "128"])
    _reject(att, (qkv[:, :-128], kc, kc, pos, rope), ["n_heads + 2·n_kv"])
    _reject(att, (qkv, kc, kc, pos.long(), rope), ["pos", "int32"])
    _reject(att, (qkv, kc, kc, pos, rope[:5]), ["rope", "max_seq = 10"])
    _reject(att, (qkv, kc, kc, pos + 10, rope), ["positions", "0 … 9"])
    _reject(att, (qkv.float(), kc, kc, pos, rope), ["qkv", "float16"])
    att(qkv, kc, kc, pos, rope)
    assert calls and calls[-1][8:12] == (B, nh, nkv, S)

    norm = catalog.ADD_RMSNORM.bind(lambda *a: calls.append(a), "norm")
    h = torch.zeros(3, 20, dtype=torch.float16)
    _reject(norm, (h, h, torch.zeros(20, dtype=torch.float16)), ["multiple of 8"])
    h = torch.zeros(3, 16, dtype=torch.float16)
    _reject(norm, (h, h[:2], torch.zeros(16, dtype=torch.float16)), ["[M, H]"])
    _reject(norm, (h, h, torch.zeros(16, dtype=torch.float16)), ["[2, M=3, H=16]"], out=torch.zeros(3, 16).half())
    silu = catalog.SILU_MUL.bind(lambda *a: calls.append(a), "silu")
    _reject(silu, (torch.zeros(2, 24, dtype=torch.float16),), ["multiple of 8"])
    assert silu(torch.zeros(2, 32, dtype=torch.float16)).shape == (2, 16)


def test_pdl_only_where_the_gpu_has_it():
    w = decode.random_weights(TINY, seed=3, device="cpu", dtype=torch.float64)
    assert not decode.DecodeModel(TINY, w).pdl  # PyTorch's ops on the CPU: nothing to launch
    with pytest.raises(ValueError, match="compute capability 9.0"):
        decode.DecodeModel(TINY, w, pdl=True)


def test_attention_groups_q_heads_once_the_caches_are_large():
    """A block reads a kv head once for up to 8 of its q heads, from 12 MB of cache per call on (below it, one q head
    per block has the shorter latency); the splits fill the GPU with such blocks."""
    att = catalog.ATTENTION
    big = 64 * 584  # 64 sequences of 584 positions in one: every group below is past 12 MB
    assert [att.heads_per_block(1, nh, nkv, big) for nh, nkv in ((32, 8), (6, 3), (6, 2), (64, 2), (4, 4))] == [4, 2, 1, 8, 1]
    assert att.heads_per_block(1, 32, 8, 584) == 1 and att.heads_per_block(16, 32, 8, 584) == 4  # 2.4 MB; 38 MB
    assert att.splits(1, 32, 8, 584, 132) == 9  # 32 single-head blocks per split: ceil(264 / 32), ≥ 64 positions each
    assert att.splits(16, 32, 8, 584, 132) == 3  # 128 groups: 3 splits, 384 blocks ≥ 2 per SM
    assert att.splits(1, 32, 8, 4096, 132) == 16  # 16.8 MB: 8 groups, 16 splits (the most)


def test_config_rejects_shapes_the_kernels_cannot_run():
    with pytest.raises(ValueError, match="head_dim must be 128"):
        decode.Config(head_dim=64)
    with pytest.raises(ValueError, match="multiple of n_kv_heads"):
        decode.Config(n_heads=6, n_kv_heads=4)


# ----------------------------------------------------------------------------------------------
# GPU

def test_check_lets_attention_write_only_the_new_cache_row():
    """check holds the inputs unchanged except where the problem declares a kernel writes (the caches' row at each
    sequence's new position), whatever the op's parameters are called (here a lambda's *args): a write one row past
    it, or into qkv, still fails."""
    from harness import decode_math

    P, shapes = catalog.ATTENTION, ((1, 1, 1, 1), (3, 40, 4, 2))
    good = check.check(P, lambda *a, out=None: decode_math.torch_attention(*a, out=out), shapes, device="cpu",
                       repeats=1)
    assert good.ok, str(good)

    def past_the_row(qkv, k_cache, v_cache, pos, rope, out=None):
        decode_math.torch_attention(qkv, k_cache, v_cache, pos, rope, out=out)
        v_cache[0, 0, int(pos[0]) + 1] += 1  # the row after the new one (the cache holds ctx + 5 rows)

    bad = check.check(P, lambda *a, out=None: past_the_row(*a, out=out), shapes, device="cpu", repeats=1)
    assert not any(r.ok for r in bad.reports), str(bad)
    assert "the kernel wrote its input input 2 outside the new position's row (v_cache[b, :, pos[b]]): 128 of" \
        in str(bad) and "input 1" not in str(bad), str(bad)

    def into_qkv(qkv, *rest, out=None):
        decode_math.torch_attention(qkv, *rest, out=out)
        qkv[0, 0] += 1

    bad = check.check(P, lambda *a, out=None: into_qkv(*a, out=out), shapes[:1], device="cpu", repeats=1)
    assert "the kernel wrote its input input 0: 1 of" in str(bad) and "read-only" in str(bad), str(bad)


@pytest.mark.gpu
@pytest.mark.parametrize("teaching", [False, True], ids=["fast", "teaching"])
@pytest.mark.parametrize("splits", [1, 3, 16])
def test_attention_kernel_any_split(splits, teaching):
    """The keys split over 1, 3 or 16 blocks (some of them empty at short contexts) give the same attention, with one
    q head per block (small caches) and with whole groups of q heads per block (the fast file; the teaching file
    always takes one q head per block)."""
    op = decode.cuda_ops(solution=True, teaching=teaching).attention
    res = check.check(catalog.ATTENTION, lambda *a, out=None: op(*a, out=out, splits=splits), name=f"splits={splits}",
                      shapes=((1, 1, 1, 1), (1, 20, 4, 1), (3, 300, 8, 2), (2, 1500, 32, 8), (2, 90, 6, 2),
                              # past 12 MB of cache: a block per group of 4, 8 and 2 q heads
                              (4, 1000, 32, 8), (8, 2000, 16, 2), (5, 2000, 6, 3)))
    assert res.ok, str(res)


@pytest.mark.gpu
@pytest.mark.parametrize("teaching", [False, True], ids=["fast", "teaching"])
@pytest.mark.parametrize("shape", [(3, 50, 8, 2), (4, 1000, 32, 8)])  # one q head per block; a group of 4 per block
def test_attention_kernel_appends_to_the_cache(shape, teaching):
    ops, ref_ops = decode.cuda_ops(solution=True, teaching=teaching), decode.torch_ops()
    qkv, kc, vc, pos, rope = catalog.ATTENTION.make_inputs(shape, torch.Generator("cuda").manual_seed(7))
    kc2, vc2 = kc.clone(), vc.clone()
    ops.attention(qkv, kc, vc, pos, rope)
    ref_ops.attention(qkv, kc2, vc2, pos, rope)
    changed = (kc != kc2) | (vc != vc2)
    # the roped k may differ in the last bit (FP32 rounding in another order); every other row must be untouched
    assert torch.allclose(kc.float(), kc2.float(), rtol=2e-3, atol=2e-3) and torch.equal(vc, vc2)
    rows = changed.any(dim=-1).nonzero()
    assert all(int(r[2]) == int(pos[int(r[0])]) for r in rows), rows


def _cuda_model(cfg, fmt, weights, **kw):
    _skip_missing(fmt)
    return decode.DecodeModel(cfg, weights, fmt, solution=True, **kw)


@pytest.mark.gpu
@pytest.mark.parametrize("teaching", [False, True], ids=["fast", "teaching"])
def test_cuda_ops_and_graph_equal_pytorch_ops(teaching):
    """The step with lesson 11's kernels (the fast file the recorded step runs, or the teaching file with PDL too)
    gives PyTorch's logits, launched from Python and from a CUDA graph."""
    w = decode.random_weights(SMALL, seed=8)
    tokens = torch.randint(0, SMALL.vocab, (3, 20), device="cuda", generator=torch.Generator("cuda").manual_seed(9))
    ref = decode.teacher_forced_logits(decode.DecodeModel(SMALL, w, ops=decode.torch_ops(), max_batch=3, max_seq=32),
                                       tokens, graph=False)
    ops = decode.cuda_ops(solution=True, teaching=teaching)
    model = _cuda_model(SMALL, "fp16", w, max_batch=3, max_seq=32, ops=ops)
    eager = decode.teacher_forced_logits(model, tokens, graph=False)
    graph = decode.teacher_forced_logits(model, tokens, graph=True)
    assert decode.compare_logits(eager, ref)["rel_err"] < 5e-3
    assert decode.compare_logits(graph, eager)["rel_err"] < 1e-3


@pytest.mark.gpu
@pytest.mark.parametrize("fmt", list(decode.ALL_FORMATS))
def test_pdl_changes_nothing_but_time(fmt):
    """Every kernel launched with PDL waits for the one before it before touching its outputs: a missing or late
    pdl_wait() reads stale activations, which a graph of 2 layers × 20 steps shows as different logits."""
    if not decode.pdl_supported():
        pytest.skip("programmatic dependent launch needs compute capability 9.0 or newer")
    w = decode.random_weights(SMALL, seed=13)
    tokens = torch.randint(0, SMALL.vocab, (3, 20), device="cuda", generator=torch.Generator("cuda").manual_seed(14))
    model = _cuda_model(SMALL, fmt, w, max_batch=3, max_seq=32)
    assert model.pdl
    graph, eager = (decode.teacher_forced_logits(model, tokens, graph=g) for g in (True, False))
    model.pdl = False
    assert torch.equal(graph, decode.teacher_forced_logits(model, tokens, graph=True))
    assert torch.equal(eager, decode.teacher_forced_logits(model, tokens, graph=False))


@pytest.mark.gpu
def test_greedy_graph_generates_like_eager():
    w = decode.random_weights(SMALL, seed=10)
    model = _cuda_model(SMALL, "w4a16", w, max_batch=2, max_seq=32)
    g = decode.DecodeGraph(model, 2)
    model.cache.zero_()
    g.tokens.copy_(torch.tensor([1, 2]))
    g.pos.zero_()
    seq = []
    for _ in range(6):
        g.replay()
        seq.append(g.tokens.clone())
    assert g.pos.tolist() == [6, 6]
    model.cache.zero_()
    toks, pos = torch.tensor([1, 2], device="cuda"), torch.zeros(2, dtype=torch.int32, device="cuda")
    for t in range(6):
        toks = model.step(toks, pos).argmax(-1)
        pos += 1
        assert torch.equal(toks, seq[t])


# What the lesson states: each format's logits against the FP16 model's, teacher-forced over 24 tokens of 2
# sequences. "kernels": against an FP16 model holding the same (dequantized) weights, so only the arithmetic
# differs; "quantization": against the original FP16 weights.
# The tolerances are each format's (decode.Format.tolerance); the baselines are held to them too (Marlin: its padded
# LM head included).
@pytest.mark.gpu
@pytest.mark.parametrize("fmt", [f for f in decode.ALL_FORMATS if f != "fp16"])
def test_quantized_model_within_tolerance(fmt):
    w = decode.random_weights(SMALL, seed=11)
    tokens = torch.randint(0, SMALL.vocab, (2, 24), device="cuda", generator=torch.Generator("cuda").manual_seed(12))
    fp16 = decode.teacher_forced_logits(_cuda_model(SMALL, "fp16", w, max_batch=2, max_seq=32), tokens)
    model = _cuda_model(SMALL, fmt, w, max_batch=2, max_seq=32)
    got = decode.teacher_forced_logits(model, tokens)
    twin = decode.teacher_forced_logits(model.dequantized_twin(), tokens)
    kern, q = decode.ALL_FORMATS[fmt].tolerance
    e_twin, e_fp16 = decode.compare_logits(got, twin), decode.compare_logits(got, fp16)
    assert e_twin["rel_err"] < kern, e_twin
    assert e_fp16["rel_err"] < q, e_fp16
    assert not math.isnan(e_fp16["min_cos"])
