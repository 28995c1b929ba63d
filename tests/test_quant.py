"""The quantization formats (harness.quant) on the CPU: round trips within their error bounds, the
documented bit orders, the NF4 codebook, clear errors on bad input, and lesson 05's exercises."""
import pytest
import torch

from harness import build, quant


def weights(n=64, k=512, seed=0):
    g = torch.Generator().manual_seed(seed)
    W = torch.randn(n, k, generator=g)
    W[:, ::37] *= 8  # outlier columns
    return W


@pytest.mark.parametrize("group", [None, 128, 64])
def test_int8_round_trip_within_half_a_step(group):
    W = weights()
    qw = quant.quantize_int8(W, group)
    g = qw.group
    assert qw.q.dtype == torch.int8 and qw.scale.dtype == torch.float16 and qw.scale.shape == (64, 512 // g)
    assert int(qw.q.abs().max()) <= 127
    step = qw.scale.float().repeat_interleave(g, dim=1)
    assert ((qw.dequantize() - W).abs() <= step / 2 + 1e-6).all()
    # the largest weight of each group lands on ±127 (up to the fp16 rounding of its scale)
    assert (qw.q.reshape(64, -1, g).abs().amax(-1) >= 126).all()


def test_int4_bit_order_is_low_nibble_first():
    q = torch.tensor([[1, 2, 3, 4, 5, 6, 7, -8]], dtype=torch.int8)
    word = quant.pack_int4(q)
    assert word.dtype == torch.int32 and word.shape == (1, 1)
    assert word.item() & 0xFFFFFFFF == 0x87654321
    assert torch.equal(quant.unpack_int4(word), q)


def test_int4_pack_round_trip_and_range_errors():
    g = torch.Generator().manual_seed(1)
    q = torch.randint(-8, 8, (5, 40), dtype=torch.int8, generator=g)
    assert torch.equal(quant.unpack_int4(quant.pack_int4(q)), q)
    u = torch.randint(0, 16, (5, 40), dtype=torch.int16, generator=g)
    assert torch.equal(quant.unpack_int4(quant.pack_int4(u), signed=False).to(torch.int16), u)
    with pytest.raises(ValueError, match="multiple of 8"):
        quant.pack_int4(q[:, :36])
    with pytest.raises(ValueError, match="4 bits"):
        quant.pack_int4(q.to(torch.int16) * 4)


@pytest.mark.parametrize("symmetric", [True, False], ids=["symmetric", "asymmetric"])
def test_int4_round_trip_within_half_a_step(symmetric):
    W = weights()
    qw = quant.quantize_int4(W, 128, symmetric=symmetric)
    assert qw.packed.shape == (64, 64) and qw.scale.shape == (64, 4)
    step = qw.scale.float().repeat_interleave(128, dim=1)
    # asymmetric: the zero point is rounded too, which can add up to half a step at the range's ends
    bound = step / 2 if symmetric else step
    assert ((qw.dequantize() - W).abs() <= bound + 1e-6).all()
    if not symmetric:
        assert qw.zero.dtype == torch.uint8 and int(qw.zero.max()) <= 15


def test_asymmetric_int4_beats_symmetric_on_one_sided_groups():
    W = weights().abs()  # all-positive groups: symmetric wastes the 8 negative levels
    sym = quant.rel_error(quant.quantize_int4(W, 128).dequantize(), W)
    asym = quant.rel_error(quant.quantize_int4(W, 128, symmetric=False).dequantize(), W)
    assert asym < 0.6 * sym


def test_nf4_codebook_derivation_matches_the_table():
    # The quantiles computed from QLoRA's definition (nf4_codebook) against the table bitsandbytes stores and the course
    # decodes with (quant.NF4; tests/test_bnb.py checks it equals the library's): 1 to 6 float32 steps apart on ten of
    # the 16 values, equal on the other six.
    steps = (quant.nf4_codebook().view(torch.int32) - quant.NF4.view(torch.int32)).abs()
    assert int(steps.max()) <= 8 and int((steps == 0).sum()) >= 6, steps.tolist()
    assert quant.NF4[7] == 0 and quant.NF4[0] == -1 and quant.NF4[15] == 1


def test_nf4_round_trip_and_layout():
    W = weights(32, 256)
    qw = quant.quantize_nf4(W)
    assert qw.packed.dtype == torch.uint8 and qw.packed.numel() == W.numel() // 2
    assert qw.absmax.shape == (W.numel() // 64,)
    idx = qw.indices().reshape(W.shape)
    assert int(idx[0, 0]) == int(qw.packed[0]) >> 4 and int(idx[0, 1]) == int(qw.packed[0]) & 0xF
    gaps = (quant.NF4[1:] - quant.NF4[:-1]).max() / 2
    am = qw.absmax.repeat_interleave(64).reshape(W.shape)
    assert ((qw.dequantize() - W).abs() <= gaps * am + 1e-6).all()


def test_w4a8_bit_order_masks_give_weights_in_order():
    u = torch.tensor([[1, 2, 3, 4, 5, 6, 7, 8]], dtype=torch.int16)
    word = quant.pack_w4a8(u).item() & 0xFFFFFFFF
    assert word & 0x0F0F0F0F == 0x04030201  # weights 0..3, one per byte, in order
    assert (word & 0xF0F0F0F0) >> 4 == 0x08070605  # weights 4..7
    g = torch.Generator().manual_seed(2)
    u = torch.randint(0, 16, (3, 64), generator=g)
    assert torch.equal(quant.unpack_w4a8(quant.pack_w4a8(u)).long(), u)
    with pytest.raises(ValueError, match="0..15"):
        quant.pack_w4a8(u - 1)


def test_w4a8_unpack_is_overflow_free():
    """The two-instruction unpack adds four bytes in one 32-bit multiply-add: it is right only if no byte ever
    carries into the next, for every code u (not just the ones present) of every group."""
    W = weights()
    W[1] = W[1].abs()  # one-sided groups push the zero point to an end
    W[2, :128] = 0
    W[3, 128:256] *= 1e3  # a group that sets the row's scale
    qw = quant.quantize_w4a8(W)
    s, z = qw.gscale.long(), qw.gzero.long()
    assert int(s.min()) >= 1 and int(s.max()) <= 15 and int(z.max()) <= 15
    for u in range(16):
        b = 128 + (u - z) * s
        assert int(b.min()) >= 0 and int(b.max()) <= 255, u
    assert torch.equal(quant.w4a8_unpack_like_the_gpu(qw), 128 + qw.codes().long())
    for u in (0, 15):  # every group filled with the extreme code: still no carry
        qx = quant.W4A8Weight(quant.pack_w4a8(torch.full(W.shape, u)), qw.scale, qw.gscale, qw.gzero, 128)
        assert torch.equal(quant.w4a8_unpack_like_the_gpu(qx), 128 + qx.codes().long())


def test_w4a8_unpack_like_the_gpu_carries_between_bytes():
    """Where a byte leaves 0..255 the reference shows what one 32-bit register does: the excess carries into the next
    byte of the same four weights (a borrow when it is negative), never into the next four."""
    def one(u, s, z):  # one row of 8 weights (one word), one group
        qw = quant.W4A8Weight(quant.pack_w4a8(torch.tensor([u])), torch.ones(1, 1, dtype=torch.float16),
                              torch.tensor([[s]], dtype=torch.uint8), torch.tensor([[z]], dtype=torch.uint8), 8)
        return quant.w4a8_unpack_like_the_gpu(qw)[0].tolist()
    assert one([15] * 8, 15, 0) == [97, 98, 98, 98] * 2     # 128 + 225 = 353 = 256 + 97: each byte passes 1 on
    assert one([0] * 8, 15, 15) == [159, 158, 158, 158] * 2  # 128 − 225 = −97: each byte borrows 1
    assert one([3, 0, 0, 0, 8, 8, 8, 8], 2, 1) == [132, 126, 126, 126, 142, 142, 142, 142]  # in range: 128 + (u − 1)·2


def test_w4a8_error_close_to_int4_with_zero_points():
    W = weights()
    qw = quant.quantize_w4a8(W)
    assert qw.packed.shape == (64, 64) and qw.scale.shape == (64, 1) and qw.gscale.shape == (64, 4)
    e = quant.rel_error(qw.dequantize(), W)
    ref = quant.rel_error(quant.quantize_int4(W, 128, symmetric=False).dequantize(), W)
    assert e < 1.2 * ref, (e, ref)  # integer group scales cost a little against float ones
    assert quant.bits_per_weight(qw, W.numel()) == 4 + 16 / 128 + 16 / 512


def test_fragment_order_word_is_one_mma_a_fragment():
    """Lesson 10: lane l = 4g + t's word of an m16 tile and k16 step holds, as nibbles u = q + 8, the A fragment of
    mma.m16n8k16 in the order lesson 07's trick unpacks it: nibbles i and i + 4 are the halves of register i."""
    g = torch.Generator().manual_seed(3)
    W = torch.randn(37, 256, generator=g)
    qw = quant.quantize_int4(W, 128)
    fw = quant.to_fragments(qw)
    assert fw.packed.shape == (3, 4, 32, 4) and fw.packed.dtype == torch.int32
    assert fw.scale.shape == (2, 48) and (fw.scale[:, 37:] == 0).all() and torch.equal(fw.scale[:, :37], qw.scale.t())
    q = quant.unpack_int4(qw.packed).long()
    for tile, chunk, lane, step in ((0, 0, 0, 0), (1, 3, 13, 2), (2, 1, 31, 3)):
        word = int(fw.packed[tile, chunk, lane, step]) & 0xFFFFFFFF
        gg, t, k0 = lane // 4, lane % 4, chunk * 64 + step * 16
        # registers a0..a3 = rows (g, g+8, g, g+8) × columns (2t, 2t, 2t+8, 2t+8), second half one column on
        for reg, (dr, dc) in enumerate(((0, 0), (8, 0), (0, 8), (8, 8))):
            for half in (0, 1):
                r, c = 16 * tile + gg + dr, k0 + 2 * t + dc + half
                want = int(q[r, c]) + 8 if r < 37 else 8  # rows past N: q = 0
                assert (word >> (4 * (reg + 4 * half))) & 0xF == want, (tile, chunk, lane, step, reg, half)
    assert torch.equal(fw.codes(), quant.unpack_int4(qw.packed))
    assert torch.equal(fw.dequantize(), qw.dequantize())
    assert fw.k == 256 and fw.nbytes() == 3 * 4 * 32 * 4 * 4 + 2 * 48 * 2


def test_fragment_order_refuses_what_it_cannot_hold():
    W = weights(16, 256)
    with pytest.raises(ValueError, match="only the symmetric format"):
        quant.to_fragments(quant.quantize_int4(W, 128, symmetric=False))
    with pytest.raises(ValueError, match="must be a multiple of 64"):
        quant.to_fragments(quant.quantize_int4(W, 32))


def test_int8_tiles_hold_each_tile_k_block_contiguously():
    """Lesson 06: to_tiles stores q[16·tile + r, 64·b + c] at [tile, b, r, c] (rows past N zero), and codes() undoes it."""
    W = torch.randn(37, 256, generator=torch.Generator().manual_seed(4))
    qw = quant.quantize_int8(W, 128)
    tw = quant.to_tiles(qw)
    assert tw.q.shape == (3, 4, 16, 64) and tw.q.dtype == torch.int8 and tw.q.is_contiguous()
    for tile, b, r, c in ((0, 0, 0, 0), (1, 3, 7, 63), (2, 2, 4, 17)):
        assert tw.q[tile, b, r, c] == qw.q[16 * tile + r, 64 * b + c]
    assert (tw.q[2, :, 5:] == 0).all()  # rows 37..47
    flat = tw.q.reshape(-1)  # a tile's K block is 1 KB in a row: tile 1, block 2 starts at (1·4 + 2)·1024
    assert torch.equal(flat[6 * 1024:7 * 1024].reshape(16, 64), qw.q[16:32, 128:192])
    assert torch.equal(tw.codes(), qw.q) and torch.equal(tw.dequantize(), qw.dequantize())
    assert tw.k == 256 and tw.scale is qw.scale and tw.nbytes() == 3 * 4 * 1024 + 37 * 2 * 2
    with pytest.raises(ValueError, match="must be a multiple of 64"):
        quant.to_tiles(quant.Int8Weight(torch.zeros(16, 96, dtype=torch.int8), torch.ones(16, 3, dtype=torch.float16), 32))


@pytest.mark.parametrize("symmetric", [True, False])
def test_int4_tiles_hold_each_group_of_16_rows_contiguously(symmetric):
    """Lesson 07: to_tiles stores packed[16·tile + r, 16·b + w] at [tile, b, r, w] and scale[16·tile + r, b] at
    [tile, b, r] (zero points too; rows past N zero), and rows() undoes it."""
    W = torch.randn(37, 384, generator=torch.Generator().manual_seed(5))
    qw = quant.quantize_int4(W, 128, symmetric)
    tw = quant.to_tiles(qw)
    assert isinstance(tw, quant.Int4Tiles) and tw.symmetric == symmetric
    assert tw.packed.shape == (3, 3, 16, 16) and tw.packed.dtype == torch.int32 and tw.packed.is_contiguous()
    for tile, b, r, w in ((0, 0, 0, 0), (1, 2, 7, 15), (2, 1, 4, 9)):
        assert tw.packed[tile, b, r, w] == qw.packed[16 * tile + r, 16 * b + w]
    assert (tw.packed[2, :, 5:] == 0).all()  # rows 37..47
    flat = tw.packed.reshape(-1)  # a tile's group is 1 KB in a row: tile 1, group 2 starts at word (1·3 + 2)·256
    assert torch.equal(flat[5 * 256:6 * 256].reshape(16, 16), qw.packed[16:32, 32:48])
    assert tw.scale.shape == (3, 3, 16) and tw.scale[1, 2, 7] == qw.scale[23, 2] and (tw.scale[2, :, 5:] == 0).all()
    if symmetric:
        assert tw.zero is None
    else:
        assert tw.zero.shape == (3, 3, 16) and tw.zero.dtype == torch.uint8 and tw.zero[2, 1, 4] == qw.zero[36, 1]
    back = tw.rows()
    assert torch.equal(back.packed, qw.packed) and torch.equal(back.scale, qw.scale)
    assert (back.zero is None) if symmetric else torch.equal(back.zero, qw.zero)
    assert torch.equal(tw.dequantize(), qw.dequantize()) and tw.k == 384
    assert tw.nbytes() == 3 * 3 * (1024 + 16 * 2 + (0 if symmetric else 16))
    with pytest.raises(ValueError, match="one group of 128 per K block"):
        quant.to_tiles(quant.quantize_int4(torch.randn(16, 256), 64))
    with pytest.raises(TypeError, match="Int8Weight, Int4Weight, NF4Weight or NF4DQWeight, got Tensor"):
        quant.to_tiles(torch.zeros(16, 128))


def test_nf4_tiles_hold_each_k_item_of_16_rows_contiguously():
    """Lesson 08: to_tiles stores row n's bytes 64·b … 64·b + 63 at [n // 16, b, n % 16] and absmax[n, j] at
    [n // 16, j, n % 16] (rows past N zero), and rows() gives back bitsandbytes' row-major layout."""
    W = torch.randn(37, 384, generator=torch.Generator().manual_seed(6))
    qw = quant.quantize_nf4(W, 64)
    tw = quant.to_tiles(qw)
    rows = qw.packed.view(37, 192)
    assert tw.packed.shape == (3, 3, 16, 64) and tw.packed.dtype == torch.uint8 and tw.packed.is_contiguous()
    assert torch.equal(tw.packed[1, 2, 7], rows[23, 128:192]) and (tw.packed[2, :, 5:] == 0).all()
    assert tw.absmax.shape == (3, 6, 16) and tw.absmax[2, 5, 4] == qw.absmax.view(37, 6)[36, 5]
    assert torch.equal(tw.codebook, quant.NF4)
    back = tw.rows()
    assert torch.equal(back.packed, qw.packed) and torch.equal(back.absmax, qw.absmax) and back.shape == (37, 384)
    assert torch.equal(tw.dequantize(), qw.dequantize()) and tw.k == 384 and tw.n == 37
    assert tw.nbytes() == 3 * 3 * 1024 + 3 * 6 * 16 * 4
    with pytest.raises(ValueError, match="K a multiple of 128"):
        quant.to_tiles(quant.quantize_nf4(torch.randn(4, 192), 64))


def test_nf4_double_quantized_tiles_hold_a_lanes_codes_per_k_item_as_one_word():
    """Lesson 08: to_tiles(double_quantize(w)) keeps the bytes' tiles and stores the absmax code of row n, block j at
    [n // 16, j // 2, n % 8, j % 2, (n % 16) // 8], the word a lane g = n % 8 loads per K item; rows() gives back
    bitsandbytes' order, and the codes decode to within absmax2 / 2 of each absmax (1/254 of it at worst)."""
    W = torch.randn(37, 384, generator=torch.Generator().manual_seed(8))
    qw = quant.quantize_nf4(W, 64)
    dq = quant.double_quantize(qw)
    assert dq.qabsmax.dtype == torch.uint8 and dq.qabsmax.shape == (37 * 6,) and dq.absmax2.shape == (1,)
    assert torch.equal(dq.packed, qw.packed) and torch.allclose(dq.offset, qw.absmax.mean().reshape(1))
    err = (dq.absmax_values() - qw.absmax).abs()
    assert float(err.max()) <= float(dq.absmax2.max()) / 2, "an absmax code is not the nearest"
    t = quant.to_tiles(dq)
    assert t.qabsmax.shape == (3, 3, 8, 2, 2) and t.qabsmax.is_contiguous() and (t.qabsmax[2, :, 5:, :, 0] == 0).all()
    codes = dq.qabsmax.view(37, 6)
    assert t.qabsmax[1, 2, 3, 1, 1] == codes[16 + 3 + 8, 5] and t.qabsmax[2, 0, 4, 0, 0] == codes[36, 0]
    back = t.rows()
    assert torch.equal(back.qabsmax, dq.qabsmax) and torch.equal(back.packed, qw.packed)
    assert torch.equal(t.dequantize(), dq.dequantize()) and t.k == 384 and t.n == 37
    assert t.nbytes() == 3 * 3 * 1024 + 3 * 6 * 16 + 4 + 4 and dq.nbytes() == 37 * 192 + 37 * 6 + 4 + 4
    # 4.5 bits per weight → 4.127 on a large matrix (absmax2 per 256 blocks, one offset)
    big = quant.double_quantize(quant.quantize_nf4(torch.randn(256, 4096), 64))
    assert abs(big.nbytes() * 8 / (256 * 4096) - 4.127) < 0.001
    with pytest.raises(TypeError, match="takes a quant.NF4Weight"):
        quant.double_quantize(t)


def test_per_token_int8():
    x = torch.randn(7, 300) * torch.linspace(0.1, 10, 7)[:, None]
    q, s = quant.quantize_per_token_int8(x)
    assert q.dtype == torch.int8 and s.shape == (7,)
    assert ((q.float() * s[:, None] - x).abs() <= s[:, None] / 2 + 1e-6).all()
    with pytest.raises(ValueError, match="2-D floating-point"):
        quant.quantize_per_token_int8(q)


def test_per_token_int8_is_ieee_float32_arithmetic():
    """The reference's scale and codes are what a kernel computes with IEEE float32 divisions (m / 127.f, then
    x / scale rounded half to even): NumPy's float32 division is IEEE. A one-bit difference in the scale moved one
    code of lesson 09's check by one step (seed 3944577863, M = 33, N = 136, K = 256)."""
    import numpy as np
    gen = torch.Generator().manual_seed(7)
    x = (torch.randn(4000, 64, generator=gen) * torch.rand(4000, 1, generator=gen) * 10).half()
    q, s = quant.quantize_per_token_int8(x)
    xf = x.float().numpy()
    want_s = np.abs(xf).max(axis=1).astype(np.float32) / np.float32(127)
    assert np.array_equal(s.numpy(), want_s)
    want_q = np.clip(np.rint(xf / want_s[:, None]), -127, 127).astype(np.int8)
    assert np.array_equal(q.numpy(), want_q)
    if torch.cuda.is_available():  # the same on the GPU, where torch divides by a Python number via its reciprocal
        qg, sg = quant.quantize_per_token_int8(x.cuda())
        assert torch.equal(sg.cpu(), s) and torch.equal(qg.cpu(), q)


def test_all_zero_group_stays_zero_without_nan():
    W = weights()
    W[5, 128:256] = 0
    for qw in (quant.quantize_int8(W, 128), quant.quantize_int4(W, 128), quant.quantize_int4(W, 128, False),
               quant.quantize_nf4(W), quant.quantize_w4a8(W)):
        d = qw.dequantize()
        assert torch.isfinite(d).all() and (d[5, 128:256] == 0).all(), type(qw).__name__


def test_bad_weights_get_clear_errors():
    W = weights()
    with pytest.raises(ValueError, match="not a multiple of the group size 128"):
        quant.quantize_int4(W[:, :500], 128)
    with pytest.raises(ValueError, match="2-D"):
        quant.quantize_int8(W[0], 128)
    with pytest.raises(TypeError, match="floating point"):
        quant.quantize_int8(W.to(torch.int32), 128)
    bad = W.clone()
    bad[0, 0] = float("nan")
    with pytest.raises(ValueError, match="NaN"):
        quant.quantize_nf4(bad)


def test_bits_per_weight():
    W = weights(128, 1024)
    assert quant.bits_per_weight(quant.quantize_int8(W, 128), W.numel()) == 8 + 16 / 128
    assert quant.bits_per_weight(quant.quantize_int4(W, 128), W.numel()) == 4 + 16 / 128
    assert quant.bits_per_weight(quant.quantize_int4(W, 128, False), W.numel()) == 4 + 24 / 128
    assert quant.bits_per_weight(quant.quantize_nf4(W), W.numel()) == 4 + 32 / 64


def test_lesson05_solutions_pass_and_stubs_fail_helpfully():
    sol = quant.check_formats(build.load_python(5, "formats", solution=True))
    assert all(r.ok for r in sol), "\n".join(map(str, sol))
    stub = quant.check_formats(build.load_python(5, "formats", solution=False))
    assert not any(r.ok for r in stub)
    assert all("not implemented yet (exercise 05." in r.message for r in stub), "\n".join(map(str, stub))


def test_format_check_names_the_first_difference():
    class Wrong:  # a pack with the nibbles in the opposite order
        @staticmethod
        def pack_int4(q):
            return quant.pack_int4(q.flip(1).reshape(q.shape[0], -1, 8).flip(1).reshape(q.shape))
    res = {r.exercise: r for r in quant.check_formats(Wrong)}
    r = res["05.b pack_int4"]
    assert not r.ok and "differ; first at" in r.message and "nibble order" in r.message
    assert "raised AttributeError" in res["05.a quantize_int8_groupwise"].message


def test_small_weights_with_subnormal_fp16_scales_round_trip():
    """Weights of ~1e-3 give INT8 group scales below FP16's smallest normal (6.1e-5): quantizing must divide by the
    stored (subnormal) scale, or the codes and the scale disagree (a 30-60% error, found in lesson 11)."""
    g = torch.Generator().manual_seed(0)
    W = torch.randn(64, 256, generator=g) * 1e-3
    q8 = quant.quantize_int8(W, 128)
    assert (q8.scale.float() < torch.finfo(torch.float16).tiny).any()
    assert quant.rel_error(q8.dequantize(), W) < 0.01
    assert quant.rel_error(quant.quantize_int4(W * 0.05, 128).dequantize(), W * 0.05) < 0.15
    assert quant.rel_error(quant.quantize_int4(W * 0.05, 128, symmetric=False).dequantize(), W * 0.05) < 0.15
    z = torch.zeros(2, 128)
    assert torch.equal(quant.quantize_int8(z, 128).dequantize(), z)
    assert torch.equal(quant.quantize_int4(z, 128, symmetric=False).dequantize(), z)


def test_lesson10_reorder_solution_passes_and_stub_fails_helpfully():
    """Exercise 10.a (reorder.py's fragment_words): the solution reads back through Int4Fragments.codes(); the stub
    says it is not written; a reorder with two registers swapped is caught and the element it misplaces named."""
    sol = quant.check_fragments(build.load_python(10, "reorder", solution=True))
    assert [r.ok for r in sol] == [True], sol
    stub = quant.check_fragments(build.load_python(10, "reorder", solution=False))
    assert not stub[0].ok and "not implemented yet (exercise 10.a" in stub[0].message

    class Swapped:  # registers a1 and a2 (nibbles 1 and 2, 5 and 6) exchanged
        @staticmethod
        def fragment_words(u):
            w = build.load_python(10, "reorder", solution=True).fragment_words(u).to(torch.int64) & 0xFFFFFFFF
            nib = [(w >> (4 * i)) & 0xF for i in range(8)]
            nib[1], nib[2], nib[5], nib[6] = nib[2], nib[1], nib[6], nib[5]
            out = sum(n << (4 * i) for i, n in enumerate(nib))
            return torch.where(out >= 2**31, out - 2**32, out).to(torch.int32)
    bad = quant.check_fragments(Swapped)
    assert not bad[0].ok and "reads back as" in bad[0].message and "lane and nibble" in bad[0].message


def test_to_fragments_takes_the_reorder_of_either_side():
    """quant.to_fragments runs lesson 10's reorder: the solution's by default (lessons 11 and 12 and the decode step
    rely on it), the learner's with solution=False (the stub's NotImplementedError reaches the caller)."""
    qw = quant.quantize_int4(weights(40, 384), 128)
    f = quant.to_fragments(qw)
    assert f.packed.shape == (3, 6, 32, 4) and torch.equal(f.codes(), quant.unpack_int4(qw.packed, signed=True))
    with pytest.raises(NotImplementedError, match="10.a"):
        quant.to_fragments(qw, solution=False)
