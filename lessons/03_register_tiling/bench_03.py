"""Lesson 03's benchmark: every step of the register-tiling ladder against cuBLAS FP32 (TF32 off), in one run.

    python lessons/03_register_tiling/bench_03.py [--sizes 4096] [--exercises] [--record]

Each step is checked first (on the odd shapes of the FP32 problem) and timed only if it passes; the table gives
each step's TFLOP/s, its % of cuBLAS measured in the same run, its gain over the step before, and the floor the
roofline predicts. The notebook imports it (`import bench_03`). With --record the rows go to build/results/03.json
(results/03.json with COURSE_RECORD=1). The tile arithmetic (`tiles`, `resources`) needs no GPU.
"""
from __future__ import annotations

import argparse
import sys
from dataclasses import dataclass

from harness import bench, build, catalog, check, results, roofline

SECTION = "bench"
CUBLAS = "cuBLAS FP32"


@dataclass(frozen=True)
class Tile:
    """One step's tiling: a BM×BN block tile of `threads` threads, each computing TM×TN outputs, BK deep."""
    step: str
    launcher: str
    bm: int
    bn: int
    tm: int
    tn: int
    bk: int = 8
    buffers: int = 1

    @property
    def threads(self) -> int:
        return self.bm * self.bn // (self.tm * self.tn)

    def smem_loads_per_fma(self) -> float:
        """Shared-memory floats a thread reads per FMA: TM + TN values feed TM·TN FMAs each k."""
        return (self.tm + self.tn) / (self.tm * self.tn)

    def flop_per_smem_byte(self) -> float:
        return 2 * self.tm * self.tn / (4 * (self.tm + self.tn))

    def flop_per_global_byte(self) -> float:
        """A block tile reads (BM + BN)·BK floats from global memory (L2) for 2·BM·BN·BK FLOPs."""
        return 2 * self.bm * self.bn / (4 * (self.bm + self.bn))

    def smem_bytes(self, pad: int = 4) -> int:
        """Both tiles stored transposed, [BK][rows + pad] floats, times the number of buffers."""
        return self.buffers * self.bk * (self.bm + pad + self.bn + pad) * 4


# Lesson 02's tiled kernel for comparison (one output per thread), then the five steps and the fast kernel.
TILES = [
    Tile("02 smem tile", "gemm_tiled", 32, 32, 1, 1, bk=32),
    Tile("03.1 1-D", "gemm_regtile_1d", 64, 64, 8, 1),
    Tile("03.2 2-D", "gemm_regtile_2d", 128, 128, 8, 8),
    Tile("03.3 float4", "gemm_regtile_vec", 128, 128, 8, 8),
    Tile("03.4 warp", "gemm_regtile_warp", 128, 128, 8, 8),
    Tile("03.5 double", "gemm_regtile_db", 128, 128, 8, 8, buffers=2),
    Tile("fast BK 8", "gemm_regtile_wide_bk8", 128, 256, 8, 16, buffers=2),
    Tile("fast BK 16", "gemm_regtile_wide", 128, 256, 8, 16, bk=16, buffers=2),
]


def tiles() -> str:
    """Loads per FMA and arithmetic intensity of each step's tiles (no GPU needed)."""
    out = [f"{'step':<13} {'block':>8} {'thread':>7} {'threads':>7} {'smem loads/FMA':>15} "
           f"{'FLOP/B smem':>12} {'FLOP/B global':>14}"]
    for t in TILES:
        out.append(f"{t.step:<13} {f'{t.bm}x{t.bn}':>8} {f'{t.tm}x{t.tn}':>7} {t.threads:>7} "
                   f"{t.smem_loads_per_fma():>15.3f} {t.flop_per_smem_byte():>12.2f} {t.flop_per_global_byte():>14.1f}")
    return "\n".join(out)


# ptxas's name for each step's kernel (the solutions, as compiled here; the fast file's double-buffered, float4 ones)
PTXAS = {"gemm_regtile_1d": ("regtile_gemm", "regtile_1d_kernel"),
         "gemm_regtile_2d": ("regtile_gemm", "regtile_kernel<false, false>"),
         "gemm_regtile_vec": ("regtile_gemm", "regtile_kernel<true, false>"),
         "gemm_regtile_warp": ("regtile_gemm", "regtile_kernel<true, true>"),
         "gemm_regtile_db": ("regtile_gemm", "regtile_db_kernel"),
         "gemm_regtile_wide_bk8": ("regtile_fast", "gemm_regtile_kernel<true, true, 4, 8>"),
         "gemm_regtile_wide": ("regtile_fast", "gemm_regtile_kernel<true, true, 4, 16>")}


