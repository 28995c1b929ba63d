"""Recorded results, ceilings, the roofline, and Nsight reports: what learners without a GPU rely on."""
import json
import time

import matplotlib
import pytest
import torch

from harness import bench, build, nsight, problems, results, roofline, toolchain

matplotlib.use("Agg")


def test_record_and_load_round_trip(tmp_path, monkeypatch):
    monkeypatch.setattr(results, "LOCAL", tmp_path / "local")
    monkeypatch.setattr(results, "RECORDED", tmp_path / "rec")
    monkeypatch.delenv("COURSE_RECORD", raising=False)
    rows = [dict(op="k", shape=[1, 2, 3], desc="M=1 N=2 K=3", us=1.0, tflops=0.1, gbs=1.0, pct_baseline=100.0,
                 pct_roofline=50.0, baseline="k")]
    gpu = roofline.gpu_slug(roofline.this_gpu() or roofline.REFERENCE_GPU)  # no GPU: filed under the reference's
    f = results.record(7, "bench", rows)
    assert f.parent == tmp_path / "local" / gpu  # a learner's run never lands in the recorded results
    sec = results.load(7, "bench")
    assert sec["rows"] == rows and {"gpu", "torch", "nvcc", "driver"} <= set(sec["env"]) and sec["date"]
    assert sec["ceilings"] == roofline.compact(roofline.ceilings())  # the ceilings its rows are compared with
    results.record(7, "other", rows)
    assert set(results.load(7)["sections"]) == {"bench", "other"}
    monkeypatch.setenv("COURSE_RECORD", "1")
    assert results.record(7, "bench", [dict(rows[0], us=2.0)]).parent == tmp_path / "rec" / gpu
    # a recording run shows what it recorded, not the older local result (the local file still says 1.0 µs)
    assert results.load(7, "bench")["rows"][0]["us"] == 2.0
    monkeypatch.delenv("COURSE_RECORD")
    assert results.load(7, "bench")["rows"][0]["us"] == 1.0
    with pytest.raises(FileNotFoundError, match="lesson 08"):
        results.load(8, "bench")


def test_recorded_results_exist_with_versions():
    for lesson in (0, 1, 2, 3):
        sec = results.load(lesson, "bench", prefer_local=False)
        e = sec["env"]
        assert e["gpu"] and e["driver"] and e["torch"] and e["nvcc"], e
        assert sec["rows"] and all(r["us"] > 0 for r in sec["rows"])


@pytest.mark.parametrize("lesson, section, view", [(7, "table", "main"), (7, "table", "tiles"), (10, "table", "main"),
                                                    (12, "table", "main")])
def test_tables_without_marlin_show_a_dash(lesson, section, view):
    """A run where Marlin could not be built (no optimum-quanto) records no Marlin rows: its tables still render,
    with "–" in the Marlin cells, and every other number as recorded."""
    marlin = bench.lesson_module(7).MARLIN
    sec = results.load(lesson, section, prefer_local=False)
    full = results.view_markdown(lesson, section, view, sec=sec)
    rows = [r for r in sec["rows"] if r["route"] != marlin]
    assert len(rows) < len(sec["rows"]), "the recorded run has Marlin rows"
    text = results.view_markdown(lesson, section, view, sec=dict(sec, rows=rows))
    cells = lambda line: [c.strip() for c in line.strip().strip("|").split("|")]
    got = [cells(line) for line in text.splitlines() if line.startswith("| ")]
    want = [cells(line) for line in full.splitlines() if line.startswith("| ")]
    assert len(got) == len(want) > 2 and got[0] == want[0]
    marlin_cols = [i for i, h in enumerate(got[0]) if "Marlin" in h]
    assert len(marlin_cols) == 2  # Marlin's time and the speedup over it
    for g, w in zip(got[2:], want[2:]):
        assert all(g[i] == "–" != w[i] for i in marlin_cols), (g, w)
        assert [c for i, c in enumerate(g) if i not in marlin_cols] == [c for i, c in enumerate(w) if i not in marlin_cols]


