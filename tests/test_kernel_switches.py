"""The kernel files carry no development switches: every `#ifdef`/`#ifndef` a solution or stub tests is an include guard
or a knob whose every value a test builds. Lesson 10's two knobs build the kernel as if the GPU had less shared memory
a block or no copy engine, the paths an A100, an sm_86/89 GPU or an sm_80 build take; here each value compiles, and
tests/test_kernels.py::test_w4a16_pipe_on_other_paths checks each on a GPU."""
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
# The ablation behind lesson 04's notes (dev/tune_tc.py --ablate times the fast kernel with parts of its K loop or its
# copy-engine path switched off): still -D switches of tc_fast.cu. Each value is built below, so none rots; they are
# listed by name so that no other switch joins them.
ABLATION_04 = {"TC_ABLATE": ["-DTC_ABLATE=1", "-DTC_ABLATE=2", "-DTC_ABLATE=4"], "TC_TMA": ["-DTC_TMA=0"],
               "MMA_SWZ": ["-DMMA_SWZ=0"], "WMMA_SWZ": ["-DWMMA_SWZ=0"], "WMMA_REG_EPI": ["-DWMMA_REG_EPI=0"]}
SOURCES = sorted(p for d in ("kernels", "solutions") for p in (build.ROOT / d).glob("*/*.cu"))


def _switches(path: Path) -> set[str]:
    names = set(re.findall(r"^\s*#\s*if(?:n?def\s+|\s+defined\s*\(?\s*)(\w+)", path.read_text(), re.M))
    return {n for n in names if not n.endswith("_H") and not n.startswith("__")}


@pytest.mark.parametrize("path", SOURCES, ids=[f"{p.parent.parent.name}/{p.parent.name}/{p.name}" for p in SOURCES])
def test_no_untested_switch(path):
    extra = _switches(path) - set(KNOBS) - (set(ABLATION_04) if path.name == "tc_fast.cu" else set())
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


@pytest.mark.parametrize("flags", [f for flags in ABLATION_04.values() for f in flags])
def test_ablation_value_compiles(flags):
    """Lesson 04's fast kernel under each value its ablation script sets (timing only: those builds are not checked)."""
    mod = build.load(4, "tc_fast", solution=True, extra_cuda_flags=[flags])
    assert {e.name for e in mod.exports}, flags
