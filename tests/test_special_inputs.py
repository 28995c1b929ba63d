"""Checks whose inputs make every term count: each problem's special inputs (problems.Special) catch a wrong kernel
that passes every random check shape. On the CPU, with PyTorch ops in the problems' calling forms: for every problem
the catalog uses, an op computed the way the kernels compute (FP16 weights, FP32 sums) passes its random shapes and
its specials, and each deliberately wrong op (one term wrong: eps, a clamp, a flush to zero, an accumulator's type)
passes every random shape and fails at least the special named for it."""
import copy
import math

import pytest
import torch

from harness import catalog, check, decode_math, problems, quant

PROBLEMS = list({id(k.problem): k.problem for k in catalog.kernels()}.values())
SEED = 20250601  # the random shapes a wrong op must pass are these; the margins hold over other seeds too


def _rules(p):
    """The shape rules of the problem's kernels (catalog.shapes of its first kernel: a problem's kernels share them)."""
    return catalog.shapes(next(k for k in catalog.kernels() if k.problem.name == p.name))


def _ftz16(t):
    """Values below FP16's smallest normal (2^-14) flushed to zero: a kernel that loses subnormals."""
    return torch.where(t.float().abs() < 2.0 ** -14, torch.zeros_like(t), t)


# ---------------------------------------------------------------------------------------------- the ops
# Each takes the problem and its inputs and returns the output (the `op` below copies it into check's buffer).

def _linear(p, x, W):
    if p.in_dtype == torch.int8:  # INT32 accumulation (exact: |y| < 2^53 in float64)
        return (x.double() @ W.double().T).to(torch.int32)
    return (x.float() @ W.float().T).to(p.out_dtype)


def _linear_k_tail_4(p, x, W):
    """A vectorized K loop (8 at a time) whose tail handles at most 4 of the leftover elements."""
    K = x.shape[1]
    keep = K - K % 8 + min(K % 8, 4)
    return _linear(p, x[:, :keep], W[:, :keep])


def _linear_fp16_steps(p, x, W):
    """Each 16-wide K step summed into an FP16 accumulator (an mma with FP16 C), the steps then added in FP32."""
    M, K = x.shape
    pad = (-K) % 16
    xs = torch.nn.functional.pad(x.float(), (0, pad)).view(M, -1, 16)
    Ws = torch.nn.functional.pad(W.float(), (0, pad)).view(W.shape[0], -1, 16)
    steps = torch.einsum("mtk,ntk->mnt", xs, Ws).half().float()  # each step's sum rounded to FP16 (inf past 65504)
    return steps.sum(-1).to(p.out_dtype)


def _linear_fp32_sum(p, x, W):
    """INT8 products summed in an FP32 accumulator, K in order (exact only while the sums stay below 2^24)."""
    xt, Wt = x.float().T.contiguous(), W.float().T.contiguous()
    acc = torch.zeros(x.shape[0], W.shape[0])
    for k in range(x.shape[1]):
        acc.addcmul_(xt[k, :, None], Wt[k, None, :])  # each product exact in FP32 (≤ 2^14): the add alone rounds
    return acc.to(torch.int32)


