"""The course as a whole: pins, notebooks' GPU tags, the catalog, the headless runner."""
import importlib.metadata
import json
import re
import shutil
import subprocess
import sys
from pathlib import Path

import nbformat
import pytest

from harness import build, catalog, exercises, problems, run, toolchain

ROOT = build.ROOT


def test_environment_yml_uses_requirements():
    env = (ROOT / "environment.yml").read_text()
    assert "-r requirements.txt" in env and "-e ." in env


def test_cuda_toolkit_pin_matches_torch_wheel():
    pins = dict(re.findall(r"^([\w\-\[\],]+)==(\S+)", (ROOT / "requirements.txt").read_text(), re.M))
    torch_req = importlib.metadata.requires("torch") or []
    pinned = [r for r in torch_req if r.startswith("cuda-toolkit")]
    if importlib.metadata.version("torch").split("+")[0] != pins["torch"] or not pinned:
        pytest.skip(f"installed torch {importlib.metadata.version('torch')} is not the pinned {pins['torch']}")
    want = re.search(r"==([\d.]+)", pinned[0]).group(1)
    assert pins["cuda-toolkit[nvcc,cccl]"] == want, f"torch {pins['torch']} pins cuda-toolkit {want}"


def test_toolchain_matches_torch():
    import torch
    tc = toolchain.find()
    assert tc.nvcc_version.split(".")[0] == torch.version.cuda.split(".")[0]
    assert (tc.cuda_home / "include" / "cuda_runtime.h").exists()


def test_wrapper_scripts_are_followed(tmp_path):
    real = tmp_path / "cuda" / "bin" / "nvcc"
    real.parent.mkdir(parents=True)
    real.write_text("#!/bin/sh\necho real\n")
    wrapper = tmp_path / "nvcc"
    wrapper.write_text(f'#!/bin/sh\nexec {real} "$@"\n')
    assert toolchain._resolve_wrapper(wrapper) == real.resolve()


def test_arch_list_without_gpu(monkeypatch):
    monkeypatch.delenv("COURSE_ARCH_LIST", raising=False)
    if not toolchain.gpu_available():
        assert toolchain.arch_list() == ["8.0", "9.0"]
    monkeypatch.setenv("COURSE_ARCH_LIST", "8.6 9.0")
    assert toolchain.arch_list() == ["8.6", "9.0"]


def test_catalog_covers_every_launcher_and_exercise():
    exported, ids = set(), set()
    for sol in [s for s, _ in exercises.pairs()] + exercises.solution_only():  # fast kernels have no stub
        if sol.suffix == ".cu":
            exported |= {(int(sol.parent.name[:2]), e.name) for e in build.parse_exports(sol.read_text())
                         if e.name not in build.SETTINGS}
            ids |= {r.ident for r in exercises.regions(sol)}
    assert exported == {(k.lesson, k.launcher) for k in catalog.kernels()}
    assert {e for k in catalog.kernels() for e in k.exercises} <= ids


NOTEBOOKS = sorted((ROOT / "lessons").glob("[0-9][0-9]_*/[0-9][0-9]_*.ipynb"))
GPU_CALLS = re.compile(r"check\.check\(|bench\.compare\(|nsight\.profile\(|roofline\.measure\(")


def test_lessons_found_by_number_everywhere():
    for nb in NOTEBOOKS:
        n = nb.name[:2]
        assert list((ROOT / "kernels").glob(f"{n}_*")) and list((ROOT / "solutions").glob(f"{n}_*")), n
        assert (ROOT / "results" / "H200" / f"{n}.json").exists(), n  # the reference GPU's recording


@pytest.mark.parametrize("nb", NOTEBOOKS, ids=[p.stem for p in NOTEBOOKS])
def test_files_the_lesson_names_are_one_click_away(nb):
    """Every kernels/ or solutions/ file a lesson's prose names is a link (Lab opens it in a tab) that resolves."""
    book = nbformat.read(nb, as_version=4)
    for i, cell in enumerate(book.cells):
        if cell.cell_type != "markdown":
            continue
        bare = re.findall(r"(?<!\[)(?<!<code>)`((?:kernels|solutions)/\d\d_\w+/[\w.]+)`(?!\]\()", cell.source)
        assert not bare, (f"{nb.name} cell {i} names {bare} without a link: write "
                          '<a href="../../path"><code>path</code></a> (a link\'s target is then not counted as words)')
        for target in re.findall(r"\]\(((?:\.\./)+(?:kernels|solutions|lessons|harness|dev|docs)/[^)#\s]+)"
                                 r"|href=\"((?:\.\./)+[^\"#]+)\"", cell.source):
            target = next(t for t in target if t)
            assert (nb.parent / target).resolve().exists(), f"{nb.name} cell {i} links to {target}, which is not there"