def resources(arch: str = "sm_90", regs_per_scheduler: int = 16384, smem_per_sm: int = 233472,
              max_threads: int = 2048) -> str:
    """Per block: shared memory from the tile sizes, the registers the accumulators alone need and the registers
    ptxas -v gives a thread (compiles, no GPU needed); how many blocks an SM holds by each limit (an H100 or H200 SM:
    4 schedulers of 16,384 registers, given to warps in units of 256; 228 KB of shared memory, 1 KB of it reserved
    per block; 2,048 threads: cuda_occupancy.h's arithmetic)."""
    found = {f: build.load(3, f, solution=True).resources() for f in ("regtile_gemm", "regtile_fast")}
    out = [f"{'step':<13} {'threads':>7} {'smem B':>7} {'acc regs':>8} {'registers':>9} {'blocks/SM by regs':>17} "
           f"{'by smem':>7} {'by threads':>10} {'warps/SM':>8}"]
    for t in TILES[1:]:
        f, kernel = PTXAS[t.launcher]
        regs = found[f].get(kernel, {}).get(arch, {}).get("registers")
        by_smem = smem_per_sm // (t.smem_bytes() + 1024)
        by_threads = max_threads // t.threads
        if regs is None:
            out.append(f"{t.step:<13} {t.threads:>7} {t.smem_bytes():>7} {t.tm * t.tn:>8} (no ptxas report for {arch})")
            continue
        by_regs = regs_per_scheduler // (-(-regs * 32 // 256) * 256) * 4 // (t.threads // 32)
        warps = min(by_regs, by_smem, by_threads) * t.threads // 32
        out.append(f"{t.step:<13} {t.threads:>7} {t.smem_bytes():>7} {t.tm * t.tn:>8} {regs:>9} {by_regs:>17} "
                   f"{by_smem:>7} {by_threads:>10} {warps:>8}")
    out.append(f"(registers: ptxas -v for {arch}; accumulators, addresses and the TM + TN values read per k. "
               f"The SM holds the fewest blocks of the three limits; 64 warps at most)")
    return "\n".join(out)


def floor_us(shape, c: dict | None = None) -> float:
    """The roofline's floor for y = x·Wᵀ in FP32 at `shape`: the larger of compute and DRAM time."""
    prob = catalog.FP32
    return roofline.floor_us(prob.flops(shape), prob.bytes(shape), c or roofline.ceilings(), "fp32")


def ops(solution: bool | None = None) -> dict:
    """label -> op: cuBLAS, lesson 02's tiled kernel, then lesson 03's launchers in ladder order (lesson 02's and the
    fast ones always from solutions/)."""
    import torch

    def cublas(x, W, out=None):
        return torch.nn.functional.linear(x, W)
    found = {CUBLAS: cublas}
    tiled = next(k for k in catalog.kernels(2) if k.launcher == "gemm_tiled")  # where lesson 02 left off
    found[tiled.label] = catalog.op(tiled, solution=True)
    for k in catalog.kernels(3):
        found[k.label] = catalog.op(k, solution=solution)
    return found


def labels() -> list[str]:
    """The ladder's labels in order: lesson 02's tiled kernel, then lesson 03's launchers (no GPU needed)."""
    return [next(k.label for k in catalog.kernels(2) if k.launcher == "gemm_tiled")] + [k.label for k in catalog.kernels(3)]


def step(i: int, size: int = 4096) -> list[dict]:
    """Step i of the ladder (1-5, then the fast kernel's 6 and 7) and the step before it, checked, then timed
    against cuBLAS at size³; prints the table with the floor."""
    names = labels()
    if not 1 <= i < len(names):
        raise ValueError(f"step must be 1 to {len(names) - 1}, not {i}")
    rows = run((size,), only=names[i - 1:i + 1])
    print(table(rows))
    return rows


def run(sizes=(4096,), *, solution: bool | None = None, record: bool = False, reps: int = 50, only=None) -> list[dict]:
    """Check every step, then time the ones that pass against cuBLAS in one run (rows of bench.compare).
    only: labels to time (with cuBLAS), e.g. one step and the step before it."""
    import torch
    torch.backends.cuda.matmul.allow_tf32 = False  # the baseline is true FP32 on CUDA cores
    timed = {}
    for label, op in ops(solution).items():
        if only is not None and label != CUBLAS and label not in only:
            continue
        if label != CUBLAS:
            res = check.check(catalog.FP32, op)
            print(("PASS " if res.ok else "FAIL ") + label)
            if not res.ok:
                print(res.first_failure())
                continue
        timed[label] = op
    rows = bench.compare(catalog.FP32, timed, [(n, n, n) for n in sizes], baseline=CUBLAS, reps=reps, verbose=False)
    if record:
        results.record(3, SECTION, rows)
    return rows