def _int_parts(p, inputs):
    """(x or None, codes [N, K], zero points [N, K] or None, FP16 scale per weight [N, K] or [N, 1]) of an integer
    format, read back through quant's own layouts."""
    x, rest = (None, inputs) if p.name.startswith("dequant") else (inputs[0], inputs[1:])
    if p.name == "w8a8":  # one scale per output channel, applied after the INT32 sum
        return x, rest[0].long(), None, rest[1]
    if p.name in ("w8a16", "dequant_w8"):
        q, s = rest
        return x, q, None, s.repeat_interleave(q.shape[1] // s.shape[1], dim=1)
    if p.name == "w8a16_tiles":
        w = rest[0]
        return x, w.codes(), None, w.scale.repeat_interleave(w.group, dim=1)
    if p.name == "w4a16_frag":
        w = rest[0]
        return x, w.codes(), None, w.scale[:, : w.n].t().repeat_interleave(w.group, dim=1)
    if p.name == "w4a8":
        w = quant.W4A8Weight(*rest, p.group)
        return x, w.codes().long(), None, w.scale
    w = rest[0].rows() if len(rest) == 1 else quant.Int4Weight(rest[0], rest[1], p.group,
                                                                 rest[2] if len(rest) > 2 else None)
    z = None if w.zero is None else w.zero.to(torch.int16).repeat_interleave(w.group, dim=1)
    return x, quant.unpack_int4(w.packed, signed=w.symmetric).to(torch.int16), z, \
        w.scale.repeat_interleave(w.group, dim=1)


def _int_format(p, inputs, codes=None, zeros=None, scales=None):
    """The INT formats as the kernels compute them: (q − zero) · scale rounded to FP16, times x in FP32; W8A8 and
    W4A8: x quantized per token, the INT8 products summed exactly, then times both scales in FP32. codes, zeros,
    scales: a bug, applied to that part."""
    x, q, z, s = _int_parts(p, inputs)
    q, z, s = (codes or (lambda t: t))(q), z if z is None else (zeros or (lambda t: t))(z), (scales or (lambda t: t))(s)
    if p.name in ("w8a8", "w4a8"):
        xq, sx = quant.quantize_per_token_int8(x)
        acc = (xq.double() @ q.double().T).float()
        return (acc * sx[:, None] * s.float().T).half()
    # (q − zero) · scale rounded to FP16, as the kernels dequantize (exact in FP32 first: at most 19 bits)
    W = (((q - z) if z is not None else q).float() * s.float()).half()
    return W if x is None else (x.float() @ W.float().T).half()


def _nf4_parts(p, inputs):
    x, rest = (None, inputs) if p.name == "dequant_nf4" else (inputs[0], inputs[1:])
    if len(rest) == 3:
        packed, absmax, _ = rest
        N, K = packed.shape[0], packed.shape[1] * 2
        w = quant.NF4Weight(packed.reshape(-1), absmax.reshape(-1), (N, K), K // absmax.shape[1])
    else:
        w = rest[0].rows()
        w = w.rows() if isinstance(w, quant.NF4DQWeight) else w
    N, K = w.shape
    return x, w.indices().long().view(N, K), w.absmax.view(N, -1).repeat_interleave(w.block, dim=1)


def _nf4(p, inputs, absmax=None, weights=None):
    """NF4 as the kernels compute it: the dequantizer in FP16 (the codebook value times absmax, both FP16), the
    linear layers with the FP16 codebook values times x summed in FP32, then times absmax. absmax, weights: a bug,
    applied to the absmax values or to the dequantized weights."""
    x, idx, a = _nf4_parts(p, inputs)
    a = (absmax or (lambda t: t))(a)
    cb = quant.NF4.half()[idx]
    if x is None:
        return cb * a.half()
    return (x.float() @ (weights or (lambda t: t))(cb.float() * a).T).half()


def _rmsnorm(h, delta, w, eps, mean_sq):
    res = (h.float() + delta.float()).half()
    return torch.stack([res, (res.float() * mean_sq(res) * w.float()).half()])


def _inv_rms(eps):
    return lambda r: torch.rsqrt(r.float().pow(2).mean(-1, keepdim=True) + eps)


def _attention(p, inputs, softmax):
    """decode_math.attention_reference's loop in FP32 with its softmax replaced (the cache rows below pos, the new k
    and v rounded to FP16), then the new row appended as the kernels do."""
    qkv, kc, vc, pos, rope = inputs
    B, nkv, _, hd = kc.shape
    nh = qkv.shape[1] // hd - 2 * nkv
    heads = qkv.float().view(B, nh + 2 * nkv, hd)
    out = torch.empty(B, nh, hd)
    for b in range(B):
        t = int(pos[b])
        q = decode_math.apply_rope(heads[b, :nh], rope[t])
        k = decode_math.apply_rope(heads[b, nh:nh + nkv], rope[t]).half().float()
        keys = torch.cat([kc[b, :, :t].float(), k[:, None]], dim=1).repeat_interleave(nh // nkv, dim=0)
        vals = torch.cat([vc[b, :, :t].float(), heads[b, nh + nkv:].half().float()[:, None]], dim=1)
        s = torch.einsum("hd,htd->ht", q, keys) / math.sqrt(hd)
        out[b] = torch.einsum("ht,htd->hd", softmax(s), vals.repeat_interleave(nh // nkv, dim=0))
        kc[b, :, t] = k.half()
        vc[b, :, t] = heads[b, nh + nkv:].half()
    return out.reshape(B, nh * hd).half()


def _silu(gate_up, sigmoid_times):
    I = gate_up.shape[1] // 2
    g, u = gate_up[:, :I], gate_up[:, I:]
    return sigmoid_times(g, u).half()


def _kernel_silu(g, u):  # the kernels: g / (1 + e^−g) · u in FP32
    g, u = g.float(), u.float()
    return g / (1 + torch.exp(-g)) * u


# problem name -> (the right op, [(wrong op's label, the op, a special it must fail)])
def _cases():
    L = "tile edges"
    lin = {"linear": [("K's tail past a multiple of 8 cut to 4", _linear_k_tail_4, L)],
           "linear_f16": [("K's tail past a multiple of 8 cut to 4", _linear_k_tail_4, L),
                          ("FP16 accumulator per 16-wide K step", _linear_fp16_steps, "partial sums")],
           "linear_s8": [("FP32 accumulator", _linear_fp32_sum, "all 127")]}
    lin["linear_f16_k8"] = lin["gemv_f16"] = lin["gemv_f16_k16"] = lin["linear_f16"][1:]
    lin["linear_s8_k16"] = lin["linear_s8"]
    cases = {n: (lambda p, i: _linear(p, *i), [(label, lambda p, i, fn=fn: fn(p, *i), catches)
                                                for label, fn, catches in w]) for n, w in lin.items()}
    flush = ("subnormal scales flushed to zero", lambda p, i: _int_format(p, i, scales=_ftz16), "subnormal scales")
    for n in ("w8a16", "w8a16_tiles", "dequant_w8", "w8a8"):
        cases[n] = (_int_format, [flush])
    minus8 = ("INT4 code −8 read as −7", lambda p, i: _int_format(p, i, codes=lambda q: q.clamp(min=-7)), "−8")
    for n in ("w4a16", "w4a16_tiles", "w4a16_frag", "dequant_w4"):
        cases[n] = (_int_format, [minus8, flush])
    zero15 = ("zero point 15 read as 14", lambda p, i: _int_format(p, i, zeros=lambda z: z.clamp(max=14)), "zero 15")
    for n in ("w4a16_asym", "w4a16_tiles_asym"):
        cases[n] = (_int_format, [zero15, flush])
    cases["w4a8"] = (_int_format, [flush])
    cases["dequant_nf4"] = (_nf4, [("absmax below 2^-14 flushed to zero", lambda p, i: _nf4(p, i, absmax=_ftz16),
                                    "tiny absmax")])
    for n in ("nf4_linear", "nf4_tiles", "nf4_tiles_dq"):
        cases[n] = (_nf4, [("weights below 2^-14 flushed to zero", lambda p, i: _nf4(p, i, weights=_ftz16),
                            "small absmax")])
    ftz32 = lambda t: torch.where(t.abs() < torch.finfo(torch.float32).tiny, torch.zeros_like(t), t)  # noqa: E731
    cases["scale_add"] = (lambda p, i: p.a * i[0] + i[1],
                          [("FP32 subnormals flushed to zero", lambda p, i: p.a * ftz32(i[0]) + ftz32(i[1]),
                            "subnormal")])
    eps = catalog.ADD_RMSNORM.eps
    cases["add_rmsnorm"] = (
        lambda p, i: decode_math.torch_add_rmsnorm(*i, eps=p.eps),
        [("eps outside the root: x / (√ms + eps)", lambda p, i: _rmsnorm(
            *i, eps, lambda r: 1 / (r.float().pow(2).mean(-1, keepdim=True).sqrt() + eps)), "tiny rows"),
         ("no eps", lambda p, i: _rmsnorm(*i, eps, _inv_rms(0.0)), "zero rows"),
         ("squares in FP16", lambda p, i: _rmsnorm(
             *i, eps, lambda r: torch.rsqrt((r * r).float().mean(-1, keepdim=True) + eps)), "huge rows"),
         ("mean square held in FP16", lambda p, i: _rmsnorm(
             *i, eps, lambda r: torch.rsqrt(r.float().pow(2).mean(-1, keepdim=True).half().float() + eps)),
          "huge rows")])

    def no_max(s):  # e^s / Σ e^s in FP32, the maximum not subtracted
        e = torch.exp(s)
        return e / e.sum(-1, keepdim=True)

    cases["decode_attention"] = (lambda p, i: _attention(p, i, lambda s: torch.softmax(s, -1)),
                                 [("softmax without the maximum subtracted", lambda p, i: _attention(p, i, no_max),
                                   "scores near")])
    cases["silu_mul"] = (
        lambda p, i: _silu(i[0], _kernel_silu),
        [("e^−g in FP16", lambda p, i: _silu(i[0], lambda g, u: g.float() / (1 + torch.exp(-g).float()) * u.float()),
          "negative tail"),
         ("sigmoid as e^g / (1 + e^g)", lambda p, i: _silu(
             i[0], lambda g, u: g.float() * torch.exp(g.float()) / (1 + torch.exp(g.float())) * u.float()),
          "positive tail"),
         ("g·up in FP16 first", lambda p, i: _silu(i[0], lambda g, u: (g * u).float() * torch.sigmoid(g.float())),
          "near FP16's max")])
    return cases


CASES = _cases()


def _op(p, fn, label):
    """fn as a bound kernel: op(*inputs, out=...) refusing shapes outside the problem's catalog rules."""
    def op(*inputs, out=None):
        y = fn(p, inputs)
        return out.copy_(y) if out is not None else y

    op.__name__ = label
    return catalog.constrained(p, op, _rules(p))


def _remembering(p):
    """p, with the random inputs of each (shape, seed) made once and their reference computed once: the right op and
    each wrong one are checked on the same random inputs (check still poisons, guards and compares every run). The
    special inputs are made afresh, as check makes them."""
    q = copy.copy(p)
    made, refs = {}, {}

    def make_inputs(shape, gen=None, device="cuda"):
        key = (tuple(shape), gen.initial_seed(), device)
        if key not in made:
            made[key] = p.make_inputs(shape, gen, device)
        return made[key]

    def reference(inputs):
        if any(inputs is m for m in made.values()):
            if id(inputs) not in refs:
                refs[id(inputs)] = p.reference(inputs)
            return refs[id(inputs)]
        return p.reference(inputs)

    q.make_inputs, q.reference = make_inputs, reference
    return q


def _random(res):
    return [r for r in res.reports if "[" not in r.shape_desc]


def _special(res):
    return [r for r in res.reports if "[" in r.shape_desc]


# ---------------------------------------------------------------------------------------------- the declarations

def test_every_catalog_problem_declares_specials_with_a_why():
    assert {p.name for p in PROBLEMS} == set(CASES), "every problem the catalog uses has its proof below"
    for p in PROBLEMS:
        sp = problems.specials_of(p)
        assert sp, f"{p.name} declares no special inputs"
        assert "Special inputs" in (type(p).__doc__ or "") or any(
            "Special inputs" in (c.__doc__ or "") for c in type(p).__mro__), p.name
        for s in sp:
            assert s.name and len(s.why) > 30 and len(s.shape) == len(p.check_shapes[0]), (p.name, s)
        kernels = [k for k in catalog.kernels() if k.problem is p]
        for k in kernels:  # every kernel gets specials; the ones outside its rules are skipped, not failed
            taken = [s for s in sp if catalog.shapes(k).accepts(s.shape)]
            assert taken, f"{k.launcher} takes none of {p.name}'s specials"


def test_specials_of_a_repacked_subclass_that_declares_none_are_none():
    from harness.baselines import marlin
    assert problems.specials_of(marlin.PROBLEM) == ()  # its inputs are Marlin's layout: W4A16's would not fit
    assert len(problems.specials_of(catalog.W4A16_FRAG)) == len(problems.specials_of(catalog.W4A16))
    x, w = problems.specials_of(catalog.NF4_TILES_DQ)[0].make(torch.Generator().manual_seed(0), "cpu")
    assert isinstance(w, quant.NF4DQTiles)


def test_check_runs_specials_with_its_own_shapes_only_unless_asked():
    P = catalog.SILU_MUL
    op = _op(P, CASES["silu_mul"][0], "silu")
    res = check.check(P, op, device="cpu", repeats=1)
    assert res.ok, str(res)
    assert len(res.reports) == len(P.check_shapes) + len(problems.specials_of(P))
    assert "M=4 I=1000 [gates in the negative tail]" in str(res)
    assert len(check.check(P, op, [(3, 16)], device="cpu").reports) == 1
    assert len(check.check(P, op, [(3, 16)], device="cpu", specials=True).reports) == 1 + len(problems.specials_of(P))


def test_a_special_outside_a_kernels_rules_is_skipped_not_failed():
    P = catalog.FP16_K8  # lesson 04's teaching kernels take K a multiple of 8: the odd-K tile edges are not theirs
    res = check.check(P, _op(P, CASES["linear_f16_k8"][0], "f16"), device="cpu", repeats=1)
    assert res.ok, str(res)
    assert res.skipped and all("[tile edges]: K = " in s and "is not a multiple of 8" in s for s in res.skipped)
    assert len(res.skipped) == sum(not _rules(P).accepts(s.shape) for s in problems.specials_of(P))
    assert "special input(s) not run" in str(res)


def test_per_row_tolerance_and_the_fp16_floor():
    ref = torch.tensor([[1e4, -2e4, 3e4], [1e-3, 2e-3, -1e-3]], dtype=torch.float64)
    got = ref.half()
    got[1, 0] = 2e-3  # a 100% error in the small row: hidden by the whole output's RMS, not by the row's
    assert check.compare(got, ref).ok
    r = check.compare(got, ref, scale=ref.pow(2).mean(-1, keepdim=True).sqrt())
    assert not r.ok and r.wrong == 1 and r.per_row and "per row" in str(r)
    tiny = torch.full((4, 4), 3e-8, dtype=torch.float64)  # below FP16's smallest step: 0 is as close as FP16 gets
    assert check.compare(torch.zeros(4, 4, dtype=torch.float16), tiny).ok
    zero_row = torch.zeros(1, 4, dtype=torch.float64)
    assert not check.compare(torch.full((1, 4), 1e-3).half(), zero_row, scale=zero_row[:, :1]).ok


def test_each_problems_library_baseline_passes_its_specials():
    """The specials ask nothing an exact-enough FP16 route cannot give: each problem's library baseline (dequantize to
    FP16 weights + F.linear, torch._int_mm, PyTorch's ops) passes them. W4A8's baseline keeps x in FP16 where the
    problem quantizes it per token to INT8 (test_grade says so too): it computes another function."""
    for p in PROBLEMS:
        if p.name == "w4a8":
            continue
        label, base = p.baseline()

        def op(*inputs, out=None, base=base):
            return out.copy_(base(*inputs))

        res = check.check(p, catalog.constrained(p, op, _rules(p)), (), specials=True, device="cpu", repeats=1,
                          seed=SEED)
        assert res.ok, f"{p.name}, {label}:\n{res}"


# ---------------------------------------------------------------------------------------------- the proof

@pytest.mark.parametrize("name", sorted(CASES))
def test_right_op_passes_and_each_wrong_op_fails_only_a_special(name):
    p = _remembering(next(p for p in PROBLEMS if p.name == name))
    right, wrongs = CASES[name]
    res = check.check(p, _op(p, right, "right"), device="cpu", repeats=1, seed=SEED)
    assert res.ok, str(res)
    assert len(_random(res)) == len(p.check_shapes) and _special(res), name
    for label, fn, catches in wrongs:
        res = check.check(p, _op(p, fn, label), device="cpu", repeats=1, seed=SEED)
        bad_random = [r for r in _random(res) if not r.ok]
        assert not bad_random, f"{name}, {label}: fails a random shape too:\n{bad_random[0]}"
        caught = [r.shape_desc for r in _special(res) if not r.ok]
        assert any(catches in c for c in caught), f"{name}, {label}: no special with '{catches}' fails: {caught}"
