"""Bugs a learner plants and the checks must catch: a write past the end of y (or before its start, or into an
input), and a missing __syncthreads(). The guard-band logic runs on the CPU with Python "kernels"; the planted CUDA
kernels (tests/data/planted.cu, not any lesson's file) run on the GPU, through check and through grade."""
from pathlib import Path

import pytest
import torch

from harness import build, catalog, check, grade, problems

PLANTED = Path(__file__).parent / "data" / "planted.cu"
FP32 = problems.Linear()
SHAPES = [(17, 33, 65), (16, 48, 40), (1, 1, 128)]


def _right(x, W, y, M, N, K):
    y.copy_(x @ W.T)


# ---------------------------------------------------------------------------------------------- on the CPU

def test_guard_bands_keep_the_alignment_and_hold_the_poison():
    for shape, dtype in (((17, 33), torch.float32), ((1, 1), torch.float16), ((3, 4097), torch.float16),
                         ((1000,), torch.int32)):
        g = check.Guarded(shape, dtype, "cpu")
        item = g.tensor.element_size()
        assert g.tensor.is_contiguous() and tuple(g.tensor.shape) == shape
        assert (g.tensor.data_ptr() - g.buf.data_ptr()) % 128 == 0 and g.guard * item >= 4096
        assert g.guard * item >= shape[-1] * item  # a whole row past the end lands in the band
        assert bool(check.is_poison(g.buf).all()) and g.overrun() == []


def test_guard_band_reports_each_side_with_offsets():
    g = check.Guarded((4, 8), torch.float32, "cpu", name="y")
    g.tensor.fill_(1)
    assert g.overrun() == []
    g.buf[g.guard + 32 + 2] = 0  # past the end, offset 2
    g.buf[g.guard - 1] = 0  # just before the start
    msgs = g.overrun()
    assert len(msgs) == 2
    assert "wrote 1 element before the start of y" in msgs[0] and "[-1]" in msgs[0]
    assert "wrote 1 element past the end of y: check your bounds guard" in msgs[1] and "[2]" in msgs[1]
    g.repoison()  # the output again, the bands as they are: the write stays visible
    assert bool(check.is_poison(g.tensor).all()) and len(g.overrun()) == 2


def test_check_passes_a_right_python_kernel_on_the_cpu():
    res = check.check(FP32, FP32.bind(_right), SHAPES, device="cpu")
    assert res.ok, str(res)


def test_row_past_the_end_fails_with_its_own_message():
    def past_end(x, W, y, M, N, K):  # a guard written m <= M: row M written too
        y.as_strided((M + 1, N), (N, 1)).copy_(torch.cat([x, x[-1:]]) @ W.T)

    res = check.check(FP32, FP32.bind(past_end), SHAPES, device="cpu")
    assert not res.ok and all(not r.ok and r.wrong == 0 for r in res.reports)
    text = str(res.reports[0])
    assert "wrote 33 elements past the end of y: check your bounds guard" in text, text
    assert "[0, 1, 2, 3, 4]" in text and "row 17 and on" in text and "every element of the output is right" in text


def test_write_before_the_start_fails():
    def before(x, W, y, M, N, K):
        y.copy_(x @ W.T)
        y.as_strided((2,), (1,), y.storage_offset() - 2).fill_(0)

    res = check.check(FP32, FP32.bind(before), SHAPES[:1], device="cpu")
    assert not res.ok and "wrote 2 elements before the start of y" in str(res)


def test_a_kernel_that_writes_its_input_fails():
    def writes_w(x, W, y, M, N, K):
        y.copy_(x @ W.T)
        W[1, 2] = 0.0

    res = check.check(FP32, FP32.bind(writes_w), SHAPES[:1], device="cpu")
    assert not res.ok and "the kernel wrote its input W: 1 of 2,145 elements changed, the first at [1, 2]" in str(res)


def test_harness_scratch_is_guarded_too():
    """A launcher's scratch from problems' allocator (W8A8's quantized x) sits in guard bands while a check runs."""
    P = problems.W8A8Linear()

    def quantize_one_row_too_many(x, q, s, xq, sx, y, M, N, K):
        from harness import quant
        xq_, sx_ = quant.quantize_per_token_int8(x)
        xq.as_strided((M + 1, K), (K, 1))[: M + 1].copy_(torch.cat([xq_, xq_[-1:]]))
        sx.copy_(sx_)
        y.copy_(((xq_.double() * sx_.double()[:, None]) @ (q.double() * s.double()).T).half())

    res = check.check(P, P.bind(quantize_one_row_too_many), [(3, 24, 256)], device="cpu")
    assert not res.ok and "past the end of xq (scratch)" in str(res), str(res)
    assert check.scratch((2, 3), torch.int8, "cpu").shape == (2, 3)  # outside a check: plain memory


def test_a_result_that_changes_between_runs_fails():
    """The plain check runs each shape three times on the same inputs: a race that shows once is caught."""
    calls = []

    def flaky(x, W, y, M, N, K):
        calls.append(1)
        y.copy_(x @ W.T)
        if len(calls) % 3 == 2:
            y[0, 0] += 1

    res = check.check(FP32, FP32.bind(flaky), SHAPES[:1], device="cpu")
    assert len(calls) == 2 and not res.ok  # stopped at the failing run
    assert "run 2 of 3 on the same inputs failed, while the first passed" in str(res), str(res)
    assert check.check(FP32, FP32.bind(flaky), SHAPES[:1], device="cpu", repeats=1).ok


