"""bitsandbytes, lesson 08's baseline (harness.baselines.bnb): the course's NF4 is bitsandbytes' to the bit (the same bytes and
absmax from the same weights, the same FP16 values from the same bytes), bad arguments get clear errors, and on a GPU
its kernels compute lesson 08's problems on odd shapes (so its timings in lesson 08 time a correct kernel)."""
import re

import pytest
import torch

from harness import build, catalog, check, doctor, quant
from harness.baselines import bnb

pytestmark = pytest.mark.skipif(bnb.unavailable() is not None, reason=str(bnb.unavailable()))


def _weights(N, K, seed, device="cpu"):
    """Gaussian weights, one all-zero block, and a row whose values sit exactly on the decision boundaries (the block's
    absmax is 1, so w / absmax is the boundary itself: the rounding rule, not chance, decides those)."""
    gen = torch.Generator(device=device).manual_seed(seed)
    W = torch.randn(N, K, generator=gen, device=device)
    W[0, :64] = 0
    mid = ((quant.NF4[1:] + quant.NF4[:-1]) / 2).to(device)
    W[1, :64] = torch.cat([torch.ones(1, device=device), mid.repeat(5)])[:64]
    return W


def test_codebook_is_bitsandbytes_table():
    import bitsandbytes.functional as F
    assert torch.equal(quant.NF4, F.get_4bit_type("nf4", device="cpu").float())


@pytest.mark.parametrize("N, K, dtype", [(37, 384, torch.float32), (5, 64, torch.float16), (128, 1088, torch.bfloat16)])
def test_quantize_gives_bitsandbytes_bytes(N, K, dtype):
    W = _weights(N, K, N * K).to(dtype)
    ours, theirs = quant.quantize_nf4(W), bnb.quantize(W)
    assert torch.equal(ours.absmax, theirs.absmax)
    diff = (ours.packed != theirs.packed).nonzero()
    assert diff.numel() == 0, f"{diff.numel()} of {ours.packed.numel()} bytes differ, first at byte {int(diff[0])}"


def test_dequantize_matches_bitsandbytes_to_the_bit():
    w = quant.quantize_nf4(_weights(64, 512, 7))
    assert torch.equal(bnb.dequantize(w), w.dequantize().half())


def test_dynamic_map_is_bitsandbytes():
    import bitsandbytes.functional as F
    assert torch.equal(quant.dynamic_map(), F.create_dynamic_map())


def test_double_quantize_is_bitsandbytes_compress_statistics():
    """Against bitsandbytes' quantize_4bit(compress_statistics=True) on the CPU: the same offset and absmax2, and
    codes that decode to within one step of its: ours are the nearest code, its CPU quantizer's search picks the
    other neighbour for a few values near the midpoint between two codes."""
    import bitsandbytes.functional as F
    W = _weights(300, 1024, 5)
    dq = quant.double_quantize(quant.quantize_nf4(W))
    packed, st = F.quantize_4bit(W, blocksize=64, compress_statistics=True, quant_type="nf4")
    assert torch.equal(packed.reshape(-1), dq.packed) and torch.equal(st.offset.reshape(1), dq.offset)
    assert torch.equal(st.state2.absmax, dq.absmax2) and torch.equal(st.state2.code, dq.code)
    diff = st.absmax.int() - dq.qabsmax.int()
    assert int(diff.abs().max()) <= 1 and int((diff != 0).sum()) < dq.qabsmax.numel() // 100
    v = quant.quantize_nf4(W).absmax - dq.offset
    g = torch.arange(v.numel()) // 256
    ours, theirs = ((dq.code[q.long()] * dq.absmax2[g] - v).abs() for q in (dq.qabsmax, st.absmax))
    assert (ours <= theirs).all()


def test_double_quantized_bytes_decode_to_bitsandbytes_values():
    """bitsandbytes' own double-quantized state, read as a quant.NF4DQWeight, decodes to its dequantize_4bit bit for
    bit: the course's decoding (and the kernel's, which does the same FP32 multiply, then add) is its."""
    import bitsandbytes.functional as F
    W = _weights(64, 512, 9)
    packed, st = F.quantize_4bit(W, blocksize=64, compress_statistics=True, quant_type="nf4")
    w = quant.NF4DQWeight(packed.reshape(-1), st.absmax, st.state2.absmax, st.offset.reshape(1), st.state2.code,
                          tuple(W.shape))
    assert torch.equal(w.absmax_values(), F.dequantize_blockwise(st.absmax, st.state2) + st.offset)
    assert torch.equal(w.dequantize(), F.dequantize_4bit(packed, st))


def test_branchy_kernel_compiles_in_the_table():
    """Lesson 08's decision-tree kernel writes the 16 values as literals: they must be harness.quant.NF4's float32s."""
    for folder in ("kernels", "solutions"):
        src = (build.ROOT / folder / "08_nf4" / "nf4.cu").read_text()
        tree = src[src.index("struct TreeLookup"):src.index("struct SmemLookup")]
        lits = sorted({float(torch.tensor(float(v), dtype=torch.float32)) for v in re.findall(r"(-?\d+\.\d*)f", tree)})
        assert lits == sorted(quant.NF4.tolist()), f"{folder}/08_nf4/nf4.cu: {lits}"


def test_bad_arguments_are_refused():
    w = quant.quantize_nf4(torch.randn(32, 256))
    with pytest.raises(TypeError, match="NF4Tiles.rows"):
        bnb.state(quant.to_tiles(w))
    with pytest.raises(TypeError, match="NF4Weight"):
        bnb.dequantize(quant.quantize_int4(torch.randn(32, 256), 128))
    with pytest.raises(ValueError, match="2-D"):
        bnb.state(quant.NF4Weight(w.packed, w.absmax, (32 * 256,)))
    with pytest.raises(ValueError, match="do not fit"):
        bnb.state(quant.NF4Weight(w.packed[:-2], w.absmax, (32, 256)))
    with pytest.raises(ValueError, match="float16"):
        bnb.linear(torch.randn(1, 256), w)
    with pytest.raises(ValueError, match=r"\[M, 256\]"):
        bnb.linear(torch.randn(1, 128).half(), w)


