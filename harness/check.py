"""Is a kernel right? Compare it with a higher-precision reference and say exactly what is wrong.

The rules (the same in notebooks and tests):
- fresh random inputs for every check, never zeros; and besides them, each problem's special inputs
  (problems.Special: the codes at a format's ends, subnormal and huge scales, tiny and huge rows, logits of ±1000,
  tile edges), where one term of the reference decides the result, which random inputs never make count;
- the output is poisoned before the run with a NaN carrying a recognisable bit pattern, so an element
  the kernel never wrote is caught and told apart from a NaN the kernel computed;
- NaN or inf never passes;
- tolerance by output dtype, scaled to the size of the reference (an absolute term relative to its
  RMS, plus a relative term), because a K-long dot product's rounding grows with the values;
- the output (and any scratch the harness hands the kernel) sits inside a larger poisoned allocation,
  with guard bands before and after it: a write into them is a failure of its own (a bounds guard
  written `m <= M` leaves every element of y right and writes one row past it);
- the inputs are compared byte for byte after the run: a kernel that writes its input fails (a problem's
  writable() names the elements a kernel writes by design, such as a KV cache's new row: only those may change);
- each shape runs more than once on the same inputs, the output poisoned again each time: a race
  (a missing __syncthreads) gives right values in one run and wrong ones in another.
"""
from __future__ import annotations

import dataclasses
import inspect
import math
import os
from dataclasses import dataclass, field

import torch

from . import build, catalog, guard, problems
# The poison and guard bands live in guard.py (problems' launchers use them too); named here as well, since notebooks
# and tests reach them as check.poisoned, check.Guarded, ...
from .guard import POISON_BITS, Guarded, is_poison, poisoned, scratch  # noqa: F401


KernelHang, hang_limit_s = build.KernelHang, build.hang_limit_s  # where notebooks and grade look for them


def wait_for_gpu(what: str, limit_s: float | None = None):
    """Wait for the GPU's work so far, like torch.cuda.synchronize(), but give up with KernelHang after limit_s (a
    Python loop, so a notebook's interrupt button also works). A fault of the kernel raises as it would there."""
    done = torch.cuda.Event()
    done.record()
    build.wait_for_stream(lambda: 0 if done.query() else build._NOT_READY, what, limit_s)


# (rtol, atol as a fraction of the reference's RMS) by output dtype.
TOLERANCE = {torch.float64: (1e-9, 1e-9), torch.float32: (1e-4, 1e-4), torch.float16: (5e-3, 5e-3),
             torch.bfloat16: (2e-2, 2e-2), torch.int32: (0.0, 0.0), torch.int8: (0.0, 0.0)}
# The smallest absolute tolerance an FP16 output gets: below 2^-14 FP16 values are the multiples of 2^-24, so a
# correctly rounded output is up to 2^-25 off, and one FP16 rounding on the way (a subnormal scale times a code) as
# much again. Only outputs that tiny feel it (a special input's subnormal scales or silu's far tail).
FP16_STEP = 2.0 ** -24


def _named_tensors(inputs, names) -> list[tuple[str, torch.Tensor]]:
    """Every tensor in the inputs (tuples, and the fields of quant layout objects), with a name for messages."""
    out = []

    def walk(obj, name):
        if isinstance(obj, torch.Tensor):
            out.append((name, obj))
        elif isinstance(obj, (tuple, list)):
            for i, o in enumerate(obj):
                walk(o, f"{name}[{i}]")
        elif dataclasses.is_dataclass(obj) and not isinstance(obj, type):
            for f in dataclasses.fields(obj):
                walk(getattr(obj, f.name), f"{name}.{f.name}")

    for i, obj in enumerate(inputs):
        walk(obj, names[i] if i < len(names) else f"input {i}")
    return out


