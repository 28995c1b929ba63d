"""Every kernel's accepted shapes (catalog.SHAPES) are computed right, down to 1, and the rest are refused.

The sweep: each dimension over 1, 2, 3, 7, 8, 9, 15, 16, 17, 31, 33, 63, 65, 127, 129 and two large odd values, the
others at a small and a typical value, plus all-small combinations; a value a kernel's rules do not allow is moved
up to the next one they do (K = 1 … 128 → 128 for the group-128 formats). The full cross product would be
thousands of shapes per kernel."""
import itertools

import pytest
import torch

from harness import build, catalog, check, problems

VALUES = (1, 2, 3, 7, 8, 9, 15, 16, 17, 31, 33, 63, 65, 127, 129)
LARGE = {"M": (1001, 2049), "N": (4099, 12289), "K": (4099, 14337), "n": (4099, (1 << 20) + 7),
         "H": (4099, 14337), "I": (4099, 14337), "B": (257, 515), "ctx": (1001, 4097), "heads": (), "kv_heads": ()}
# The other dimensions while one is swept: a small and a typical value each.
BASES = {("M", "N", "K"): ({"M": 3, "N": 67, "K": 256}, {"M": 65, "N": 1024, "K": 1024}),
         ("n",): ({"n": 1},),
         ("N", "K"): ({"N": 3, "K": 256}, {"N": 1024, "K": 1024}),
         ("M", "H"): ({"M": 3, "H": 256}, {"M": 65, "H": 4096}),
         ("M", "I"): ({"M": 3, "I": 256}, {"M": 65, "I": 4096}),
         ("B", "ctx", "heads", "kv_heads"): ({"B": 2, "ctx": 65, "heads": 4, "kv_heads": 1},
                                             {"B": 4, "ctx": 1000, "heads": 32, "kv_heads": 8})}


