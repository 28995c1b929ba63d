"""`./course lab` keeps the lesson notebooks you open and run apart from the course's: opening, running and saving a
lesson in Lab leaves lessons/ as shipped (git status clean), your work lands in work/, and nothing of it is lost."""
import hashlib
import json

import pytest

from harness import build, lab

pytest.importorskip("jupyter_server")
NB = "lessons/01_naive_gemm/01_naive_gemm.ipynb"


def _sha(p):
    return hashlib.sha256(p.read_bytes()).hexdigest()


@pytest.fixture
def tmp_path(tmp_path_factory):
    """Your copies must sit under the course root (Lab serves nothing outside it): a fresh folder in build/."""
    import shutil
    import uuid
    d = build.ROOT / "build" / f"test_lab_{uuid.uuid4().hex[:8]}"
    d.mkdir(parents=True)
    yield d
    shutil.rmtree(d, ignore_errors=True)


@pytest.fixture
def cm(tmp_path, monkeypatch):
    monkeypatch.setattr(lab, "WORK", tmp_path / "work")
    return lab.CourseContentsManager(root_dir=str(build.ROOT))


def test_saving_a_lesson_in_lab_leaves_the_course_notebook_as_shipped(cm, tmp_path):
    shipped = build.ROOT / NB
    before = _sha(shipped)
    model = cm.get(NB)
    assert model["type"] == "notebook" and not (tmp_path / "work").exists()  # opening writes nothing
    nb = model["content"]
    nb["metadata"]["kernelspec"]["display_name"] = "Python 3 (ipykernel)"  # what Lab stamps on open
    nb["cells"][0]["source"] = "my note\n" + "".join(nb["cells"][0]["source"])
    cm.save({"type": "notebook", "format": "json", "content": nb}, NB)
    assert _sha(shipped) == before
    mine = tmp_path / "work" / NB
    saved = json.loads(mine.read_text())
    assert "".join(saved["cells"][0]["source"]).startswith("my note") and saved["metadata"][lab._ORIGIN] == before
    again = cm.get(NB)  # the next open shows your copy
    assert "".join(again["content"]["cells"][0]["source"]).startswith("my note")
    assert dict(lab.status())[NB] == "your copy, edited"


def test_reset_keeps_your_copy_and_starts_again(cm, tmp_path):
    model = cm.get(NB)
    model["content"]["cells"][0]["source"] = "mine"
    cm.save({"type": "notebook", "format": "json", "content": model["content"]}, NB)
    fresh = lab.reset(1)
    assert fresh.read_bytes() == (build.ROOT / NB).read_bytes()
    kept = list((tmp_path / "work" / "lessons" / "01_naive_gemm").glob("01_naive_gemm.ipynb.bak-*"))
    assert len(kept) == 1 and "".join(json.loads(kept[0].read_text())["cells"][0]["source"]) == "mine"


def test_other_files_save_where_they_are(cm, tmp_path):
    rel = "build/lab_probe.txt"
    try:
        cm.save({"type": "file", "format": "text", "content": "x"}, rel)
        assert (build.ROOT / rel).read_text() == "x" and not (tmp_path / "work" / rel).exists()
    finally:
        (build.ROOT / rel).unlink(missing_ok=True)


def test_lab_settings_turn_off_the_news(tmp_path):
    p = lab.write_lab_settings(tmp_path)
    s = json.loads(p.read_text())
    assert s["@jupyterlab/apputils-extension:notification"]["fetchNews"] == "false"
    assert lab.write_lab_settings(tmp_path).read_text() == p.read_text()  # idempotent


def test_every_lesson_notebook_is_recognised():
    found = [p.relative_to(build.ROOT).as_posix() for p in build.ROOT.glob("lessons/*/*.ipynb")]
    assert len([f for f in found if lab.is_lesson_notebook(f)]) == 13
    assert not lab.is_lesson_notebook("lessons/01_naive_gemm/other.ipynb")
