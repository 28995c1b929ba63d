"""Is a kernel right? Compare it with a higher-precision reference and say exactly what is wrong.

The rules (the same in notebooks and tests):
- fresh random inputs for every check, never zeros;
- the output is poisoned before the run with a NaN carrying a recognisable bit pattern, so an element
  the kernel never wrote is caught and told apart from a NaN the kernel computed;
- NaN or inf never passes;
- tolerance by output dtype, scaled to the size of the reference (an absolute term relative to its
  RMS, plus a relative term), because a K-long dot product's rounding grows with the values.
"""
from __future__ import annotations

import math
import os
from dataclasses import dataclass, field

import torch

# Bit patterns for the poison: quiet NaNs with a payload the GPU never produces itself
# (CUDA's arithmetic returns the canonical NaN 0x7fffffff / 0x7fff).
POISON_BITS = {torch.float32: (torch.int32, 0x7FC0DEAD), torch.float16: (torch.int16, 0x7E5A),
               torch.bfloat16: (torch.int16, 0x7FDA), torch.int32: (torch.int32, -0x5EAD5EAD)}

# (rtol, atol as a fraction of the reference's RMS) by output dtype.
TOLERANCE = {torch.float64: (1e-9, 1e-9), torch.float32: (1e-4, 1e-4), torch.float16: (5e-3, 5e-3),
             torch.bfloat16: (2e-2, 2e-2), torch.int32: (0.0, 0.0), torch.int8: (0.0, 0.0)}


def poisoned(shape, dtype, device="cuda") -> torch.Tensor:
    """A tensor every element of which is the poison value for `dtype`."""
    if dtype not in POISON_BITS:
        raise TypeError(f"no poison value defined for {dtype}; known: {list(POISON_BITS)}")
    idt, bits = POISON_BITS[dtype]
    return torch.full(tuple(shape), bits, dtype=idt, device=device).view(dtype)


def is_poison(t: torch.Tensor) -> torch.Tensor:
    idt, bits = POISON_BITS[t.dtype]
    return t.view(idt) == bits


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

    def summary(self) -> str:
        head = f"{'PASS' if self.ok else 'FAIL'}  {self.name}  {self.shape_desc}  ({str(self.dtype).replace('torch.', '')})"
        if self.ok:
            return f"{head}: max error within tolerance, ‖got−ref‖/‖ref‖ = {self.rel_error:.2e}"
        lines = [f"{head}: {self.wrong:,} of {self.total:,} elements wrong ({100 * self.wrong / max(self.total, 1):.1f}%)"]
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
            lines.append(f"  {written_wrong:,} were written with a wrong value "
                         f"(tolerance |got−ref| ≤ {self.atol:.3g} + {self.rtol:g}·|ref|)")
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
            max_examples: int = 5) -> Report:
    """Compare `got` with the higher-precision `ref` (same shape). Poison still in `got` counts
    as unwritten; NaN/inf anywhere fails."""
    if got.shape != ref.shape:
        raise ValueError(f"{name}: output shape {tuple(got.shape)} differs from the reference's {tuple(ref.shape)}")
    dt = got.dtype
    d_rtol, d_atol = TOLERANCE.get(dt, (1e-4, 1e-4))
    rtol = d_rtol if rtol is None else rtol
    ref64 = ref.double()
    rms = ref64.pow(2).mean().sqrt().item() if ref64.numel() else 0.0
    atol = d_atol * (rms if rms > 0 else 1.0) if atol is None else atol
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
    rep = Report(name, shape_desc or "x".join(map(str, got.shape)), dt, n_bad == 0, got.numel(), n_bad,
                 int(unwritten.sum()), int(nonfinite.sum()), rel, rtol, atol, seed)
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
    """Reports for every shape a kernel was checked on."""
    name: str
    reports: list[Report]

    @property
    def ok(self) -> bool:
        return bool(self.reports) and all(r.ok for r in self.reports)

    def __str__(self):
        verdict = "all passed" if self.ok else f"{sum(not r.ok for r in self.reports)} of {len(self.reports)} FAILED"
        return "\n".join([f"{self.name}: {verdict}"] + [r.summary() for r in self.reports])

    def _repr_pretty_(self, p, cycle):
        p.text(str(self))

    def first_failure(self) -> Report | None:
        return next((r for r in self.reports if not r.ok), None)

    def raise_if_failed(self):
        if not self.ok:
            raise CheckFailed(str(self))
        return self


def check(problem, op, shapes=None, *, name: str | None = None, seed: int | None = None) -> CheckResult:
    """Run `op` (a bound kernel or any callable problem.call understands) on fresh random inputs
    for each shape, with the output poisoned, and compare with the problem's reference."""
    shapes = problem.check_shapes if shapes is None else shapes
    name = name or getattr(op, "__name__", None) or problem.name
    reports = []
    for shape in shapes:
        s = seed_for_check() if seed is None else seed
        gen = torch.Generator(device="cuda").manual_seed(s)
        inputs = problem.make_inputs(shape, gen)
        out = poisoned(problem.out_shape(shape), problem.out_dtype, "cuda")
        note = ""
        try:
            problem.call(op, inputs, out)
            torch.cuda.synchronize()
        except (RuntimeError, ValueError, TypeError) as e:
            if "CUDA error" in str(e):  # a fault leaves the CUDA context unusable: stop here
                raise RuntimeError(f"{name} crashed at {problem.describe(shape)}: {e}. The CUDA context of this "
                                   "process is now unusable: restart the kernel. grade.check_isolated() runs a "
                                   "check in a child process (optionally under compute-sanitizer memcheck, "
                                   "which names the faulting access) so this cannot happen.") from e
            note = f"the call raised {type(e).__name__}: {e}"
        ref = problem.reference(inputs)
        rep = compare(out, ref, name=name, shape_desc=problem.describe(shape), seed=s)
        if note:
            rep.ok, rep.note = False, note
            rep.wrong = max(rep.wrong, 1)
        reports.append(rep)
    return CheckResult(name, reports)
