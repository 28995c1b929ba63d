"""Bugs that pass every value check: a race on shared memory, an access past a tensor, a block that waits for another.

On the GPU every catalog kernel whose file uses shared memory (teaching kernels and fast kernels) runs its first two
check shapes under compute-sanitizer racecheck (and synccheck where the file uses warp or named barriers), and every
catalog kernel runs them under memcheck with PyTorch's caching allocator off, so that a read or write past a tensor is
past its allocation. Each run is a child process (harness.grade.check_isolated), so a fault cannot take the test
session with it.

No kernel waits for another block of its grid: CUDA promises neither the order in which a grid's blocks start nor how
many of them are resident at once, so a block that spins until others arrive can hang. Split-K fix-ups and split
attention merges are done by the block that arrives last (an atomic counter). A CPU test finds any spin on global
memory in the sources; a GPU test runs the split attention merge with far more blocks than fit on the GPU at once.
"""
import re

import pytest
import torch

from harness import build, catalog, check, grade

KERNELS = catalog.kernels()
IDS = [f"{k.lesson:02d}-{k.launcher}" for k in KERNELS]


def _source(k) -> str:
    return build.source_path(k.lesson, k.file, solution=True).read_text()


SHARED = [k for k in KERNELS if "__shared__" in _source(k)]


def _runs_here(k):
    mod = build.load(k.lesson, k.file, solution=True)
    if mod.exact and torch.cuda.get_device_capability() != (int(mod.min_capability), 0):
        pytest.skip(f"{k.file} runs on compute capability {mod.min_capability} only; this GPU is "
                    f"{torch.cuda.get_device_name()}")


def _clean(k, tool):
    _runs_here(k)
    out = grade.check_isolated(k.lesson, k.launcher, solution=True, sanitize=tool, timeout=600)
    if out.status == "not-run":
        pytest.skip(out.text)
    assert out.ok, f"{tool}: {out.status}\n{out.text}\n" + "\n".join(out.findings)


@pytest.mark.gpu
@pytest.mark.parametrize("k", SHARED, ids=[f"{k.lesson:02d}-{k.launcher}" for k in SHARED])
def test_no_race_on_shared_memory(k):
    for tool in grade.race_tools(build.source_path(k.lesson, k.file, solution=True)):
        _clean(k, tool)


@pytest.mark.gpu
@pytest.mark.parametrize("k", KERNELS, ids=IDS)
def test_no_access_out_of_bounds(k):
    _clean(k, "memcheck")


def test_shared_memory_kernels_are_found():
    """The racecheck list is not empty by accident: the tiled GEMMs, the pipelines and lesson 12 are on it."""
    names = {k.launcher for k in SHARED}
    assert len(SHARED) >= 20 and {k.lesson for k in SHARED} >= {2, 3, 4, 10, 11, 12}, sorted(names)


# A spin on global memory: an acquire/volatile/relaxed load at GPU scope, an atomic read-modify-write in a loop's
# condition, or a volatile pointer. The mbarrier waits of lesson 12 are on shared memory, within one block: allowed.
SPIN = re.compile(r"ld\.(acquire|volatile|relaxed)\.(gpu|sys)|ld\.volatile\.global|while\s*\([^)]*atomic"
                  r"|volatile\s+(int|unsigned|uint32_t)\s*\*")


@pytest.mark.parametrize("path", sorted([*build.ROOT.glob("kernels/*/*.cu"), *build.ROOT.glob("solutions/*/*.cu")]),
                         ids=lambda p: f"{p.parent.name}/{p.name}")
def test_no_block_waits_for_another(path):
    code = "\n".join(l.split("//")[0] for l in path.read_text().splitlines())
    found = [m.group(0) for m in SPIN.finditer(code)]
    assert not found, (f"{path.name} spins on global memory ({found}): a block that waits for other blocks of its "
                       "grid can hang. Let the block that arrives last do the work (an atomic counter).")


ATTENTION = [k for k in KERNELS if k.problem.name == "decode_attention"]


@pytest.mark.gpu
@pytest.mark.parametrize("k", ATTENTION, ids=[f"{k.lesson:02d}-{k.launcher}" for k in ATTENTION])
def test_split_merge_with_more_blocks_than_fit(k):
    """64 sequences × 32 heads × 16 splits: thousands of blocks more than the GPU holds at once (at most
    2048 threads per SM), so the splits of a head run in no particular order, many after others finished."""
    _runs_here(k)
    op = catalog.op(k, solution=True)

    def forced(qkv, k_cache, v_cache, pos, rope, out=None):
        return op(qkv, k_cache, v_cache, pos, rope, out=out, splits=16)

    forced.__name__ = f"{op.__name__} (16 splits)"
    B, nh = 64, 32
    sms = torch.cuda.get_device_properties(0).multi_processor_count
    assert B * nh // 8 * 16 > sms * 2048 // 256, "the grid would fit at once: pick more sequences"
    res = check.check(k.problem, forced, [(B, 1000, nh, 8)], repeats=2)
    assert res.ok, str(res)