@pytest.mark.parametrize("nb", NOTEBOOKS, ids=[p.stem for p in NOTEBOOKS])
def test_notebook_cells_that_launch_kernels_are_tagged(nb):
    book = nbformat.read(nb, as_version=4)
    for i, cell in enumerate(book.cells):
        if cell.cell_type != "code":
            continue
        tagged = "gpu" in cell.metadata.get("tags", [])
        if tagged:  # JupyterLab then skips it without a GPU too, as ./course run does
            assert re.match(r"%%gpu( sm_90a)?\n", cell.source), f"{nb.name} cell {i} is tagged gpu but lacks its %%gpu line"
        if GPU_CALLS.search(cell.source):
            assert tagged, f"{nb.name} cell {i} launches kernels but is not tagged gpu:\n{cell.source[:200]}"
        errors = [o for o in cell.get("outputs", []) if o.output_type == "error"]
        assert not errors, f"{nb.name} cell {i} has a stored error"
    assert any(c.get("outputs") for c in book.cells if c.cell_type == "code"), f"{nb.name} has no stored outputs"
    first = next(c for c in book.cells if c.cell_type == "code")
    assert "%load_ext harness.notebook" in first.source.splitlines(), f"{nb.name}: its first cell must load %%gpu"


def test_runner_skips_gpu_cells_without_gpu(tmp_path, monkeypatch):
    nb = nbformat.v4.new_notebook()
    nb.metadata["kernelspec"] = {"name": "python3", "display_name": "Python 3", "language": "python"}
    gpu_cell = nbformat.v4.new_code_cell("import torch; torch.zeros(1, device='cuda')")
    gpu_cell.metadata["tags"] = ["gpu"]
    gpu_cell.outputs = [nbformat.v4.new_output("stream", name="stdout", text="recorded on the H100\n")]
    nb.cells = [nbformat.v4.new_code_cell("x = 1 + 1\nprint(x)"), gpu_cell]
    src, out = tmp_path / "t.ipynb", tmp_path / "out.ipynb"
    nbformat.write(nb, src)
    monkeypatch.setattr(toolchain, "gpu_available", lambda: False)
    stats = run.execute(src, out, timeout=120)
    done = nbformat.read(out, as_version=4)
    assert stats["error"] is None and stats["skipped"] == 1
    assert done.cells[0].outputs[0]["text"] == "2\n"
    texts = [o.get("text", "") for o in done.cells[1].outputs]
    assert texts[0].startswith("[skipped here") and "recorded on the H100\n" in texts


def test_problem_bind_rejects_bad_shapes():
    import torch
    prob = problems.Linear()
    op = prob.bind(lambda *a: None, "op")
    with pytest.raises(ValueError, match=r"x \[M, K\] must be 2-D, got shape \(2, 3, 4\)"):
        op(torch.zeros(2, 3, 4), torch.zeros(5, 4))
    with pytest.raises(ValueError, match="sharing K"):
        op(torch.zeros(2, 3), torch.zeros(5, 4))
    with pytest.raises(ValueError, match=r"out must be \[M=2, N=5\]"):
        op(torch.zeros(2, 4), torch.zeros(5, 4), out=torch.zeros(5, 2))
    with pytest.raises(TypeError, match="must be a torch.Tensor"):
        op([[1.0]], torch.zeros(5, 4))
    assert prob.flops((2, 3, 4)) == 48 and prob.bytes((2, 3, 4)) == (8 + 12 + 6) * 4


