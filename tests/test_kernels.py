"""Every exercise stub and every solution compiles (sm_80 and sm_90 without a GPU); on a GPU the
solutions pass their checks on odd shapes and the stubs fail them with a message that helps."""
import pytest

from harness import build, catalog, check, grade

FILES = sorted({(k.lesson, k.file) for k in catalog.kernels()})


@pytest.mark.parametrize("solution", [False, True], ids=["stub", "solution"])
@pytest.mark.parametrize("lesson, file", FILES, ids=[f"{l:02d}-{f}" for l, f in FILES])
def test_compiles(lesson, file, solution):
    if not solution and (lesson, file) in catalog.solution_only():
        pytest.skip(f"{file}.cu is lesson {lesson:02d}'s fast kernel: it has no stub in kernels/")
    mod = build.load(lesson, file, solution=solution)
    launchers = {k.launcher for k in catalog.kernels(lesson) if k.file == file}
    assert launchers <= {e.name for e in mod.exports}
    for kernel, per_arch in mod.resources().items():
        for arch, r in per_arch.items():
            assert r["spill_stores"] == 0, f"{kernel} spills registers on {arch}: {r}"


# the measurement kernels outside kernels/ and solutions/ (Marlin's launcher: tests/test_marlin.py)
TOOL_FILES = sorted([*(build.ROOT / "dev").glob("*.cu"), build.ROOT / "lessons" / "04_tensor_cores" / "wmma_layout.cu",
                     build.ROOT / "lessons" / "08_nf4" / "stream_probe.cu", build.ROOT / "harness" / "read_probe.cu"])


@pytest.mark.parametrize("path", TOOL_FILES, ids=[p.name for p in TOOL_FILES])
def test_tool_kernels_compile(path):
    """The measurement kernels of dev/ and the lessons' folders (lesson 12's read probe) build everywhere too."""
    mod = build.load_file(path, solution=True)
    assert mod.exports and all(r["spill_stores"] == 0 for per in mod.resources().values() for r in per.values())


IDS = [f"{k.lesson:02d}-{k.launcher}" for k in catalog.kernels()]


def _runs_here(k):
    """Lesson 12's kernel is built for sm_90a (wgmma): on any other GPU it cannot run, and says so."""
    import torch
    mod = build.load(k.lesson, k.file, solution=True)
    if mod.exact and torch.cuda.get_device_capability() != (int(mod.min_capability), 0):
        pytest.skip(f"{k.file} runs on compute capability {mod.min_capability} only (sm_90a); this GPU is "
                    f"{torch.cuda.get_device_name()}")


@pytest.mark.gpu
@pytest.mark.parametrize("k", catalog.kernels(), ids=IDS)
def test_solution_passes(k):
    _runs_here(k)
    res = check.check(k.problem, catalog.op(k, solution=True))
    assert res.ok, str(res)



@pytest.mark.gpu
@pytest.mark.parametrize("flags", ["-DTILE_SMEM_CAP=166912", "-DTILE_SMEM_CAP=101376", "-DTILE_TMA=0"],
                         ids=["a100-163KB", "sm86-99KB", "no-copy-engine"])
def test_w4a16_pipe_on_other_paths(flags):
    """Lesson 10's tiles of 64 and 128 tokens ask for 97 and 206 KB of shared memory on an H100 (the 128-token tile's
    5 stages filled by the copy engine, sm_90). A GPU with less a block (A100: 163 KB; sm_86/89: 99 KB) gets the
    barrier's 3-stage ring or 64-token tiles of 4 stages, and an sm_80 build on an H100 the cp.async ring on
    mbarriers (201 KB). Built as if this GPU had only that much, or no copy engine, the kernel passes at the sizes
    that take those paths."""
    mod = build.load(10, "w4a16_pipe_fast", solution=True, extra_cuda_flags=[flags])
    P = catalog.W4A16_FRAG
    for name in ("linear_w4a16_frag", "gemm_w4a16_frag_pipe"):
        res = check.check(P, P.bind(getattr(mod, name)), [(64, 4096, 1024), (65, 1000, 512), (128, 4096, 1024),
                                                          (200, 1000, 640), (100, 4100, 1152)])
        assert res.ok, f"{name} with {flags}: {res}"


@pytest.mark.gpu
def test_w4a16_pipe_takes_the_copy_engine_on_sm90():
    """On sm_90 and up the 128-token tile must run its copy-engine instance: a launcher that fell back to cp.async
    without a word would still pass every check, only slower (as lesson 08's once did; lessons/08_nf4/notes.md)."""
    import torch
    from torch.profiler import ProfilerActivity, profile
    if torch.cuda.get_device_capability() < (9, 0):
        pytest.skip(f"the copy engine (TMA) is sm_90+; this GPU is {torch.cuda.get_device_name()}")
    mod = build.load(10, "w4a16_pipe_fast", solution=True)
    P = catalog.W4A16_FRAG
    inputs = P.make_inputs((128, 4096, 1024))
    op = P.bind(mod.linear_w4a16_frag)
    op(*inputs)
    with profile(activities=[ProfilerActivity.CUDA]) as prof:
        op(*inputs)
        torch.cuda.synchronize()
    names = [e.name for e in prof.events() if "w4a16_kernel" in e.name]
    assert any("w4a16_kernel<2, 128, 2, 5, 1, 1, true>" in n for n in names), names


