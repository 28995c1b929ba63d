"""The checker: poison, NaN, tolerance by dtype, and failure reports that say what is wrong."""
import pytest
import torch

from harness import check


def _pair(shape=(64, 96), dtype=torch.float32):
    ref = torch.randn(*shape, dtype=torch.float64)
    return ref.to(dtype), ref


def test_pass_within_tolerance():
    got, ref = _pair()
    r = check.compare(got, ref, name="k")
    assert r.ok and r.wrong == 0 and r.rel_error < 1e-6
    assert str(r).startswith("PASS")


def test_poison_is_reported_as_unwritten():
    got, ref = _pair()
    p = check.poisoned(got.shape, got.dtype, "cpu")
    p[:, :64] = got[:, :64]  # columns 64.. never written
    r = check.compare(p, ref, name="k")
    assert not r.ok and r.unwritten == 64 * 32 and r.nonfinite == 0
    s = str(r)
    assert "never written" in s and "tile columns 2" in s
    assert r.examples[0][1] == "never written"


def test_kernel_nan_is_not_poison_and_fails():
    got, ref = _pair()
    got[3, 5] = float("nan")
    got[7, 1] = float("inf")
    r = check.compare(got, ref)
    assert not r.ok and r.nonfinite == 2 and r.unwritten == 0 and "NaN/inf computed by the kernel" in str(r)


@pytest.mark.parametrize("dtype", [torch.float32, torch.float16, torch.bfloat16])
def test_tolerance_scales_with_dtype(dtype):
    got, ref = _pair(dtype=dtype)
    assert check.compare(got, ref).ok  # rounding to the dtype is within its tolerance
    bad = got.clone()
    bad[0, 0] += 0.1 * ref.abs().max().to(dtype)
    r = check.compare(bad, ref)
    assert not r.ok and r.wrong == 1 and r.examples[0][0] == (0, 0)


def test_fp32_tolerance_catches_tf32_level_error():
    ref = torch.randn(128, 128, dtype=torch.float64)
    got = (ref * (1 + 2e-3 * torch.randn_like(ref))).float()
    assert not check.compare(got, ref).ok


def test_all_zero_output_gets_a_hint():
    _, ref = _pair()
    r = check.compare(torch.zeros(ref.shape), ref)
    assert not r.ok and "exactly 0" in str(r)


def test_int32_exact_and_poison():
    ref = torch.randint(-1000, 1000, (16, 16), dtype=torch.int32)
    assert check.compare(ref.clone(), ref).ok
    p = check.poisoned((16, 16), torch.int32, "cpu")
    assert check.compare(p, ref).unwritten == 256


def test_shape_mismatch_raises():
    with pytest.raises(ValueError, match="differs from the reference"):
        check.compare(torch.zeros(3, 4), torch.zeros(4, 3))


def test_heatmap_draws_tiles():
    import matplotlib
    matplotlib.use("Agg")
    got, ref = _pair((300, 200))
    got[32:64, 96:128] = 0
    r = check.compare(got, ref)
    ax = r.heatmap(tile=(32, 32))
    cells = ax.images[0].get_array()
    assert cells.max() > 0.5 and cells.min() == 0


def test_check_result_aggregates():
    got, ref = _pair()
    ok, bad = check.compare(got, ref), check.compare(torch.zeros_like(got), ref)
    res = check.CheckResult("k", [ok, bad])
    assert not res.ok and res.first_failure() is bad and "1 of 2 FAILED" in str(res)
    with pytest.raises(check.CheckFailed, match="FAIL"):
        res.raise_if_failed()
    assert not check.CheckResult("k", []).ok  # nothing checked is not a pass


def test_int8_linear_inputs_span_the_int8_range_and_reference_is_exact():
    from harness import catalog
    x, W = catalog.INT8.make_inputs((64, 48, 4099), device="cpu")
    assert x.dtype == W.dtype == torch.int8 and x.shape == (64, 4099) and W.shape == (48, 4099)
    assert int(x.min()) == -128 and int(x.max()) == 127  # 262k draws cover both ends
    ref = catalog.INT8.reference((x, W))
    assert torch.equal(ref, (x.long() @ W.long().T).double())  # exact: |y| < 2**53


