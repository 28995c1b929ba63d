"""The kernel files carry no development switches: every `#ifdef`/`#ifndef` a solution or stub tests is an include guard
or a knob whose every value a test builds. Lesson 10's two knobs build the kernel as if the GPU had less shared memory
a block or no copy engine, the paths an A100, an sm_86/89 GPU or an sm_80 build take; here each value compiles, and
tests/test_kernels.py::test_w4a16_pipe_on_other_paths checks each on a GPU. Lesson 04's ablation is not a switch of
its kernel file: dev/tc_variants.py makes each variant from a copy of it, and each is built here."""
import importlib.util
import json
import re
from pathlib import Path

import pytest

from harness import build

# knob -> the -D flags that build each of its non-default values (the default is the plain build)
KNOBS = {
    "TILE_SMEM_CAP": ["-DTILE_SMEM_CAP=166912", "-DTILE_SMEM_CAP=101376"],
    "TILE_TMA": ["-DTILE_TMA=0"],
}
FLAGS = [f for flags in KNOBS.values() for f in flags]
SOURCES = sorted(p for d in ("kernels", "solutions") for p in (build.ROOT / d).glob("*/*.cu"))


def _switches(path: Path) -> set[str]:
    names = set(re.findall(r"^\s*#\s*if(?:n?def\s+|\s+defined\s*\(?\s*)(\w+)", path.read_text(), re.M))
    return {n for n in names if not n.endswith("_H") and not n.startswith("__")}


@pytest.mark.parametrize("path", SOURCES, ids=[f"{p.parent.parent.name}/{p.parent.name}/{p.name}" for p in SOURCES])
def test_no_untested_switch(path):
    extra = _switches(path) - set(KNOBS)
    assert not extra, f"{path.relative_to(build.ROOT)} has -D switches no test builds: {sorted(extra)}"


def test_switch_values_are_checked_on_a_gpu():
    """Every value built here is also one the GPU test runs the kernel's checks under."""
    gpu_test = (build.ROOT / "tests" / "test_kernels.py").read_text()
    body = gpu_test[gpu_test.index("def test_w4a16_pipe_on_other_paths"):]
    params = gpu_test[gpu_test.rindex("@pytest.mark.parametrize", 0, gpu_test.index("def test_w4a16_pipe_on_other_paths")):]
    assert all(f'"{f}"' in params.split("def ")[0] for f in FLAGS), FLAGS
    assert "extra_cuda_flags=[flags]" in body.split("\n\n")[0]


@pytest.mark.parametrize("flags", FLAGS)
def test_switch_value_compiles(flags):
    mod = build.load(10, "w4a16_pipe_fast", solution=True, extra_cuda_flags=[flags])
    assert {"linear_w4a16_frag", "gemm_w4a16_frag_pipe"} <= {e.name for e in mod.exports}
    for kernel, per_arch in mod.resources().items():
        for arch, r in per_arch.items():
            assert r["spill_stores"] == 0, f"{kernel} spills registers on {arch} with {flags}: {r}"


def _tc_variants():
    spec = importlib.util.spec_from_file_location("tc_variants", build.ROOT / "dev" / "tc_variants.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


TC = _tc_variants()
ABLATIONS = [v for v in TC.VARIANTS if v != "shipped"]


def test_ablation_variants_apply_and_keep_the_recorded_names():
    """Each named variant's edits find their text in the shipped kernel (once each) and change it; the rows recorded
    by dev/tune_tc.py --ablate (results/<GPU>/04.json "ablate") are named after these variants and no others."""
    shipped = TC.SHIPPED.read_text()
    for v in ABLATIONS:
        assert TC.source(v) != shipped, v
    assert TC.source("shipped") == shipped and TC.path("shipped") == TC.SHIPPED
    names = {f"{dt} {kind} {v}" for dt in ("f16", "s8") for v in TC.VARIANTS
             for kind in (("wmma",) if v in TC.WMMA_ONLY else ("wmma", "mma") if v in TC.CHECKED else ("mma",))}
    for rec in sorted(build.ROOT.glob("results/*/04.json")):
        ab = json.loads(rec.read_text())["sections"].get("ablate")
        if ab:
            got = {r["op"] for r in ab["rows"]} - {"cuBLAS FP16", "torch._int_mm"}
            assert got == names, (rec.relative_to(build.ROOT), sorted(got ^ names))


def test_an_edit_whose_text_moved_fails_loudly(monkeypatch):
    monkeypatch.setitem(TC.EDITS, "no waits", [("text the kernel does not have", "x")])
    with pytest.raises(ValueError, match="occurs 0 times"):
        TC.source("no waits")


@pytest.mark.parametrize("variant", ABLATIONS)
def test_ablation_variant_compiles(variant):
    """Lesson 04's fast kernel as each variant its ablation script times (the K-loop ones are timed only)."""
    mod = build.load_file(TC.path(variant), solution=True)
    assert {e.name for e in mod.exports} == {f"gemm_fast_{k}_{t}" for k in ("wmma", "mma") for t in ("f16", "s8")}
