"""Grading and crash isolation: a faulting or hanging kernel is reported, and the session survives."""
import re
from pathlib import Path

import pytest

from harness import grade, toolchain

FAULTY = Path(__file__).parent / "data" / "faulty.cu"


def test_nsight_questions_start_unanswered():
    answered = grade.nsight_answers()
    assert answered and not any(a for _, a in answered)  # the stubs hold the questions only


def test_unknown_launcher_is_a_clear_error():
    with pytest.raises(ValueError, match="lesson 1 has no launcher 'nope'"):
        grade.check_isolated(1, "nope")


def test_without_gpu_nothing_is_run():
    if toolchain.gpu_available():
        pytest.skip("this machine has a GPU")
    out = grade.check_isolated(1, "gemm_naive", solution=True)
    assert out.status == "not-run" and "compiles" in out.text and "needs a CUDA GPU" in out.text


def test_compile_error_is_reported_without_a_gpu(tmp_path):
    """Grading compiles the file first, GPU or not: a learner without one still sees their compile error."""
    src = (Path(grade.build.ROOT) / "kernels" / "01_naive" / "naive_gemm.cu").read_text()
    bad = tmp_path / "naive_gemm.cu"
    bad.write_text(src.replace("// END EXERCISE", "int broken = ;\n// END EXERCISE", 1))
    out = grade.check_isolated(file=bad, launcher="gemm_naive", problem="linear", timeout=120)
    assert out.status == "compile-error" and not out.ok, str(out)
    assert "naive_gemm.cu" in out.text and "expected an expression" in out.text, str(out)


# compute-sanitizer's own text (CUDA 12.x): a clean racecheck run still prints its summary line.
RACECHECK_CLEAN = """\
gemm_tiled_race: all passed
PASS  gemm_tiled_race  M=17 N=33 K=65  (float32): max error within tolerance
========= COMPUTE-SANITIZER
========= RACECHECK SUMMARY: 0 hazards displayed (0 errors, 0 warnings)
"""
RACECHECK_RACE = """\
========= COMPUTE-SANITIZER
========= Error: Race reported between Write access at gemm_tiled_race(const float *, const float *, float *, int, \
int, int)+0x2f0 in /work/main/kernels/02_smem_tiling/race_demo.cu:31
=========     and Read access at gemm_tiled_race(const float *, const float *, float *, int, int, int)+0x4a0 in \
/work/main/kernels/02_smem_tiling/race_demo.cu:38 [4096 hazards]
=========
gemm_tiled_race: all passed
========= RACECHECK SUMMARY: 1 hazard displayed (1 error, 0 warnings)
"""
MEMCHECK_CLEAN = "========= COMPUTE-SANITIZER\nPASS\n========= ERROR SUMMARY: 0 errors\n"
MEMCHECK_BAD = """\
========= COMPUTE-SANITIZER
========= Invalid __global__ write of size 4 bytes
=========     at oob_kernel(float *, int)+0x90 in /work/main/tests/data/faulty.cu:7
=========     by thread (0,0,0) in block (0,0,0)
========= ERROR SUMMARY: 1 error
"""


def test_sanitizer_report_tells_a_clean_summary_from_a_hazard():
    """A clean racecheck run's summary ("0 hazards displayed (0 errors, 0 warnings)") is no race and is not shown;
    a race record, or a summary counting hazards or errors, is one, and its source lines are named."""
    assert grade.sanitizer_report(RACECHECK_CLEAN) == ([], False)
    assert grade.sanitizer_report(MEMCHECK_CLEAN) == ([], False)
    findings, found = grade.sanitizer_report(RACECHECK_RACE)
    assert found and any("Race reported" in f for f in findings), findings
    assert "RACECHECK SUMMARY: 1 hazard displayed (1 error, 0 warnings)" in findings
    assert "race_demo.cu, line 31" in grade.where(findings) and "race_demo.cu, line 38" in grade.where(findings)
    # the counts alone are enough: a report whose records are cut (--print-limit) still fails
    assert grade.sanitizer_report("========= RACECHECK SUMMARY: 3 hazards displayed (0 errors, 3 warnings)\n")[1]
    assert grade.sanitizer_report("========= ERROR SUMMARY: 2 errors\n")[1]
    findings, found = grade.sanitizer_report(MEMCHECK_BAD)
    assert found and findings[0] == "Invalid __global__ write of size 4 bytes", findings


