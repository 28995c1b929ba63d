"""The problems the course's kernels solve: inputs, reference, FLOPs and bytes, and a safe call.

A problem knows how to make fresh random inputs for a shape, compute the reference in higher
precision, count the work (FLOPs) and the fewest bytes any kernel must move, and call a kernel
launcher with shape checks, so a wrong shape is a clear error rather than a wild pointer.
"""
from __future__ import annotations

from dataclasses import dataclass

import torch

DTYPE_BYTES = {torch.float32: 4, torch.float16: 2, torch.bfloat16: 2, torch.int8: 1, torch.int32: 4}


def _need_2d(t, what, name):
    if not isinstance(t, torch.Tensor):
        raise TypeError(f"{name}: {what} must be a torch.Tensor, got {type(t).__name__}")
    if t.dim() != 2:
        raise ValueError(f"{name}: {what} must be 2-D, got shape {tuple(t.shape)}")


@dataclass
class Linear:
    """y[M, N] = x[M, K] · W[N, K]ᵀ, with W stored as torch.nn.Linear stores it.

    Kernel launchers have the form `fn(x, W, y, M, N, K)` (stream implicit)."""
    in_dtype: torch.dtype = torch.float32
    out_dtype: torch.dtype = torch.float32
    name: str = "linear"
    # M, N, K that are not multiples of any tile, M = 1, and aligned ones for the fast paths.
    check_shapes: tuple = ((1, 67, 129), (17, 33, 65), (127, 255, 1001), (1, 1024, 256),
                           (200, 129, 256), (256, 512, 384), (96, 1000, 4099), (512, 512, 512))

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

    Kernel launchers have the form `fn(x, b, out, a, n)`."""
    a: float = 2.0
    name: str = "scale_add"
    ceiling: str = "fp32"
    in_dtype: torch.dtype = torch.float32
    out_dtype: torch.dtype = torch.float32
    check_shapes: tuple = ((1,), (31,), (1000,), (4099,), (1 << 20,), ((1 << 22) + 3,))

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