def test_nf4_dequant_bind_rejects_bad_input():
    """The NF4 problem (lesson 08): inputs made on the CPU from harness.quant, every wrong one named."""
    import torch
    from harness import quant
    prob = problems.DequantNF4()
    calls = []
    op = prob.bind(lambda *a: calls.append(a), "dequant_nf4")
    packed, absmax, cb = prob.make_inputs((4, 128), torch.Generator().manual_seed(0), device="cpu")
    assert packed.shape == (4, 64) and absmax.shape == (4, 2) and torch.equal(cb, quant.NF4)
    ref = prob.reference((packed, absmax, cb))
    assert ref.shape == (4, 128) and (ref.abs().amax(dim=1) > 0).all()
    with pytest.raises(ValueError, match="K = 96 is not a multiple of the block size 64"):
        op(packed[:, :48], absmax, cb)
    with pytest.raises(TypeError, match="packed .* must be torch.uint8"):
        op(packed.to(torch.int8), absmax, cb)
    with pytest.raises(ValueError, match=r"absmax must have shape \(4, 2\)"):
        op(packed, absmax[:, :1], cb)
    with pytest.raises(TypeError, match="codebook must be torch.float32"):
        op(packed, absmax, cb.half())
    assert not calls and prob.bytes((4, 128)) == 4 * 128 // 2 + 4 * 4 * 2 + 2 * 4 * 128