def test_graph_table_reads_per_call_then_graph(monkeypatch):
    """results.graph_markdown: each cell is "per call → graph" from the same rows; % copy bw scales with the time;
    a baseline without a graph timing (or not run) shows "–"."""
    env = {"gpu": "G", "driver": "d", "torch": "t", "torch_cuda": "c", "nvcc": "n"}
    shape = [1, 8192, 8192]
    row = lambda route, us, g, gbs=None: dict(route=route, op=route, shape=shape, us=us, graph_us=g, gbs=gbs or 100.0)
    graph6 = {"kernels": {"k6": "06 W8A16"}, "vs": {"cuBLAS FP16": "cub", "dequantize + cuBLAS": "deq6"}}
    graph7 = {"kernels": {"k7": "07 W4A16"}, "vs": {"cuBLAS FP16": "cub", "dequantize + cuBLAS": "deq7",
                                                    "tinygemm": "tiny", "Marlin": "marlin"}}
    ceil = dict(gpu="G", date="2026-11-23", copy_GBps=3000.0)  # the ceilings each section stores
    secs = {6: dict(env=env, date="2026-11-23", views={"graph": graph6}, ceilings=ceil,
                    rows=[row("k6", 27.0, 24.0, 2500.0), row("cub", 54.0, 50.0), row("deq6", 135.0, None)]),
            7: dict(env=env, date="2026-11-23", views={"graph": graph7}, ceilings=ceil,
                    rows=[row("k7", 16.0, 14.0, 2000.0), row("cub", 48.0, 49.0), row("tiny", 24.0, 21.0),
                          row("k7", 30.0, None) | dict(shape=[64, 8192, 8192])])}
    lines = [[c.strip() for c in line.strip().strip("|").split("|")]
             for line in results.graph_markdown((6, 7), secs=secs).splitlines() if line.startswith("| ")]
    head, body = lines[0], lines[1:]  # (the |---| line is not read)
    assert head == ["kernel", "K × N", "M", "µs", "% copy bw", "% of a pure read", "vs cuBLAS FP16",
                    "vs dequantize + cuBLAS", "vs tinygemm", "vs Marlin"]
    assert len(body) == 2  # the M = 64 row has no graph timing
    # "–" for a pure read: GPU "G" has no recorded read probe
    assert body[0] == ["06 W8A16", "8192 × 8192", "1", "27.0 → 24.0", "83.3% → 93.8%", "–", "2.00× → 2.08×", "–", "–",
                       "–"]
    assert body[1] == ["07 W4A16", "8192 × 8192", "1", "16.0 → 14.0", "66.7% → 76.2%", "–", "3.00× → 3.50×", "–",
                       "1.50× → 1.50×", "–"]


def test_pure_read_is_the_probes_fastest_plain_read_of_the_same_bytes():
    """The floor graph_markdown divides by: lesson 12's probe on the section's GPU, no PDL, no cuBLAS, the same bytes."""
    sec = results.load(7, "table", prefer_local=False)
    row = next(r for r in results.rows_of(sec) if r.route == "w4a16.gemv_tiles" and r.shape == (1, 8192, 8192))
    probe = [r for r in results.load(12, "stream", prefer_local=False)["rows"] if r["size"] == "INT4 8192x8192"]
    plain = [r for r in probe if not r["variant"].startswith("cuBLAS") and "PDL" not in r["variant"]]
    assert results.pure_read(row.bytes, sec) == (min(r["per_call_us"] for r in plain), min(r["graph_us"] for r in plain))
    assert results.pure_read(row.bytes * 1.1, sec) is None  # no probe size within 1.5%
    assert results.pure_read(row.bytes, dict(sec, env=dict(sec["env"], gpu="No such GPU"))) is None


