"""Marlin, the third-party W4A16 baseline (harness.baselines.marlin): its source is found, it builds for sm_80 and sm_90, our
packing equals the layout optimum-quanto's own packer makes, bad weights get clear errors, and on a GPU it computes
the course's symmetric W4A16 problem on odd shapes (so its timings in lessons 07 and 10 time a correct kernel)."""
import pytest
import torch

from harness import check, doctor, quant
from harness.baselines import marlin


def test_source_found_and_builds():
    assert marlin.unavailable() is None, marlin.unavailable()
    assert (marlin.kernel_dir() / "marlin_cuda_kernel.cu").is_file()
    mod = marlin.load()
    assert [e.name for e in mod.exports] == ["marlin_w4a16"]
    res = mod.resources()
    assert any(k.startswith("Marlin<") for k in res), list(res)
    for kernel, per_arch in res.items():
        assert per_arch  # sm_80 and sm_90 without a GPU, the GPU's own arch with one
        for arch, r in per_arch.items():
            assert r["spill_stores"] == 0, f"{kernel} spills on {arch}: {r}"


@pytest.mark.parametrize("N, K", [(256, 256), (512, 384), (768, 1152)])
def test_pack_equals_quantos_packer(N, K):
    """The same bytes as the package's own Marlin packing (its pure-Python functions; the CUDA extension is not built).
    K > 128: with one group along K, quanto switches to Marlin's per-channel scale order, where our launcher keeps
    the grouped kernel and its order (checked on the GPU at K = 128)."""
    from optimum.quanto.tensor.weights.marlin.int4.packed import pack as quanto_pack
    from optimum.quanto.tensor.weights.marlin.permutations import marlin_permute
    gen = torch.Generator().manual_seed(N + K)
    w = quant.quantize_int4(torch.randn(N, K, generator=gen), 128, symmetric=True)
    m = marlin.pack(w)
    u = (quant.unpack_int4(w.packed, signed=True).to(torch.int32) + 8).to(torch.uint8)
    assert torch.equal(m.packed, quanto_pack(u))
    assert torch.equal(m.scale, marlin_permute(w.scale.t().contiguous()))
    assert torch.equal(m.zero, marlin_permute((w.scale * -8).t().contiguous()))
    assert m.locks.dtype == torch.int32 and m.locks.numel() == N // 128 * 16 and not m.locks.any()
    assert torch.equal(m.dequantize(), w.dequantize())


def test_pack_refuses_what_marlin_cannot_run():
    W = torch.randn(512, 256)
    with pytest.raises(ValueError, match="symmetric"):
        marlin.pack(quant.quantize_int4(W, 128, symmetric=False))
    with pytest.raises(ValueError, match="groups of 128"):
        marlin.pack(quant.quantize_int4(W, 64))
    with pytest.raises(ValueError, match="multiple of 256"):
        marlin.pack(quant.quantize_int4(torch.randn(384, 256), 128))
    with pytest.raises(TypeError, match="Int4Weight"):
        marlin.pack(quant.to_tiles(quant.quantize_int4(W, 128)))


def test_op_checks_its_arguments():
    op = marlin.PROBLEM.bind(lambda *a: None, "marlin_w4a16")
    m = marlin.pack(quant.quantize_int4(torch.randn(512, 256), 128))
    with pytest.raises(ValueError, match="weights have K = 256"):
        op(torch.randn(1, 128).half(), m)
    with pytest.raises(TypeError, match="MarlinWeight"):
        op(torch.randn(1, 256).half(), m.source)
    with pytest.raises(TypeError, match="float16"):
        op(torch.randn(1, 256), m)


@pytest.mark.gpu
def test_marlin_computes_the_course_format():
    res = check.check(marlin.PROBLEM, marlin.op())
    assert res.ok, str(res)


def test_doctor_reports_marlin():
    """Where its source was found, as a path inside the package: the report is stored in lesson 00's notebook, so it
    names no folder of the machine it ran on."""
    tail = "/".join(marlin.kernel_dir().parts[-6:])
    assert tail.startswith("optimum/quanto/") and f"Marlin (baseline): source in the installed package, .../{tail}" \
        in doctor.report()
    assert str(marlin.kernel_dir().parent) not in doctor.report()
