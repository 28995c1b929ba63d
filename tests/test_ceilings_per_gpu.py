"""Every percentage divides by the ceilings of the GPU its rows were measured on. A stand-in GPU whose copy bandwidth
and peaks are half the reference's, carrying the reference's rows, must double every percentage of a ceiling that a
table, chart, README row or notebook helper prints, and name itself; a section that stores no ceilings is refused,
never divided by another GPU's (CPU only)."""
import copy
import json
import re

import matplotlib
import pytest

from harness import bench, build, roofline, results

matplotlib.use("Agg")

STAND_IN = "Stand-in GPU 7"
KEYS = ("copy_GBps", "read_GBps", "fp32_TFLOPs", "tf32_TFLOPs", "fp16_TFLOPs", "int8_TOPs")


def halved(c: dict) -> dict:
    return dict(c, gpu=STAND_IN, date="2026-01-02", **{k: c[k] / 2 for k in KEYS if k in c})


@pytest.fixture
def stand_in(tmp_path, monkeypatch):
    """A results tree holding the reference recording and the stand-in's (the same rows, measured "on" the stand-in,
    each section storing the stand-in's halved ceilings); the stand-in made the reference GPU."""
    ref = roofline.recording_dir()
    root = tmp_path / "results"
    for gpu in roofline.recorded_gpus():
        src = roofline.recording_dir(gpu)
        dst = root / src.name
        dst.mkdir(parents=True)
        for f in src.glob("*.json"):
            (dst / f.name).write_text(f.read_text())
    d = root / roofline.gpu_slug(STAND_IN)
    d.mkdir()
    c = json.loads((ref / "ceilings.json").read_text())
    (d / "ceilings.json").write_text(json.dumps(halved(c)))
    for f in ref.glob("[0-9][0-9].json"):
        data = json.loads(f.read_text())
        for sec in data["sections"].values():
            sec["env"] = dict(sec["env"], gpu=STAND_IN)
            if "ceilings" in sec:
                sec["ceilings"] = halved(sec["ceilings"])
        (d / f.name).write_text(json.dumps(data))
    monkeypatch.setattr(roofline, "RESULTS", root)
    monkeypatch.setattr(results, "RECORDED", root)
    monkeypatch.setattr(results, "LOCAL", tmp_path / "local")
    monkeypatch.delenv("COURSE_RECORD", raising=False)
    real = roofline.REFERENCE_GPU
    monkeypatch.setattr(roofline, "REFERENCE_GPU", STAND_IN)
    return real


def pct_cells(text: str, header: str) -> list[float]:
    """The numbers of every column whose header contains `header`, over a Markdown table's body lines."""
    lines = [[c.strip() for c in l.strip().strip("|").split("|")] for l in text.splitlines() if l.startswith("| ")]
    cols = [i for i, h in enumerate(lines[0]) if header in h]
    return [float(x) for row in lines[1:] for i in cols for x in re.findall(r"([\d.]+)%", row[i])]


def render(name: str, gpu: str, monkeypatch) -> str:
    monkeypatch.setattr(roofline, "REFERENCE_GPU", gpu)
    return results.TABLES[name]()


# The generated tables that print a percentage of a ceiling, and the header of its column.
PCT_TABLES = {"06_w8a16": " bw", "07_w4a16": " bw", "07_w4a16_tiles": " bw",
              "10_w4a16": " bw", "09_graph": " bw", "12_graph": " bw",
              "decode_graph": " bw", "11_decode": "% of floor", "12_stream": "best `ld.global`",
              "08_nf4": ""}  # "": every column (its time cells carry their % of the copy bandwidth)


@pytest.mark.parametrize("name", sorted(PCT_TABLES))
def test_generated_tables_divide_by_the_stand_ins_ceilings(stand_in, monkeypatch, name):
    ref, mine = render(name, stand_in, monkeypatch), render(name, STAND_IN, monkeypatch)
    a, b = pct_cells(ref, PCT_TABLES[name]), pct_cells(mine, PCT_TABLES[name])
    assert a and len(a) == len(b), (name, ref[:400])
    assert all(abs(y - 2 * x) <= 1.01 for x, y in zip(a, b)), (name, list(zip(a, b))[:5])  # shown to 0 or 1 place
    assert STAND_IN in mine and STAND_IN not in ref