def test_row_round_trip_keeps_every_key_and_number():
    d = dict(route="r", op="R", shape=[1, 2, 3], us=1.5, graph_us=None, desc="M=1", speedup_vs_cublas=2.0)
    row = results.Row.from_dict(d)
    assert row.shape == (1, 2, 3) and row.extra == {"desc": "M=1", "speedup_vs_cublas": 2.0}
    assert row.to_dict() == d
    with pytest.raises(ValueError, match="route"):
        results.Row.from_dict(dict(op="R", shape=[1], us=1.0))
    r = results.Row("r", "R", (1, 4, 4), 2.0, bytes=4e3, flops=2e6)
    assert r.gbs == pytest.approx(2.0) and r.tflops == pytest.approx(1.0)


def test_route_names_are_registered_once():
    assert results.register("test.route", "A test route") == "test.route"
    results.register("test.route", "A test route")  # the same name again is fine
    with pytest.raises(ValueError, match="already registered"):
        results.register("test.route", "Another name")
    with pytest.raises(ValueError, match="route id"):
        results.register("Has Spaces", "x")
    with pytest.raises(KeyError, match="not registered"):
        results.name("test.nothing")


@pytest.mark.parametrize("lesson", [6, 7, 8, 9, 10, 12])
def test_recorded_sections_store_their_modules_views(lesson):
    """Each recorded section renders from the views its lesson's benchmark module defines, and every row's route
    has the name the registry gives it (one name per route, in one place)."""
    mod = bench.lesson_module(lesson)
    data = results.load(lesson, prefer_local=False)
    for name, sec in data["sections"].items():
        if not sec.get("views"):
            continue
        # a module keys its views by section (VIEWS[name]), names them per section (STEPS_VIEWS for "steps"), or has
        # one set for its one section
        views = mod.VIEWS[name] if name in mod.VIEWS else getattr(mod, f"{name.upper()}_VIEWS", mod.VIEWS)
        assert sec["views"] == views, f"lesson {lesson:02d}, {name}: re-record, or migrate the stored views"
        for r in sec["rows"]:
            assert results.name(r["route"]) == r["op"], r
        for view in views:
            if view not in ("graph", "headline"):
                assert "| " in results.view_markdown(lesson, name, view, sec=sec)


def test_lesson_module_by_number():
    mod = bench.lesson_module(7)
    assert mod is bench.lesson_module(7) and mod.__file__.endswith("lessons/07_fused_int4/bench_07.py")
    assert callable(mod.run) and callable(mod.main)
    with pytest.raises(FileNotFoundError, match="lesson 13"):
        bench.lesson_module(13)


@pytest.mark.parametrize("lesson", range(13))
def test_every_lesson_has_a_benchmark_module(lesson):
    """Each lesson folder holds the module its notebook measures through, runnable as a script."""
    mod = bench.lesson_module(lesson)
    assert callable(mod.main) and mod.__file__.endswith(f"bench_{lesson:02d}.py")


def test_headline_table_has_a_line_per_lesson():
    lines = results.headline_markdown().splitlines()
    assert len(lines) == 2 + 13 and not any("not recorded" in l for l in lines), lines
    assert "× cuBLAS FP16" in lines[2 + 7]


