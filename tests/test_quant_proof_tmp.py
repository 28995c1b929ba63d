import torch
from harness import quant
def test_frag():
    r, c = quant._frag_positions(); r0, c0 = quant._old_frag_positions()
    assert torch.equal(r, r0) and torch.equal(c, c0) and r.dtype == r0.dtype
def test_w4a8():
    g = torch.Generator().manual_seed(0)
    for group in (8, 32, 128):
        for trial in range(20):
            N, K = 7, 256
            u = torch.randint(0, 16, (N, K), generator=g)
            gs = torch.randint(1, 16, (N, K // group), generator=g).to(torch.uint8)   # any codes: carries and borrows
            gz = torch.randint(0, 16, (N, K // group), generator=g).to(torch.uint8)
            qw = quant.W4A8Weight(quant.pack_w4a8(u), torch.ones(N, 1, dtype=torch.float16), gs, gz, group)
            a, b = quant.w4a8_unpack_like_the_gpu(qw), quant._old_w4a8_unpack_like_the_gpu(qw)
            assert torch.equal(a, b) and a.dtype == b.dtype
    # exhaustive over (u, s, z) for one byte position pattern
    import itertools
    for s_, z_ in itertools.product(range(1, 16), range(16)):
        u = torch.arange(16).repeat(1, 8)[:, :128].reshape(1, 128)
        qw = quant.W4A8Weight(quant.pack_w4a8(u), torch.ones(1, 1, dtype=torch.float16),
                              torch.tensor([[s_]], dtype=torch.uint8), torch.tensor([[z_]], dtype=torch.uint8), 128)
        assert torch.equal(quant.w4a8_unpack_like_the_gpu(qw), quant._old_w4a8_unpack_like_the_gpu(qw))
    qw = quant.quantize_w4a8(torch.randn(64, 512, generator=g))
    assert torch.equal(quant.w4a8_unpack_like_the_gpu(qw), quant._old_w4a8_unpack_like_the_gpu(qw))