def _input_names(op, n) -> list[str]:
    """The bound op's parameter names (x, W, q, scales ...), else input 0, 1, ..."""
    try:
        ps = [p.name for p in inspect.signature(op).parameters.values()
              if p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD) and p.name != "out"]
    except (TypeError, ValueError):
        ps = []
    return ps[:n] if len(ps) >= n else [f"input {i}" for i in range(n)]


def _changed_inputs(before, after, writable=None) -> list[str]:
    """Messages for the input tensors whose bytes changed during the run. `writable` maps id(tensor) of an input the
    problem lets the kernel write to (mask of the elements it may change, their name): only changes outside the mask
    count there."""
    out = []
    for (name, b), (_, a) in zip(before, after):
        if b.numel() == 0:
            continue
        bb, aa = b.reshape(-1).view(torch.uint8), a.detach().contiguous().reshape(-1).view(torch.uint8)
        if torch.equal(bb, aa):
            continue
        diff = (bb != aa).view(-1, b.element_size()).any(dim=1)
        mask, part = (writable or {}).get(id(a), (None, None))
        if mask is not None:
            diff &= ~mask.reshape(-1).to(diff.device)
            if not diff.any():
                continue
        first = int(diff.nonzero()[0])
        idx = []
        for d in reversed(tuple(a.shape)):
            idx.insert(0, first % d)
            first //= d
        if mask is None:
            out.append(f"the kernel wrote its input {name}: {int(diff.sum()):,} of {b.numel():,} elements changed, the "
                       f"first at {idx} (inputs are read-only: write only to the output)")
        else:
            out.append(f"the kernel wrote its input {name} outside {part}: {int(diff.sum()):,} of {b.numel():,} "
                       f"elements changed there, the first at {idx} (write only to the output and {part})")
    return out


def seed_for_check() -> int:
    """A new seed each time (fresh inputs), overridable with COURSE_SEED to reproduce a failure."""
    s = os.environ.get("COURSE_SEED")
    return int(s) if s else int.from_bytes(os.urandom(4), "little")


@dataclass
class Report:
    """The result of comparing one output with its reference."""
    name: str
    shape_desc: str
    dtype: torch.dtype
    ok: bool
    total: int
    wrong: int = 0
    unwritten: int = 0
    nonfinite: int = 0
    rel_error: float = float("nan")
    rtol: float = 0.0
    atol: float = 0.0
    seed: int | None = None
    examples: list = field(default_factory=list)  # (index tuple, got, expected)
    wrong_mask: torch.Tensor | None = None  # on the CPU, for the heatmap
    note: str = ""
    faults: list = field(default_factory=list)  # writes outside the output: guard bands, inputs
    per_row: bool = False  # the absolute tolerance is per output row (atol: the smallest row's)

    def summary(self) -> str:
        head = f"{'PASS' if self.ok else 'FAIL'}  {self.name}  {self.shape_desc}  ({str(self.dtype).replace('torch.', '')})"
        if self.ok:
            return f"{head}: max error within tolerance, ‖got−ref‖/‖ref‖ = {self.rel_error:.2e}"
        if self.faults and not self.wrong:
            lines = [f"{head}: every element of the output is right, but the kernel writes where it must not"]
        else:
            lines = [f"{head}: {self.wrong:,} of {self.total:,} elements wrong "
                     f"({100 * self.wrong / max(self.total, 1):.1f}%)"]
        lines += ["  " + f for f in self.faults]
        if self.note:
            lines.append("  " + self.note)
        if self.unwritten:
            lines.append(f"  {self.unwritten:,} were never written (they still hold the poison NaN): "
                         "check your bounds guard, your grid size, and that every thread stores its result")
        if self.nonfinite:
            lines.append(f"  {self.nonfinite:,} are NaN/inf computed by the kernel: an uninitialised "
                         "accumulator, a read out of bounds, or a missing __syncthreads")
        written_wrong = self.wrong - self.unwritten - self.nonfinite
        if written_wrong > 0:
            tol = (f"per row |got−ref| ≤ {TOLERANCE.get(self.dtype, (0, 1e-4))[1]:g}·(the row's RMS) + "
                   f"{self.rtol:g}·|ref|, at least {self.atol:.3g}" if self.per_row
                   else f"|got−ref| ≤ {self.atol:.3g} + {self.rtol:g}·|ref|")
            lines.append(f"  {written_wrong:,} were written with a wrong value (tolerance {tol})")
        if self.examples:
            lines.append("  first wrong elements [index]: got vs expected")
            for idx, got, exp in self.examples:
                lines.append(f"    {list(idx)}: {got!r:>14} vs {exp!r}")
        if not math.isnan(self.rel_error):
            lines.append(f"  ‖got−ref‖/‖ref‖ over finite elements = {self.rel_error:.2e}")
        if self.wrong_mask is not None and self.wrong_mask.dim() == 2:
            lines.append("  " + tile_summary(self.wrong_mask))
        if self.seed is not None:
            lines.append(f"  inputs from seed {self.seed} (COURSE_SEED={self.seed} reproduces them)")
        return "\n".join(lines)

    def __str__(self):
        return self.summary()

    def _repr_pretty_(self, p, cycle):
        p.text(self.summary())

    def heatmap(self, tile: tuple[int, int] | None = None, ax=None):
        """Plot the fraction of wrong elements per tile of the output (rows × columns)."""
        return heatmap(self.wrong_mask, title=f"{self.name} {self.shape_desc}: wrong elements", tile=tile, ax=ax)