def test_stream_fit_recovers_the_line_and_skips_cublas_and_pdl():
    """results.stream_fit (lesson 12's read probe): the line through the two largest sizes' fastest plain reads."""
    a, B = 2.5, 3.0  # µs, TB/s
    t = lambda n: a + n / (B * 1e6)
    rows = []
    for n in (8e6, 30e6, 60e6, 120e6):
        rows += [dict(bytes=n, variant="ldg U=4 grid=4xSM", per_call_us=t(n) + 0.3),
                 dict(bytes=n, variant="bulk S=4 chunk=16K grid=1xSM", per_call_us=t(n)),  # the fastest plain read
                 dict(bytes=n, variant="ldg U=4 grid=4xSM +PDL", per_call_us=t(n) - 2.0),  # overlaps: not a read's cost
                 dict(bytes=n, variant="cuBLAS FP16 M=1 (same bytes)", per_call_us=t(n) - 1.0)]
    got_a, got_B = results.stream_fit(rows, "per_call_us")
    assert got_a == pytest.approx(a) and got_B == pytest.approx(B)
    with pytest.raises(ValueError, match="two sizes"):
        results.stream_fit([r for r in rows if r["bytes"] == 8e6], "per_call_us")
    with pytest.raises(ValueError, match="not slower"):
        results.stream_fit([dict(bytes=1e6, variant="ldg", graph_us=5.0), dict(bytes=2e6, variant="ldg", graph_us=4.0)],
                           "graph_us")
    # the recorded run: the fit lesson 12's and the README's prose quote comes out of the stored rows
    rows12 = results.load(12, "stream", prefer_local=False)["rows"]
    fits = [results.stream_fit(rows12, k) for k in ("per_call_us", "chain_us", "graph_us")]
    copy = results.floor_GBps(results.load(12, "stream", prefer_local=False)) / 1e3  # TB/s, this GPU's copy
    assert all(0 < a < 10 and 0.8 * copy < B < 1.3 * copy for a, B in fits) and fits[0][0] > fits[1][0] > fits[2][0]
    (a1, b1), (a2, _), (a3, _) = fits  # prose written by hand quotes them: re-recording the probe must update it
    nb = json.loads((build.ROOT / "lessons" / "12_hopper_wgmma" / "12_hopper_wgmma.ipynb").read_text())
    prose = "".join("".join(c["source"]) for c in nb["cells"] if c["cell_type"] == "markdown")
    docs = " ".join(results.DOCS.read_text().split())
    for quote in (f"B = {b1:.2f} TB/s and a = {a1:.1f} µs", f"a = {a2:.1f} µs back to back and {a3:.1f} µs in a graph"):
        assert quote in " ".join(prose.split()), f"lesson 12's prose does not quote the stored fit: {quote!r}"
    for quote in (f"{a1:.1f} µs of each call is launch and ramp", f"{a3:.1f} µs of fixed cost left"):
        assert quote in docs, f"docs/results.md does not quote the stored fit: {quote!r}"


def test_docs_tables_are_generated_from_results():
    """docs/results.md (and any generated block left in the README) is what the recorded results render to."""
    assert "<!-- table:07_w4a16 -->" in results.DOCS.read_text()
    for p in results.GENERATED:
        if p.exists():
            assert results.update_markdown(p, check=True), f"{p.name}'s tables are stale: run python -m harness.results docs"


def test_a_generated_block_without_a_table_is_an_error(tmp_path):
    p = tmp_path / "x.md"
    p.write_text("<!-- table:no_such -->\n<!-- /table:no_such -->\n")
    with pytest.raises(KeyError, match="no_such"):
        results.update_markdown(p, check=True)


def test_markdown_tables_are_not_cut_by_a_blank_line():
    """A blank line ends a Markdown table: rows after it render as a paragraph of pipes (the lessons table once lost
    lessons 11 and 12 that way). A table row after a blank line must start a new table (a header and its |---| line)."""
    texts = [(p.name, p.read_text()) for p in (build.ROOT / "README.md", results.DOCS)]
    texts += [(p.parent.name + "/nsight.md", p.read_text()) for p in sorted((build.ROOT / "solutions").glob("*/nsight.md"))]
    for nb in sorted((build.ROOT / "lessons").glob("*/[0-9][0-9]_*.ipynb")):
        cells = json.loads(nb.read_text())["cells"]
        texts += [(f"{nb.name}, cell {j}", "".join(c["source"])) for j, c in enumerate(cells) if c["cell_type"] == "markdown"]
    for where, text in texts:
        lines = text.split("\n")
        for i in range(1, len(lines) - 1):
            if lines[i].strip() or not lines[i + 1].startswith("|"):
                continue
            prev = next((l for l in reversed(lines[:i]) if l.strip()), "")
            new_table = i + 2 < len(lines) and lines[i + 2].startswith("|-")
            assert not prev.startswith("|") or new_table, f"{where}, line {i + 1}: a blank line inside a table"