def table(rows: list[dict], c: dict | None = None) -> str:
    """Each step at each size: TFLOP/s, % of cuBLAS (same run), gain over the step before, and the floor at the
    ceilings c of the GPU the rows were measured on (this GPU's by default)."""
    c = c or roofline.ceilings()
    out = []
    for shape in sorted({tuple(r["shape"]) for r in rows}):
        at = [r for r in rows if tuple(r["shape"]) == shape]
        fl = floor_us(shape, c)
        out.append(f"M = N = K = {shape[0]}: the roofline's floor is {fl:,.0f} µs "
                   f"({catalog.FP32.flops(shape) / fl / 1e6:.1f} TFLOP/s)")
        out.append(f"  {'kernel':<30} {'µs':>9} {'TFLOP/s':>8} {'% cuBLAS':>9} {'x step before':>14}")
        prev = None
        for r in at:
            gain = f"{prev / r['us']:.2f}" if prev and r["op"] != CUBLAS else ""
            out.append(f"  {r['op']:<30} {r['us']:>9,.1f} {r['tflops']:>8.1f} {r['pct_baseline']:>8.1f}% {gain:>14}")
            prev = r["us"] if r["op"] != CUBLAS else prev
    return "\n".join(out)


def chart(rows: list[dict], shape=(4096, 4096, 4096), c: dict | None = None):
    """The ladder on the FP32 roofline at one shape: every kernel has the same DRAM intensity there (the problem's),
    so the points stand on one vertical line; each is numbered and named in the legend, never on the plot."""
    import matplotlib.pyplot as plt
    import numpy as np
    c = c or roofline.ceilings()
    prob = catalog.FP32
    at = [r for r in rows if tuple(r["shape"]) == tuple(shape)]
    fig, (ax, bar) = plt.subplots(1, 2, figsize=(11, 4.2), gridspec_kw={"width_ratios": [1, 1.15]})
    bw, peak = c["copy_GBps"] / 1e3, roofline.rate(c, "fp32")
    ai = np.logspace(0, 4, 100)
    ax.plot(ai, np.minimum(peak, bw * ai), color="0.3", lw=1.5, label=f"roof: {peak:g} TFLOP/s, {bw:.2f} TB/s")
    x = prob.flops(shape) / prob.bytes(shape)
    for i, r in enumerate(at):
        ax.scatter([x], [r["tflops"]], s=40, zorder=5, color=f"C{i % 10}", marker="o*sD^v<>ph"[i % 10],
                   label=f"{i}: {r['op']}")
    ax.set_xscale("log"); ax.set_yscale("log")
    ax.set_xlim(1, 1e4); ax.set_ylim(0.5, peak * 2)
    ax.set_xlabel("FLOP per byte of DRAM traffic"); ax.set_ylabel("TFLOP/s")
    ax.set_title(f"FP32 roofline of the {c['gpu']}, {prob.describe(shape)}", fontsize=9)
    ax.grid(True, which="both", lw=0.3)
    ax.legend(fontsize=7, loc="upper left", bbox_to_anchor=(0.0, -0.18), ncol=2, frameon=False)
    labels = [f"{i}: {r['op']}" for i, r in enumerate(at)]
    vals = [r["pct_baseline"] for r in at]
    bar.barh(range(len(at)), vals, color=[f"C{i % 10}" for i in range(len(at))])
    for i, v in enumerate(vals):
        bar.text(v + 1, i, f"{v:.0f}%", va="center", fontsize=8)
    bar.set_yticks(range(len(at)), labels, fontsize=8)
    bar.invert_yaxis()
    bar.set_xlim(0, max(110, max(vals) * 1.15))
    bar.set_xlabel("% of cuBLAS FP32 (same run)")
    bar.set_title("each step against cuBLAS", fontsize=9)
    fig.tight_layout()
    return fig


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--sizes", type=int, nargs="+", default=[4096])
    ap.add_argument("--exercises", action="store_true", help="time your kernels/ file instead of the solution")
    ap.add_argument("--record", action="store_true")
    a = ap.parse_args(argv)
    from harness import toolchain
    if not toolchain.gpu_available():
        print(f"The benchmark {toolchain.NO_GPU_REASON}.")
        print(tiles())
        return 0
    rows = run(a.sizes, solution=not a.exercises, record=a.record)
    print(table(rows))
    return 0


if __name__ == "__main__":
    sys.exit(main())