def test_w4a8_bind_rejects_bad_input():
    """The W4A8 problem (lesson 09): inputs made on the CPU from harness.quant, every wrong one named."""
    import torch
    prob = problems.W4A8Linear()
    calls = []
    op = prob.bind(lambda *a: calls.append(a), "linear_w4a8")
    x, packed, scale, gs, gz = prob.make_inputs((3, 5, 256), torch.Generator().manual_seed(0), device="cpu")
    assert packed.shape == (5, 32) and scale.shape == (5, 1) and gs.shape == gz.shape == (5, 2)
    assert prob.reference((x, packed, scale, gs, gz)).shape == (3, 5)
    with pytest.raises(ValueError, match="K = 192 is not a multiple of the group size 128"):
        op(x[:, :192], packed[:, :24], scale, gs, gz)
    with pytest.raises(TypeError, match="x must be torch.float16"):
        op(x.float(), packed, scale, gs, gz)
    with pytest.raises(TypeError, match="packed .* must be torch.int32"):
        op(x, packed.to(torch.int64), scale, gs, gz)
    with pytest.raises(ValueError, match=r"scale .* must have shape \(5, 1\)"):
        op(x, packed, scale.reshape(1, 5), gs, gz)
    with pytest.raises(TypeError, match="gzero must be torch.uint8"):
        op(x, packed, scale, gs, gz.to(torch.int8))
    with pytest.raises(ValueError, match="could overflow"):
        op(torch.zeros(1, 65536 + 128, dtype=torch.float16), torch.zeros(5, (65536 + 128) // 8, dtype=torch.int32),
           scale, gs, gz)
    assert not calls
    op(x, packed, scale, gs, gz)
    assert [a.dtype for a in calls[0][5:8]] == [torch.int8, torch.float32, torch.int32]


@pytest.mark.gpu
@pytest.mark.parametrize("symmetric", [True, False])
def test_w4a16_gemv_on_tiles_equals_row_major_bit_for_bit(symmetric):
    """Lesson 07 says the GEMV on tiles does the row-major GEMV's arithmetic in the same order, so their outputs are
    equal bit for bit; also where the tiles' launch keeps one generation of blocks that each compute several units
    (at M <= 8, where the units of 32 outputs outnumber the blocks that fit: N 14336 and 20008 on an H100)."""
    import torch
    mod = build.load(7, "w4a16_fast", solution=True)
    sfx = "" if symmetric else "_asym"
    rows_op = problems.W4A16Linear(symmetric=symmetric).bind(getattr(mod, "gemv_w4a16" + sfx))
    tiles = problems.W4A16TilesLinear(symmetric=symmetric)
    tiles_op = tiles.bind(getattr(mod, "gemv_w4a16_tiles" + sfx))
    for shape in ((1, 14336, 4096), (3, 20008, 1152), (8, 9000, 256), (12, 4200, 384)):
        x, w = tiles.make_inputs(shape, torch.Generator(device="cuda").manual_seed(shape[1]))
        r = w.rows()
        a = rows_op(x, r.packed, r.scale, *(() if symmetric else (r.zero,)))
        b = tiles_op(x, w)
        assert not a.isnan().any() and torch.equal(a, b), f"{shape}: {(a != b).sum().item()} outputs differ"


@pytest.mark.gpu
def test_nf4_gemv_on_tiles_equals_row_major_bit_for_bit():
    """Lesson 08's GEMV on tiles changes only the addresses of the row-major one, so their outputs are equal bit for
    bit; also where the tiles' launch keeps one generation of blocks that each compute several units (at M <= 8,
    where the units of 16 outputs outnumber the blocks that fit: N 14336, 20008 and 9000 on an H100)."""
    import torch
    mod = build.load(8, "nf4_fast", solution=True)
    rows_op = problems.NF4Linear().bind(mod.gemv_nf4)
    tiles = problems.NF4TilesLinear()
    tiles_op = tiles.bind(mod.gemv_nf4_tiles)
    for shape in ((1, 14336, 4096), (3, 20008, 1152), (8, 9000, 256), (12, 4200, 384)):
        M, N, K = shape
        x, w = tiles.make_inputs(shape, torch.Generator(device="cuda").manual_seed(N))
        r = w.rows()
        a = rows_op(x, r.packed.view(N, K // 2), r.absmax.view(N, K // 64), w.codebook)
        b = tiles_op(x, w)
        assert not a.isnan().any() and torch.equal(a, b), f"{shape}: {(a != b).sum().item()} outputs differ"


@pytest.mark.parametrize("symmetric", [True, False])
def test_w4a16_tiles_bind_rejects_bad_input(symmetric):
    """Lesson 07's tiled-layout problems take x and a quant.Int4Tiles of their own format; every wrong one is named
    before any launch."""
    import torch
    from harness import quant
    prob = problems.W4A16TilesLinear(symmetric=symmetric)
    other = problems.W4A16TilesLinear(symmetric=not symmetric)
    calls = []
    op = prob.bind(lambda *a: calls.append(a), "gemv_w4a16_tiles")
    x, w = prob.make_inputs((3, 40, 256), torch.Generator().manual_seed(0), device="cpu")
    assert isinstance(w, quant.Int4Tiles) and w.packed.shape == (3, 2, 16, 16) and w.scale.shape == (3, 2, 16)
    assert prob.reference((x, w)).shape == (3, 40)
    with pytest.raises(ValueError, match="the weights have K = 256"):
        op(x[:, :128], w)
    with pytest.raises(TypeError, match="x must be torch.float16"):
        op(x.float(), w)
    with pytest.raises(TypeError, match="must be a quant.Int4Tiles"):
        op(x, w.rows())
    with pytest.raises(ValueError, match="asymmetric" if symmetric else "the weights are symmetric"):
        op(x, other.make_inputs((3, 40, 256), torch.Generator().manual_seed(1), device="cpu")[1])
    with pytest.raises(ValueError, match=r"w.scale .* must have shape \(3, 2, 16\)"):
        op(x, quant.Int4Tiles(w.packed, w.scale[:, :1], w.n, zero=w.zero))
    with pytest.raises(ValueError, match=r"w.packed .* must have shape \(3, 2, 16, 16\)"):
        op(x, quant.Int4Tiles(w.packed[:2], w.scale, w.n, zero=w.zero))  # 40 rows need 3 tiles
    with pytest.raises(TypeError, match=r"w.packed .* must be torch.int32"):
        op(x, quant.Int4Tiles(w.packed.to(torch.int64), w.scale, w.n, zero=w.zero))
    if not symmetric:
        with pytest.raises(ValueError, match=r"w.zero .* must have shape \(3, 2, 16\)"):
            op(x, quant.Int4Tiles(w.packed, w.scale, w.n, zero=w.zero[:, :1]))
    assert not calls
    y = op(x, w)
    assert y.shape == (3, 40) and calls[0][-3:] == (3, 40, 256) and len(calls[0]) == (7 if symmetric else 8)


def test_nf4_tiles_bind_rejects_bad_input():
    """Lesson 08's tiled-layout problem takes x and a quant.NF4Tiles; every wrong one is named before any launch."""
    import torch
    from harness import quant
    prob = problems.NF4TilesLinear()
    calls = []
    op = prob.bind(lambda *a: calls.append(a), "gemv_nf4_tiles")
    x, w = prob.make_inputs((3, 40, 256), torch.Generator().manual_seed(0), device="cpu")
    assert isinstance(w, quant.NF4Tiles) and w.packed.shape == (3, 2, 16, 64) and w.absmax.shape == (3, 4, 16)
    assert prob.reference((x, w)).shape == (3, 40)
    with pytest.raises(ValueError, match="the weights have K = 256"):
        op(x[:, :128], w)
    with pytest.raises(TypeError, match="must be a quant.NF4Tiles"):
        op(x, w.rows())
    with pytest.raises(ValueError, match="reads blocks of 64, the weights have 32"):
        op(x, quant.NF4Tiles(w.packed, w.absmax, w.n, w.codebook, block=32))
    with pytest.raises(ValueError, match=r"w.absmax .* must have shape \(3, 4, 16\)"):
        op(x, quant.NF4Tiles(w.packed, w.absmax[:, :2], w.n, w.codebook))
    with pytest.raises(TypeError, match=r"w.codebook must be torch.float32"):
        op(x, quant.NF4Tiles(w.packed, w.absmax, w.n, w.codebook.half()))
    assert not calls
    y = op(x, w)
    assert y.shape == (3, 40) and calls[0][-3:] == (3, 40, 256) and len(calls[0]) == 8


def test_w8a16_tiles_bind_rejects_bad_input():
    """Lesson 06's tiled-layout problem takes x and a quant.Int8Tiles; every wrong one is named before any launch."""
    import torch
    from harness import quant
    prob = problems.W8A16TilesLinear()
    calls = []
    op = prob.bind(lambda *a: calls.append(a), "gemv_w8a16_tiles")
    x, w = prob.make_inputs((3, 40, 256), torch.Generator().manual_seed(0), device="cpu")
    assert isinstance(w, quant.Int8Tiles) and w.q.shape == (3, 4, 16, 64) and w.scale.shape == (40, 2)
    assert prob.reference((x, w)).shape == (3, 40)
    with pytest.raises(ValueError, match="the weights have K = 256"):
        op(x[:, :128], w)
    with pytest.raises(TypeError, match="x must be torch.float16"):
        op(x.float(), w)
    with pytest.raises(TypeError, match="must be a quant.Int8Tiles"):
        op(x, quant.Int8Weight(w.codes(), w.scale, 128))
    with pytest.raises(ValueError, match=r"w.scale must have shape \(40, 2\)"):
        op(x, quant.Int8Tiles(w.q, w.scale[:, :1], w.n))
    with pytest.raises(ValueError, match=r"w.q .* must have shape \(3, 4, 16, 64\)"):
        op(x, quant.Int8Tiles(w.q[:2], w.scale, w.n))  # 40 rows need 3 tiles
    with pytest.raises(TypeError, match=r"w.q .* must be torch.int8"):
        op(x, quant.Int8Tiles(w.q.to(torch.uint8), w.scale, w.n))
    with pytest.raises(ValueError, match="groups of 128"):
        op(x, quant.Int8Tiles(w.q, w.scale, w.n, group=64))
    assert not calls
    y = op(x, w)
    assert y.shape == (3, 40) and calls[0][-3:] == (3, 40, 256)


def test_w4a16_frag_bind_rejects_bad_input():
    """Lesson 10's problem takes x and a quant.Int4Fragments; every wrong one is named before any launch."""
    import torch
    from harness import quant
    prob = problems.W4A16FragLinear()
    calls = []
    op = prob.bind(lambda *a: calls.append(a), "linear_w4a16_frag")
    x, w = prob.make_inputs((3, 40, 256), torch.Generator().manual_seed(0), device="cpu")
    assert isinstance(w, quant.Int4Fragments) and w.packed.shape == (3, 4, 32, 4) and w.scale.shape == (2, 48)
    assert prob.reference((x, w)).shape == (3, 40)
    with pytest.raises(ValueError, match="the weights have K = 256"):
        op(x[:, :128], w)
    with pytest.raises(TypeError, match="x must be torch.float16"):
        op(x.float(), w)
    with pytest.raises(TypeError, match="must be a quant.Int4Fragments"):
        op(x, quant.Int4Weight(torch.zeros(40, 32, dtype=torch.int32), torch.ones(40, 2, dtype=torch.float16), 128))
    with pytest.raises(ValueError, match=r"w.scale .* must have shape \(2, 48\)"):
        op(x, quant.Int4Fragments(w.packed, w.scale[:, :16], w.n))
    with pytest.raises(TypeError, match="w.packed .* must be torch.int32"):
        op(x, quant.Int4Fragments(w.packed.long(), w.scale, w.n))
    with pytest.raises(ValueError, match="groups of 128"):
        op(x, quant.Int4Fragments(w.packed, w.scale, w.n, group=64))
    assert not calls
    y = op(x, w)
    assert y.shape == (3, 40) and calls[0][-3:] == (3, 40, 256)


def _fake_toolkit(home, version):
    """A CUDA_HOME with headers but no CCCL, whose nvcc reports `version`."""
    (home / "bin").mkdir(parents=True)
    (home / "include").mkdir()
    (home / "include" / "cuda_runtime.h").write_text("")
    nvcc = home / "bin" / "nvcc"
    nvcc.write_text(f"#!/bin/sh\necho 'Cuda compilation tools, release {version}, V{version}.1'\n")
    nvcc.chmod(0o755)
    return home


@pytest.mark.parametrize("version, source, error", [
    ("11.8", "/opt/old", r"nvcc 11.8 at .* does not match torch's CUDA {cuda}"),
    # pip's nvcc without cuda-toolkit[cccl] compiles lessons 00-03 but not cuda_fp16.h: say so up front
    (None, "pip", r"no CCCL headers .*cuda-toolkit\[cccl\]"),
], ids=["version mismatch", "no CCCL"])
def test_unusable_toolkit_is_named(tmp_path, monkeypatch, version, source, error):
    import torch
    home = _fake_toolkit(tmp_path / "cuda", version or torch.version.cuda)
    monkeypatch.setattr(toolchain, "_candidates", lambda: [(source, home)])
    toolchain.find.cache_clear()
    try:
        with pytest.raises(toolchain.ToolchainError, match=error.format(cuda=torch.version.cuda)):
            toolchain.find()
    finally:
        toolchain.find.cache_clear()  # the next find() (after monkeypatch's undo) sees the real toolchain


def test_pinned_ninja_is_the_one_torch_runs():
    import shutil
    ninja = pytest.importorskip("ninja")
    toolchain.find()
    assert shutil.which("ninja") == str(Path(ninja.BIN_DIR) / "ninja")


def _shown(outputs) -> list:
    """Outputs as a learner sees them: streams joined per name, without the line saying a cell was skipped."""
    from harness import notebook
    shown, streams = [], {}
    for o in outputs:
        if o["output_type"] == "stream":
            text = "".join(l for l in o["text"].splitlines(keepends=True) if not l.startswith(notebook.SKIP_PREFIX))
            streams[o["name"]] = streams.get(o["name"], "") + text
        elif o["output_type"] in ("display_data", "execute_result"):
            shown.append((o["output_type"], {k: v for k, v in o["data"].items() if k.startswith("text/")}))
    return sorted((k, v) for k, v in streams.items() if v) + shown


def _execute_like_lab(path: Path, cwd: Path):
    """Run a notebook top to bottom in the python3 kernel JupyterLab uses, every cell (no runner skipping)."""
    from nbclient import NotebookClient
    nb = nbformat.read(path, as_version=4)
    NotebookClient(nb, timeout=900, kernel_name="python3", resources={"metadata": {"path": str(cwd)}}).execute()
    return nb


@pytest.mark.parametrize("lesson", ["00_setup_and_roofline", "01_naive_gemm"])
def test_notebook_in_lab_without_gpu_keeps_recorded_outputs(lesson, tmp_path, monkeypatch):
    """Without a GPU, `%%gpu` cells do not launch: each says why in one line and shows the outputs recorded on the
    H100 again, so running the notebook top to bottom ends without an error and its saved outputs are unchanged,
    rerun after rerun (the line does not stack)."""
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "")  # the kernel process sees no GPU, whatever this machine has
    monkeypatch.delenv("REQUIRE_GPU", raising=False)
    path = ROOT / "lessons" / lesson / f"{lesson}.ipynb"
    stored = nbformat.read(path, as_version=4)
    # In a copy of the lesson's folder, as a learner's checkout holds it (the notebook imports its benchmark module,
    # bench_NN.py, from the folder it lives in): run, save in place as Lab does, run again from the saved file.
    here = tmp_path / lesson
    shutil.copytree(path.parent, here, ignore=shutil.ignore_patterns("__pycache__", ".ipynb_checkpoints"))
    first = _execute_like_lab(here / path.name, here)
    nbformat.write(first, here / path.name)
    second = _execute_like_lab(here / path.name, here)
    tagged = [i for i, c in enumerate(stored.cells) if "gpu" in c.metadata.get("tags", [])]
    assert tagged
    for i in tagged:
        assert stored.cells[i].source.startswith("%%gpu\n"), f"cell {i} is tagged gpu but has no %%gpu line"
        for run_ in (first, second):
            outs = run_.cells[i].outputs
            assert not [o for o in outs if o.output_type == "error"], outs
            assert outs and outs[0].output_type == "stream" and outs[0].text.startswith("[skipped here: this cell needs")
            assert sum(o.get("text", "").count("[skipped here") for o in outs) == 1, outs
            assert _shown(outs) == _shown(stored.cells[i].outputs), f"cell {i}"
    for run_ in (first, second):
        assert not [(i, o) for i, c in enumerate(run_.cells) if c.cell_type == "code"
                    for o in c.outputs if o.output_type == "error"]


def test_gpu_magic_without_a_recorded_cell_says_so(tmp_path, monkeypatch):
    from harness import notebook
    nb = nbformat.v4.new_notebook()
    cell = nbformat.v4.new_code_cell("%%gpu\nprint('hi')")
    cell.outputs = [nbformat.v4.new_output("stream", name="stdout", text=notebook.skip_line(True) + "hi\n")]
    nb.cells = [cell]
    nbformat.write(nb, tmp_path / "07_x.ipynb")
    outs = notebook.recorded_outputs("%%gpu\nprint('hi')\n", tmp_path)
    assert outs == [dict(cell.outputs[0], text="hi\n")]  # the skipped line is not replayed
    assert notebook.recorded_outputs("%%gpu\nprint('edited')", tmp_path) is None
    nbformat.write(nb, tmp_path / "08_y.ipynb")  # two notebooks in one folder: none is the lesson's
    assert notebook.recorded_outputs("%%gpu\nprint('hi')", tmp_path) is None


def test_gpu_magic_sm90a_skips_with_its_reason_below_hopper(monkeypatch):
    """`%%gpu sm_90a` (lesson 12's wgmma and copy-engine cells) runs only on compute capability 9.0; on an Ampere or
    Ada GPU it says why, names the GPU, and shows the reference's recorded output, like a machine without a GPU."""
    import torch
    from harness import notebook, toolchain
    monkeypatch.setattr(toolchain, "gpu_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "get_device_name", lambda *a: "NVIDIA GeForce RTX 3090")
    monkeypatch.setattr(torch.cuda, "get_device_capability", lambda *a: (8, 6))
    why = notebook._why_not("sm_90a")
    assert "compute capability 9.0" in why and "RTX 3090" in why and "sm_86" in why
    assert notebook._why_not("") is None  # a plain %%gpu cell runs on any GPU
    assert notebook.skip_line(True, why).startswith(f"{notebook.SKIP_PREFIX}: this cell {why}.")
    monkeypatch.setattr(torch.cuda, "get_device_capability", lambda *a: (9, 0))
    assert notebook._why_not("sm_90a") is None
    with pytest.raises(ValueError, match="sm_90a"):
        notebook._why_not("sm_80")
    monkeypatch.setattr(toolchain, "gpu_available", lambda: False)
    assert notebook._why_not("sm_90a") == toolchain.NO_GPU_REASON


def test_paths_display_relative_to_the_course_root():
    from IPython.core.interactiveshell import InteractiveShell
    from harness import notebook
    shell = InteractiveShell.instance()
    notebook.load_ipython_extension(shell)
    fmt = shell.display_formatter.formatters["text/plain"]
    assert fmt(ROOT / "results" / "01.json") == "PosixPath('results/01.json')"
    assert fmt(Path("/elsewhere/x.json")) == "PosixPath('/elsewhere/x.json')"


@pytest.mark.parametrize("argv", [["run", "99"], ["grade", "99"], ["demo", "99"], ["exercises", "reset", "99"],
                                  ["exercises", "list", "99"], ["run", "x1"]])
def test_every_command_refuses_a_lesson_that_does_not_exist(argv):
    env = dict(__import__("os").environ, COURSE_PYTHON=sys.executable)
    p = subprocess.run([str(ROOT / "course"), *argv], capture_output=True, text=True, env=env, timeout=300)
    assert p.returncode == 3, (p.stdout, p.stderr)
    assert p.stderr.count("\n") == 1 and "there is no lesson" in p.stderr and "00 to" in p.stderr, p.stderr
    assert "Traceback" not in p.stdout + p.stderr


def test_lab_opens_at_the_course_root_and_as_root_when_it_must():
    text = (ROOT / "course").read_text()
    lab = text[text.index("  lab)"):text.index(";;", text.index("  lab)"))]
    assert '--ServerApp.root_dir="$PWD"' in lab and "lessons" not in lab.split("exec")[1]
    assert 'id -u)" = 0' in lab and "--allow-root" in lab and "running as root" in lab