def compare(got: torch.Tensor, ref: torch.Tensor, *, name: str = "output", shape_desc: str = "",
            rtol: float | None = None, atol: float | None = None, seed: int | None = None,
            max_examples: int = 5, scale: float | torch.Tensor | None = None) -> Report:
    """Compare `got` with the higher-precision `ref` (same shape). Poison still in `got` counts
    as unwritten; NaN/inf anywhere fails. The absolute tolerance is the dtype's fraction of `scale`
    (default: the reference's RMS; a tensor broadcast against ref, such as each row's RMS, gives each element its
    own), and for FP16 outputs at least FP16_STEP."""
    if got.shape != ref.shape:
        raise ValueError(f"{name}: output shape {tuple(got.shape)} differs from the reference's {tuple(ref.shape)}")
    dt = got.dtype
    d_rtol, d_atol = TOLERANCE.get(dt, (1e-4, 1e-4))
    rtol = d_rtol if rtol is None else rtol
    ref64 = ref.double()
    per_row = isinstance(scale, torch.Tensor)
    if atol is None and per_row:
        atol = d_atol * scale.to(device=ref64.device, dtype=torch.float64)
        if dt == torch.float16:
            atol = atol.clamp_min(FP16_STEP)
    elif atol is None:
        rms = ref64.pow(2).mean().sqrt().item() if ref64.numel() else 0.0
        rms = rms if scale is None or not math.isfinite(scale) else scale
        atol = d_atol * (rms if rms > 0 else 1.0)
        if dt == torch.float16:
            atol = max(atol, FP16_STEP)
    unwritten = is_poison(got) if dt in POISON_BITS else torch.zeros_like(got, dtype=torch.bool)
    g64 = got.double()
    nonfinite = ~torch.isfinite(g64) & ~unwritten
    err = (g64 - ref64).abs()
    bad = unwritten | nonfinite | ~(err <= atol + rtol * ref64.abs())  # NaN compares False -> bad
    bad |= ~torch.isfinite(ref64)
    n_bad = int(bad.sum())
    fin = torch.isfinite(g64) & torch.isfinite(ref64)
    num = (g64[fin] - ref64[fin]).norm().item() if fin.any() else float("nan")
    den = ref64[fin].norm().item() if fin.any() else float("nan")
    rel = num / den if den else (0.0 if num == 0 else float("inf"))
    atol_min = (float(atol.min()) if atol.numel() else 0.0) if per_row else float(atol)
    rep = Report(name, shape_desc or "x".join(map(str, got.shape)), dt, n_bad == 0, got.numel(), n_bad,
                 int(unwritten.sum()), int(nonfinite.sum()), rel, rtol, atol_min, seed, per_row=per_row)
    if n_bad:
        written_bad = bad & ~unwritten & ~nonfinite
        if written_bad.any() and bool((g64[written_bad] == 0).all()):
            rep.note = ("every wrongly written element is exactly 0: nothing was accumulated "
                        "(is the loop that adds the products still a TODO?)")
        idx = bad.nonzero()[:max_examples].tolist()
        for i in idx:
            g = got[tuple(i)]
            g = "never written" if dt in POISON_BITS and bool(is_poison(g.reshape(1))[0]) else _fmt(g.item())
            rep.examples.append((tuple(i), g, _fmt(ref64[tuple(i)].item())))
        rep.wrong_mask = bad.cpu()
    return rep


