"""nsight.sass_counts without cuobjdump: the recorded counts of the same file and arch, said and returned (CPU only)."""
import re
from pathlib import Path
from types import SimpleNamespace

import pytest

from harness import build, nsight


def _module(lesson, name, solution=True):
    # sass_counts' fallback reads only the module's source path and whether it is the solution: no build needed
    return SimpleNamespace(path=build.source_path(lesson, name, solution), solution=solution)


def test_without_cuobjdump_the_recorded_counts_are_printed_and_returned(monkeypatch, capsys):
    monkeypatch.setattr(nsight, "cuobjdump_path", lambda: None)
    counts = nsight.sass_counts(_module(12, "w4a16_wgmma_fast"), "sm_90a")
    said = capsys.readouterr().out
    assert "cuobjdump" in said and "showing the counts recorded" in said and re.search(r"results/[A-Za-z0-9_]+/12.json", said)
    hgmma = {k: sum(n for op, n in ops.items() if op.startswith("HGMMA")) for k, ops in counts.items()}
    assert any(k.startswith("void wgmma_w4a16_kernel<128, 4>") for k in hgmma), sorted(hgmma)
    assert all(v > 0 for v in hgmma.values()), hgmma  # every kernel of the file multiplies with wgmma
    l10 = nsight.sass_counts(_module(10, "w4a16_pipe_fast"), "sm_90")
    assert l10 and all(not any(op.startswith("HGMMA") for op in ops) for ops in l10.values())
    tma = [ops for k, ops in l10.items() if k.startswith("void w4a16_kernel<2, 128, 2, 5, 1, 1, true>")]
    assert tma and any(op.startswith("UTMALDG") for op in tma[0])  # lesson 10's M = 128 kernel: the copy engine


def test_exercise_files_are_told_the_counts_are_the_solutions(monkeypatch, capsys):
    monkeypatch.setattr(nsight, "cuobjdump_path", lambda: None)
    mine = SimpleNamespace(path=build.lesson_dir(12, False) / "w4a16_wgmma_fast.cu", solution=False)
    assert nsight.sass_counts(mine, "sm_90a")
    assert "not your kernels/ file" in capsys.readouterr().out


def test_without_cuobjdump_or_a_record_it_says_so(monkeypatch):
    monkeypatch.setattr(nsight, "cuobjdump_path", lambda: None)
    with pytest.raises(nsight.NsightUnavailable, match="no counts are recorded"):
        nsight.sass_counts(_module(12, "w4a16_wgmma_fast"), "sm_80")  # recorded for sm_90a only


def test_cuobjdump_is_found_in_tritons_bundled_tools(monkeypatch, tmp_path):
    tools = nsight._triton_bin()
    if tools is None or not (tools / "cuobjdump").exists():
        pytest.skip("triton with its bundled CUDA tools is not installed")
    if (Path("/usr/local/cuda/bin") / "cuobjdump").exists():
        pytest.skip("a CUDA toolkit in /usr/local/cuda comes first")
    monkeypatch.setattr(nsight.toolchain, "find", lambda: SimpleNamespace(cuda_home=tmp_path))  # a toolkit without it
    monkeypatch.setattr(nsight.shutil, "which", lambda name: None)  # and none on PATH
    assert nsight.cuobjdump_path() == str(tools / "cuobjdump")