@pytest.mark.gpu
@pytest.mark.parametrize("k", catalog.kernels(), ids=IDS)
def test_stub_fails_helpfully(k):
    if not k.exercises:
        pytest.skip(f"{k.launcher} holds no exercise: its code is given, not written (or it has no stub)")
    _runs_here(k)
    if k.stub_check != "check":  # a race can give right values: the sanitizer must catch it
        out = grade.check_isolated(k.lesson, k.launcher, solution=False, sanitize=k.stub_check)
        assert not out.ok and any("Race" in f or "hazard" in f.lower() for f in out.findings), str(out)
        fixed = grade.check_isolated(k.lesson, k.launcher, solution=True, sanitize=k.stub_check)
        assert fixed.ok, str(fixed)
        return
    res = check.check(k.problem, catalog.op(k, solution=False))
    assert not res.ok, f"the stub of {k.launcher} passes its check: the exercise tests nothing"
    msg = str(res.first_failure())
    assert any(h in msg for h in ("never written", "exactly 0", "NaN/inf")), msg


@pytest.mark.gpu
def test_wmma_fragment_layout_is_mma_sync_s():
    """Lesson 04's WMMA kernel fills fragments with ldmatrix and stores them from registers on sm_90 machine code,
    relying on the layout lessons/04_tensor_cores/wmma_layout.cu measures: it must be mma.sync's, and mma_sync must read exactly the
    elements that layout defines (FP16 operands: x[0..7]; x[8..15] repeat them)."""
    import importlib.util

    import torch
    spec = importlib.util.spec_from_file_location("wmma_layout", build.ROOT / "lessons" / "04_tensor_cores" / "wmma_layout.py")
    probe = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(probe)
    cap = torch.cuda.get_device_capability()
    if cap != (9, 0):
        pytest.skip(f"the layout is relied on for sm_90 machine code only; this GPU is sm_{cap[0]}{cap[1]}")
    mod = build.load_file(build.ROOT / "lessons" / "04_tensor_cores" / "wmma_layout.cu", solution=True)
    where, reads = probe.measure(mod)
    assert not probe.mismatches(where), "\n".join(probe.mismatches(where)[:10])
    assert reads[0].tolist() == reads[1].tolist() == [1] * 8 + [0] * 8, reads
    assert reads[2].tolist()[:8] == reads[3].tolist()[:8] == [1] * 8, reads


@pytest.mark.gpu
def test_floor_movers_carry_every_byte():
    """Lesson 08's floor (lessons/08_nf4/stream_probe.cu): `expand` and the bulk copy engine's `expand_bulk` write, per packed
    word, (word, its scale, word, word), every output written (poisoned first), with blocks that loop over several
    chunks; `expand_bulk` leaves a word count that is not a multiple of its chunk alone; `fill` writes every word."""
    import torch
    cap = torch.cuda.get_device_capability()
    if cap < (9, 0):
        pytest.skip(f"the bulk copy engine needs sm_90; this GPU is sm_{cap[0]}{cap[1]}")
    mod = build.load_file(build.ROOT / "lessons" / "08_nf4" / "stream_probe.cu", solution=True)
    gen = torch.Generator(device="cuda").manual_seed(3)
    for words, movers in ((5 * 1024, ("expand", 4, 8)), (1000, ("expand",))):
        q = torch.randint(-2**31, 2**31 - 1, (words,), dtype=torch.int32, device="cuda", generator=gen)
        s = torch.rand(words // 8, device="cuda", generator=gen)
        want = torch.stack([q, s.view(torch.int32).repeat_interleave(8), q, q], 1).reshape(-1)
        for m in movers:
            out = torch.full((words * 4,), -1, dtype=torch.int32, device="cuda")
            if m == "expand":
                mod.expand(q.view(torch.uint8), s, out.view(torch.uint8), words, 2)
            else:
                mod.expand_bulk(q.view(torch.uint8), s, out.view(torch.uint8), words, 2, m)
            torch.cuda.synchronize()
            assert torch.equal(out, want), f"{m} stages" if m != "expand" else "expand"
    out = torch.full((1000 * 4,), -1, dtype=torch.int32, device="cuda")
    mod.expand_bulk(q.view(torch.uint8), s, out.view(torch.uint8), 1000, 2, 4)
    mod.fill(out.view(torch.uint8)[:999 * 16], 999, 3)
    torch.cuda.synchronize()
    o = out.view(1000, 4)
    assert torch.equal(o[:999, 0], torch.arange(999, dtype=torch.int32, device="cuda")) and (o[:999, 1:] == torch.tensor(
        [1, 2, 3], dtype=torch.int32, device="cuda")).all() and (o[999] == -1).all()
