"""What each lesson's kernel files export, which problem each launcher solves, and its exercises.
Tests, the ladder runner and the notebooks all read this one table."""
from __future__ import annotations

import inspect
from dataclasses import dataclass

import torch

from . import build
from .problems import (AddRMSNorm, DecodeAttention, DequantNF4, DequantW4, DequantW8, GemvLinear, Linear, NF4Linear,
                       NF4TilesDQLinear, NF4TilesLinear, ScaleAdd, SiluMul, W4A8Linear, W4A16FragLinear, W4A16Linear,
                       W4A16TilesLinear, W8A8Linear, W8A16Linear, W8A16TilesLinear)
from .problems import DECODE_SHAPES, Shapes, shape_of


@dataclass(frozen=True)
class Kernel:
    lesson: int
    file: str  # stem of the .cu file in kernels/NN_*/ and solutions/NN_*/
    launcher: str  # the EXPORT function
    problem: object
    exercises: tuple[str, ...]  # exercise ids this launcher needs
    label: str  # how tables name it
    stub_check: str = "check"  # how the exercise version is shown wrong: "check" (values) or a sanitizer tool
    # False: a lesson's fast kernel, kept in solutions/ only (no exercise, no file in kernels/); op() and the
    # stub tools then take the solution, the only version there is.
    stub: bool = True


FP32 = Linear()
FP16 = Linear(torch.float16, torch.float16, "linear_f16")
INT8 = Linear(torch.int8, torch.int32, "linear_s8")
# Lesson 04's teaching kernels copy 16-byte pieces of rows: K a multiple of 16 bytes. Check shapes with K a multiple
# of 16 elements (both types) that still end in a partial tile, M = 1 and N not a multiple of anything.
_K16_SHAPES = ((1, 67, 128), (17, 33, 16), (127, 255, 1008), (1, 1024, 256), (200, 129, 272), (256, 512, 384),
               (96, 1000, 4112), (512, 512, 512))


@dataclass
class _Rows16Linear(Linear):
    """Linear for kernels that copy 16-byte pieces of rows with cp.async: x and W must start 16-byte aligned."""

    def bind(self, launcher, name: str | None = None):
        inner = super().bind(launcher, name)

        def op(x, W, out=None):
            for t, what in ((x, "x"), (W, "W")):
                if isinstance(t, torch.Tensor) and t.is_cuda and t.data_ptr() % 16:
                    raise ValueError(f"{op.__name__}: {what} must start on a 16-byte boundary (the kernel copies "
                                     "16-byte pieces of its rows); pass a freshly allocated tensor, e.g. .clone()")
            return inner(x, W, out=out)

        op.__name__ = inner.__name__
        return op


FP16_K8 = _Rows16Linear(torch.float16, torch.float16, "linear_f16_k8", check_shapes=_K16_SHAPES)
INT8_K16 = _Rows16Linear(torch.int8, torch.int32, "linear_s8_k16", check_shapes=_K16_SHAPES)
GEMV_F16 = GemvLinear(torch.float16, torch.float16, "gemv_f16")
# Lesson 06's teaching GEMV reads 16 weights per lane: K a multiple of 16 (check shapes: M past one grid row of
# 8 tokens, N not a multiple of the 4 outputs a block computes).
GEMV_F16_K16 = GemvLinear(torch.float16, torch.float16, "gemv_f16_k16", k_multiple=16,
                          check_shapes=((1, 67, 16), (17, 33, 48), (9, 255, 1024), (1, 1024, 256), (3, 129, 4096),
                                        (16, 511, 384), (200, 100, 4112)))
W8A16 = W8A16Linear()
W8A16_TILES = W8A16TilesLinear()
DEQUANT_W8 = DequantW8()
W8A8 = W8A8Linear()
W4A16 = W4A16Linear()
W4A16_ASYM = W4A16Linear(symmetric=False, name="w4a16_asym")
W4A16_TILES = W4A16TilesLinear()
W4A16_TILES_ASYM = W4A16TilesLinear(symmetric=False, name="w4a16_tiles_asym")
DEQUANT_W4 = DequantW4()
DEQUANT_NF4 = DequantNF4()
NF4_LINEAR = NF4Linear()
NF4_TILES = NF4TilesLinear()
NF4_TILES_DQ = NF4TilesDQLinear()
W4A8 = W4A8Linear()
W4A16_FRAG = W4A16FragLinear()
ADD_RMSNORM = AddRMSNorm()
ATTENTION = DecodeAttention()
SILU_MUL = SiluMul()