def test_crash_message_is_the_exception_not_the_raising_line():
    """A child's traceback shows the source line that raised, which names "CUDA error" too: the report is the
    exception's message."""
    tb = """Traceback (most recent call last):
  File "/work/main/harness/build.py", line 412, in __call__
    raise RuntimeError(f"{name}: CUDA error {self.dll.course_error_name(err).decode()}: "
RuntimeError: oob_write: CUDA error cudaErrorIllegalAddress: an illegal memory access was encountered
"""
    assert grade.crash_message(tb, 1) == ("oob_write: CUDA error cudaErrorIllegalAddress: "
                                          "an illegal memory access was encountered")
    assert grade.crash_message("Traceback (most recent call last):\n  ...\nKeyError: 'x'\n", 1) == "KeyError: 'x'"
    assert grade.crash_message("", -11) == "the child process exited with code -11"


def test_child_reports_the_launch_error_as_a_crash(monkeypatch, capsys):
    """A check that raises (a faulting launch, wrapped by check in its advice for notebooks) ends the child with a
    crash result whose text is the launch's own message."""
    import json
    import types

    def faulting_check(*a, **k):
        try:
            raise RuntimeError("oob_write: CUDA error cudaErrorIllegalAddress: an illegal memory access was encountered")
        except RuntimeError as e:
            raise RuntimeError("oob_write crashed at M=17 N=33 K=65: ... restart the kernel") from e

    monkeypatch.setattr(grade.build, "load_file", lambda *a, **k: types.SimpleNamespace(oob_write=lambda *a: None))
    monkeypatch.setattr(grade.check, "check", faulting_check)
    assert grade._child(["--file", str(FAULTY), "--launcher", "oob_write"]) == 1
    line = next(l for l in capsys.readouterr().out.splitlines() if l.startswith(grade.MARK))
    assert json.loads(line[len(grade.MARK):]) == {
        "status": "crash", "text": "oob_write: CUDA error cudaErrorIllegalAddress: an illegal memory access was encountered"}


@pytest.mark.gpu
def test_solution_grades_pass():
    out = grade.check_isolated(1, "gemm_coalesced", solution=True)
    assert out.ok, str(out)


@pytest.mark.gpu
def test_fault_is_isolated_and_reported():
    import torch
    out = grade.check_isolated(file=FAULTY, launcher="oob_write", problem="linear", timeout=120)
    assert out.status == "crash" and "CUDA error cudaError" in out.text, str(out)
    assert any(w in out.text.lower() for w in ("illegal", "invalid address")), str(out)
    torch.zeros(1, device="cuda").add_(1)  # this process's CUDA context is untouched
    torch.cuda.synchronize()


@pytest.mark.gpu
def test_hang_times_out():
    out = grade.check_isolated(file=FAULTY, launcher="hang", problem="linear", timeout=30)
    assert out.status == "timeout" and "hangs" in out.text


@pytest.mark.gpu
def test_the_check_itself_reports_a_hang(monkeypatch):
    """The child's check gives up on a launch after COURSE_CHECK_TIMEOUT seconds and says so, long before the
    process's own time limit: a learner waits seconds, not minutes, for the verdict on a hanging kernel."""
    import time
    monkeypatch.setenv("COURSE_CHECK_TIMEOUT", "3")
    t0 = time.monotonic()
    out = grade.check_isolated(file=FAULTY, launcher="hang", problem="linear", timeout=300)
    assert out.status == "timeout" and "has run for 3 s without finishing: it hangs" in out.text, str(out)
    assert time.monotonic() - t0 < 120


def test_grading_in_parallel_keeps_lesson_order():
    """Checks run several at a time; the table is still in lesson and exercise order, each launcher heard of once."""
    heard = []
    rows = grade.grade([1, 2], solution=True, jobs=3, progress=heard.append, races=False)
    assert [(r[1], r[0]) for r in rows] == sorted((r[1], r[0]) for r in rows)
    assert len(heard) == len({l for r in rows for l in r[2]}) and all(": " in h for h in heard)


@pytest.mark.gpu
def test_memcheck_names_the_bad_write():
    if grade._sanitizer() is None:
        pytest.skip("compute-sanitizer is not installed")
    out = grade.check_isolated(file=FAULTY, launcher="oob_write", problem="linear", sanitize="memcheck", timeout=300)
    assert not out.ok and any("Invalid __global__ write" in f for f in out.findings), str(out)