@pytest.mark.gpu
@pytest.mark.parametrize("dtype", [torch.float32, torch.float16])
def test_cuda_quantize_and_dequantize_match_the_course(dtype):
    """bitsandbytes' CUDA quantizer compares w / absmax with boundary constants of its own, which can sit a float32 step
    from the midpoints harness.quant uses: on the H100 2 of the 33.5 M bytes it wrote for 8192 × 8192 float32 weights
    differed from ours (none for the same weights in float16). So: the same absmax, and the same index wherever
    w / absmax is more than 1e-6 from a boundary (one index apart where it is not). A block of zeros (absmax 0) gets
    index 0 there (ours: 7, the zero code); both decode to zeros. And its dequantization is the course's to the bit."""
    W = _weights(1000, 4096, 11, "cuda").to(dtype)
    ours, theirs = quant.quantize_nf4(W), bnb.quantize(W)
    assert torch.equal(ours.absmax, theirs.absmax)
    a, b = ours.indices().long(), theirs.indices().long()
    live = ours.absmax.repeat_interleave(64) > 0
    assert not bnb.dequantize(theirs).reshape(-1)[~live].any()
    diff = ((a != b) & live).nonzero().flatten()
    x = (W.float().reshape(-1, 64) * (1.0 / ours.absmax.clamp_min(1e-38))[:, None]).reshape(-1)[diff]
    near = (x[:, None] - ((quant.NF4[1:] + quant.NF4[:-1]) / 2).cuda()).abs().min(dim=1).values
    bad = ((a[diff] - b[diff]).abs() != 1) | (near > 1e-6)
    assert not bad.any(), (f"{diff.numel()} indices differ, {int(bad.sum())} of them not at a boundary; first: weight "
                           f"{int(diff[bad][0])}, w / absmax {float(x[bad][0])!r}, ours {int(a[diff][bad][0])}, "
                           f"bitsandbytes' {int(b[diff][bad][0])}")
    assert torch.equal(bnb.dequantize(ours), ours.dequantize().half())


@pytest.mark.gpu
def test_lesson_08_dequantize_gives_bitsandbytes_values():
    """Lesson 08's kernels that scale in float32 give bitsandbytes' FP16 values exactly. The pair table rounds the
    code and the absmax to FP16 and multiplies in FP16: up to 2^-10 relative from the two roundings plus the
    product's own, so within 3 FP16 steps of them (1.4 at most on the H100, for 4 M values)."""
    mod = build.load(8, "nf4", solution=True)
    ins = catalog.DEQUANT_NF4.make_inputs((1000, 4096))
    want = bnb.dequant_op(*ins)
    for name in ("dequant_nf4_global", "dequant_nf4_branchy", "dequant_nf4_smem", "dequant_nf4_shfl"):
        got = catalog.DEQUANT_NF4.bind(getattr(mod, name))(*ins)
        assert torch.equal(got, want), f"{name}: {int((got != want).sum())} of {got.numel()} values differ"
    for name in ("dequant_nf4_pairs", "dequant_nf4_banked"):  # the same table of pairs, one copy or one per bank
        got, w = catalog.DEQUANT_NF4.bind(getattr(mod, name))(*ins).float(), want.float()
        steps = (got - w).abs() / torch.clamp(w.abs() * 2 ** -10, min=2 ** -24)
        assert float(steps.max()) <= 3, f"{name}: up to {float(steps.max()):.2f} FP16 steps from bitsandbytes"


@pytest.mark.gpu
def test_lesson_08_double_quantized_gemv_reads_bitsandbytes_state():
    """bitsandbytes' CUDA quantize_4bit(compress_statistics=True), repacked into tiles, through lesson 08's
    gemv_nf4_tiles_dq: the product with the weights bitsandbytes' own dequantize_4bit gives, within FP16 tolerance,
    on an odd N and M."""
    import bitsandbytes.functional as F
    mod = build.load(8, "nf4_fast", solution=True)
    W = _weights(1000, 4096, 11, "cuda").half()
    packed, st = F.quantize_4bit(W, blocksize=64, compress_statistics=True, quant_type="nf4")
    w = quant.NF4DQWeight(packed.reshape(-1), st.absmax, st.state2.absmax, st.offset.reshape(1).float(), st.state2.code,
                          tuple(W.shape))
    x = torch.randn(3, 4096, device="cuda", generator=torch.Generator(device="cuda").manual_seed(2)).half()
    out = check.poisoned((3, 1000), torch.float16)
    catalog.NF4_TILES_DQ.bind(mod.gemv_nf4_tiles_dq)(x, quant.to_tiles(w), out=out)
    rep = check.compare(out, x.double() @ F.dequantize_4bit(packed, st).double().T, name="gemv_nf4_tiles_dq")
    assert rep.ok, str(rep)


@pytest.mark.gpu
@pytest.mark.parametrize("problem, op", [(catalog.DEQUANT_NF4, bnb.dequant_op), (catalog.NF4_LINEAR, bnb.linear_op)],
                         ids=["dequantize_4bit", "matmul_4bit"])
def test_bitsandbytes_computes_lesson_08s_problems(problem, op):
    res = check.check(problem, op)
    assert res.ok, str(res)


def test_doctor_reports_bitsandbytes():
    assert f"bitsandbytes (baseline): {bnb.VERSION}" in doctor.report()