def test_ceilings_and_floor():
    c = roofline.recorded()
    assert c["copy_GBps"] > 1000 and c["fp32_TFLOPs"] > 10 and c["fp16_TFLOPs"] > c["tf32_TFLOPs"] > c["fp32_TFLOPs"]
    prob = problems.Linear()
    big, decode = (4096, 4096, 4096), (1, 4096, 4096)
    assert roofline.floor_us(prob.flops(big), prob.bytes(big), c) == pytest.approx(prob.flops(big) / (c["fp32_TFLOPs"] * 1e6))
    assert roofline.floor_us(prob.flops(decode), prob.bytes(decode), c) == pytest.approx(prob.bytes(decode) / (c["copy_GBps"] * 1e3))
    if not toolchain.gpu_available():
        assert roofline.ceilings() == c  # without a GPU, the recorded H100's


def test_a_copy_bandwidth_far_from_the_recorded_one_is_flagged():
    ref = roofline.recorded()
    low = dict(ref, copy_GBps=round(ref["copy_GBps"] * 0.971, 1))  # as low as fresh machines have measured
    msg = roofline.off_recorded(low)
    assert msg is not None and f"{low['copy_GBps']:,.0f}" in msg and "-2.9%" in msg and "remeasure=True" in msg
    assert roofline.off_recorded(dict(ref, copy_GBps=ref["copy_GBps"] * 1.015)) is None  # within 2%
    assert roofline.off_recorded(dict(ref, copy_GBps=ref["copy_GBps"] * 1.03)) is not None  # too high is flagged too
    assert roofline.off_recorded(dict(ref, gpu="Some GPU with no recording", copy_GBps=1.0)) is None


