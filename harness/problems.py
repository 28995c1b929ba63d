"""The problems the course's kernels solve: inputs, reference, FLOPs and bytes, and a safe call.

A problem knows how to make fresh random inputs for a shape, compute the reference in higher
precision, count the work (FLOPs) and the fewest bytes any kernel must move, and call a kernel
launcher with shape checks, so a wrong shape is a clear error rather than a wild pointer.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Callable, ClassVar

import torch

from . import decode_math, quant
from .guard import scratch as _scratch  # guarded while a check runs

# The demo's shapes for the weight formats (python -m harness.report demo): M tokens of one large layer's K × N
# weights, from one token (decode) up.
DECODE_SHAPES = ((1, 8192, 8192), (16, 8192, 8192), (64, 8192, 8192))

DTYPE_BYTES = {torch.float32: 4, torch.float16: 2, torch.bfloat16: 2, torch.int8: 1, torch.int32: 4}


def _need_2d(t, what, name):
    if not isinstance(t, torch.Tensor):
        raise TypeError(f"{name}: {what} must be a torch.Tensor, got {type(t).__name__}")
    if t.dim() != 2:
        raise ValueError(f"{name}: {what} must be 2-D, got shape {tuple(t.shape)}")


class ShapeError(ValueError):
    """A shape outside those a kernel takes (catalog.SHAPES), refused before any launch."""


@dataclass(frozen=True)
class Shapes:
    """The shapes a kernel takes, in the problem's shape tuple (`dims` names its entries): every dim ≥ 0, each of
    `multiple_of` (dim, m) a multiple of m, each of `at_most` (dim, n) at most n, each of `divides` (a, b): dim a
    divides dim b. `why` says, per dim, where the rule comes from (shown in the error)."""
    dims: tuple
    multiple_of: tuple = ()
    at_most: tuple = ()
    divides: tuple = ()
    why: tuple = ()  # (dim, reason)

    def violations(self, shape) -> list[str]:
        if len(shape) != len(self.dims):
            return [f"a shape has {len(self.dims)} entries ({', '.join(self.dims)}), got {tuple(shape)}"]
        d = dict(zip(self.dims, shape))
        why = dict(self.why)
        out = [f"{k} = {v} is negative" for k, v in d.items() if v < 0]
        out += [f"{k} = {d[k]} is not a multiple of {m}" + (f" ({why[k]})" if k in why else "")
                for k, m in self.multiple_of if d[k] % m]
        out += [f"{k} = {d[k]} is more than {n}" + (f" ({why[k]})" if k in why else "")
                for k, n in self.at_most if d[k] > n]
        out += [f"{b} = {d[b]} is not a multiple of {a} = {d[a]}" + (f" ({why[b]})" if b in why else "")
                for a, b in self.divides if d[a] and d[b] % d[a]]
        return out

    def accepts(self, shape) -> bool:
        return not self.violations(shape)

    def refuse(self, shape, name: str):
        """Raise ShapeError naming every rule `shape` breaks."""
        bad = self.violations(shape)
        if bad:
            raise ShapeError(f"{name}: {', '.join(f'{k}={v}' for k, v in zip(self.dims, shape))} is not a shape this "
                             f"kernel takes: {'; '.join(bad)}. It takes {self}")

    def __str__(self):
        rules = [f"{k} % {m} == 0" for k, m in self.multiple_of] + [f"{k} ≤ {n}" for k, n in self.at_most] + \
                [f"{b} % {a} == 0" for a, b in self.divides]
        return ", ".join(rules) if rules else f"any {', '.join(self.dims)} ≥ 0"


@dataclass(frozen=True)
class Special:
    """An input a problem's check runs besides its random ones, chosen so that one term of the reference decides the
    result (an epsilon, a clamp, a saturation, a rounding rule, an accumulator's range, a tile's edge): random normal
    inputs keep every such term negligible, so a kernel can get it wrong and still pass them.
    `make(gen, device)` returns inputs in make_inputs' form for `shape`; `why` says which term they make count.
    `rows`: the absolute tolerance is taken per output row (that row's RMS), for inputs whose rows differ in size by
    orders of magnitude: a fraction of the whole output's RMS would pass any value in the small rows."""
    name: str
    shape: tuple
    why: str
    make: Callable
    rows: bool = False


def specials_of(problem) -> tuple:
    """The problem's special inputs (its `specials`), if the class that declares them is the one that makes its inputs
    or below it: a subclass that makes its inputs in another form (weights repacked into another layout) and declares
    no specials of its own gets none, rather than inputs of its parent's form."""
    mro = type(problem).__mro__

    def owner(attr):
        return next((i for i, c in enumerate(mro) if attr in c.__dict__), None)

    sp, mk = owner("specials"), owner("make_inputs")
    if sp is None or mk is None or sp > mk:
        return ()
    return tuple(problem.specials)


def _specials_through(specials, convert) -> tuple:
    """`specials` with each one's inputs passed through convert(inputs) (a repacked problem's form of its parent's)."""
    return tuple(Special(sp.name, sp.shape, sp.why, lambda gen, device, sp=sp: convert(sp.make(gen, device)), sp.rows)
                 for sp in specials)


FP16_MAX = 65504.0


def _rand(shape, lo, hi, gen, device):
    """float32 uniform in [lo, hi)."""
    return lo + (hi - lo) * torch.rand(shape, generator=gen, device=device)


def _signs(shape, gen, device):
    """±1 (float32) at random."""
    return torch.randint(0, 2, shape, generator=gen, device=device).float() * 2 - 1


def _fp16_scales(kind, shape, largest, gen, device):
    """FP16 scales of one kind: "normal" (about 1e-3, as a quantized layer's), "large" (up to `largest`, the most that
    keeps every dequantized weight finite in FP16), "tiny" (subnormal: FP16's multiples of 2^-24 below 2^-14, zero
    among them, as an all-zero group gets)."""
    if kind == "large":
        return (_rand(shape, 0.5, 1.0, gen, device) * largest).half()
    if kind == "tiny":
        return (torch.randint(0, 1024, shape, generator=gen, device=device).float() * 2.0 ** -24).half()
    return (_rand(shape, 0.5, 1.5, gen, device) * 2.0 ** -10).half()


def _x_for(M, K, W, target, gen, device):
    """FP16 activations [M, K], standard normal, or scaled so that y = x · Wᵀ has an RMS near `target` (large weights:
    y must stay finite in FP16)."""
    x = torch.randn(M, K, generator=gen, device=device)
    if target is not None:
        x = x * (target / (K ** 0.5 * float(W.double().pow(2).mean().sqrt())))
    return x.half()


# What the quantized formats' specials are for, by kind (their names say the codes of each format).
_WHY_CODES = ("every weight at the format's {end} code: a kernel that clamps, saturates or sign-extends the codes at "
              "the end of their range gets every weight wrong here, where random inputs hold one such weight per "
              "group at most")
_WHY_LARGE = ("scales so large that the dequantized weights reach {top:.0f} (FP16's largest finite value is 65504), "
              "the activations small enough that y stays finite: FP16 weights must not overflow on the way")
_WHY_NF4 = {"min": "lowest (index 0, the codebook's −1: every weight −absmax)",
            "max": "highest (index 15, the codebook's +1: every weight +absmax)",
            "large": ("absmax from 2e4 to 6e4: weights up to ±6e4, near FP16's largest value (65504), the activations "
                      "small enough that y stays finite"),
            "tiny": ("absmax from 2^-23 to 2^-15: every weight below FP16's smallest normal value (2^-14); a kernel "
                     "that converts absmax to FP16 must keep subnormals"),
            "small": ("absmax from 2^-14 to 2^-11: most weights below FP16's smallest normal value (2^-14), down to "
                      "2^-18; a kernel whose FP16 weights or absmax lose subnormals loses them (FP16 weights this "
                      "small still carry 4 or more bits, so an FP16 route that keeps subnormals passes)")}
_WHY_TOKENS = ("every element of a token at ± its absmax, so that every per-token INT8 code is ±127 (the ends of "
               "what the symmetric quantizer makes: −128 never), absmax from 1e-2 to 1e2 by token, and a token of "
               "zeros, whose scale 0 must give y = 0, not 0/0")
_WHY_TINY = ("subnormal FP16 scales (multiples of 2^-24 below 2^-14, zero among them): a kernel that flushes them to "
             "zero, or that rounds a product of them through a narrower type, loses these weights")


@dataclass
class Linear:
    """y[M, N] = x[M, K] · W[N, K]ᵀ, with W stored as torch.nn.Linear stores it.

    Kernel launchers have the form `fn(x, W, y, M, N, K)` (stream implicit).
    Special inputs (specials): M, N and K one short of and one past the course's tiles (the last partial tile's
    guards); INT8: every operand at 127, at −128, or at either (the INT32 sums past 2^24, where FP32 stops being
    exact); FP16: partial sums past FP16's range with a finite y (right only with an FP32 accumulator)."""
    in_dtype: torch.dtype = torch.float32
    out_dtype: torch.dtype = torch.float32
    name: str = "linear"
    # M, N, K that are not multiples of any tile, M = 1, and aligned ones for the fast paths.
    check_shapes: tuple = ((1, 67, 129), (17, 33, 65), (127, 255, 1001), (1, 1024, 256),
                           (200, 129, 256), (256, 512, 384), (96, 1000, 4099), (512, 512, 512))
    # What `python -m harness.report demo` times (a lesson may ask for others: catalog.DEMO_SHAPES).
    demo_shapes: ClassVar[tuple] = ((1024, 1024, 1024), (2048, 2048, 2048), (4096, 4096, 4096))

    def _edge_shapes(self) -> tuple:
        """M, N and K one short of and one past a tile of the course's GEMMs: 32 (lesson 02), 64 and 128 (lesson 03's
        block tiles), 256 (lesson 04's widest), K tiles of 8 and 16 (lesson 03) and of 64 FP16 or 128 INT8 elements
        (a 128-byte row, lesson 04). The last three keep K a multiple of 16, which lesson 04's teaching kernels
        need (a kernel refuses the others, and check skips them there)."""
        return ((129, 31, 63), (127, 65, 129), (33, 127, 255), (65, 257, 17), (3, 255, 7), (31, 129, 9),
                (127, 129, 112), (33, 255, 80), (129, 63, 144))

    @property
    def specials(self) -> tuple:
        out = [Special("tile edges", shape, "M, N and K one short of or one past a tile of the course's kernels: "
                       "the last partial tile's bounds guards, its zero fill and a vector load's tail",
                       lambda gen, device, shape=shape: self.make_inputs(shape, gen, device))
               for shape in self._edge_shapes()]
        if self.in_dtype == torch.int8:
            out += _int8_gemm_specials()
        elif self.in_dtype == torch.float16:
            out += _fp16_sum_specials()
        return tuple(out)

    def baseline(self):
        """(label, op) of the library route the demo times this problem's kernels against; op takes the problem's
        inputs, as a bound kernel does."""
        if self.in_dtype == torch.int8:
            return "torch._int_mm", torch_int_mm
        if self.in_dtype == torch.float16:
            return "cuBLAS FP16", torch_linear
        return "cuBLAS FP32", lambda x, W: torch.nn.functional.linear(x, W)

    @property
    def ceiling(self):
        """Which compute roof applies (see roofline.KINDS)."""
        return {torch.float32: "fp32", torch.float16: "fp16", torch.bfloat16: "fp16", torch.int8: "int8"}[self.in_dtype]

    def describe(self, shape):
        M, N, K = shape
        return f"M={M} N={N} K={K}"

    def flops(self, shape):
        M, N, K = shape
        return 2 * M * N * K

    def bytes(self, shape):
        """Each input read once and the output written once: the floor on DRAM traffic."""
        M, N, K = shape
        b = DTYPE_BYTES[self.in_dtype]
        return (M * K + N * K) * b + M * N * DTYPE_BYTES[self.out_dtype]

    def out_shape(self, shape):
        return (shape[0], shape[1])

    def make_inputs(self, shape, gen: torch.Generator | None = None, device="cuda"):
        M, N, K = shape
        if not self.in_dtype.is_floating_point:  # integers over the whole int8 range
            info = torch.iinfo(self.in_dtype)
            return tuple(torch.randint(info.min, info.max + 1, (r, K), generator=gen, device=device,
                                       dtype=self.in_dtype) for r in (M, N))
        x = torch.randn(M, K, generator=gen, device=device)
        W = torch.randn(N, K, generator=gen, device=device) / K ** 0.5  # keeps |y| ~ |x|
        return x.to(self.in_dtype), W.to(self.in_dtype)

    def reference(self, inputs):
        x, W = inputs
        return x.double() @ W.double().T

    def bind(self, launcher, name: str | None = None):
        """Wrap a launcher `fn(x, W, y, M, N, K)` as `op(x, W, out=None) -> y` with shape checks."""
        prob = self

        def op(x, W, out=None):
            _need_2d(x, "x [M, K]", op.__name__)
            _need_2d(W, "W [N, K]", op.__name__)
            M, K = x.shape
            N, K2 = W.shape
            if K != K2:
                raise ValueError(f"{op.__name__}: x is [M={M}, K={K}] but W is [N={N}, K={K2}]; "
                                 "W must be [N, K] (nn.Linear's layout), sharing K with x")
            if out is None:
                out = torch.empty(M, N, dtype=prob.out_dtype, device=x.device)
            elif tuple(out.shape) != (M, N):
                raise ValueError(f"{op.__name__}: out must be [M={M}, N={N}], got {tuple(out.shape)}")
            if M and N:
                launcher(x, W, out, M, N, K)
            return out

        op.__name__ = name or getattr(launcher, "__name__", "linear_op")
        return op

    def call(self, op, inputs, out):
        x, W = inputs
        op(x, W, out=out)


def _int8_gemm_specials() -> list:
    K = 4112  # 16 · 257: every INT8 kernel takes it (a multiple of 16), and it ends 16 into a 128-wide K tile

    def full(shape, vx, vw):
        def make(gen, device):
            M, N, _ = shape
            return (torch.full((M, K), vx, dtype=torch.int8, device=device),
                    torch.full((N, K), vw, dtype=torch.int8, device=device))
        return make

    def ends(shape):
        def make(gen, device):
            M, N, _ = shape
            def pick(rows):
                return torch.where(torch.rand(rows, K, generator=gen, device=device) < 0.5, 127, -128).to(torch.int8)
            return pick(M), pick(N)
        return make

    a, b, c = (20, 72, K), (5, 33, K), (33, 65, K)
    return [Special("x and W all 127", a, "every product 127² = 16129, an odd number: the INT32 sums reach "
                    "127²·K = 6.6e7, past 2^24, where an FP32 accumulator stops holding every integer",
                    full(a, 127, 127)),
            Special("x and W all −128", b, "every product (−128)² = 16384, INT8's largest: sums of 6.7e7 (INT32 holds "
                    "2.1e9); a kernel that mishandles −128 (its negation is itself) gets all of them wrong",
                    full(b, -128, -128)),
            Special("x and W at −128 or 127", c, "both ends of INT8 at random: products −16256, 16129 and 16384, "
                    "sums of either sign up to ~2e6", ends(c))]


def _fp16_sum_specials() -> list:
    def make_for(shape):
        def make(gen, device):
            M, N, K = shape
            sign = torch.ones(K, device=device)
            sign[K // 2:] = -1
            x = sign * (66 + torch.randn(M, K, generator=gen, device=device))
            W = 66 + torch.randn(N, K, generator=gen, device=device)
            return x.half(), W.half()
        return make

    why = ("terms x·W of about ±4400, positive over the first half of K and negative over the second: the partial "
           "sums pass 65504 (FP16's largest) within 16 terms (one mma's K) and reach 5.6e5, while y (about ±1500) "
           "is finite: right only with an FP32 accumulator")
    return [Special("partial sums past FP16's range", shape, why, make_for(shape)) for shape in ((3, 40, 256),
                                                                                                  (65, 130, 512))]


def torch_linear(x, W, out=None):
    """The baseline: cuBLAS through torch (F.linear computes x · Wᵀ)."""
    y = torch.nn.functional.linear(x, W)
    if out is not None:
        out.copy_(y)
        return out
    return y


torch_linear.__name__ = "cuBLAS (F.linear)"


def torch_int_mm(x, W, out=None):
    """The INT8 baseline: torch._int_mm (cuBLASLt, s8 × s8 → s32). It computes x · B for a [K, N]
    B; W.t() is that B, column-major, the layout cuBLASLt's INT8 kernels want. It refuses M ≤ 16."""
    y = torch._int_mm(x, W.t())
    if out is not None:
        out.copy_(y)
        return out
    return y


torch_int_mm.__name__ = "torch._int_mm"


@dataclass
class ScaleAdd:
    """out[i] = a · x[i] + b[i]: lesson 00's first kernel, pure data movement.

    Kernel launchers have the form `fn(x, b, out, a, n)`.
    Special inputs: n one short of and one past a 256-thread block, subnormal values, values near FP32's largest."""
    a: float = 2.0
    name: str = "scale_add"
    ceiling: str = "fp32"
    in_dtype: torch.dtype = torch.float32
    out_dtype: torch.dtype = torch.float32
    check_shapes: tuple = ((1,), (31,), (1000,), (4099,), (1 << 20,), ((1 << 22) + 3,))
    demo_shapes: ClassVar[tuple] = ((1 << 24,), (1 << 26,))

    def baseline(self):
        return "torch.add(b, x, alpha=a)", lambda x, b: torch.add(b, x, alpha=self.a)

    def describe(self, shape):
        return f"n={shape[0]}"

    def flops(self, shape):
        return 2 * shape[0]

    def bytes(self, shape):
        return 3 * 4 * shape[0]

    def out_shape(self, shape):
        return (shape[0],)

    def make_inputs(self, shape, gen=None, device="cuda"):
        n = shape[0]
        return torch.randn(n, generator=gen, device=device), torch.randn(n, generator=gen, device=device)

    def reference(self, inputs):
        x, b = inputs
        return self.a * x.double() + b.double()

    @property
    def specials(self) -> tuple:
        big = torch.finfo(torch.float32).max

        def edge(n):
            return lambda gen, device: self.make_inputs((n,), gen, device)

        def subnormal(gen, device):  # FP32's smallest normal value is 1.2e-38
            return tuple(1e-39 * torch.randn(4096, generator=gen, device=device) for _ in range(2))

        def near_max(gen, device):
            x = _signs((1024,), gen, device) * _rand((1024,), 0.4, 0.8, gen, device) * (big / abs(self.a))
            return x, _signs((1024,), gen, device) * _rand((1024,), 0, 0.1, gen, device) * big

        why_edge = "n one short of / one past a 256-thread block: the last block's bounds guard"
        return (Special("one short of a block", (255,), why_edge, edge(255)),
                Special("one past a block", (257,), why_edge, edge(257)),
                Special("subnormal values", (4096,), "x and b below FP32's smallest normal value (1.2e-38): a build "
                        "that flushes subnormals to zero (--use_fast_math) loses every element", subnormal),
                Special("near FP32's max", (1024,), "a·x up to 0.8 of FP32's largest value, b up to 0.1 more: the "
                        "output is finite only when computed as a·x + b in FP32", near_max))

    def bind(self, launcher, name=None):
        prob = self

        def op(x, b, out=None):
            for t, what in ((x, "x"), (b, "b")):
                if not isinstance(t, torch.Tensor) or t.dim() != 1:
                    raise ValueError(f"{op.__name__}: {what} must be a 1-D tensor")
            if x.shape != b.shape:
                raise ValueError(f"{op.__name__}: x has {x.shape[0]} elements but b has {b.shape[0]}")
            out = torch.empty_like(x) if out is None else out
            if out.shape != x.shape:
                raise ValueError(f"{op.__name__}: out must have {x.shape[0]} elements, got {tuple(out.shape)}")
            if x.numel():
                launcher(x, b, out, prob.a, x.numel())
            return out

        op.__name__ = name or getattr(launcher, "__name__", "scale_add_op")
        return op

    def call(self, op, inputs, out):
        op(*inputs, out=out)


@dataclass
class GemvLinear(Linear):
    """Linear for kernels that read rows of W in blocks along K: K must be a multiple of `k_multiple`
    (lesson 06's GEMV: 64, four lanes' 16-weight pieces)."""
    k_multiple: int = 64
    check_shapes: tuple = ((1, 67, 128), (17, 33, 64), (127, 255, 1024), (1, 1024, 256), (3, 129, 4096),
                           (16, 512, 384), (200, 100, 4160))
    demo_shapes: ClassVar[tuple] = ((1024, 1024, 1024), (2048, 2048, 2048))

    def _edge_shapes(self) -> tuple:
        """M one short of / one past the 8 tokens a warp computes, N of the 4 outputs of a block, K one, 3, 5 and 65
        blocks of k_multiple (fewer than the 8 warps that split K, not a multiple of them, one past 64)."""
        k = self.k_multiple
        return ((1, 3, k), (9, 127, 3 * k), (7, 129, 5 * k), (17, 5, 65 * k))

    def bind(self, launcher, name: str | None = None):
        inner = super().bind(launcher, name)

        def op(x, W, out=None):
            K = x.shape[-1] if isinstance(x, torch.Tensor) else None
            if K is not None and K % self.k_multiple:
                raise ValueError(f"{op.__name__}: K = {K} is not a multiple of {self.k_multiple}; this kernel "
                                 f"reads W in {self.k_multiple}-wide blocks along K (pad K with zeros)")
            return inner(x, W, out=out)

        op.__name__ = inner.__name__
        return op


def _need(t, dtype, shape, what, name):
    if not isinstance(t, torch.Tensor):
        raise TypeError(f"{name}: {what} must be a torch.Tensor, got {type(t).__name__}")
    if t.dtype != dtype:
        raise TypeError(f"{name}: {what} must be {dtype}, got {t.dtype}")
    if tuple(t.shape) != tuple(shape):
        raise ValueError(f"{name}: {what} must have shape {tuple(shape)}, got {tuple(t.shape)}")


def _group_multiple(K, group, name, what="the group size", why=None):
    if K % group:
        why = why or f"the format has one scale per {group} weights along K (pad K with zero weights)"
        raise ValueError(f"{name}: K = {K} is not a multiple of {what} {group}: {why}")


def _out(out, shape, name, device, dims=("M", "N")):
    """The output tensor: a new FP16 one, or the caller's, which must have `shape` (its dims named in errors)."""
    if out is None:
        return torch.empty(*shape, dtype=torch.float16, device=device)
    if tuple(out.shape) != tuple(shape):
        want = ", ".join(f"{d}={n}" for d, n in zip(dims, shape))
        raise ValueError(f"{name}: out must be [{want}], got {list(out.shape)}")
    return out


def _codes(kind, lo, hi, shape, gen, device) -> torch.Tensor:
    """Integer codes in lo … hi (int64): all lo ("min"), all hi ("max"), each lo or hi ("ends"), else uniform with half
    of them at one end or the other (so that every kind of input still holds both ends)."""
    if kind == "min":
        return torch.full(shape, lo, dtype=torch.int64, device=device)
    if kind == "max":
        return torch.full(shape, hi, dtype=torch.int64, device=device)
    end = torch.where(torch.rand(shape, generator=gen, device=device) < 0.5, lo, hi)
    if kind == "ends":
        return end
    q = torch.randint(lo, hi + 1, shape, generator=gen, device=device)
    return torch.where(torch.rand(shape, generator=gen, device=device) < 0.5, end, q)


def _scale_kind(kind):
    return kind if kind in ("large", "tiny") else "normal"


def _int8_weights(kind, N, K, group, gen, device):
    """INT8 codes (quantize_int8's range, ±127) and FP16 scales [N, K/group] of one kind."""
    q = _codes(kind, -quant.INT8_MAX, quant.INT8_MAX, (N, K), gen, device).to(torch.int8)
    return q, _fp16_scales(_scale_kind(kind), (N, K // group), 512.0, gen, device)  # 127 · 512 = 65024


def _int4_weights(kind, N, K, group, symmetric, gen, device):
    """Packed INT4 codes (−8 … 7, or 0 … 15 with zero points 0 … 15) and FP16 scales of one kind. Asymmetric "min" and
    "max" pair the codes with the zero point at the other end ((q − zero) = ∓15); "zeros": zero points 0 and 15."""
    lo, hi = (quant.INT4_MIN, quant.INT4_MAX) if symmetric else (0, 15)
    q = _codes(kind, lo, hi, (N, K), gen, device)
    gs = (N, K // group)
    s = _fp16_scales(_scale_kind(kind), gs, 8000.0 if symmetric else 4300.0, gen, device)  # 8 · 8000, 15 · 4300
    packed = quant.pack_int4(q.to(torch.int16))
    if symmetric:
        return packed, s
    if kind in ("min", "max"):
        z = torch.full(gs, 15 if kind == "min" else 0, dtype=torch.int64, device=device)
    elif kind == "zeros":
        z = torch.randint(0, 2, gs, generator=gen, device=device) * 15
    else:
        z = torch.randint(0, 16, gs, generator=gen, device=device)
    return packed, s, z.to(torch.uint8)


def _nf4_weights(kind, N, K, block, gen, device):
    """NF4 indices (both ends: 0 is −1, 15 is +1), packed two per byte [N, K/2], and FP32 absmax [N, K/block] of one
    kind: "large" from 2e4 to 6e4 (weights near FP16's largest), "tiny" from 2^-23 to 2^-15 (every weight below FP16's
    smallest normal, 2^-14), "small" from 2^-14 to 2^-11 (most weights below it, none below 2^-18)."""
    idx = _codes(kind, 0, 15, (N, K), gen, device).to(torch.uint8)
    packed = (idx[:, 0::2] << 4) | idx[:, 1::2]
    shape = (N, K // block)
    if kind == "large":
        absmax = _rand(shape, 2e4, 6e4, gen, device)
    elif kind == "tiny":
        absmax = 2.0 ** _rand(shape, -23, -15, gen, device)
    elif kind == "small":
        absmax = 2.0 ** _rand(shape, -14, -11, gen, device)
    else:
        absmax = _rand(shape, 0.02, 0.08, gen, device)
    return packed, absmax, quant.NF4.to(device)


def _nf4_dequant(packed, absmax, codebook):
    N, K = packed.shape[0], packed.shape[1] * 2
    return quant.NF4Weight(packed.reshape(-1), absmax.reshape(-1), (N, K), K // absmax.shape[1]).dequantize()


def _w4a8_weights(kind, N, K, group, gen, device):
    """Lesson 09's two-level weights of one kind: "min" u = 0 with gscale 14, gzero 9 (every code −126), "max" u = 15
    with gzero 6 (+126): the ends of the INT8 codes quantize_w4a8 allows; "gzero" gscale 8 with gzero 0 or 15 (its
    range's ends); otherwise u, gscale and gzero at random within the format's rules, the scale of the kind."""
    gs_shape = (N, K // group)
    if kind in ("min", "max", "int32"):
        u = torch.full((N, K), 0 if kind == "min" else 15, dtype=torch.int64, device=device)
        gs = torch.full(gs_shape, 14, dtype=torch.int64, device=device)
        gz = torch.full(gs_shape, 9 if kind == "min" else 6, dtype=torch.int64, device=device)
    else:
        u = _codes(kind, 0, 15, (N, K), gen, device)
        if kind == "gzero":
            gs = torch.full(gs_shape, 8, dtype=torch.int64, device=device)
            gz = torch.randint(0, 2, gs_shape, generator=gen, device=device) * 15
        else:  # gzero within ceil(15 − 127/gs) … floor(128/gs): every (u − gzero)·gscale in −128 … 127
            gs = torch.randint(1, 16, gs_shape, generator=gen, device=device)
            zmin = torch.ceil(15 - 127 / gs).clamp(min=0).long()
            zmax = torch.floor(128 / gs).clamp(max=15).long()
            gz = zmin + (torch.rand(gs_shape, generator=gen, device=device) * (zmax - zmin + 1)).long()
    if kind == "int32":
        scale = torch.full((N, 1), 2.0 ** -9, device=device).half()
    else:
        scale = _fp16_scales(_scale_kind(kind), (N, 1), 512.0, gen, device)  # 126 · 512 = 64512
    return quant.pack_w4a8(u.to(torch.int16)), scale, gs.to(torch.uint8), gz.to(torch.uint8)


def _token_ends(M, K, gen, device):
    """Activations whose every element is ± its token's absmax (each per-token INT8 code ±127, the ends of what the
    symmetric quantizer makes), absmax from 1e-2 to 1e2 by token, and a last token of zeros (its scale is 0)."""
    amax = 10.0 ** _rand((M, 1), -2, 2, gen, device)
    x = (_signs((M, K), gen, device) * amax).half()
    x[-1] = 0
    return x


def _weight_special(name, shape, why, weights, dequant, finish, x="normal", rows=False):
    """A Special of a quantized linear layer: weights(N, K, gen, device) gives the format's tensors, dequant(*them)
    its Ŵ (float32 [N, K]), finish(x, *them) the problem's inputs. x: "normal" (standard normal), "scaled" (so that y
    has an RMS near 4000: large weights, y finite in FP16), "tokens" (_token_ends) or "ones" (every element 1)."""
    M, N, K = shape

    def make(gen, device):
        w = weights(N, K, gen, device)
        if x == "tokens":
            xs = _token_ends(M, K, gen, device)
        elif x == "ones":
            xs = torch.ones(M, K, dtype=torch.float16, device=device)
        else:
            xs = _x_for(M, K, dequant(*w), 4000.0 if x == "scaled" else None, gen, device)
        return finish(xs, *w)

    return Special(name, shape, why, make, rows)


def _as_inputs(x, *w):
    return (x, *w)


class _Repacked:
    """For the problems whose weights come as one quant layout object w (16-row tiles, fragment order): the reference
    is x times w's own dequantized weights, in float64."""

    def reference(self, inputs):
        x, w = inputs
        return x.double() @ w.dequantize().double().T

    def baseline(self):
        return "PyTorch: dequantize + cuBLAS", lambda x, w: torch.nn.functional.linear(x, w.dequantize().half())


def _bind_repacked(prob, launcher, name, default, cls, how, tensors, unit="group"):
    """`op(x, w, out=None)` for a problem whose weights come repacked in a quant layout object of type `cls` (made by
    `how`, for the error), with `.n`, `.k` and the size of the `unit` ("group" or "block") that one scale covers, which
    must equal the problem's. `tensors(w, K)` lists the (tensor, dtype, shape, what) the launcher
    `fn(x, *tensors, y, M, N, K)` takes, each checked before any launch."""
    def op(x, w, out=None):
        _need_2d(x, "x [M, K]", op.__name__)
        if not isinstance(w, cls):
            raise TypeError(f"{op.__name__}: w must be a quant.{cls.__name__} ({how}), got {type(w).__name__}")
        M, K = x.shape
        if w.k != K:
            raise ValueError(f"{op.__name__}: x is [M={M}, K={K}] but the weights have K = {w.k}")
        if getattr(w, unit) != getattr(prob, unit):
            raise ValueError(f"{op.__name__}: the kernel reads {unit}s of {getattr(prob, unit)}, the weights have "
                             f"{getattr(w, unit)}")
        _group_multiple(K, getattr(prob, unit), op.__name__)
        _need(x, torch.float16, (M, K), "x", op.__name__)
        args = tensors(w, K)
        for t, dtype, shape, what in args:
            _need(t, dtype, shape, what, op.__name__)
        out = _out(out, (M, w.n), op.__name__, x.device)
        if M and w.n:
            launcher(x, *(a[0] for a in args), out, M, w.n, K)
        return out

    op.__name__ = name or getattr(launcher, "__name__", default)
    return op


@dataclass
class W8A16Linear(Linear):
    """y[M, N] = x[M, K] · Ŵᵀ with Ŵ = q · scale: INT8 weights q [N, K], FP16 scales [N, K/group]
    (harness.quant.quantize_int8's format), FP16 activations and output.

    Kernel launchers have the form `fn(x, q, scales, y, M, N, K)`.
    Special inputs: every code at −127 and at +127 (the format's ends), scales so large that q · scale nears FP16's
    largest value, subnormal scales."""
    in_dtype: torch.dtype = torch.float16
    out_dtype: torch.dtype = torch.float16
    name: str = "w8a16"
    # M over 1..17, 31, 64, 127, 256; N not a multiple of anything; K a multiple of the group (the format's rule)
    check_shapes: tuple = ((1, 1000, 384), (2, 33, 128), (3, 4097, 1152), (4, 256, 4096), (5, 64, 256),
                           (6, 200, 256), (7, 130, 640), (8, 1024, 2048), (9, 77, 512), (10, 300, 384),
                           (11, 96, 896), (12, 64, 128), (13, 129, 1024), (14, 1000, 256), (15, 40, 768),
                           (16, 1024, 2048), (17, 333, 512),
                           (31, 500, 640), (48, 200, 4096), (64, 256, 1024), (100, 300, 2048), (127, 129, 256),
                           (256, 64, 384))
    group: int = 128
    demo_shapes: ClassVar[tuple] = DECODE_SHAPES

    def baseline(self):
        return "PyTorch: dequantize + cuBLAS", lambda x, q, s: torch.nn.functional.linear(
            x, quant.Int8Weight(q, s, self.group).dequantize().half())

    def bytes(self, shape):
        """x, the INT8 weights and their FP16 scales read once, y written once."""
        M, N, K = shape
        return 2 * M * K + N * K + 2 * N * (K // self.group) + 2 * M * N

    def make_inputs(self, shape, gen: torch.Generator | None = None, device="cuda"):
        M, N, K = shape
        x = torch.randn(M, K, generator=gen, device=device).half()
        W = torch.randn(N, K, generator=gen, device=device) / K ** 0.5
        qw = quant.quantize_int8(W, self.group)
        return x, qw.q, qw.scale

    def reference(self, inputs):
        x, q, s = inputs
        W = q.double() * s.double().repeat_interleave(self.group, dim=1)
        return x.double() @ W.T

    @property
    def specials(self) -> tuple:
        g = self.group

        def w(kind):
            return lambda N, K, gen, device: _int8_weights(kind, N, K, g, gen, device)

        def deq(q, s):
            return q.float() * s.float().repeat_interleave(g, dim=1)

        return (_weight_special("codes −127", (3, 72, 256), _WHY_CODES.format(
                    end="lowest (−127: quantize_int8's range is ±127)"), w("min"), deq, _as_inputs),
                _weight_special("codes +127", (33, 40, 384), _WHY_CODES.format(end="highest (+127)"), w("max"), deq,
                                _as_inputs),
                _weight_special("large scales", (5, 64, 256), _WHY_LARGE.format(top=127 * 512), w("large"), deq,
                                _as_inputs, x="scaled"),
                _weight_special("subnormal scales", (20, 48, 512), _WHY_TINY, w("tiny"), deq, _as_inputs))

    def bind(self, launcher, name: str | None = None):
        prob = self

        def op(x, q, scales, out=None):
            _need_2d(x, "x [M, K]", op.__name__)
            _need_2d(q, "q [N, K]", op.__name__)
            M, K = x.shape
            N = q.shape[0]
            if q.shape[1] != K:
                raise ValueError(f"{op.__name__}: x is [M={M}, K={K}] but q is {list(q.shape)}; q must be [N, K]")
            _group_multiple(K, prob.group, op.__name__)
            _need(x, torch.float16, (M, K), "x", op.__name__)
            _need(q, torch.int8, (N, K), "q", op.__name__)
            _need(scales, torch.float16, (N, K // prob.group), "scales", op.__name__)
            out = _out(out, (M, N), op.__name__, x.device)
            if M and N:
                launcher(x, q, scales, out, M, N, K)
            return out

        op.__name__ = name or getattr(launcher, "__name__", "w8a16_op")
        return op

    def call(self, op, inputs, out):
        op(*inputs, out=out)


@dataclass
class W8A16TilesLinear(_Repacked, W8A16Linear):
    """Lesson 06: W8A16Linear's problem with q in 16-row tiles (harness.quant.to_tiles): `op(x, w, out=None)` with
    w a quant.Int8Tiles. Launchers: `fn(x, q_tiles, scales, y, M, N, K)`, q_tiles int8 [ceil(N/16), K/64, 16, 64]."""
    name: str = "w8a16_tiles"

    def _repack(self, inputs):
        x, q, scale = inputs
        return x, quant.to_tiles(quant.Int8Weight(q, scale, self.group))

    def make_inputs(self, shape, gen: torch.Generator | None = None, device="cuda"):
        return self._repack(W8A16Linear.make_inputs(self, shape, gen, device))

    @property
    def specials(self) -> tuple:  # W8A16Linear's, in tiles
        return _specials_through(W8A16Linear.specials.fget(self), self._repack)

    def bind(self, launcher, name: str | None = None):
        rows, kb = quant.TILE_ROWS, quant.TILE_K
        return _bind_repacked(self, launcher, name, "w8a16_tiles_op", quant.Int8Tiles,
                              "quant.to_tiles(quantize_int8(W, 128))", lambda w, K: [
                                  (w.q, torch.int8, (-(-w.n // rows), K // kb, rows, kb), "w.q (16-row tiles)"),
                                  (w.scale, torch.float16, (w.n, K // self.group), "w.scale")])


@dataclass
class W4A16Linear(Linear):
    """y[M, N] = x[M, K] · Ŵᵀ with INT4 weights packed 8 per int32 (harness.quant.quantize_int4's format):
    Ŵ = q · scale (symmetric) or (q − zero) · scale (asymmetric), FP16 scales (and uint8 zeros) per group.

    Launchers: `fn(x, packed, scales, y, M, N, K)`, or `fn(x, packed, scales, zeros, y, M, N, K)` (asymmetric).
    Special inputs: every code at the format's lowest and highest (−8 and 7; asymmetric 0 and 15 with the zero point
    at the other end), asymmetric zero points at 0 and 15, scales that bring (q − zero) · scale near FP16's largest
    value, subnormal scales."""
    in_dtype: torch.dtype = torch.float16
    out_dtype: torch.dtype = torch.float16
    name: str = "w4a16"
    symmetric: bool = True
    group: int = 128
    check_shapes: tuple = W8A16Linear.check_shapes
    demo_shapes: ClassVar[tuple] = DECODE_SHAPES

    def baseline(self):
        def deq4(x, q, s, *z):
            W = quant.Int4Weight(q, s, self.group, z[0] if z else None).dequantize().half()
            return torch.nn.functional.linear(x, W)
        return "PyTorch: dequantize + cuBLAS", deq4

    def bytes(self, shape):
        """x, the packed weights, their scales (and zeros) read once, y written once."""
        M, N, K = shape
        return 2 * M * K + N * K // 2 + (2 if self.symmetric else 3) * N * (K // self.group) + 2 * M * N

    def make_inputs(self, shape, gen: torch.Generator | None = None, device="cuda"):
        M, N, K = shape
        x = torch.randn(M, K, generator=gen, device=device).half()
        W = torch.randn(N, K, generator=gen, device=device) / K ** 0.5
        qw = quant.quantize_int4(W, self.group, self.symmetric)
        return (x, qw.packed, qw.scale) if self.symmetric else (x, qw.packed, qw.scale, qw.zero)

    def reference(self, inputs):
        x, packed, scale, *zero = inputs
        W = quant.Int4Weight(packed, scale, self.group, zero[0] if zero else None).dequantize()
        return x.double() @ W.double().T

    @property
    def specials(self) -> tuple:
        g, sym = self.group, self.symmetric

        def w(kind):
            return lambda N, K, gen, device: _int4_weights(kind, N, K, g, sym, gen, device)

        def deq(packed, s, *z):
            return quant.Int4Weight(packed, s, g, z[0] if z else None).dequantize()

        lo = ("lowest (−8: the format holds it, though quantize_int4, which scales by absmax / 7, never makes it)"
              if sym else "lowest (0) with the zero point at 15: every q − zero = −15")
        hi = "highest (7)" if sym else "highest (15) with the zero point at 0: every q − zero = +15"
        out = [_weight_special(f"codes {'−8' if sym else '0, zero 15'}", (3, 72, 256), _WHY_CODES.format(end=lo),
                               w("min"), deq, _as_inputs),
               _weight_special(f"codes {'+7' if sym else '15, zero 0'}", (33, 40, 384), _WHY_CODES.format(end=hi),
                               w("max"), deq, _as_inputs)]
        if not sym:
            out.append(_weight_special("zero points 0 and 15", (9, 136, 256), "zero points at both ends of their "
                                       "range (quantize_int4 gives 0 only to a group with no negative weight, 15 only "
                                       "to one with no positive weight), codes at random: q − zero from −15 to 15",
                                       w("zeros"), deq, _as_inputs))
        out += [_weight_special("large scales", (5, 64, 256), _WHY_LARGE.format(top=(8 * 8000 if sym else 15 * 4300)),
                                w("large"), deq, _as_inputs, x="scaled"),
                _weight_special("subnormal scales", (20, 48, 512), _WHY_TINY, w("tiny"), deq, _as_inputs)]
        return tuple(out)

    def bind(self, launcher, name: str | None = None):
        prob = self

        def op(x, packed, scales, *zeros, out=None):
            _need_2d(x, "x [M, K]", op.__name__)
            _need_2d(packed, "packed [N, K/8]", op.__name__)
            M, K = x.shape
            N = packed.shape[0]
            _group_multiple(K, prob.group, op.__name__)
            if len(zeros) != (0 if prob.symmetric else 1):
                raise TypeError(f"{op.__name__}: the {'symmetric' if prob.symmetric else 'asymmetric'} format takes "
                                f"{'no zero points' if prob.symmetric else 'zero points (uint8 [N, K/group])'}")
            _need(x, torch.float16, (M, K), "x", op.__name__)
            _need(packed, torch.int32, (N, K // 8), "packed (8 weights per int32)", op.__name__)
            _need(scales, torch.float16, (N, K // prob.group), "scales", op.__name__)
            if zeros:
                _need(zeros[0], torch.uint8, (N, K // prob.group), "zeros", op.__name__)
            out = _out(out, (M, N), op.__name__, x.device)
            if M and N:
                launcher(x, packed, scales, *zeros, out, M, N, K)
            return out

        op.__name__ = name or getattr(launcher, "__name__", "w4a16_op")
        return op

    def call(self, op, inputs, out):
        op(*inputs, out=out)


@dataclass
class W4A16TilesLinear(_Repacked, W4A16Linear):
    """Lesson 07: W4A16Linear's problem with the packed weights in 16-row tiles (harness.quant.to_tiles):
    `op(x, w, out=None)` with w a quant.Int4Tiles, symmetric or not as the problem. Launchers:
    `fn(x, packed, scales, y, M, N, K)` or `fn(x, packed, scales, zeros, y, M, N, K)`, packed int32
    [ceil(N/16), K/128, 16, 16], scales fp16 (zeros uint8) [ceil(N/16), K/128, 16]."""
    name: str = "w4a16_tiles"
    # + an odd tile count where a block takes two tiles (N ≥ 32·132 on the H100): the last block's second is past N;
    # + more units than the persistent launch has blocks at M ≤ 8 (on the H100 264 blocks: N > 8448), so blocks loop,
    # with K blocks fewer than the warps (2) and not a multiple of them (9)
    check_shapes: tuple = W4A16Linear.check_shapes + ((2, 4200, 256), (9, 4200, 384), (1, 9000, 256), (3, 20008, 1152))

    def _repack(self, inputs):
        x, packed, scale, *zero = inputs
        return x, quant.to_tiles(quant.Int4Weight(packed, scale, self.group, zero[0] if zero else None))

    def make_inputs(self, shape, gen: torch.Generator | None = None, device="cuda"):
        return self._repack(W4A16Linear.make_inputs(self, shape, gen, device))

    @property
    def specials(self) -> tuple:  # W4A16Linear's, in tiles
        return _specials_through(W4A16Linear.specials.fget(self), self._repack)

    def bind(self, launcher, name: str | None = None):
        rows, kb = quant.TILE_ROWS, quant.TILE_K4

        def tensors(w, K):
            if w.symmetric != self.symmetric:
                raise ValueError(f"{op.__name__}: this kernel reads the {'symmetric' if self.symmetric else 'asymmetric'}"
                                 f" format, the weights are {'symmetric' if w.symmetric else 'asymmetric (zero points)'}")
            tiles = (-(-w.n // rows), K // kb)
            ts = [(w.packed, torch.int32, (*tiles, rows, kb // 8), "w.packed (16-row tiles)"),
                  (w.scale, torch.float16, (*tiles, rows), "w.scale (16-row tiles)")]
            return ts + ([] if w.symmetric else [(w.zero, torch.uint8, (*tiles, rows), "w.zero (16-row tiles)")])

        op = _bind_repacked(self, launcher, name, "w4a16_tiles_op", quant.Int4Tiles,
                            f"quant.to_tiles(quantize_int4(W, 128{'' if self.symmetric else ', symmetric=False'}))",
                            tensors)
        return op


@dataclass
class W4A16FragLinear(_Repacked, W4A16Linear):
    """Lesson 10: W4A16Linear's problem with the weights in mma fragment order (harness.quant.to_fragments):
    `op(x, w, out=None)` with w a quant.Int4Fragments. Symmetric only.

    Launchers: `fn(x, packed, scales, y, M, N, K)` with packed int32 [ceil(N/16), K/64, 32, 4] and scales
    fp16 [K/128, ceil(N/16)·16]."""
    name: str = "w4a16_frag"
    # (3, 4097, 1152), (5, 7000, 1408), (29, 4100, 1024): lesson 10 slices K (4, 2, 4 slices; the first two end on a
    # partial stage)
    check_shapes: tuple = W4A16Linear.check_shapes + ((33, 136, 256), (130, 8, 512), (16, 384, 14336), (5, 7000, 1408),
                                                      (29, 4100, 1024))

    def _repack(self, inputs):
        x, packed, scale = inputs
        return x, quant.to_fragments(quant.Int4Weight(packed, scale, self.group))

    def make_inputs(self, shape, gen: torch.Generator | None = None, device="cuda"):
        return self._repack(W4A16Linear.make_inputs(self, shape, gen, device))

    @property
    def specials(self) -> tuple:  # W4A16Linear's (symmetric), in fragment order
        return _specials_through(W4A16Linear.specials.fget(self), self._repack)

    def bind(self, launcher, name: str | None = None):
        rows = quant.FRAG_ROWS
        return _bind_repacked(self, launcher, name, "w4a16_frag_op", quant.Int4Fragments,
                              "quant.to_fragments(quantize_int4(W))", lambda w, K: [
                                  (w.packed, torch.int32, (-(-w.n // rows), K // quant.FRAG_K, 32, 4),
                                   "w.packed (fragment order)"),
                                  (w.scale, torch.float16, (K // self.group, -(-w.n // rows) * rows),
                                   "w.scale (transposed, padded)")])


@dataclass
class DequantW8:
    """W[N, K] = q · scale in FP16 (the unfused route's first kernel). Launchers: `fn(q, scales, W, N, K)`.
    Special inputs: as W8A16Linear's (every code at −127 and +127, large and subnormal scales), W alone."""
    group: int = 128
    name: str = "dequant_w8"
    ceiling: str = "fp16"
    in_dtype: torch.dtype = torch.int8
    out_dtype: torch.dtype = torch.float16
    check_shapes: tuple = ((1, 128), (33, 384), (1000, 1152), (4096, 4096))
    per_element: int = 1  # weights per element of q
    demo_shapes: ClassVar[tuple] = ((8192, 8192),)

    def baseline(self):
        return "PyTorch: dequantize", lambda q, s: self.reference((q, s)).half()

    def describe(self, shape):
        return f"N={shape[0]} K={shape[1]}"

    def flops(self, shape):
        return shape[0] * shape[1]

    def bytes(self, shape):
        N, K = shape
        return N * K * DTYPE_BYTES[self.in_dtype] // self.per_element + 2 * N * (K // self.group) + 2 * N * K

    def out_shape(self, shape):
        return tuple(shape)

    def make_inputs(self, shape, gen=None, device="cuda"):
        _, q, s = W8A16Linear(group=self.group).make_inputs((1, *shape), gen, device)
        return q, s

    def _weights(self, kind, N, K, gen, device):
        return _int8_weights(kind, N, K, self.group, gen, device)

    @property
    def specials(self) -> tuple:
        top = 127 * 512 if self.per_element == 1 else 8 * 8000
        lo = ("lowest (−127: quantize_int8's range is ±127)" if self.per_element == 1 else
              "lowest (−8: the format holds it, though quantize_int4, which scales by absmax / 7, never makes it)")
        hi = "highest (+127)" if self.per_element == 1 else "highest (7)"
        cases = ((f"codes {'−127' if self.per_element == 1 else '−8'}", (72, 256), "min", _WHY_CODES.format(end=lo)),
                 (f"codes {'+127' if self.per_element == 1 else '+7'}", (40, 384), "max", _WHY_CODES.format(end=hi)),
                 ("large scales", (64, 256), "large", _WHY_LARGE.format(top=top).replace(
                     ", the activations small enough that y stays finite", "")),
                 ("subnormal scales", (48, 512), "tiny", _WHY_TINY))
        return tuple(Special(name, shape, why, lambda gen, device, shape=shape, kind=kind:
                             self._weights(kind, *shape, gen, device)) for name, shape, kind, why in cases)

    def reference(self, inputs):
        q, s = inputs
        return q.double() * s.double().repeat_interleave(self.group, dim=1)

    def bind(self, launcher, name=None):
        prob = self

        def op(q, scales, out=None):
            _need_2d(q, f"q [N, K{'/' + str(prob.per_element) if prob.per_element > 1 else ''}]", op.__name__)
            N, K = q.shape[0], q.shape[1] * prob.per_element
            _group_multiple(K, prob.group, op.__name__)
            _need(q, prob.in_dtype, (N, K // prob.per_element), "q", op.__name__)
            _need(scales, torch.float16, (N, K // prob.group), "scales", op.__name__)
            out = _out(out, (N, K), op.__name__, q.device, ("N", "K"))
            if out.numel():
                launcher(q, scales, out, N, K)
            return out

        op.__name__ = name or getattr(launcher, "__name__", "dequant_op")
        return op

    def call(self, op, inputs, out):
        op(*inputs, out=out)


def _need_nf4(packed, absmax, codebook, N, K, block, name):
    """NF4 weights [N, K] as the kernels take them: packed uint8 [N, K/2], absmax fp32 [N, K/block], 16 fp32 values."""
    _need(packed, torch.uint8, (N, K // 2), "packed (2 indices per byte)", name)
    _need(absmax, torch.float32, (N, K // block), "absmax", name)
    _need(codebook, torch.float32, (16,), "codebook", name)


@dataclass
class DequantNF4:
    """W[N, K] = NF4[idx] · absmax in FP16 (harness.quant.quantize_nf4's format: two indices per byte, high nibble
    first, one fp32 absmax per 64 weights, here viewed per row: packed [N, K/2], absmax [N, K/64]).
    Launchers: `fn(packed, absmax, codebook, W, N, K)`, codebook the 16 fp32 values (harness.quant.NF4).
    Special inputs: every index at 0 (−1) and at 15 (+1), absmax near FP16's largest value and below its smallest
    normal one."""
    block: int = 64
    name: str = "dequant_nf4"
    ceiling: str = "fp16"
    in_dtype: torch.dtype = torch.uint8
    out_dtype: torch.dtype = torch.float16
    check_shapes: tuple = ((1, 64), (33, 192), (1000, 1088), (4096, 4096), (7, 14336))
    demo_shapes: ClassVar[tuple] = ((8192, 8192),)

    def baseline(self):
        return "PyTorch: dequantize", lambda q, a, cb: self.reference((q, a, cb)).half()

    def describe(self, shape):
        return f"N={shape[0]} K={shape[1]}"

    def flops(self, shape):
        return shape[0] * shape[1]

    def bytes(self, shape):
        """the packed indices and the absmax read once, FP16 W written once (the codebook is 64 bytes)"""
        N, K = shape
        return N * K // 2 + 4 * N * K // self.block + 2 * N * K

    def out_shape(self, shape):
        return tuple(shape)

    def make_inputs(self, shape, gen=None, device="cuda"):
        N, K = shape
        W = torch.randn(N, K, generator=gen, device=device) / K ** 0.5
        w = quant.quantize_nf4(W, self.block)
        return w.packed.view(N, K // 2), w.absmax.view(N, K // self.block), quant.NF4.to(device)

    def reference(self, inputs):
        packed, absmax, _ = inputs
        N, K = packed.shape[0], packed.shape[1] * 2
        return quant.NF4Weight(packed.reshape(-1), absmax.reshape(-1), (N, K), self.block).dequantize().double()

    @property
    def specials(self) -> tuple:
        cases = (("indices 0", (72, 192), "min"), ("indices 15", (40, 320), "max"),
                 ("large absmax", (64, 256), "large"), ("tiny absmax", (48, 512), "tiny"))
        return tuple(Special(name, shape, _WHY_CODES.format(end=_WHY_NF4[kind]) if kind in ("min", "max") else
                             _WHY_NF4[kind].replace(", the activations small enough that y stays finite", ""),
                             lambda gen, device, shape=shape, kind=kind: _nf4_weights(kind, *shape, self.block, gen,
                                                                                      device))
                     for name, shape, kind in cases)

    def bind(self, launcher, name=None):
        prob = self

        def op(packed, absmax, codebook, out=None):
            _need_2d(packed, "packed [N, K/2]", op.__name__)
            N, K = packed.shape[0], packed.shape[1] * 2
            _group_multiple(K, prob.block, op.__name__, "the block size",
                            f"the format has one absmax per {prob.block} weights, and a block must not cross a row")
            _need_nf4(packed, absmax, codebook, N, K, prob.block, op.__name__)
            out = _out(out, (N, K), op.__name__, packed.device, ("N", "K"))
            if out.numel():
                launcher(packed, absmax, codebook, out, N, K)
            return out

        op.__name__ = name or getattr(launcher, "__name__", "dequant_nf4_op")
        return op

    def call(self, op, inputs, out):
        op(*inputs, out=out)


@dataclass
class NF4Linear(Linear):
    """y[M, N] = x[M, K] · Ŵᵀ with NF4 weights (DequantNF4's format: packed [N, K/2] uint8, absmax [N, K/64] fp32)
    and the codebook (harness.quant.NF4), FP16 x and y. The fused kernel takes K in multiples of 128.
    Launchers: `fn(x, packed, absmax, codebook, y, M, N, K)`.
    Special inputs: every index at 0 (−1) and at 15 (+1), absmax near FP16's largest value, and absmax that puts most
    weights below FP16's smallest normal value."""
    in_dtype: torch.dtype = torch.float16
    out_dtype: torch.dtype = torch.float16
    name: str = "nf4_linear"
    block: int = 64
    k_multiple: int = 128
    check_shapes: tuple = W8A16Linear.check_shapes
    demo_shapes: ClassVar[tuple] = DECODE_SHAPES[:2]

    def baseline(self):
        nf4 = DequantNF4(block=self.block)
        return "PyTorch: dequantize + cuBLAS", lambda x, q, a, cb: torch.nn.functional.linear(
            x, nf4.reference((q, a, cb)).half())

    def bytes(self, shape):
        """x, the packed weights and their absmax read once, y written once"""
        M, N, K = shape
        return 2 * M * K + N * K // 2 + 4 * N * K // self.block + 2 * M * N

    def make_inputs(self, shape, gen: torch.Generator | None = None, device="cuda"):
        M, N, K = shape
        x = torch.randn(M, K, generator=gen, device=device).half()
        return (x, *DequantNF4(block=self.block).make_inputs((N, K), gen, device))

    def reference(self, inputs):
        x, *w = inputs
        return x.double() @ DequantNF4(block=self.block).reference(tuple(w)).T

    @property
    def specials(self) -> tuple:
        def w(kind):
            return lambda N, K, gen, device: _nf4_weights(kind, N, K, self.block, gen, device)

        cases = (("indices 0", (3, 72, 256), "min"), ("indices 15", (33, 40, 384), "max"),
                 ("large absmax", (5, 64, 256), "large"), ("small absmax", (20, 48, 512), "small"))
        return tuple(_weight_special(name, shape, _WHY_CODES.format(end=_WHY_NF4[kind]) if kind in ("min", "max")
                                     else _WHY_NF4[kind], w(kind), _nf4_dequant, _as_inputs,
                                     x="scaled" if kind == "large" else "normal")
                     for name, shape, kind in cases)

    def bind(self, launcher, name: str | None = None):
        prob = self

        def op(x, packed, absmax, codebook, out=None):
            _need_2d(x, "x [M, K]", op.__name__)
            _need_2d(packed, "packed [N, K/2]", op.__name__)
            M, K = x.shape
            N = packed.shape[0]
            _group_multiple(K, prob.k_multiple, op.__name__, "the fused kernel's step",
                            "it reads 128 weights (two absmax blocks) at a time (pad K with zero weights)")
            _need(x, torch.float16, (M, K), "x", op.__name__)
            _need_nf4(packed, absmax, codebook, N, K, prob.block, op.__name__)
            out = _out(out, (M, N), op.__name__, x.device)
            if M and N:
                launcher(x, packed, absmax, codebook, out, M, N, K)
            return out

        op.__name__ = name or getattr(launcher, "__name__", "nf4_linear_op")
        return op

    def call(self, op, inputs, out):
        op(*inputs, out=out)


@dataclass
class NF4TilesLinear(_Repacked, NF4Linear):
    """Lesson 08: NF4Linear's problem with the weights in 16-row tiles (harness.quant.to_tiles): `op(x, w, out=None)`
    with w a quant.NF4Tiles. Launchers: `fn(x, packed, absmax, codebook, y, M, N, K)`, packed uint8
    [ceil(N/16), K/128, 16, 64], absmax fp32 [ceil(N/16), K/64, 16]."""
    name: str = "nf4_tiles"
    # + an odd tile count where a block takes two tiles (N ≥ 32·132 on the H100, and M > 8 at this K): the last block's
    # second is past N. (At M ≤ 8 a block takes two only from K = 8192: checked on the H100, lessons/08_nf4/notes.md, not here.)
    # + shapes where, at M ≤ 8, the units of 16 outputs outnumber the blocks that fit (396 on an H100) and each block
    # loops over several: K items fewer than the warps, and a count of them that is not a multiple of the warps.
    check_shapes: tuple = NF4Linear.check_shapes + ((2, 4200, 1024), (9, 4200, 1024), (1, 9000, 256), (3, 20008, 1152))

    def _rows(self, packed, absmax) -> quant.NF4Weight:
        N, K = packed.shape[0], packed.shape[1] * 2
        return quant.NF4Weight(packed.reshape(-1), absmax.reshape(-1), (N, K), self.block)

    def _repack(self, inputs):
        x, packed, absmax, _ = inputs
        return x, quant.to_tiles(self._rows(packed, absmax))

    def make_inputs(self, shape, gen: torch.Generator | None = None, device="cuda"):
        return self._repack(NF4Linear.make_inputs(self, shape, gen, device))

    @property
    def specials(self) -> tuple:  # NF4Linear's, in tiles (this class's _repack)
        return _specials_through(NF4Linear.specials.fget(self), self._repack)

    def bind(self, launcher, name: str | None = None):
        rows = quant.TILE_ROWS

        def tensors(w, K):
            tiles = -(-w.n // rows)
            return [(w.packed, torch.uint8, (tiles, K // 128, rows, 64), "w.packed (16-row tiles)"),
                    (w.absmax, torch.float32, (tiles, K // self.block, rows), "w.absmax (16-row tiles)"),
                    (w.codebook, torch.float32, (16,), "w.codebook")]

        return _bind_repacked(self, launcher, name, "nf4_tiles_op", quant.NF4Tiles, "quant.to_tiles(quantize_nf4(W))",
                              tensors, unit="block")


@dataclass
class NF4TilesDQLinear(NF4TilesLinear):
    """Lesson 08: NF4TilesLinear's problem with double-quantized absmax (quant.double_quantize, bitsandbytes'
    compress_statistics=True): `op(x, w, out=None)` with w a quant.NF4DQTiles. Launchers: `fn(x, packed, qabsmax,
    absmax2, offset, code, codebook, y, M, N, K)`."""
    name: str = "nf4_tiles_dq"

    def bytes(self, shape):
        """x, the packed weights, their absmax codes, absmax2 and the offset read once, y written once"""
        M, N, K = shape
        return 2 * M * K + N * K // 2 + N * K // self.block + 4 * -(-N * K // self.block // 256) + 4 + 2 * M * N

    def _repack(self, inputs):  # make_inputs and specials: NF4TilesLinear's, through this
        x, packed, absmax, _ = inputs
        return x, quant.to_tiles(quant.double_quantize(self._rows(packed, absmax)))

    def bind(self, launcher, name: str | None = None):
        rows = quant.TILE_ROWS

        def tensors(w, K):
            tiles = -(-w.n // rows)
            return [(w.packed, torch.uint8, (tiles, K // 128, rows, 64), "w.packed (16-row tiles)"),
                    (w.qabsmax, torch.uint8, (tiles, K // 128, 8, 2, 2), "w.qabsmax (16-row tiles)"),
                    (w.absmax2, torch.float32, (-(-w.n * K // self.block // 256),), "w.absmax2"),
                    (w.offset, torch.float32, (1,), "w.offset"), (w.code, torch.float32, (256,), "w.code"),
                    (w.codebook, torch.float32, (16,), "w.codebook")]

        return _bind_repacked(self, launcher, name, "nf4_tiles_dq_op", quant.NF4DQTiles,
                              "quant.to_tiles(quant.double_quantize(quantize_nf4(W)))", tensors, unit="block")


@dataclass
class DequantW4(DequantW8):
    """W[N, K] = q · scale in FP16 from symmetric INT4 packed 8 per int32. Launchers: `fn(packed, scales, W, N, K)`.
    Special inputs: every code at −8 and at 7, large and subnormal scales."""
    name: str = "dequant_w4"
    in_dtype: torch.dtype = torch.int32
    per_element: int = 8

    def make_inputs(self, shape, gen=None, device="cuda"):
        _, q, s = W4A16Linear(group=self.group).make_inputs((1, *shape), gen, device)
        return q, s

    def _weights(self, kind, N, K, gen, device):
        return _int4_weights(kind, N, K, self.group, True, gen, device)

    @property
    def specials(self) -> tuple:  # DequantW8's cases, in symmetric INT4 (its own _weights)
        return DequantW8.specials.fget(self)

    def reference(self, inputs):
        q, s = inputs
        return quant.Int4Weight(q, s, self.group).dequantize().double()


@dataclass
class W8A8Linear(Linear):
    """y[M, N] = x̂ · Ŵᵀ, both operands INT8: x̂ = x quantized per token at run time
    (harness.quant.quantize_per_token_int8), Ŵ = q · scale per output channel (quantize_int8 with no group).
    FP16 x, scales [N, 1] and output.

    Kernel launchers have the form `fn(x, q, scales, xq, sx, y, M, N, K)`: xq (int8 [M, K]) and sx (fp32 [M])
    receive x's INT8 copy and its per-token scales, which the GEMM then reads.
    Special inputs: every activation code at ±127 (tokens of ± their absmax, a zero token), weights and activations
    all at ±127, large and subnormal weight scales."""
    in_dtype: torch.dtype = torch.float16
    out_dtype: torch.dtype = torch.float16
    name: str = "w8a8"
    k_multiple: int = 128  # the INT8 GEMM's K tile
    check_shapes: tuple = ((1, 1000, 384), (3, 4097, 1152), (16, 1024, 2048), (17, 333, 512), (31, 500, 640),
                           (48, 200, 4096), (64, 256, 1024), (127, 129, 256), (256, 64, 384), (200, 520, 1024))
    demo_shapes: ClassVar[tuple] = ((64, 8192, 8192), (256, 8192, 8192))

    def baseline(self):
        return "PyTorch: quantize + _int_mm + scale", torch_w8a8

    def bytes(self, shape):
        """x read once, the INT8 weights and their scales read once, y written once (xq's round trip through
        memory is the unfused part of this path and is not counted)."""
        M, N, K = shape
        return 2 * M * K + N * K + 2 * N + 2 * M * N

    def make_inputs(self, shape, gen: torch.Generator | None = None, device="cuda"):
        M, N, K = shape
        x = torch.randn(M, K, generator=gen, device=device).half()
        W = torch.randn(N, K, generator=gen, device=device) / K ** 0.5
        qw = quant.quantize_int8(W)
        return x, qw.q, qw.scale

    def reference(self, inputs):
        x, q, s = inputs
        xq, sx = quant.quantize_per_token_int8(x)
        return (xq.double() * sx.double()[:, None]) @ (q.double() * s.double()).T

    @property
    def specials(self) -> tuple:
        def w(kind):
            return lambda N, K, gen, device: _int8_weights(kind, N, K, K, gen, device)  # one scale per channel

        def deq(q, s):
            return q.float() * s.float()

        return (_weight_special("activation codes ±127, a zero token", (9, 72, 512), _WHY_TOKENS, w("any"), deq,
                                _as_inputs, x="tokens", rows=True),
                _weight_special("weights and activations at ±127", (3, 64, 4096), "every weight code −127 or +127 and "
                                "every activation code ±127: the INT32 sums of K products of 127² (and the epilogue's "
                                "scaling of sums past 2^24)", w("ends"), deq, _as_inputs, x="tokens", rows=True),
                _weight_special("large scales", (5, 64, 256), _WHY_LARGE.format(top=127 * 512), w("large"), deq,
                                _as_inputs, x="scaled"),
                _weight_special("subnormal scales", (20, 48, 512), _WHY_TINY, w("tiny"), deq, _as_inputs))

    def bind(self, launcher, name: str | None = None):
        prob = self

        def op(x, q, scales, out=None):
            _need_2d(x, "x [M, K]", op.__name__)
            _need_2d(q, "q [N, K]", op.__name__)
            M, K = x.shape
            N = q.shape[0]
            if q.shape[1] != K:
                raise ValueError(f"{op.__name__}: x is [M={M}, K={K}] but q is {list(q.shape)}; q must be [N, K]")
            _group_multiple(K, prob.k_multiple, op.__name__, "the K tile",
                            f"the INT8 GEMM reads K in {prob.k_multiple}-wide tiles (pad K with zeros)")
            _need(x, torch.float16, (M, K), "x", op.__name__)
            _need(q, torch.int8, (N, K), "q", op.__name__)
            _need(scales, torch.float16, (N, 1), "scales (one per output channel)", op.__name__)
            out = _out(out, (M, N), op.__name__, x.device)
            if M and N:
                xq = _scratch((M, K), torch.int8, x.device, name="xq")
                sx = _scratch((M,), torch.float32, x.device, name="sx")
                launcher(x, q, scales, xq, sx, out, M, N, K)
            return out

        op.__name__ = name or getattr(launcher, "__name__", "w8a8_op")
        return op

    def call(self, op, inputs, out):
        op(*inputs, out=out)


@dataclass
class W4A8Linear(Linear):
    """y[M, N] = x̂ · Ŵᵀ: x̂ = x quantized per token at run time (as W8A8), Ŵ = the two-level 4-bit weights of
    harness.quant.quantize_w4a8 (packed int32 [N, K/8], scale fp16 [N, 1], gscale and gzero uint8 [N, K/128]).
    FP16 x and y.

    Launchers: `fn(x, packed, scale, gscale, gzero, xq, sx, xsum, y, M, N, K)`: xq (int8 [M, K]), sx (fp32 [M])
    and xsum (int32 [M], each token's sum of xq) receive the quantized x, which the GEMM then reads.
    Special inputs: every code at −126 and +126 (the ends the format's gscale and gzero allow), gzero at 0 and 15,
    activation codes at ±127 with a zero token, large and subnormal scales, and K = 65536 with every code and
    activation at its top (the INT32 sum just below 2^31)."""
    in_dtype: torch.dtype = torch.float16
    out_dtype: torch.dtype = torch.float16
    name: str = "w4a8"
    group: int = 128
    # The INT32 sum of (128 + c)·xq over K stays below 2³¹ while 255 · 127 · K does.
    max_k: int = 65536
    check_shapes: tuple = W8A8Linear.check_shapes + ((16, 384, 14336), (33, 136, 256), (130, 8, 512))
    demo_shapes: ClassVar[tuple] = ((64, 8192, 8192), (256, 8192, 8192))

    def baseline(self):
        def deq_w4a8(x, *w):  # the weights dequantized to FP16 (their INT8 codes × scale), then cuBLAS
            return torch.nn.functional.linear(x, self.weight((x, *w)).dequantize().half())
        return "PyTorch: dequantize + cuBLAS", deq_w4a8

    def bytes(self, shape):
        """x read once, the packed weights and their scales read once, y written once (xq's round trip
        through memory is the unfused part of this path and is not counted)."""
        M, N, K = shape
        return 2 * M * K + N * K // 2 + 2 * N + 2 * N * (K // self.group) + 2 * M * N

    def make_inputs(self, shape, gen: torch.Generator | None = None, device="cuda"):
        M, N, K = shape
        x = torch.randn(M, K, generator=gen, device=device).half()
        W = torch.randn(N, K, generator=gen, device=device) / K ** 0.5
        qw = quant.quantize_w4a8(W, self.group)
        return x, qw.packed, qw.scale, qw.gscale, qw.gzero

    def weight(self, inputs):
        _, packed, scale, gscale, gzero = inputs
        return quant.W4A8Weight(packed, scale, gscale, gzero, self.group)

    def reference(self, inputs):
        xq, sx = quant.quantize_per_token_int8(inputs[0])
        return (xq.double() * sx.double()[:, None]) @ self.weight(inputs).dequantize().double().T

    @property
    def specials(self) -> tuple:
        g = self.group

        def w(kind):
            return lambda N, K, gen, device: _w4a8_weights(kind, N, K, g, gen, device)

        def deq(packed, scale, gs, gz):
            return quant.W4A8Weight(packed, scale, gs, gz, g).dequantize()

        code = ("every weight's INT8 code {c} (u = {u}, gscale 14, gzero {z}): the end of the codes the format allows "
                "(gzero and gscale keep 128 + (u − gzero)·gscale in a byte, so ±126 is as far as they go); a kernel "
                "whose byte arithmetic carries, or that saturates, gets every weight wrong here")
        return (_weight_special("codes −126", (3, 72, 256), code.format(c="−126", u=0, z=9), w("min"), deq, _as_inputs),
                _weight_special("codes +126", (33, 40, 384), code.format(c="+126", u=15, z=6), w("max"), deq,
                                _as_inputs),
                _weight_special("gzero 0 and 15", (9, 136, 256), "gzero at both ends of its range (0 and 15, gscale 8),"
                                " u at random: codes from −120 to +120", w("gzero"), deq, _as_inputs),
                _weight_special("activation codes ±127, a zero token", (9, 72, 512), _WHY_TOKENS, w("any"), deq,
                                _as_inputs, x="tokens", rows=True),
                _weight_special("large scales", (5, 64, 256), _WHY_LARGE.format(top=126 * 512), w("large"), deq,
                                _as_inputs, x="scaled"),
                _weight_special("subnormal scales", (20, 48, 512), _WHY_TINY, w("tiny"), deq, _as_inputs),
                _weight_special("INT32 at its limit", (1, 64, self.max_k), f"K = {self.max_k} (the most the kernels "
                                "take), every code +126 and every activation code +127: the INT32 sum Σ (128 + c)·xq "
                                "reaches 2.11e9, just below 2^31", w("int32"), deq, _as_inputs, x="ones"))

    def bind(self, launcher, name: str | None = None):
        prob = self

        def op(x, packed, scale, gscale, gzero, out=None):
            _need_2d(x, "x [M, K]", op.__name__)
            _need_2d(packed, "packed [N, K/8]", op.__name__)
            M, K = x.shape
            N = packed.shape[0]
            _group_multiple(K, prob.group, op.__name__, "the group size",
                            f"the format has one integer scale and zero per {prob.group} weights along K "
                            "(pad K with zero weights)")
            if K > prob.max_k:
                raise ValueError(f"{op.__name__}: K = {K} is more than {prob.max_k}: the INT32 accumulator "
                                 "(255 · 127 per term) could overflow; split K into several calls")
            _need(x, torch.float16, (M, K), "x", op.__name__)
            _need(packed, torch.int32, (N, K // 8), "packed (quant.pack_w4a8's order)", op.__name__)
            _need(scale, torch.float16, (N, 1), "scale (one per output channel)", op.__name__)
            _need(gscale, torch.uint8, (N, K // prob.group), "gscale", op.__name__)
            _need(gzero, torch.uint8, (N, K // prob.group), "gzero", op.__name__)
            out = _out(out, (M, N), op.__name__, x.device)
            if M and N:
                xq = _scratch((M, K), torch.int8, x.device, name="xq")
                sx = _scratch((M,), torch.float32, x.device, name="sx")
                xsum = _scratch((M,), torch.int32, x.device, name="xsum")
                launcher(x, packed, scale, gscale, gzero, xq, sx, xsum, out, M, N, K)
            return out

        op.__name__ = name or getattr(launcher, "__name__", "w4a8_op")
        return op

    def call(self, op, inputs, out):
        op(*inputs, out=out)


def torch_w8a8(x, q, scales, out=None):
    """The W8A8 baseline: per-token quantization in PyTorch, torch._int_mm (cuBLASLt INT8; it refuses M ≤ 16),
    then the scaling in PyTorch."""
    xq, sx = quant.quantize_per_token_int8(x, exact=False)
    y = (torch._int_mm(xq, q.t()).float() * sx[:, None] * scales.float().t()).half()
    if out is not None:
        out.copy_(y)
        return out
    return y


torch_w8a8.__name__ = "torch: quantize + _int_mm + scale"


# ----------------------------------------------------------------------------------------------
# Lesson 11: the rest of a decode step (harness/decode_math.py holds the math, used here as the float64 reference)

def _need_fp16(t, what, name, dims=None):
    if not isinstance(t, torch.Tensor):
        raise TypeError(f"{name}: {what} must be a torch.Tensor, got {type(t).__name__}")
    if dims is not None and t.dim() != dims:
        raise ValueError(f"{name}: {what} must be {dims}-D, got shape {tuple(t.shape)}")
    if t.dtype != torch.float16:
        raise TypeError(f"{name}: {what} must be torch.float16, got {t.dtype}")


@dataclass
class AddRMSNorm:
    """residual = h + delta (rounded to FP16, as stored), y = residual / sqrt(mean(residual²) + eps) · w, per row.
    The output holds both: out[0] = residual, out[1] = y, each [M, H]; h may be out[0] (an in-place residual).
    Launchers: `fn(h, delta, w, out, M, H, eps)`.
    Special inputs: rows whose mean square is below eps (eps decides), zero rows, rows whose squares overflow FP16,
    and all of them in one batch; each row is measured against its own size."""
    eps: float = 1e-5
    name: str = "add_rmsnorm"
    ceiling: str = "fp16"
    in_dtype: torch.dtype = torch.float16
    out_dtype: torch.dtype = torch.float16
    check_shapes: tuple = ((1, 4096), (3, 256), (16, 8), (5, 1000), (17, 14336), (64, 4104), (130, 2048))
    demo_shapes: ClassVar[tuple] = ((1, 4096), (16, 4096))  # Llama-3-8B's hidden size, batch 1 and 16

    def baseline(self):
        return "PyTorch ops", lambda h, delta, w, out=None: decode_math.torch_add_rmsnorm(h, delta, w, out, self.eps)

    def describe(self, shape):
        return f"M={shape[0]} H={shape[1]}"

    def flops(self, shape):
        return 5 * shape[0] * shape[1]

    def bytes(self, shape):
        """h, delta read once, w once; residual and y written once"""
        M, H = shape
        return 2 * (4 * M * H + H)

    def out_shape(self, shape):
        return (2, *shape)

    def make_inputs(self, shape, gen=None, device="cuda"):
        M, H = shape
        h = (3 * torch.randn(M, H, generator=gen, device=device)).half()
        delta = torch.randn(M, H, generator=gen, device=device).half()
        w = (1 + 0.2 * torch.randn(H, generator=gen, device=device)).half()
        return h, delta, w

    def reference(self, inputs):
        h, delta, w = inputs
        res = (h.double() + delta.double()).half().double()
        return torch.stack([res, decode_math.rms_norm(res, w.double(), self.eps)])

    @staticmethod
    def _rows(kinds, H, gen, device):
        """(h, delta, w) with one row per kind: "random" (as make_inputs), "tiny<m>" (residual of size about m),
        "cancel" (delta = −h: a residual of exact zeros from nonzero inputs), "zero" (h = delta = 0), "huge"
        (|h| 1e4 … 3e4, |delta| up to 2e4: squares to 2.5e9)."""
        hs, ds = [], []
        for kind in kinds:
            if kind.startswith("tiny"):
                m = float(kind[4:])
                h, d = (m * torch.randn(H, generator=gen, device=device) for _ in range(2))
            elif kind == "huge":
                h = _signs((H,), gen, device) * _rand((H,), 1e4, 3e4, gen, device)
                d = _signs((H,), gen, device) * _rand((H,), 0, 2e4, gen, device)
            elif kind == "zero":
                h = d = torch.zeros(H, device=device)
            else:
                h, d = 3 * torch.randn(H, generator=gen, device=device), torch.randn(H, generator=gen, device=device)
                if kind == "cancel":
                    d = -h.half().float()
            hs.append(h)
            ds.append(d)
        w = 1 + 0.2 * torch.randn(H, generator=gen, device=device)
        return torch.stack(hs).half(), torch.stack(ds).half(), w.half()

    @property
    def specials(self) -> tuple:
        def rows(kinds, H):
            return lambda gen, device: self._rows(kinds, H, gen, device)

        tiny = ("tiny1e-4", "tiny3e-4", "tiny1e-3", "tiny3e-3")
        return (Special("tiny rows: eps decides", (4, 4096), "residuals of size 1e-4 … 3e-3, whose mean square "
                        f"(2e-8 … 2e-5) is below or near eps = {self.eps:g}: eps decides y; eps outside the square "
                        "root, or a wrong eps, shows only here", rows(tiny, 4096), rows=True),
                Special("zero rows", (3, 4096), "a residual of exact zeros from nonzero h and delta, and one of zero "
                        "inputs: y must be 0 (eps is all that keeps the root from 0, and 0/0 = NaN)",
                        rows(("random", "cancel", "zero"), 4096), rows=True),
                Special("huge rows: Σ residual² past FP16", (4, 14336), "residuals of 1e4 … 5e4: each square (to "
                        "2.5e9) and their sum (to 1e13) are far past FP16's 65504: right only with the squares and "
                        "their sum in FP32", rows(("huge", "huge", "random", "huge"), 14336), rows=True),
                Special("every kind of row in one batch", (8, 1000), "random, tiny, zero and huge rows together: "
                        "nothing of one row's sum may reach another's",
                        rows(("random", "tiny1e-4", "cancel", "huge", "tiny3e-3", "zero", "huge", "random"), 1000),
                        rows=True))

    def bind(self, launcher, name=None):
        prob = self

        def op(h, delta, w, out=None, eps=None):
            n = op.__name__
            _need_fp16(h, "h [M, H]", n, 2)
            _need_fp16(delta, "delta [M, H]", n, 2)
            _need_fp16(w, "w [H]", n, 1)
            M, H = h.shape
            if tuple(delta.shape) != (M, H) or tuple(w.shape) != (H,):
                raise ValueError(f"{n}: h {list(h.shape)}, delta {list(delta.shape)} and w {list(w.shape)} must be "
                                 "[M, H], [M, H] and [H]")
            if H % 8:
                raise ValueError(f"{n}: H = {H} must be a multiple of 8 (each thread moves 16 bytes)")
            if out is None:
                out = torch.empty(2, M, H, dtype=torch.float16, device=h.device)
            elif tuple(out.shape) != (2, M, H) or out.dtype != torch.float16:
                raise ValueError(f"{n}: out must be float16 [2, M={M}, H={H}] (residual, normed), got "
                                 f"{out.dtype} {list(out.shape)}")
            if M:
                launcher(h, delta, w, out, M, H, prob.eps if eps is None else float(eps))
            return out

        op.__name__ = name or getattr(launcher, "__name__", "add_rmsnorm_op")
        return op

    def call(self, op, inputs, out):
        op(*inputs, out=out)


@dataclass
class DecodeAttention:
    """One decode step of grouped-query attention with RoPE and a KV cache (harness/decode.py's layouts):
    qkv fp16 [B, (n_heads + 2·n_kv)·128], k_cache and v_cache fp16 [B, n_kv, max_seq, 128], pos int32 [B] (each
    sequence's new position), rope fp32 [≥ max_seq, 64, 2]. Writes the roped k and v at pos into the caches and
    returns out fp16 [B, n_heads·128], the attention of the roped q over positions 0 … pos.
    A shape is (B, ctx, n_heads, n_kv): positions are drawn below ctx (the first sequence's is ctx − 1).
    From 12 MB of caches per call a block serves the q heads of one kv head (up to 8) from one read of its cache
    rows, below that one q head (heads_per_block). The keys of a sequence are split over `splits` blocks (enough to
    give the GPU two blocks per SM, at most 16);
    their partial results go through a workspace that the bound op keeps (it only grows, and old ones are kept
    alive, so a CUDA graph that captured one stays valid).
    Launchers: `fn(qkv, k_cache, v_cache, pos, rope, out, work, counters, B, n_heads, n_kv, max_seq, splits)`.
    Special inputs (specials): scores near +1000 and −1000 (exp overflows or underflows without the max subtracted),
    pos = 0 everywhere with a long cache (one position, every other split empty), and in each of them the cache
    rows at and past pos holding huge keys and values that a kernel must not read."""
    head_dim: int = 128
    theta: float = 500000.0
    name: str = "decode_attention"
    ceiling: str = "fp16"
    in_dtype: torch.dtype = torch.float16
    out_dtype: torch.dtype = torch.float16
    check_shapes: tuple = ((1, 1, 1, 1), (1, 37, 4, 1), (3, 200, 8, 2), (2, 513, 32, 8), (5, 1000, 6, 3),
                           (16, 64, 32, 8), (1, 4097, 32, 8), (4, 33, 2, 2), (4, 1000, 32, 8))  # the last: grouped
    # Llama-3-8B's heads, batch 1 and 16, 512 cached positions
    demo_shapes: ClassVar[tuple] = ((1, 512, 32, 8), (16, 512, 32, 8))

    def baseline(self):
        return "PyTorch ops", decode_math.torch_attention

    def describe(self, shape):
        B, ctx, nh, nkv = shape
        return f"B={B} ctx={ctx} heads={nh}/{nkv}"

    def flops(self, shape):
        B, ctx, nh, _ = shape
        return 4 * B * nh * ctx * self.head_dim

    def bytes(self, shape):
        """the cached k and v of every position read once (per kv head), qkv read, out and the new k, v written"""
        B, ctx, nh, nkv = shape
        hd = self.head_dim
        return 2 * (2 * B * nkv * ctx * hd + B * (nh + 2 * nkv) * hd + B * nh * hd + 2 * B * nkv * hd)

    def out_shape(self, shape):
        B, _, nh, _ = shape
        return (B, nh * self.head_dim)

    def make_inputs(self, shape, gen=None, device="cuda"):
        B, ctx, nh, nkv = shape
        hd, max_seq = self.head_dim, ctx + 5  # cache rows past every position hold values too: reading them shows
        qkv = torch.randn(B, (nh + 2 * nkv) * hd, generator=gen, device=device).half()
        kc = torch.randn(B, nkv, max_seq, hd, generator=gen, device=device).half()
        vc = torch.randn(B, nkv, max_seq, hd, generator=gen, device=device).half()
        pos = torch.randint(0, ctx, (B,), generator=gen, device=device, dtype=torch.int32)
        pos[0] = ctx - 1
        return qkv, kc, vc, pos, decode_math.rope_table(max_seq, hd, self.theta, device)

    def reference(self, inputs):
        qkv, kc, vc, pos, rope = inputs
        return decode_math.attention_reference(qkv, kc, vc, pos, rope, torch.float64)

    def _special_inputs(self, shape, kind, gen, device):
        """Inputs of one kind: "large" / "negative" (the q heads of a kv head close to one direction, 4 per element;
        the cached keys along it so that every score is +1000 / −1000 plus a spread of about 2, the new key too),
        "pos0" (every position 0), "masked" (random scores). In every kind the cache rows at and past each position
        hold keys along q that would score 500 above the rest, and values of ±6e4."""
        B, ctx, nh, nkv = shape
        hd, max_seq, g = self.head_dim, ctx + 5, nh // nkv
        s0 = {"large": 1000.0, "negative": -1000.0}.get(kind)
        rope = decode_math.rope_table(max_seq, hd, self.theta, device)
        pos = torch.randint(0, ctx, (B,), generator=gen, device=device, dtype=torch.int32)
        pos[0] = ctx - 1
        if kind == "pos0":
            pos.zero_()
        qkv = torch.randn(B, nh + 2 * nkv, hd, generator=gen, device=device)
        kc = torch.randn(B, nkv, max_seq, hd, generator=gen, device=device)
        vc = torch.randn(B, nkv, max_seq, hd, generator=gen, device=device)
        if s0 is not None:
            lead = torch.randn(B, nkv, 1, hd, generator=gen, device=device)
            near = lead + 0.05 * torch.randn(B, nkv, g, hd, generator=gen, device=device)
            qkv[:, :nh] = (4 * near).reshape(B, nh, hd)
        q = qkv[:, :nh].half().double()  # as the kernel reads it
        first = q.view(B, nkv, g, hd)[:, :, 0]  # each kv head's first q head, before and after RoPE at pos
        roped = decode_math.apply_rope(first, rope[pos.long()].double()[:, None])
        norm = roped.norm(dim=-1, keepdim=True)  # [B, nkv, 1]; RoPE keeps the norm
        unit = (roped / norm).float()
        if s0 is not None:  # key = c · unit + noise scores s0 + noise · |q| / √hd
            c, spread = (s0 * hd ** 0.5 / norm).float(), (2 * hd ** 0.5 / norm).float()
            kc = c[:, :, None] * unit[:, :, None] + spread[:, :, None] * kc
            # the new key, before RoPE: along the first head's q before RoPE (one rotation turns both)
            qkv[:, nh:nh + nkv] = c * (first / norm).float() + spread * torch.randn(B, nkv, hd, generator=gen,
                                                                                       device=device)
        at_or_past = (torch.arange(max_seq, device=device)[None, :] >= pos.long()[:, None])[:, None, :, None]
        big = ((abs(s0 or 0.0) + 500) * hd ** 0.5 / norm).float()
        kc = torch.where(at_or_past, (big * unit)[:, :, None], kc)
        vc = torch.where(at_or_past, 6e4 * _signs(vc.shape, gen, device), vc)
        return qkv.reshape(B, -1).half(), kc.half(), vc.half(), pos, rope

    @property
    def specials(self) -> tuple:
        def make(shape, kind):
            return lambda gen, device: self._special_inputs(shape, kind, gen, device)

        masked = ("; the cache rows at and past each position hold huge keys and values (a kernel that reads one "
                  "is ruined by it)")
        large = ("scores about +1000 with a spread of 2: e^1000 overflows FP32 (and e^88.7 already does), so only "
                 "a softmax that subtracts the running maximum gets them" + masked)
        return (Special("scores near +1000", (3, 200, 8, 2), large, make((3, 200, 8, 2), "large")),
                Special("scores near +1000, q heads grouped", (4, 800, 32, 8), large.replace(
                    "gets them", "gets them; 13 MB of caches: the fast kernel serves 8 q heads per block"),
                    make((4, 800, 32, 8), "large")),
                Special("scores near −1000", (2, 300, 4, 1), "scores about −1000: every e^s underflows to 0 without "
                        "the maximum subtracted, and 0/0 is NaN" + masked, make((2, 300, 4, 1), "negative")),
                Special("pos = 0, a long cache", (2, 1000, 4, 1), "one position (the new token alone: out = its v) "
                        "in a cache of 1005 rows: split over many blocks, all but the first see no position and must "
                        "add nothing (a state whose max is −inf)" + masked, make((2, 1000, 4, 1), "pos0")),
                Special("huge rows past pos", (3, 64, 4, 2), "random scores" + masked, make((3, 64, 4, 2), "masked")))

    def writable(self, inputs) -> dict[int, tuple[torch.Tensor, str]]:
        """The inputs a kernel writes by design, by position, each with the mask of the elements it may change and
        their name: k_cache and v_cache, in the row of each sequence's new position (every kv head). check holds
        every other element of every input unchanged."""
        _, kc, vc, pos, _ = inputs
        B, nkv, max_seq, hd = kc.shape
        row = torch.zeros(B, max_seq, dtype=torch.bool, device=kc.device)
        row[torch.arange(B, device=kc.device), pos.long().clamp(0, max_seq - 1)] = True
        mask = row[:, None, :, None].expand(B, nkv, max_seq, hd)
        return {1: (mask, "the new position's row (k_cache[b, :, pos[b]])"),
                2: (mask, "the new position's row (v_cache[b, :, pos[b]])")}

    max_splits: int = 16

    group_min_bytes: int = 12 << 20

    def heads_per_block(self, B, n_heads, n_kv, max_seq):
        """q heads a block of the kernel serves from one read of their kv head, as decode_ops_fast.cu decides: up to 8 of
        a group once the caches hold group_min_bytes (12 MB), else one (the shorter latency where few bytes move)."""
        group = n_heads // n_kv
        if B * n_kv * max_seq * self.head_dim * 4 < self.group_min_bytes:
            return 1
        return next(g for g in (8, 4, 2, 1) if group % g == 0)

    def splits(self, B, n_heads, n_kv, max_seq, sms):
        """Blocks per (sequence, group of g q heads): two blocks per SM in all, each with at least 64 / g positions
        (64 scores per block)."""
        g = self.heads_per_block(B, n_heads, n_kv, max_seq)
        want = -(-2 * sms // max(B * (n_heads // g), 1))
        return max(1, min(want, self.max_splits, -(-max_seq * g // 64)))

    def bind(self, launcher, name=None):
        prob = self
        hd = self.head_dim
        scratch = {}  # device -> (work, counters); grown, never freed while the op lives
        kept = []

        def workspace(dev, B, nh, splits):
            w, c = scratch.get(dev, (None, None))
            if w is None or w.numel() < B * nh * splits * (hd + 2) or c.numel() < B * nh:
                w = _scratch((max(B * nh * splits * (hd + 2), 0 if w is None else w.numel()),), torch.float32, dev,
                             name="work")
                c = _scratch((max(B * nh, 0 if c is None else c.numel()),), torch.int32, dev, zero=True,
                             name="counters")
                kept.append(scratch.get(dev))
                scratch[dev] = (w, c)
            return w, c

        def op(qkv, k_cache, v_cache, pos, rope, out=None, splits=None):
            n = op.__name__
            _need_fp16(qkv, "qkv [B, (n_heads + 2·n_kv)·128]", n, 2)
            _need_fp16(k_cache, "k_cache [B, n_kv, max_seq, 128]", n, 4)
            _need_fp16(v_cache, "v_cache [B, n_kv, max_seq, 128]", n, 4)
            B, nkv, max_seq, d = k_cache.shape
            if d != hd or tuple(v_cache.shape) != tuple(k_cache.shape) or k_cache.shape[0] != qkv.shape[0]:
                raise ValueError(f"{n}: k_cache and v_cache must both be [B={qkv.shape[0]}, n_kv, max_seq, {hd}], got "
                                 f"{list(k_cache.shape)} and {list(v_cache.shape)}")
            if qkv.shape[1] % hd or qkv.shape[1] // hd <= 2 * nkv or (qkv.shape[1] // hd - 2 * nkv) % nkv:
                raise ValueError(f"{n}: qkv has {qkv.shape[1]} columns: it must hold n_heads + 2·n_kv heads of {hd} "
                                 f"with n_kv = {nkv} (from the cache) and n_heads a multiple of n_kv")
            nh = qkv.shape[1] // hd - 2 * nkv
            _need(pos, torch.int32, (B,), "pos (one position per sequence)", n)
            if not isinstance(rope, torch.Tensor) or rope.dtype != torch.float32 or rope.dim() != 3 \
                    or tuple(rope.shape[1:]) != (hd // 2, 2) or rope.shape[0] < max_seq:
                raise ValueError(f"{n}: rope must be float32 [≥ max_seq = {max_seq}, {hd // 2}, 2] "
                                 "(harness.decode_math.rope_table)")
            if B and not (pos.is_cuda and torch.cuda.is_current_stream_capturing()):  # in a graph: the kernel's guard
                lo, hi = int(pos.min()), int(pos.max())
                if lo < 0 or hi >= max_seq:
                    raise ValueError(f"{n}: positions must be in 0 … {max_seq - 1} (the cache's length), got {lo} … {hi}")
            out = _out(out, (B, nh * hd), n, qkv.device, ("B", "n_heads·128"))
            if B:
                if splits is None:
                    sms = torch.cuda.get_device_properties(qkv.device).multi_processor_count if qkv.is_cuda else 1
                    splits = prob.splits(B, nh, nkv, max_seq, sms)
                if not 1 <= splits <= prob.max_splits:
                    raise ValueError(f"{n}: splits must be 1 … {prob.max_splits}, got {splits}")
                work, counters = workspace(qkv.device, B, nh, splits)
                launcher(qkv, k_cache, v_cache, pos, rope, out, work, counters, B, nh, nkv, max_seq, splits)
            return out

        op.__name__ = name or getattr(launcher, "__name__", "decode_attention_op")
        return op

    def call(self, op, inputs, out):
        op(*inputs, out=out)


@dataclass
class SiluMul:
    """SwiGLU's activation: act[M, I] = silu(gate_up[:, :I]) · gate_up[:, I:] (the fused gate and up projections).
    Launchers: `fn(gate_up, act, M, I)`.
    Special inputs: gates deep in silu's negative tail (silu → 0) and positive tail (silu → g), products near FP16's
    largest value, and all of them in one batch; each row is measured against its own size."""
    name: str = "silu_mul"
    ceiling: str = "fp16"
    in_dtype: torch.dtype = torch.float16
    out_dtype: torch.dtype = torch.float16
    check_shapes: tuple = ((1, 8), (3, 14336), (16, 1000), (7, 24), (64, 4096))
    demo_shapes: ClassVar[tuple] = ((1, 14336), (16, 14336))

    def baseline(self):
        return "PyTorch ops", decode_math.torch_silu_mul

    def describe(self, shape):
        return f"M={shape[0]} I={shape[1]}"

    def flops(self, shape):
        return 5 * shape[0] * shape[1]

    def bytes(self, shape):
        return 2 * 3 * shape[0] * shape[1]

    def out_shape(self, shape):
        return tuple(shape)

    def make_inputs(self, shape, gen=None, device="cuda"):
        M, I = shape
        return (2 * torch.randn(M, 2 * I, generator=gen, device=device)).half(),

    def reference(self, inputs):
        gu = inputs[0].double()
        I = gu.shape[1] // 2
        return torch.nn.functional.silu(gu[:, :I]) * gu[:, I:]

    @staticmethod
    def _rows(kinds, I, gen, device):
        """gate_up with one row per kind: "random" (as make_inputs), "negative" (gates −8 … −17, a quarter −90 …
        −6e4), "positive" (gates 20 … 2000), "range" (gates 1.5 … 4 and up such that silu(g)·up is 0.6 … 0.95 of
        65504), "zero" (gates 0)."""
        rows = []
        for kind in kinds:
            u = _signs((I,), gen, device)
            if kind == "negative":
                g = -_rand((I,), 8, 17, gen, device)
                far = torch.rand(I, generator=gen, device=device) < 0.25
                g = torch.where(far, -_rand((I,), 90, 6e4, gen, device), g)
                u = u * _rand((I,), 0.5, 4, gen, device)
            elif kind == "positive":
                g, u = _rand((I,), 20, 2000, gen, device), u * _rand((I,), 0.5, 15, gen, device)
            elif kind == "range":
                g = _rand((I,), 1.5, 4, gen, device).half().float()
                u = u * _rand((I,), 0.6, 0.95, gen, device) * FP16_MAX / torch.nn.functional.silu(g)
            else:
                g = 2 * torch.randn(I, generator=gen, device=device) * (kind != "zero")
                u = 2 * torch.randn(I, generator=gen, device=device)
            rows.append(torch.cat([g, u]))
        return (torch.stack(rows).half(),)

    @property
    def specials(self) -> tuple:
        def rows(kinds):
            return lambda gen, device: self._rows(kinds, 1000, gen, device)

        return (Special("gates in the negative tail", (4, 1000), "silu(g) = g·σ(g) → 0 for g ≪ 0 (−4.5e-4 at −10, "
                        "−7e-7 at −17): an exponential taken in FP16 (e^11.1 overflows it) or a sigmoid clamped at ±8 "
                        "gets these wrong, and past g = −88 e^−g overflows even FP32 (g / (1 + e^−g) must give −0, "
                        "not NaN)", rows(("negative",) * 4), rows=True),
                Special("gates in the positive tail", (4, 1000), "silu(g) → g for g ≫ 0, gates to 2000: e^g overflows "
                        "FP32 from g = 89, so a sigmoid written e^g / (1 + e^g) gives inf/inf = NaN",
                        rows(("positive",) * 4), rows=True),
                Special("products near FP16's max", (4, 1000), "silu(g)·up from 3.9e4 to 6.2e4 while g·up passes "
                        "65504: right only if formed in FP32 (or silu(g) first), never g·up in FP16",
                        rows(("range",) * 4), rows=True),
                Special("every kind of row in one batch", (6, 1000), "random, both tails, near-overflow and zero gates "
                        "together", rows(("random", "negative", "positive", "range", "zero", "random")), rows=True))

    def bind(self, launcher, name=None):
        def op(gate_up, out=None):
            n = op.__name__
            _need_fp16(gate_up, "gate_up [M, 2·I]", n, 2)
            M, I = gate_up.shape[0], gate_up.shape[1] // 2
            if gate_up.shape[1] % 16:
                raise ValueError(f"{n}: gate_up has {gate_up.shape[1]} columns; it must be 2·I with I a multiple of 8")
            out = _out(out, (M, I), n, gate_up.device, ("M", "I"))
            if M:
                launcher(gate_up, out, M, I)
            return out

        op.__name__ = name or getattr(launcher, "__name__", "silu_mul_op")
        return op

    def call(self, op, inputs, out):
        op(*inputs, out=out)


def shape_of(problem, args) -> tuple | None:
    """The problem's shape tuple from a bound op's arguments (None where they are not the tensors it takes: the
    op's own checks then say what is wrong)."""
    try:
        a0 = args[0]
        if isinstance(problem, Linear):
            M, K = a0.shape
            w = args[1]
            return (M, w.shape[0] if isinstance(w, torch.Tensor) else w.n, K)
        if isinstance(problem, ScaleAdd):
            return (a0.numel(),)
        if isinstance(problem, DequantW8):
            return (a0.shape[0], a0.shape[1] * problem.per_element)
        if isinstance(problem, DequantNF4):
            return (a0.shape[0], a0.shape[1] * 2)
        if isinstance(problem, (AddRMSNorm,)):
            return tuple(a0.shape)
        if isinstance(problem, SiluMul):
            return (a0.shape[0], a0.shape[1] // 2)
        if isinstance(problem, DecodeAttention):
            B, nkv, max_seq, _ = args[1].shape
            return (B, max_seq, a0.shape[1] // problem.head_dim - 2 * nkv, nkv)
    except (AttributeError, IndexError, TypeError, ValueError):
        return None
    return None