def _fmt(v):
    return v if isinstance(v, int) else float(f"{v:.6g}")


def tile_summary(mask: torch.Tensor, tile: tuple[int, int] | None = None) -> str:
    """One line saying where the wrong elements are, by tile, e.g. which rows/columns of tiles."""
    R, C = mask.shape
    tr, tc = tile or (32 if R >= 32 else max(R, 1), 32 if C >= 32 else max(C, 1))
    nr, nc = -(-R // tr), -(-C // tc)
    pad = torch.zeros(nr * tr, nc * tc, dtype=torch.bool)
    pad[:R, :C] = mask
    per = pad.view(nr, tr, nc, tc).any(dim=3).any(dim=1)
    bad_tiles = int(per.sum())
    rows = per.any(dim=1).nonzero().flatten().tolist()
    cols = per.any(dim=0).nonzero().flatten().tolist()

    def span(v):
        return ", ".join(map(str, v[:8])) + (" …" if len(v) > 8 else "")

    return (f"wrong in {bad_tiles} of {nr * nc} tiles of {tr}×{tc} "
            f"(tile rows {span(rows)}; tile columns {span(cols)})")


def heatmap(mask: torch.Tensor | None, title: str = "wrong elements", tile=None, ax=None):
    """Fraction of wrong elements in each cell of the output (downsampled to at most 128×128)."""
    import matplotlib.pyplot as plt

    if ax is None:
        _, ax = plt.subplots(figsize=(5, 4))
    if mask is None:
        ax.set_title(title + ": none")
        return ax
    m = mask.float()
    if m.dim() == 1:
        m = m[None, :]
    R, C = m.shape
    fr, fc = max(1, -(-R // 128)), max(1, -(-C // 128))
    pad = torch.zeros(-(-R // fr) * fr, -(-C // fc) * fc)
    pad[:R, :C] = m
    cells = pad.view(pad.shape[0] // fr, fr, pad.shape[1] // fc, fc).mean(dim=(1, 3))
    im = ax.imshow(cells.numpy(), cmap="Reds", vmin=0, vmax=1, aspect="auto", interpolation="nearest",
                   extent=(0, C, R, 0))
    if tile:
        for r in range(0, R, tile[0]):
            ax.axhline(r, color="0.7", lw=0.4)
        for c in range(0, C, tile[1]):
            ax.axvline(c, color="0.7", lw=0.4)
    ax.set_xlabel("column (n)")
    ax.set_ylabel("row (m)")
    ax.set_title(title)
    ax.figure.colorbar(im, ax=ax, label="fraction wrong")
    return ax


class CheckFailed(AssertionError):
    pass


@dataclass
class CheckResult:
    """Reports for every shape a kernel was checked on; `skipped`: the special inputs whose shape the kernel does
    not take (it refused them with a ShapeError before any launch, as catalog's rules say), one line each."""
    name: str
    reports: list[Report]
    skipped: list[str] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        return bool(self.reports) and all(r.ok for r in self.reports)

    def __str__(self):
        verdict = "all passed" if self.ok else f"{sum(not r.ok for r in self.reports)} of {len(self.reports)} FAILED"
        lines = [f"{self.name}: {verdict}"] + [r.summary() for r in self.reports]
        if self.skipped:
            lines.append(f"{len(self.skipped)} special input(s) not run: shapes this kernel does not take")
            lines += ["  " + s for s in self.skipped]
        return "\n".join(lines)

    def _repr_pretty_(self, p, cycle):
        p.text(str(self))

    def first_failure(self) -> Report | None:
        return next((r for r in self.reports if not r.ok), None)

    def raise_if_failed(self):
        if not self.ok:
            raise CheckFailed(str(self))
        return self


def check(problem, op, shapes=None, *, specials: bool | None = None, name: str | None = None, seed: int | None = None,
          repeats: int = 3, device: str = "cuda") -> CheckResult:
    """Run `op` (a bound kernel or any callable problem.call understands) on fresh random inputs for each shape,
    with the output poisoned inside poisoned guard bands, and compare with the problem's reference; `repeats` runs
    per shape on the same inputs (a race shows in some runs only). Writes past the output, into scratch's guard
    bands or into an input fail the shape too. device="cpu" checks Python ops on CPU tensors.
    With the problem's own shapes (shapes=None) the check also runs its special inputs (problems.specials_of: the
    inputs where each term of the reference counts, which random ones never reach), each report naming the special;
    with explicit shapes only if specials=True. A special whose shape the op refuses with a ShapeError (a catalog
    kernel outside its rules) is skipped and listed in the result's `skipped`, not failed."""
    run_specials = shapes is None if specials is None else bool(specials)
    shapes = problem.check_shapes if shapes is None else shapes
    name = name or getattr(op, "__name__", None) or problem.name
    out_name = getattr(problem, "out_name", None) or ("y" if isinstance(problem, problems.Linear) else "out")
    cases = [(tuple(shape), None) for shape in shapes]
    reports, skipped = [], []
    # The shapes every kernel of this problem takes (catalog.SHAPES): a special outside them is not run even where
    # the op is a bare binding that would not refuse it (a 16-byte-row kernel given K = 7 would fault, not fail).
    rules = catalog.SHAPES.get(getattr(problem, "name", None))
    for sp in problems.specials_of(problem) if run_specials else ():
        if rules is not None and not rules.accepts(tuple(sp.shape)):
            skipped.append(f"{problem.describe(tuple(sp.shape))} [{sp.name}]: {'; '.join(rules.violations(sp.shape))}")
        else:
            cases.append((tuple(sp.shape), sp))
    for shape, special in cases:
        s = seed_for_check() if seed is None else seed
        gen = torch.Generator(device=device).manual_seed(s)
        inputs = special.make(gen, device) if special else problem.make_inputs(shape, gen, device=device)
        desc = problem.describe(shape) + (f" [{special.name}]" if special else "")
        names = _input_names(op, len(inputs))
        before = [(n, t.detach().clone()) for n, t in _named_tensors(inputs, names)]
        # inputs the problem lets a kernel write (a KV cache's new row), by position: whatever the op's parameters
        # are called, only the declared elements may change
        writable = {id(inputs[i]): w for i, w in problem.writable(inputs).items()} \
            if hasattr(problem, "writable") else {}
        out = Guarded(problem.out_shape(shape), problem.out_dtype, device, name=out_name)
        rep, first, refused = None, None, False
        with guard.guarded_scratch() as scratches:
            for run in range(max(1, repeats)):
                if run:
                    out.repoison()
                note = ""
                try:
                    problem.call(op, inputs, out.tensor)
                    if device != "cpu":
                        wait_for_gpu(f"{name} at {desc}")
                except KernelHang:
                    raise
                except problems.ShapeError as e:
                    if special is not None:  # refused before any launch: a shape outside this kernel's rules
                        why = str(e).split("this kernel takes: ", 1)[-1].split(". It takes", 1)[0]
                        skipped.append(f"{desc}: {why}")
                        refused = True
                        break
                    note = f"the call raised {type(e).__name__}: {e}"
                except (RuntimeError, ValueError, TypeError) as e:
                    if "CUDA error" in str(e):  # a fault leaves the CUDA context unusable: stop here
                        raise RuntimeError(f"{name} crashed at {desc}: {e}. The CUDA context of "
                                           "this process is now unusable: restart the kernel. grade.check_isolated() "
                                           "runs a check in a child process (optionally under compute-sanitizer "
                                           "memcheck, which names the faulting access) so this cannot happen.") from e
                    note = f"the call raised {type(e).__name__}: {e}"
                faults = out.overrun() + [m for g in scratches for m in g.overrun()]
                got = out.tensor
                if rep is not None and not note and not faults and torch.equal(got.view(torch.uint8), first):
                    continue  # the same bytes as the first run: the same report
                if rep is None:
                    ref = problem.reference(inputs)
                    scale = _output_scale(problem, inputs, ref)
                    if special is not None and special.rows:
                        # Rows orders of magnitude apart (a norm's tiny and huge rows, say): the whole output's RMS
                        # is the huge rows', and a fraction of it would pass any value in a tiny row. Each row is
                        # measured against its own RMS instead (a zero row must then come out zero).
                        scale = ref.double().pow(2).mean(dim=-1, keepdim=True).sqrt()
                r = compare(got, ref, name=name, shape_desc=desc, seed=s, scale=scale)
                if note:
                    r.ok, r.note = False, note
                    r.wrong = max(r.wrong, 1)
                if faults:
                    r.ok, r.faults = False, faults
                if rep is None:
                    rep, first = r, got.clone().view(torch.uint8)
                elif not r.ok:
                    r.note = (f"run {run + 1} of {max(1, repeats)} on the same inputs failed, while the first "
                              + ("passed" if rep.ok else "failed too") + ": results that change from run to run are "
                              "the mark of a race (a missing __syncthreads) or of uninitialised memory"
                              + (f"; {r.note}" if r.note else ""))
                    rep = r
                if not rep.ok:
                    break
        if refused:
            continue
        changed = _changed_inputs(before, _named_tensors(inputs, names), writable)
        if changed:
            rep.ok = False
            rep.faults = rep.faults + changed
        reports.append(rep)
    return CheckResult(name, reports, skipped)


def _output_scale(problem, inputs, ref) -> float | None:
    """The size against which the absolute tolerance is measured. Usually the reference's RMS; for a y = x·Ŵᵀ of a
    few elements that RMS is a poor estimate (one output whose K terms cancel is tiny, while its rounding error
    still scales with the terms), so there it is sqrt(mean over outputs of Σ_k (x_k·Ŵ_nk)²), the RMS an output has
    on average, computed from Ŵ = the reference applied to rows of the identity."""
    if ref.numel() >= 64 or not isinstance(problem, problems.Linear) or not problem.out_dtype.is_floating_point:
        return None
    x, *rest = inputs
    K = x.shape[1]
    cols = []
    for k0 in range(0, K, 512):  # Ŵᵀ[k0:k0+512] = reference(I[k0:k0+512]), in pieces to bound the memory
        eye = torch.zeros(min(512, K - k0), K, dtype=x.dtype, device=x.device)
        eye[:, k0:k0 + eye.shape[0]].fill_diagonal_(1)
        cols.append(problem.reference((eye, *rest)))
    W = torch.cat(cols).T  # [N, K]
    return float(((x.double() ** 2) @ (W ** 2).T).mean().sqrt())