def test_course_report_from_recorded_results(tmp_path):
    from harness import report
    p = report.course_report()
    text = p.read_text()
    assert "## Lesson 03" in text and "NVIDIA H100" in text and "% of cuBLAS FP32" in text
    for img in ("00_roofline.png", "03_speedup.png"):
        assert f"]({img})" in text and (p.parent / img).stat().st_size > 10_000


# Lessons 06-12 show their stored views in the generic table, whose ratio columns read "<ours> vs <baseline>" in the
# short names of the time columns they divide.
@pytest.mark.parametrize("lesson, shows", [(3, "% cuBLAS FP32"), (4, "[steps]"), (6, "(d) fused W8A16"),
                                           (7, "07 fused W4A16 vs tinygemm (bf16)"), (8, "codebook in shared memory"),
                                           (9, "09 W4A8 vs 06 W8A8"), (10, "10 W4A16 vs cuBLAS FP16"),
                                           (11, "W4A16 (lesson 10)"), (12, "12 W4A16 (TMA + wgmma) vs cuBLAS FP16")])
def test_demo_without_gpu_shows_recorded(capsys, lesson, shows):
    if toolchain.gpu_available():
        pytest.skip("this machine has a GPU (the GPU demo is tested below)")
    from harness import report
    assert report.demo(lesson) == 0
    out = capsys.readouterr().out
    assert "Recorded results instead" in out and shows in out


def test_each_problem_gives_the_demo_its_baseline_and_shapes():
    """The demo asks a problem for its library baseline (label, op) and catalog for the shapes: each baseline op
    computes the problem's result from the problem's inputs (on the CPU here), and each lesson's kernels take every
    shape the demo times them at."""
    import torch

    from harness import catalog, check
    from harness.baselines import marlin
    problems = {id(k.problem): k.problem for k in catalog.kernels()}
    problems[id(marlin.PROBLEM)] = marlin.PROBLEM
    for p in problems.values():
        label, op = p.baseline()
        inputs = p.make_inputs(p.check_shapes[1], torch.Generator().manual_seed(1), device="cpu")
        ref = p.reference(inputs)
        got = op(*[t.clone() if isinstance(t, torch.Tensor) else t for t in inputs])
        rep = check.compare(got, ref, name=f"{p.name}: {label}")
        if p.name == "w4a8":  # the baseline keeps x in FP16; the problem quantizes it to INT8 per token
            assert label == "PyTorch: dequantize + cuBLAS" and rep.rel_error < 0.02, str(rep)
        else:
            assert rep.ok, str(rep)
    for k in catalog.kernels():
        shapes = catalog.demo_shapes(k.lesson, k.problem)
        assert shapes and all(catalog.shapes(k).accepts(s) for s in shapes), (k.label, shapes)


@pytest.mark.gpu
def test_demo_on_gpu(capsys):
    from harness import build, report
    assert report.demo(2) == 0
    out = capsys.readouterr().out
    assert "PASS  02 smem tiled, padded" in out and "rounds M down to 32" in out and "never written" in out
    assert (build.ROOT / "build" / "demo" / "02_heatmap_buggy.png").exists()


@pytest.mark.gpu
@pytest.mark.parametrize("lesson, first", [(4, "PASS  04.1 WMMA FP16"), (6, "PASS  06 fused W8A16 GEMV"),
                                          (7, "PASS  07 fused W4A16 GEMV"), (8, "PASS  08 NF4 dequantize"),
                                          (9, "PASS  09 W4A8"), (10, "PASS  10.1 write-back"),
                                          (11, "PASS  11 decode attention"), (12, "PASS  12 W4A16, TMA + wgmma")])
def test_demo_on_gpu_quantized_lessons(capsys, lesson, first):
    """Lessons whose kernels solve FP16, INT8 or quantized problems: each group timed against its own baseline."""
    from harness import report
    assert report.demo(lesson) == 0
    out = capsys.readouterr().out
    assert first in out
    assert not [l for l in out.splitlines() if l.startswith(f"FAIL  {lesson:02d}")], out  # the solutions all pass


def test_grade_command_table(capsys):
    rc = grade.main(["1"])
    out = capsys.readouterr().out
    assert "01.a" in out and "01.b" in out and "Nsight questions answered" in out
    if toolchain.gpu_available():
        assert rc == 1 and "FAIL" in out  # the stubs are not solved
    else:  # the stubs compile; their checks cannot run: not counted as failures
        assert rc == 2 and "NOT RUN" in out and "0 passed, 0 failed, 2 not run" in out