def test_only_lesson_00s_recording_replaces_the_recorded_ceilings(tmp_path, monkeypatch):
    """A later lesson's recording measures the copy for itself and keeps lesson 00's as every table's denominator."""
    ref = roofline.recorded()
    monkeypatch.setattr(roofline, "RESULTS", tmp_path / "rec")
    shipped = tmp_path / "rec" / roofline.gpu_slug(ref["gpu"]) / "ceilings.json"
    shipped.parent.mkdir(parents=True)
    shipped.write_text(json.dumps(ref))
    monkeypatch.setattr(toolchain, "gpu_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "get_device_name", lambda *a: ref["gpu"])
    monkeypatch.setattr(roofline, "_cache_file", lambda gpu: tmp_path / "cache" / "c.json")
    fresh = dict(ref, copy_GBps=ref["copy_GBps"] * 0.99, date="a later run")
    monkeypatch.setattr(roofline, "measure", lambda: dict(fresh))
    monkeypatch.setenv("COURSE_RECORD", "1")
    monkeypatch.setenv("COURSE_NOTEBOOK", "12_hopper_wgmma")
    assert roofline.ceilings() == fresh  # this run's own measurement, cached for its own plots
    assert roofline.recorded() == ref  # lesson 00's stays the shipped one
    monkeypatch.setenv("COURSE_NOTEBOOK", "00_setup_and_roofline")
    assert roofline.ceilings(remeasure=True) == fresh and roofline.recorded() == fresh
    monkeypatch.delenv("COURSE_RECORD")
    shipped.write_text(json.dumps(ref))
    roofline.ceilings(remeasure=True)  # a learner's run of lesson 00 records nothing
    assert roofline.recorded() == ref


def test_roofline_plot_has_ceilings_and_points():
    sec = results.load(3, "bench", prefer_local=False)
    pts = roofline.points_from_rows(sec["rows"], problems.Linear())
    ax = roofline.plot(pts, roofline.recorded())
    assert len(ax.lines) >= 3 and len(ax.collections) == len(pts)


def test_bench_table_format():
    rows = results.load(1, "bench", prefer_local=False)["rows"]
    t = bench.table(rows)
    assert "% cuBLAS FP32" in t and "01 naive" in t and t.count("\n") == len(rows) + 1
    # a kernel name longer than the column ("02 smem tiled, bank conflicts") widens it: every shape lines up
    long = results.load(2, "bench", prefer_local=False)["rows"]
    assert max(len(r["op"]) for r in long) > 28
    lines = bench.table(long).splitlines()
    assert len({l.index("shape") if i == 0 else l.index(" M=") + 1 for i, l in enumerate(lines) if i != 1}) == 1


def test_show_names_the_baseline_not_its_route_id():
    """results.show's header gives the baseline's display name (rows are keyed by route id, the header is not)."""
    for lesson, section, base in ((0, "bench", "torch.add(b, x, alpha=a)"), (1, "bench", "cuBLAS FP32"),
                                  (2, "bench", "cuBLAS FP32"), (3, "bench", "cuBLAS FP32"),
                                  (4, "steps", "cuBLAS FP16")):
        head = results.show(lesson, section, prefer_local=False).splitlines()[1]
        route = results.load(lesson, section, prefer_local=False)["rows"][0]["baseline"]
        assert f"% {base} " in head and f"% {route} " not in head, (lesson, section, head)


def test_nsight_recorded_reports():
    p = nsight.load_recorded(1, "naive_vs_coalesced")
    spr = p.per_kernel("l1tex__t_sectors_pipe_lsu_mem_global_op_ld.sum", per="l1tex__t_requests_pipe_lsu_mem_global_op_ld.sum")
    assert spr["gemm_coalesced_kernel"] == pytest.approx(4.0, abs=0.05)  # fully coalesced 4-byte loads
    assert spr["gemm_naive_kernel"] > 15  # (1 broadcast + 32 scattered) / 2
    assert "device__attribute" not in p.table()  # attributes are not shown as measurements
    with pytest.raises(nsight.NsightUnavailable):
        nsight.load_recorded(1, "no_such_report")


def test_nsight_falls_back_without_gpu():
    if toolchain.gpu_available():
        pytest.skip("this machine has a GPU: the fallback is for machines without one")
    p = nsight.profile(0, "scale_add", setup="", run="", kernel="scale_add_kernel", metrics=["dram__bytes_read.sum"])
    assert "recorded" in p.source and any("not measured here" in n for n in p.notes)
    assert p.value("dram__bytes_read.sum") > 5e8


@pytest.mark.gpu
def test_time_fn_and_rotation():
    prob = problems.ScaleAdd()
    sets = bench.input_sets(prob, (1 << 20,))
    l2 = torch.cuda.get_device_properties(0).L2_cache_size
    assert len(sets) * prob.bytes((1 << 20,)) >= 3 * l2  # one pass over the sets overflows L2
    c = roofline.ceilings()
    for _ in range(3):  # the suite's other workers may share the GPU (pytest -n): the best of three runs
        t = bench.time_fn(lambda x, b: torch.add(b, x, alpha=2.0), sets, reps=50)
        gbs = prob.bytes((1 << 20,)) / t.median_us / 1e3
        if 0.2 * c["copy_GBps"] < gbs:
            break
    assert 0.2 * c["copy_GBps"] < gbs < 1.3 * c["copy_GBps"], gbs
    assert t.p10_us <= t.median_us <= t.p90_us


@pytest.mark.gpu
def test_time_fn_redoes_a_batch_the_cpu_fell_behind_on():
    # 0.5 ms of host time per call for 40 calls: the GPU runs dry inside those batches and, kept, their calls
    # would time at ~500 µs. time_fn must notice (the queueing outlasted the sleep ahead of it) and time them again.
    prob = problems.ScaleAdd()
    sets = bench.input_sets(prob, (1 << 20,))
    calls = 0

    def stalling(x, b):
        nonlocal calls
        calls += 1
        if 33 <= calls < 73:
            time.sleep(0.0005)
        torch.add(b, x, alpha=2.0)

    t = bench.time_fn(stalling, sets, reps=50)
    assert t.redone >= 1, t
    assert t.median_us < 150 and t.p90_us < 250, t  # the kernel alone: a few µs


@pytest.mark.gpu
def test_chain_and_graph_timings_leave_out_the_launch_and_nothing_else():
    """time_fn(chain=True, graph=True): back-to-back and graph-replayed calls are faster than calls between their own
    events (no launch of their own), and still no faster than the copy bandwidth allows (so every call ran)."""
    prob = problems.ScaleAdd()
    shape = (1 << 22,)
    sets = bench.input_sets(prob, shape)
    c = roofline.ceilings()
    for _ in range(3):  # the suite's other workers may share the GPU (pytest -n): the best of three runs
        t = bench.time_fn(lambda x, b: torch.add(b, x, alpha=2.0), sets, reps=50, chain=True, graph=True)
        if t.graph_us < t.median_us and t.chain_us < t.median_us:
            break
    assert t.graph_error is None and t.graph_us < t.median_us and t.chain_us < t.median_us, t
    for us in (t.median_us, t.chain_us, t.graph_us):
        assert prob.bytes(shape) / us / 1e3 < 1.3 * c["copy_GBps"], t


@pytest.mark.gpu
def test_a_call_that_cannot_be_captured_is_timed_per_call_and_says_why():
    prob = problems.ScaleAdd()
    sets = bench.input_sets(prob, (1 << 20,))

    def syncs(x, b):
        torch.add(b, x, alpha=2.0)
        torch.cuda.synchronize()  # not allowed while a stream is captured

    t = bench.time_fn(syncs, sets, reps=20, graph=True)
    assert t.graph_us is None and t.graph_error and t.median_us > 0, t
    t2 = bench.time_fn(lambda x, b: torch.add(b, x, alpha=2.0), sets, reps=20, graph=True)  # the GPU still works
    assert t2.graph_us and t2.graph_error is None, t2


@pytest.mark.gpu
def test_nsight_profiles_on_gpu():
    if nsight.ncu_path() is None:
        pytest.skip("ncu is not installed")
    p = nsight.profile(0, "test_scale_add", kernel="scale_add_kernel", metrics=["dram__bytes_read.sum"], solution=True,
                       setup="from harness import build\nfrom harness.problems import ScaleAdd\n"
                             "op = ScaleAdd().bind(build.load(0).scale_add)\nx, b = ScaleAdd().make_inputs((1 << 24,))\n",
                       run="op(x, b)")
    assert p.source.startswith("measured now"), p.notes
    assert p.value("dram__bytes_read.sum") == pytest.approx(8 * (1 << 24), rel=0.05)


@pytest.mark.parametrize("lesson", range(13))
def test_report_draws_every_lessons_recorded_results(lesson):
    """The course report has each lesson's figures: every lesson's recorded sections give at least one chart, and
    progress is reported as each section is drawn."""
    from harness import report
    said = []
    secs = report.recorded_sections(lesson, prefer_local=False, progress=said.append)
    figs = [f for _, _, fs in secs for f in fs]
    assert secs and figs, f"lesson {lesson:02d}: no figure in the report"
    assert all(f.stat().st_size > 10_000 for f in figs), figs
    assert sum(f"lesson {lesson:02d}, section" in s for s in said) >= len(secs), said


def test_lesson05_module_recomputes_the_recorded_memory_table():
    """bench_05.memory counts each format's bits from the quantized tensors it makes: on the recorded 8192 × 8192
    shape it gives the recorded bits per weight and MB (the floors follow from the recorded copy bandwidth)."""
    mod = bench.lesson_module(5)
    got = {r["format"]: r for r in mod.memory()}
    for r in results.load(5, "memory", prefer_local=False)["rows"]:
        assert got[r["format"]]["bits_per_weight"] == r["bits_per_weight"] and got[r["format"]]["MB"] == r["MB"], r
    assert f"{got['INT4 sym group 128']['bits_per_weight']:.3f}" in mod.memory_table(list(got.values()))


@pytest.mark.gpu
@pytest.mark.parametrize("lesson, sizes", [(0, ((1 << 20,),)), (1, (512,)), (2, (512,))])
def test_lesson_benchmark_modules_time_every_route(lesson, sizes):
    """Lessons 00-02's modules check their kernels, then time them and the library in one run: a row per route and
    size, each against the library of the same run; the chart draws from those rows."""
    mod = bench.lesson_module(lesson)
    rows = mod.run(sizes, solution=True, reps=5)
    routes = {r["op"] for r in rows}
    assert routes == set(mod.ops(solution=True)), routes
    assert len(rows) == len(routes) * len(sizes) and all(r["pct_baseline"] > 0 for r in rows)
    assert mod.table(rows).count("\n") == len(rows) + 1
    n = sizes[0][0] if lesson == 0 else sizes[0]
    assert mod.chart(rows, n=n).axes


def test_lesson10_steps_table_falls_back_to_the_recorded_ladder(tmp_path, monkeypatch):
    """Lesson 10's section 6 shows a run of the teaching steps where one exists; before that it says there is none
    and shows the fast kernel's recorded ladder, labelled as such ("fast" then points at the recorded table)."""
    mod = bench.lesson_module(10)
    data = results.load(10, prefer_local=False)
    monkeypatch.setattr(results, "LOCAL", tmp_path / "local")
    monkeypatch.setattr(results, "RECORDED", tmp_path / "rec")
    monkeypatch.delenv("COURSE_RECORD", raising=False)
    rec = tmp_path / "rec" / roofline.gpu_slug(roofline.REFERENCE_GPU)
    rec.mkdir(parents=True)
    secs = {k: v for k, v in data["sections"].items() if k != "steps"}
    (rec / "10.json").write_text(json.dumps(dict(data, sections=secs)))
    main, fast = mod.steps_markdown(), mod.steps_markdown("fast")
    assert main.startswith("**No run of the teaching steps") and "the fast kernel's own ladder" in main
    assert main.endswith(results.view_markdown(10, "ladder")) and "10.1 write-back" in main
    assert fast.startswith("**No run of the teaching steps") and "| " not in fast
    # a run of the steps (here the ladder's rows under the steps' route ids): its own tables, no fallback
    rename = dict(zip(mod.LADDER, [*mod.TEACH, mod.OURS]))
    rows = [dict(r, route=rename.get(r["route"], r["route"])) for r in secs["ladder"]["rows"]]
    results.record(10, "steps", rows, views=mod.VIEWS["steps"])
    for view in ("main", "fast"):
        got = mod.steps_markdown(view)
        assert got == results.view_markdown(10, "steps", view, prefer_local=True) and "No run" not in got
        assert "10 step 5: + split-K" in got


def test_lesson07_teach_table_says_when_the_teaching_gemv_has_no_row(tmp_path, monkeypatch):
    """Lesson 07's last table (view "teach") is a note pointing at the measured output of section 3 while no row of
    the teaching GEMV is recorded, and the table with one line per shape once rows are there."""
    mod = bench.lesson_module(7)
    data = results.load(7, prefer_local=False)
    monkeypatch.setattr(results, "LOCAL", tmp_path / "local")
    monkeypatch.setattr(results, "RECORDED", tmp_path / "rec")
    monkeypatch.delenv("COURSE_RECORD", raising=False)
    rec = tmp_path / "rec" / roofline.gpu_slug(roofline.REFERENCE_GPU)
    rec.mkdir(parents=True)
    sec = data["sections"][mod.SECTION]
    without = [r for r in sec["rows"] if r["route"] != mod.TEACH]
    (rec / "07.json").write_text(json.dumps(dict(data, sections={mod.SECTION: dict(sec, rows=without)})))
    note = mod.teach_table()
    assert note.startswith("**No row of the teaching GEMV") and "section 3" in note and "| " not in note
    # rows of the teaching GEMV (here the fast GEMV's, under its route id): the view's own table, no note
    rows = without + [dict(r, route=mod.TEACH, op=results.name(mod.TEACH)) for r in without if r["route"] == mod.GEMV]
    (rec / "07.json").write_text(json.dumps(dict(data, sections={mod.SECTION: dict(sec, rows=rows)})))
    got = mod.teach_table()
    assert got == results.view_markdown(7, mod.SECTION, "teach") and "No row" not in got
    assert got.count("\n| ") == sum(r["route"] == mod.GEMV for r in without)