KERNELS = [
    Kernel(0, "scale_add", "scale_add", ScaleAdd(), ("00.a",), "scale_add"),
    Kernel(1, "naive_gemm", "gemm_naive", FP32, ("01.a",), "01 naive (thread/output)"),
    Kernel(1, "naive_gemm", "gemm_coalesced", FP32, ("01.b",), "01 coalesced (warp/output)"),
    Kernel(2, "tiled_gemm", "gemm_tiled_conflicts", FP32, ("02.a",), "02 smem tiled, bank conflicts"),
    Kernel(2, "tiled_gemm", "gemm_tiled", FP32, ("02.a",), "02 smem tiled, padded"),
    Kernel(2, "race_demo", "gemm_xchunk", FP32, ("02.b",), "02 x in shared chunks (the race)", "racecheck"),
    # Lesson 03's ladder, one step per launcher; the 1-D step is read, not written. regtile_fast.cu is the
    # lesson's fast kernel: solutions/ only (stub=False), so kernels/ has no counterpart of it by design.
    Kernel(3, "regtile_gemm", "gemm_regtile_1d", FP32, (), "03.1 1-D register tile (8x1)"),
    Kernel(3, "regtile_gemm", "gemm_regtile_2d", FP32, ("03.a",), "03.2 2-D register tile (8x8)"),
    Kernel(3, "regtile_gemm", "gemm_regtile_vec", FP32, ("03.a", "03.b"), "03.3 + 128-bit global loads"),
    Kernel(3, "regtile_gemm", "gemm_regtile_warp", FP32, ("03.a", "03.b"), "03.4 + warp tiling"),
    Kernel(3, "regtile_gemm", "gemm_regtile_db", FP32, ("03.a", "03.b", "03.c"), "03.5 + double buffering"),
    Kernel(3, "regtile_fast", "gemm_regtile_wide_bk8", FP32, (), "03 8x16 tile, BK 8", stub=False),
    Kernel(3, "regtile_fast", "gemm_regtile_wide", FP32, (), "03 8x16 tile, BK 16", stub=False),
    # Lesson 04's three teaching steps in FP16 and INT8; tc_fast.cu is the lesson's fast kernel (solutions/ only),
    # its labels those of its recorded rows (results/04.json).
    Kernel(4, "tc_gemm", "gemm_wmma_f16", FP16_K8, ("04.a",), "04.1 WMMA FP16"),
    Kernel(4, "tc_gemm", "gemm_wmma_s8", INT8_K16, ("04.a",), "04.1 WMMA INT8"),
    Kernel(4, "tc_gemm", "gemm_mma_f16", FP16_K8, ("04.b",), "04.2 mma.sync FP16"),
    Kernel(4, "tc_gemm", "gemm_mma_s8", INT8_K16, ("04.b",), "04.2 mma.sync INT8"),
    Kernel(4, "tc_gemm", "gemm_mma_db_f16", FP16_K8, ("04.b", "04.c"), "04.3 + cp.async double buffer FP16"),
    Kernel(4, "tc_gemm", "gemm_mma_db_s8", INT8_K16, ("04.b", "04.c"), "04.3 + cp.async double buffer INT8"),
    Kernel(4, "tc_fast", "gemm_fast_wmma_f16", FP16, (), "04 WMMA FP16", stub=False),
    Kernel(4, "tc_fast", "gemm_fast_wmma_s8", INT8, (), "04 WMMA INT8", stub=False),
    Kernel(4, "tc_fast", "gemm_fast_mma_f16", FP16, (), "04 mma.sync FP16", stub=False),
    Kernel(4, "tc_fast", "gemm_fast_mma_s8", INT8, (), "04 mma.sync INT8", stub=False),
    # Lesson 06: the teaching kernels (one GEMV template over three formats), then w8a16_fast.cu, the lesson's fast
    # kernel (solutions/ only; its labels those of the recorded rows, results/06.json). Lessons 07, 09 and 11 use it.
    Kernel(6, "w8a16", "dequant_w8_basic", DEQUANT_W8, ("06.a",), "06.1 dequantize INT8 to FP16"),
    Kernel(6, "w8a16", "gemv_f16_basic", GEMV_F16_K16, ("06.b",), "06.2 FP16 GEMV (lanes split K)"),
    Kernel(6, "w8a16", "gemv_w8a16_basic", W8A16, ("06.a", "06.b"), "06.3 fused W8A16 GEMV"),
    Kernel(6, "w8a16", "linear_w8a8_basic", W8A8, ("06.b", "06.c"), "06.4 W8A8 (per-token quantize + INT8 GEMV)"),
    Kernel(6, "w8a16_fast", "gemv_w8a16", W8A16, (), "06 fused W8A16 GEMV", stub=False),
    Kernel(6, "w8a16_fast", "gemv_w8a16_tiles", W8A16_TILES, (), "06 fused W8A16 GEMV, 16-row tiles", stub=False),
    Kernel(6, "w8a16_fast", "gemv_f16", GEMV_F16, (), "06 FP16 GEMV", stub=False),
    Kernel(6, "w8a16_fast", "dequant_w8", DEQUANT_W8, (), "06 dequantize INT8 to FP16", stub=False),
    Kernel(6, "w8a16_fast", "gemm_w8a16", W8A16, (), "06 fused W8A16 tiled", stub=False),
    Kernel(6, "w8a16_fast", "linear_w8a16", W8A16, (), "06 fused W8A16 (GEMV to M=16, then tiled)", stub=False),
    Kernel(6, "w8a16_fast", "linear_w8a8", W8A8, (), "06 W8A8 (per-token quantize + INT8 GEMM)", stub=False),
    # Lesson 07's two teaching kernels; w4a16_fast.cu is the lesson's fast kernel (solutions/ only), its labels those
    # of its recorded rows (results/07.json). Lessons 08-12 and the decode step use its launchers by name.
    Kernel(7, "w4a16", "dequant_int4", DEQUANT_W4, ("07.a",), "07.1 dequantize INT4 to FP16 (one LOP3 per pair)"),
    Kernel(7, "w4a16", "gemv_int4", W4A16, ("07.a", "07.b"), "07.2 W4A16 GEMV, scale after the mma"),
    Kernel(7, "w4a16_fast", "gemv_w4a16", W4A16, (), "07 fused W4A16 GEMV", stub=False),
    Kernel(7, "w4a16_fast", "gemv_w4a16_asym", W4A16_ASYM, (), "07 fused W4A16 GEMV, zero points", stub=False),
    Kernel(7, "w4a16_fast", "gemv_w4a16_tiles", W4A16_TILES, (), "07 fused W4A16 GEMV, 16-row tiles", stub=False),
    Kernel(7, "w4a16_fast", "gemv_w4a16_tiles_asym", W4A16_TILES_ASYM, (),
           "07 fused W4A16 GEMV, 16-row tiles, zero points", stub=False),
    Kernel(7, "w4a16_fast", "gemm_w4a16", W4A16, (), "07 fused W4A16 tiled", stub=False),
    Kernel(7, "w4a16_fast", "gemm_w4a16_asym", W4A16_ASYM, (), "07 fused W4A16 tiled, zero points", stub=False),
    Kernel(7, "w4a16_fast", "linear_w4a16", W4A16, (), "07 fused W4A16 (GEMV to M=16, then tiled)", stub=False),
    Kernel(7, "w4a16_fast", "linear_w4a16_asym", W4A16_ASYM, (),
           "07 fused W4A16, zero points (GEMV to M=16, then tiled)", stub=False),
    Kernel(7, "w4a16_fast", "dequant_w4", DEQUANT_W4, (), "07 dequantize INT4 to FP16", stub=False),
    # Lesson 08's teaching file: five places for the codebook, the banked pair table (08.a) and a warp-per-output
    # GEMV (08.b); nf4_fast.cu is the lesson's fast kernel (solutions/ only), used by lesson 11's decode step.
    Kernel(8, "nf4", "dequant_nf4_global", DEQUANT_NF4, (), "08 NF4 dequantize, codebook in global memory"),
    Kernel(8, "nf4", "dequant_nf4_branchy", DEQUANT_NF4, (), "08 NF4 dequantize, decision tree"),
    Kernel(8, "nf4", "dequant_nf4_smem", DEQUANT_NF4, (), "08 NF4 dequantize, codebook in shared memory"),
    Kernel(8, "nf4", "dequant_nf4_shfl", DEQUANT_NF4, (), "08 NF4 dequantize, codebook in registers (shuffles)"),
    Kernel(8, "nf4", "dequant_nf4_pairs", DEQUANT_NF4, (), "08 NF4 dequantize, table of pairs in shared memory"),
    Kernel(8, "nf4", "dequant_nf4_banked", DEQUANT_NF4, ("08.a",), "08 NF4 dequantize, table of pairs per bank"),
    Kernel(8, "nf4", "gemv_nf4_warp", NF4_LINEAR, ("08.a", "08.b"), "08 NF4 GEMV, a warp per output"),
    Kernel(8, "nf4_fast", "gemv_nf4", NF4_LINEAR, (), "08 fused NF4 GEMV", stub=False),
    Kernel(8, "nf4_fast", "gemv_nf4_tiles", NF4_TILES, (), "08 fused NF4 GEMV, 16-row tiles", stub=False),
    Kernel(8, "nf4_fast", "gemv_nf4_tiles_dq", NF4_TILES_DQ, (), "08 fused NF4 GEMV, 16-row tiles, double-quantized absmax",
           stub=False),
    # Lesson 09's teaching kernel; w4a8_fast.cu is the lesson's fast kernel (solutions/ only), its label that of
    # its recorded rows (results/09.json).
    Kernel(9, "w4a8", "linear_w4a8_simple", W4A8, ("09.a", "09.b", "09.c"),
           "09 W4A8, teaching kernel (per-token quantize + INT4-to-INT8 mma from registers)"),
    Kernel(9, "w4a8_fast", "linear_w4a8", W4A8, (), "09 W4A8 (per-token quantize + INT4-to-INT8 GEMM)", stub=False),
    # Lesson 10's teaching file: the five steps, each measured against the one before (exercise 10.a, the offline
    # reorder, is Python: reorder.py, graded in-process). w4a16_pipe_fast.cu is the lesson's fast kernel (solutions/
    # only), its labels those of its recorded rows (results/10.json); lessons 11 and 12 use linear_w4a16_frag.
    Kernel(10, "w4a16_pipe", "w4a16_smem_tile", W4A16, (), "10 step 1: FP16 tile in shared memory"),
    Kernel(10, "w4a16_pipe", "w4a16_smem_padded", W4A16, (), "10 step 2: + padded tile rows"),
    Kernel(10, "w4a16_pipe", "w4a16_regs", W4A16_FRAG, (), "10 step 3: fragment order, in registers"),
    Kernel(10, "w4a16_pipe", "w4a16_regs_pipe", W4A16_FRAG, ("10.b",), "10 step 4: + cp.async ring"),
    Kernel(10, "w4a16_pipe", "w4a16_regs_split", W4A16_FRAG, ("10.b", "10.c"), "10 step 5: + split-K"),
    Kernel(10, "w4a16_pipe_fast", "gemm_w4a16_writeback", W4A16, (), "10.1 write-back to shared FP16", stub=False),
    Kernel(10, "w4a16_pipe_fast", "gemm_w4a16_writeback_padded", W4A16, (), "10.2 write-back, padded rows", stub=False),
    Kernel(10, "w4a16_pipe_fast", "gemm_w4a16_frag", W4A16_FRAG, (), "10.3 fragment order, in registers", stub=False),
    Kernel(10, "w4a16_pipe_fast", "gemm_w4a16_frag_pipe", W4A16_FRAG, (), "10.4 + cp.async pipeline", stub=False),
    Kernel(10, "w4a16_pipe_fast", "gemm_w4a16_frag_split", W4A16_FRAG, (), "10.5 + split-K", stub=False),
    Kernel(10, "w4a16_pipe_fast", "gemv_w4a16_frag", W4A16_FRAG, (), "10 decode GEMV on fragment order", stub=False),
    Kernel(10, "w4a16_pipe_fast", "linear_w4a16_frag", W4A16_FRAG, (),
           "10.6 + the decode GEMV at M ≤ 8 (lesson 10's kernel)", stub=False),
    # Lesson 11's teaching kernels; decode_ops_fast.cu holds the ones the decode step runs (solutions/ only; its
    # attention reads each kv head once for a group of q heads), the step's rows in results/11.json.
    Kernel(11, "decode_ops", "decode_attention", ATTENTION, ("11.a", "11.b"), "11 decode attention (RoPE, GQA, KV cache)"),
    Kernel(11, "decode_ops", "add_rmsnorm", ADD_RMSNORM, ("11.c",), "11 residual add + RMSNorm"),
    Kernel(11, "decode_ops", "silu_mul", SILU_MUL, ("11.d",), "11 SiLU · up (SwiGLU)"),
    Kernel(11, "decode_ops_fast", "decode_attention_fast", ATTENTION, (),
           "11 decode attention, q heads grouped per kv head (the step's)", stub=False),
    Kernel(11, "decode_ops_fast", "add_rmsnorm_fast", ADD_RMSNORM, (), "11 residual add + RMSNorm (the step's)",
           stub=False),
    Kernel(11, "decode_ops_fast", "silu_mul_fast", SILU_MUL, (), "11 SiLU · up (the step's)", stub=False),
    # Lesson 12's teaching kernel (one 64-token tile, a ring of full and empty mbarriers); w4a16_wgmma_fast.cu is the
    # lesson's fast kernel (solutions/ only), whose launcher bench_12 records (results/12.json).
    Kernel(12, "w4a16_wgmma", "linear_w4a16_wgmma_basic", W4A16_FRAG, ("12.a", "12.b"),
           "12 W4A16, TMA + wgmma, teaching kernel (64-token tiles, sm_90a)"),
    Kernel(12, "w4a16_wgmma_fast", "linear_w4a16_wgmma", W4A16_FRAG, (), "12 W4A16, TMA + wgmma (sm_90a)", stub=False),
]