def _fit(rules: problems.Shapes, d: dict) -> tuple | None:
    """`d` moved up to the nearest shape the rules allow (None if none is near)."""
    d = dict(d)
    for k, m in rules.multiple_of:
        d[k] = -(-d[k] // m) * m
    for a, b in rules.divides:
        if d[b] % d[a]:  # heads swept past kv_heads: keep the group, round heads up
            d[b] = -(-d[b] // d[a]) * d[a]
    shape = tuple(d[k] for k in rules.dims)
    return shape if rules.accepts(shape) else None


def sweep_shapes(rules: problems.Shapes) -> list[tuple]:
    dims = rules.dims
    out = []
    for base in BASES[dims]:
        for dim in dims:
            for v in VALUES + LARGE[dim]:
                d = dict(base, **{dim: v})
                if dim == "kv_heads":  # kv heads swept with a group of 2 q heads each
                    d["heads"] = 2 * v
                out.append(_fit(rules, d))
    for small in itertools.product((1, 2, 3), repeat=len(dims)):  # all-small combinations
        out.append(_fit(rules, dict(zip(dims, small))))
    return list(dict.fromkeys(s for s in out if s is not None))


IDS = [f"{k.lesson:02d}-{k.launcher}" for k in catalog.kernels()]


def test_every_kernel_states_its_shapes_and_takes_its_own_check_shapes():
    total = 0
    for k in catalog.kernels():
        rules = catalog.shapes(k)
        assert len(rules.dims) == len(k.problem.check_shapes[0]), k.launcher
        bad = [s for s in k.problem.check_shapes if not rules.accepts(s)]
        assert not bad, f"{k.launcher}: its problem's check shapes {bad} break its stated rules {rules}"
        shapes = sweep_shapes(rules)
        assert (1,) * len(rules.dims) in shapes or any(m > 1 for _, m in rules.multiple_of), k.launcher
        total += len(shapes)
    print(f"\nshape sweep: {len(catalog.kernels())} kernels, {total} kernel-shape pairs")


def test_group_128_kernels_sweep_k_in_whole_groups():
    rules = catalog.SHAPES["w4a16_frag"]
    ks = {s[2] for s in sweep_shapes(rules)}
    assert ks == {128, 256, 1024, 4224, 14464} and all(s[0] >= 1 and s[1] >= 1 for s in sweep_shapes(rules))
    assert (1, 1, 128) in sweep_shapes(rules)


@pytest.mark.parametrize("k", catalog.kernels(), ids=IDS)
def test_shapes_outside_the_rules_are_refused_before_any_launch(k):
    rules = catalog.shapes(k)

    def never(*a):
        raise AssertionError("the launcher must not be reached")

    op = catalog.constrained(k.problem, k.problem.bind(never, k.label), rules)
    if not rules.multiple_of:
        return
    dim, m = rules.multiple_of[0]
    if not isinstance(k.problem, problems.Linear) or dim != "K":
        bad = dict(zip(rules.dims, k.problem.check_shapes[0]))
        bad[dim] += 1
        with pytest.raises(problems.ShapeError, match=f"{dim} = {bad[dim]} is not a multiple of {m}"):
            rules.refuse(tuple(bad.values()), k.launcher)
        return
    # an x whose K breaks the rule, with weights of a shape that takes it: refused by the catalog's rule
    x, w, *rest = k.problem.make_inputs((2, 16, 2 * m), device="cpu")
    with pytest.raises(problems.ShapeError, match=f"K = {2 * m - 1} is not a multiple of {m}"):
        op(x[:, : 2 * m - 1].contiguous(), w, *rest)


def _runs_here(k):
    mod = build.load(k.lesson, k.file, solution=True)
    if mod.exact and torch.cuda.get_device_capability() != (int(mod.min_capability), 0):
        pytest.skip(f"{k.file} runs on sm_{int(mod.min_capability * 10)}a only")
    return mod


@pytest.mark.gpu
@pytest.mark.parametrize("k", catalog.kernels(), ids=IDS)
def test_shape_sweep(k):
    """The solution on every swept shape its rules allow: right values, nothing written outside y, inputs
    unchanged (check's guard bands), each shape run twice."""
    _runs_here(k)
    shapes = sweep_shapes(catalog.shapes(k))
    res = check.check(k.problem, catalog.op(k, solution=True), shapes, repeats=2)
    bad = [r for r in res.reports if not r.ok]
    assert not bad, f"{len(bad)} of {len(shapes)} shapes fail:\n" + "\n".join(r.summary() for r in bad[:6])


# Where each kernel rounds at M = 1 (K = 128: one scale group). Lesson 12's wgmma kernel dequantizes each weight to
# FP16 (q · s rounded, as lesson 10 teaches) and accumulates the products in FP32. linear_w4a16_frag at M <= 8 runs
# lesson 07's decode GEMV, which sums the integer codes times x in FP32 on the tensor cores (every product exact) and
# multiplies the group's sum by s once.
SCALE_AFTER_SUM = {"linear_w4a16_frag"}


@pytest.mark.gpu
@pytest.mark.parametrize("launcher", ["linear_w4a16_wgmma", "linear_w4a16_frag"])
def test_one_output_matches_fp16_dequantization(launcher):
    """M = N = 1, K = 128 over 200 seeds: the one output equals the kernel's own rounding model computed in PyTorch
    (FP16-rounded weights q · s then an FP32 dot; or, for a kernel that scales after the sum, s times the FP32 dot of
    the codes with x) to within an FP16 step, and check passes it every time: a lone output whose 128 terms cancel is
    no longer judged against its own tiny size."""
    k = next(k for k in catalog.kernels() if k.launcher == launcher)
    _runs_here(k)
    op, P = catalog.op(k, solution=True), k.problem
    for seed in range(200):
        x, w = P.make_inputs((1, 1, 128), torch.Generator(device="cuda").manual_seed(seed))
        if launcher in SCALE_AFTER_SUM:
            q, s = w.codes().float(), w.scale[0, 0].float()  # exact integers; the group's one scale
            want = ((x.float() @ q.T) * s).half().float()
            size = float(x.float().abs() @ q.abs().T) * abs(float(s))
        else:
            Wh = (w.codes().half() * w.scale[:, :1].t().repeat_interleave(128, dim=1)).float()  # FP16 products
            want = (x.float() @ Wh.T).half().float()
            size = float(x.float().abs() @ Wh.abs().T)
        # Σ|terms| · 2^-16: FP32 summation order moves the sum by ~1e-7 of it; 2^-10 of the output: one FP16 step
        got = op(x, w).float()
        assert (got - want).abs().item() <= want.abs().item() * 2 ** -10 + size * 2 ** -16, (seed, got, want)
    res = check.check(P, op, [(1, 1, 128)] * 200)
    assert res.ok, str(res.first_failure())