def test_w8a16_problem_rejects_bad_input_before_any_launch():
    from harness import catalog

    def never(*a):
        raise AssertionError("the launcher must not be reached")

    op = catalog.W8A16.bind(never, "w8a16")
    x = torch.zeros(2, 256, dtype=torch.float16)
    q = torch.zeros(8, 256, dtype=torch.int8)
    s = torch.zeros(8, 2, dtype=torch.float16)
    with pytest.raises(ValueError, match="not a multiple of the group size 128"):
        op(x[:, :200], q[:, :200], s)
    with pytest.raises(TypeError, match="q must be torch.int8"):
        op(x, q.to(torch.int16), s)
    with pytest.raises(ValueError, match=r"scales must have shape \(8, 2\)"):
        op(x, q, s[:, :1])
    with pytest.raises(ValueError, match="q must be \\[N, K\\]"):
        op(x, q[:, :128], s)
    with pytest.raises(ValueError, match="not a multiple of 64"):
        catalog.GEMV_F16.bind(never, "gemv")(x[:, :100], torch.zeros(8, 100, dtype=torch.float16))


def test_w8a8_problem_rejects_bad_input_before_any_launch():
    from harness import catalog

    def never(*a):
        raise AssertionError("the launcher must not be reached")

    op = catalog.W8A8.bind(never, "w8a8")
    x = torch.zeros(2, 256, dtype=torch.float16)
    q = torch.zeros(8, 256, dtype=torch.int8)
    s = torch.zeros(8, 1, dtype=torch.float16)
    with pytest.raises(ValueError, match="not a multiple of the K tile 128"):
        op(x[:, :200], q[:, :200], s)
    with pytest.raises(TypeError, match="x must be torch.float16"):
        op(x.float(), q, s)
    with pytest.raises(ValueError, match=r"scales \(one per output channel\) must have shape \(8, 1\)"):
        op(x, q, s.view(-1))
    with pytest.raises(ValueError, match="q must be \\[N, K\\]"):
        op(x, q[:, :128], s)
    with pytest.raises(ValueError, match=r"out must be \[M=2, N=8\], got \[8, 2\]"):
        op(x, q, s, out=torch.empty(8, 2, dtype=torch.float16))


def test_w8a8_reference_quantizes_the_activations_per_token():
    from harness import catalog, quant
    x, q, s = catalog.W8A8.make_inputs((5, 24, 384), device="cpu")
    assert s.shape == (24, 1) and q.dtype == torch.int8
    xq, sx = quant.quantize_per_token_int8(x)
    want = (xq.double() * sx.double()[:, None]) @ (q.double() * s.double()).T
    assert torch.allclose(catalog.W8A8.reference((x, q, s)), want)
    # it is the W8A8 function, not the FP16 product: activation rounding shows at the 1e-3..1e-1 level
    err = quant.rel_error(catalog.W8A8.reference((x, q, s)), x.double() @ (q.double() * s.double()).T)
    assert 1e-4 < err < 0.1


def test_w4a16_problems_check_the_format_and_use_the_dequantized_reference():
    from harness import catalog, quant

    def never(*a):
        raise AssertionError("the launcher must not be reached")

    x, q, s = catalog.W4A16.make_inputs((3, 16, 256), device="cpu")
    assert q.dtype == torch.int32 and q.shape == (16, 32) and s.shape == (16, 2)
    W = quant.Int4Weight(q, s, 128).dequantize().double()
    assert torch.allclose(catalog.W4A16.reference((x, q, s)), x.double() @ W.T)
    x, q, s, z = catalog.W4A16_ASYM.make_inputs((3, 16, 256), device="cpu")
    W = quant.Int4Weight(q, s, 128, z).dequantize().double()
    assert torch.allclose(catalog.W4A16_ASYM.reference((x, q, s, z)), x.double() @ W.T)
    op, op_asym = catalog.W4A16.bind(never, "w4a16"), catalog.W4A16_ASYM.bind(never, "w4a16_asym")
    with pytest.raises(TypeError, match="takes no zero points"):
        op(x, q, s, z)
    with pytest.raises(TypeError, match="takes zero points"):
        op_asym(x, q, s)
    with pytest.raises(TypeError, match="zeros must be torch.uint8"):
        op_asym(x, q, s, z.to(torch.int8))
    with pytest.raises(ValueError, match=r"packed \(8 weights per int32\) must have shape \(16, 32\)"):
        op(x, q[:, :16], s)
    with pytest.raises(ValueError, match="not a multiple of the group size 128"):
        op(x[:, :200], q, s)
    assert catalog.W4A16.bytes((1, 16, 256)) == 2 * 256 + 16 * 128 + 2 * 16 * 2 + 2 * 16


def test_w8a16_reference_is_the_dequantized_product():
    from harness import catalog, quant
    x, q, s = catalog.W8A16.make_inputs((3, 16, 256), device="cpu")
    W = quant.Int8Weight(q, s, 128).dequantize().double()
    assert torch.allclose(catalog.W8A16.reference((x, q, s)), x.double() @ W.T)
    assert catalog.W8A16.bytes((1, 16, 256)) == 2 * 256 + 16 * 256 + 2 * 16 * 2 + 2 * 16