# The demo (python -m harness.report demo) times each problem at its demo_shapes; these lessons ask for others, for
# every problem they have: lesson 01 stops at 2048³ (its naive kernels are the slow ones), lesson 04 starts at 2048³
# (smaller GEMMs leave tensor cores idle), lesson 12 goes up to 128 tokens (the tensor-core regime is its point).
DEMO_SHAPES = {1: ((1024, 1024, 1024), (2048, 2048, 2048)),
               4: ((2048, 2048, 2048), (4096, 4096, 4096)),
               12: DECODE_SHAPES + ((128, 8192, 8192),)}


def demo_shapes(lesson: int, problem) -> list[tuple]:
    """The shapes the demo times `problem`'s kernels of `lesson` at."""
    return list(DEMO_SHAPES.get(lesson, problem.demo_shapes))


def kernels(lesson: int | None = None) -> list[Kernel]:
    return [k for k in KERNELS if lesson is None or k.lesson == int(lesson)]


def solution_only() -> set[tuple[int, str]]:
    """(lesson, file stem) of the kernel files that live in solutions/ only (stub=False)."""
    return {(k.lesson, k.file) for k in KERNELS if not k.stub}


# The shapes each kernel takes, by its problem's name (a launcher stricter than its problem would get an entry of its
# own in SHAPES_BY_LAUNCHER). Anything else is refused before any launch (problems.ShapeError); every shape these
# allow is computed right, down to 1 (tests/test_shape_sweep.py sweeps them on the GPU).
_MNK = ("M", "N", "K")
_GROUP = (("K", "one scale per 128 weights along K: pad K with zero weights"),)
SHAPES = {
    "scale_add": Shapes(("n",)),
    "linear": Shapes(_MNK), "linear_f16": Shapes(_MNK), "linear_s8": Shapes(_MNK),
    "linear_f16_k8": Shapes(_MNK, (("K", 8),), why=(("K", "each cp.async copies 16 bytes of a row: pad K with zeros"),)),
    "linear_s8_k16": Shapes(_MNK, (("K", 16),), why=(("K", "each cp.async copies 16 bytes of a row: pad K with zeros"),)),
    "gemv_f16": Shapes(_MNK, (("K", 64),), why=(("K", "the GEMV reads W in 64-wide blocks along K"),)),
    "gemv_f16_k16": Shapes(_MNK, (("K", 16),), why=(("K", "each lane reads 16 weights (one 32-byte piece) at a time"),)),
    "w8a16": Shapes(_MNK, (("K", 128),), why=_GROUP), "w8a16_tiles": Shapes(_MNK, (("K", 128),), why=_GROUP),
    "dequant_w8": Shapes(("N", "K"), (("K", 128),), why=_GROUP),
    "w8a8": Shapes(_MNK, (("K", 128),), why=(("K", "the INT8 GEMM reads K in 128-wide tiles"),)),
    **{name: Shapes(_MNK, (("K", 128),), why=_GROUP)
       for name in ("w4a16", "w4a16_asym", "w4a16_tiles", "w4a16_tiles_asym", "w4a16_frag")},
    "dequant_w4": Shapes(("N", "K"), (("K", 128),), why=_GROUP),
    "dequant_nf4": Shapes(("N", "K"), (("K", 64),), why=(("K", "one absmax per 64 weights, not crossing a row"),)),
    **{name: Shapes(_MNK, (("K", 128),), why=(("K", "the fused NF4 kernels read 128 weights at a time"),))
       for name in ("nf4_linear", "nf4_tiles", "nf4_tiles_dq")},
    "w4a8": Shapes(_MNK, (("K", 128),), (("K", 65536),),
                   why=(("K", "one integer scale per 128 weights; past 65536 the INT32 accumulator could overflow"),)),
    "add_rmsnorm": Shapes(("M", "H"), (("H", 8),), why=(("H", "each thread moves 16 bytes"),)),
    "silu_mul": Shapes(("M", "I"), (("I", 8),), why=(("I", "each thread moves 16 bytes"),)),
    "decode_attention": Shapes(("B", "ctx", "heads", "kv_heads"), divides=(("kv_heads", "heads"),),
                               why=(("heads", "grouped-query attention: each kv head serves the same number of q heads"),)),
}
SHAPES_BY_LAUNCHER: dict[str, Shapes] = {
    "gemm_xchunk": Shapes(_MNK, at_most=(("M", 65535),), why=(("M", "one row of blocks per row of x: gridDim.y"),)),
}


def shapes(k: Kernel) -> Shapes:
    """The shapes kernel `k` takes."""
    return SHAPES_BY_LAUNCHER.get(k.launcher) or SHAPES[k.problem.name]


def constrained(problem, bound, rules: Shapes):
    """`bound` (a problem's op) refusing, before anything else, a shape outside `rules` with a ShapeError."""
    def op(*args, **kwargs):
        shape = shape_of(problem, args)
        if shape is not None:
            rules.refuse(shape, op.__name__)
        return bound(*args, **kwargs)

    op.__name__ = bound.__name__
    op.__signature__ = inspect.signature(bound)  # check names the inputs from it
    return op


def op(k: Kernel, solution: bool | None = None):
    """Compile (or reuse) the kernel's file and return its launcher bound to its problem, refusing shapes outside
    shapes(k)."""
    mod = build.load(k.lesson, k.file, solution=True if not k.stub else solution)
    return constrained(k.problem, k.problem.bind(getattr(mod, k.launcher), k.label), shapes(k))