def test_unknown_lesson_is_refused(capsys):
    assert grade.main(["99"]) == 3
    err = capsys.readouterr().err
    assert err.strip().count("\n") == 0 and "there is no lesson 99: the lessons are 00 to 12" in err
    with pytest.raises(ValueError, match="no lesson 42"):
        grade.grade([42])


def test_grade_table_keeps_whole_words_and_lesson_order():
    long = grade.Outcome("k", "fail", "x" * 300)
    rows = [("05.a", 5, ["quantize_absmax"], long), ("01.a", 1, ["gemm_naive", "gemm_coalesced", "gemm_other_name"],
                                                    grade.Outcome("k", "not-run", "compiles; no GPU"))]
    text = grade.table(sorted(rows, key=lambda r: (r[1], r[0])))
    assert "x" * 10 not in text and "FAIL (see above)" in text and "NOT RUN" in text
    assert text.index("01.a") < text.index("05.a")
    assert all(n in text.split() or n + "," in text.split() for n in ("gemm_naive", "gemm_coalesced", "gemm_other_name"))


def test_grade_all_lessons_with_one_broken_file(monkeypatch, capsys, tmp_path):
    """A syntax error in lesson 01's file (two exercises) is reported once, with the file, the line and the excerpt,
    and every other lesson is still graded, in lesson order."""
    real = grade.build.source_path
    good = real(1, solution=False).read_text()
    bad = tmp_path / "naive_gemm.cu"
    bad.write_text(good.replace("// END EXERCISE", "int broken = 1\n    // END EXERCISE", 1))
    line = [l.strip() for l in bad.read_text().splitlines()].index("int broken = 1") + 1
    monkeypatch.setattr(grade.build, "source_path", lambda lesson, name=None, solution=False:
                        bad if int(lesson) == 1 and not solution else real(lesson, name, solution))
    rc = grade.main([])
    out = capsys.readouterr().out
    assert rc == 1
    assert out.count("naive_gemm.cu did not compile") == 1, out
    assert f"--- 01.a, 01.b (gemm_coalesced, gemm_naive) ---" in out
    at = int(re.search(rf"{re.escape(str(bad))}\((\d+)\): error", out).group(1))
    assert line <= at <= line + 2, out  # nvcc reports a missing ';' where the next statement starts
    assert re.search(rf"^(>>|  ) {line:4d} \|     int broken = 1$", out, re.M), out
    table = out[out.index("exercise  lesson"):]
    ids = [l.split()[0] for l in table.splitlines()[1:] if l[:2].isdigit()]
    lessons = [int(i[:2]) for i in ids]
    assert lessons == sorted(lessons) and set(lessons) == set(range(13)), ids
    assert [l for l in table.splitlines() if l.startswith("01.")] and all(
        "COMPILE ERROR" in l for l in table.splitlines() if l.startswith("01."))
    others = [l for l in table.splitlines() if l[:2].isdigit() and not l.startswith("01.")]
    assert others and not any("COMPILE ERROR" in l for l in others), table


@pytest.mark.gpu
def test_grade_solutions_pass(capsys):
    assert grade.main(["0", "--solutions"]) == 0
    assert "1 passed, 0 failed" in capsys.readouterr().out


@pytest.mark.gpu
def test_every_exercise_grades_with_its_own_problem():
    """Each launcher is checked against its catalog problem (FP16, INT8, W8A16 ...), not an FP32 default:
    the solutions of lessons 04 and 06 pass, and their stubs fail without crashing."""
    sol = grade.grade([4, 6], solution=True)
    assert all(out.ok for *_, out in sol), "\n".join(str(out) for *_, out in sol if not out.ok)
    stub = grade.grade([4, 6], solution=False)
    assert stub and all(out.status == "fail" for *_, out in stub), "\n".join(str(o) for *_, o in stub)


def test_python_exercises_are_graded_without_a_gpu():
    sol = grade.grade([5], solution=True)
    assert [r[0] for r in sol] == ["05.a", "05.b", "05.c"] and all(r[3].ok for r in sol)
    stub = grade.grade([5], solution=False)
    assert not any(r[3].ok for r in stub) and all("not implemented yet" in r[3].text for r in stub)