def test_readme_rows_and_ceilings_follow_each_gpu(stand_in, monkeypatch):
    heads = results.headline_markdown(gpus=[stand_in, STAND_IN])
    for line in heads.splitlines()[2:]:
        cells = [c.strip() for c in line.strip("|").split("|")]
        got = [re.findall(r"\((\d+)% of (?:copy|read) bandwidth\)", c) for c in cells[1:]]
        if got[0]:
            assert abs(int(got[1][0]) - 2 * int(got[0][0])) <= 1, line
    table = results.ceilings_markdown(gpus=[stand_in, STAND_IN])
    assert STAND_IN in table and f"{roofline.recorded(stand_in)['copy_GBps'] / 2:,.0f}" in table


def test_notebook_helpers_use_the_ceilings_they_are_given(stand_in, monkeypatch):
    ref = roofline.recorded(stand_in)
    fake = roofline.recorded(STAND_IN)
    b07 = bench.lesson_module(7)
    for fn in (b07.floors, lambda c: bench.lesson_module(4).floors(c=c)):
        a, b = fn(ref), fn(fake)
        assert a != b and STAND_IN in b
    floors = lambda text: [float(x) for x in re.findall(r" (\d+\.\d)\s*$", text, re.M)]
    assert [round(2 * x, 1) for x in floors(b07.floors(ref))] == pytest.approx(floors(b07.floors(fake)), abs=0.11)
    if ref.get("clock_MHz"):
        assert b07.budget(ref) != b07.budget(fake)
    assert bench.lesson_module(6).traffic() == bench.lesson_module(6).traffic()  # the reference's, by default
    assert STAND_IN in bench.lesson_module(6).traffic()  # the stand-in is the reference here
    assert STAND_IN in bench.lesson_module(0).two_gpus([stand_in, STAND_IN])
    assert STAND_IN in bench.lesson_module(0).ceilings_table(fake)
    sec = results.load(0, "bench", prefer_local=False)
    ax = roofline.plot([], roofline.of_section(sec))
    assert STAND_IN in ax.get_title()


def test_the_lessons_charts_use_the_sections_ceilings(stand_in, monkeypatch):
    sec = results.load(12, "stream", prefer_local=False)
    ax = bench.lesson_module(12).stream_chart()
    assert STAND_IN in ax.get_title()
    floor = next(l for l in ax.get_lines() if "floor" in (l.get_label() or ""))
    assert f"{results.floor_GBps(sec):,.0f} GB/s" in floor.get_label()
    rows = results.load(3, "bench", prefer_local=False)["rows"]
    fig = bench.lesson_module(3).chart(rows, shape=tuple(rows[-1]["shape"]), c=roofline.of_section(
        results.load(3, "bench", prefer_local=False)))
    assert STAND_IN in fig.axes[0].get_title()


def test_a_section_without_ceilings_is_refused_not_divided_by_another_gpus():
    sec = copy.deepcopy(results.load(7, "table", prefer_local=False))
    del sec["ceilings"]
    with pytest.raises(roofline.NoCeilings, match="stores no ceilings"):
        results.view_markdown(7, "table", "main", sec=sec)
    with pytest.raises(roofline.NoCeilings, match="no recorded ceilings"):
        roofline.recorded("A GPU the course never recorded")


def test_every_recorded_section_stores_the_ceilings_of_its_own_gpu():
    for gpu in roofline.recorded_gpus():
        for f in sorted(roofline.recording_dir(gpu).glob("[0-9][0-9].json")):
            for name, sec in json.loads(f.read_text())["sections"].items():
                assert sec.get("ceilings", {}).get("gpu") == gpu, (f.name, name)
                assert sec["env"].get("gpu") in (gpu, None), (f.name, name)  # None: computed without a GPU


def test_the_reference_gpu_and_the_prose_tests_agree():
    import importlib.util
    from pathlib import Path
    spec = importlib.util.spec_from_file_location("prose", Path(__file__).with_name("test_lesson_prose.py"))
    test_lesson_prose = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(test_lesson_prose)
    assert test_lesson_prose.REF == roofline.recording_dir() and (test_lesson_prose.REF / "ceilings.json").exists()
    assert roofline.recorded_gpus()[0] == roofline.REFERENCE_GPU and len(roofline.recorded_gpus()) >= 2