def test_one_output_is_judged_against_its_terms_not_its_cancelled_sum():
    """y = x·Ŵᵀ with one element: the absolute tolerance is measured against the RMS of its K products (not |y|,
    which cancellation can make tiny), and a wrong value still fails."""
    P = catalog.W4A16_FRAG
    x, w = P.make_inputs((1, 1, 128), torch.Generator().manual_seed(0), device="cpu")
    terms = x.double()[0] * w.dequantize().double()[0]
    scale = check._output_scale(P, (x, w), P.reference((x, w)))
    assert scale == pytest.approx(float(terms.pow(2).sum().sqrt()), rel=1e-6)
    ref = P.reference((x, w))
    off = torch.full_like(ref, float(ref) + 0.02 * scale).half()
    assert not check.compare(off, ref, scale=scale).ok


def test_grade_looks_for_races_where_shared_memory_is_used(tmp_path):
    assert grade.race_tools(PLANTED) == ["racecheck"]
    assert grade.race_tools(build.ROOT / "solutions" / "01_naive_gemm" / "naive_gemm.cu") == []
    warp = tmp_path / "w.cu"
    warp.write_text("__shared__ float s[32]; __syncwarp();")
    assert grade.race_tools(warp) == ["racecheck", "synccheck"]
    found = [f"Error: Race reported between Write access at 0x1a0 in {PLANTED}:29:tiled_kernel",
             f"    and Read access at 0x2b0 in {PLANTED}:32:tiled_kernel [120 hazards]"]
    text = grade.where(found)
    assert "planted.cu, line 29: xs[ty][tx]" in text and "line 32: for (int k = 0" in text, text


def test_grade_says_in_one_line_when_races_cannot_be_looked_for(monkeypatch):
    out = grade.Outcome("k", "not-run", "compiles; running its check needs a GPU")
    r = grade.look_for_races(out, 2, "race_refill", file=PLANTED, solution=True, timeout=10)
    assert r.notes == ["races not looked for: no GPU here"]
    monkeypatch.setattr(grade, "_sanitizer", lambda: None)
    monkeypatch.setattr(grade.toolchain, "gpu_available", lambda: True)
    monkeypatch.setattr(grade.subprocess, "run", lambda *a, **k: pytest.fail("nothing may run without the tool"))
    r = grade.look_for_races(grade.Outcome("k", "pass", "PASS"), 2, "race_refill", file=PLANTED, solution=True,
                             timeout=10)
    assert r.ok and r.notes == ["races not looked for: compute-sanitizer is not installed"]


# ---------------------------------------------------------------------------------------------- on the GPU

def _planted():
    return build.load_file(PLANTED, solution=True)


@pytest.mark.gpu
def test_check_catches_the_planted_row_past_the_end():
    res = check.check(FP32, FP32.bind(_planted().oob_row), SHAPES)
    assert not res.ok and all(r.wrong == 0 and not r.ok for r in res.reports), str(res)
    assert "past the end of y: check your bounds guard" in str(res)
    assert check.check(FP32, FP32.bind(_planted().tiled_ok), SHAPES).ok


@pytest.mark.gpu
def test_check_catches_the_planted_missing_barrier():
    res = check.check(FP32, FP32.bind(_planted().race_late), SHAPES[:2])
    assert not res.ok, str(res)


def _fake_lesson(monkeypatch, launchers):
    """Lesson 02 with only the planted kernels in its catalog, their file tests/data/planted.cu."""
    ks = [catalog.Kernel(2, "planted", name, FP32, (f"02.{chr(ord('x') + i)}",), f"planted {name}")
          for i, name in enumerate(launchers)]
    monkeypatch.setattr(catalog, "KERNELS", ks)
    real = build.source_path
    monkeypatch.setattr(build, "source_path",
                        lambda lesson, name=None, solution=False: PLANTED if name == "planted" else real(lesson, name,
                                                                                                       solution))


@pytest.mark.gpu
def test_grade_catches_the_planted_bugs(monkeypatch):
    _fake_lesson(monkeypatch, ["oob_row", "race_refill", "race_late", "tiled_ok"])
    rows = {r[2][0]: r[3] for r in grade.grade([2], solution=True, timeout=600)}
    assert rows["oob_row"].status == "fail" and "past the end of y" in rows["oob_row"].text, str(rows["oob_row"])
    assert rows["race_late"].status == "fail", str(rows["race_late"])
    refill = rows["race_refill"]
    assert refill.status == "fail", str(refill)
    if grade._sanitizer() is None:
        pytest.skip("compute-sanitizer is not installed: the race's source line cannot be shown")
    if "Race" in " ".join(refill.findings):  # the values passed; racecheck found it and names the lines
        assert "planted.cu, line" in refill.text, str(refill)
    assert rows["tiled_ok"].ok, str(rows["tiled_ok"])
    off = {r[2][0]: r[3] for r in grade.grade([2], solution=True, timeout=600, races=False)}
    assert off["tiled_ok"].ok and not off["oob_row"].ok
