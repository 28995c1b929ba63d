"""kernels/ stubs are generated from solutions/; learners' edits are never overwritten."""
import os

import pytest

from harness import exercises

SOL = '''// header
__global__ void k(float* y) {
    // BEGIN EXERCISE 09.a: write it
    //> // TODO: store 1
    y[0] = 1.f;
    // END EXERCISE
}
'''


def test_stub_generation():
    stub = exercises.stub_text(SOL)
    assert "    // TODO: store 1\n" in stub and "y[0] = 1.f" not in stub
    assert "BEGIN EXERCISE 09.a" in stub and "END EXERCISE" in stub and stub.startswith("// header")


def test_unterminated_region_is_an_error():
    with pytest.raises(exercises.ExerciseError, match="no END EXERCISE"):
        exercises.stub_text(SOL.replace("    // END EXERCISE\n", ""))


def test_repository_in_sync():
    # In CI (a clean clone) the stubs must equal the generated text exactly; in a learner's
    # checkout only the parts outside the exercise regions must match.
    problems = exercises.check(strict=bool(os.environ.get("CI")))
    assert not problems, "\n".join(problems)


def test_every_solution_has_an_exercise():
    assert all(exercises.regions(sol) for sol, _ in exercises.pairs() if sol.suffix == ".cu")


@pytest.fixture
def course(tmp_path, monkeypatch):
    (tmp_path / "solutions" / "09_x").mkdir(parents=True)
    (tmp_path / "solutions" / "09_x" / "k.cu").write_text(SOL)
    monkeypatch.setattr(exercises, "SOL", tmp_path / "solutions")
    monkeypatch.setattr(exercises, "EX", tmp_path / "kernels")
    monkeypatch.setattr(exercises, "ROOT", tmp_path)
    return tmp_path


def test_sync_never_overwrites_learner_work(course):
    assert exercises.sync() == ["wrote kernels/09_x/k.cu"]
    mine = course / "kernels" / "09_x" / "k.cu"
    work = mine.read_text().replace("// TODO: store 1", "y[0] = 1.f; // mine")
    mine.write_text(work)
    assert exercises.check() == []  # edits inside the region are the learner's
    (course / "solutions" / "09_x" / "k.cu").write_text(SOL.replace("// header", "// header v2"))
    msg = exercises.sync()
    assert "kept your" in msg[0] and mine.read_text() == work
    assert (course / "kernels" / "09_x" / "k.cu.new").exists()
    msg = exercises.sync(force=True)
    backups = list((course / "kernels" / "09_x").glob("k.cu.bak-*"))
    assert len(backups) == 1 and backups[0].read_text() == work and "kept as" in msg[0]


def test_edits_outside_regions_are_flagged(course):
    exercises.sync()
    mine = course / "kernels" / "09_x" / "k.cu"
    mine.write_text(mine.read_text().replace("// header", "// changed"))
    assert "outside its EXERCISE regions" in exercises.check()[0]


def test_list_gives_lines_of_the_learners_file(capsys):
    assert exercises.main(["list"]) == 0
    rows = [l.split(None, 2) for l in capsys.readouterr().out.splitlines()]
    assert rows and all(where.startswith("kernels/") for _, where, _ in rows), rows
    for ident, where, _ in rows:
        path, line = where.rsplit(":", 1)
        text = (exercises.ROOT / path).read_text().splitlines()[int(line) - 1]
        assert "BEGIN EXERCISE" in text and ident in text, (where, text)


def test_list_works_without_solutions(capsys, monkeypatch, tmp_path):
    """A copy of the course without solutions/ (a learner's) still lists every exercise, from the markers in kernels/."""
    assert exercises.main(["list"]) == 0
    full = capsys.readouterr().out
    monkeypatch.setattr(exercises, "SOL", tmp_path / "no-solutions")
    monkeypatch.setattr(exercises, "solution_only", lambda: [])
    assert exercises.main(["list"]) == 0
    assert capsys.readouterr().out == full and full.count("\n") >= 25


@pytest.mark.parametrize("argv", [["reset", "99"], ["list", "99"], ["reset", "x"]])
def test_unknown_lesson_is_refused(argv, capsys):
    assert exercises.main(argv) == 3
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "there is no lesson" in err
