"""Lesson 04's benchmark: the three teaching kernels (WMMA, ldmatrix + mma.sync, + the cp.async double buffer) and
the lesson's fast kernel (solutions/04_tensor_cores/tc_fast.cu) against cuBLAS FP16 and torch._int_mm, in one run.

    python lessons/04_tensor_cores/bench_04.py [--sizes 4096] [--exercises] [--record]

Each kernel is checked first (on its problem's odd shapes) and timed only if it passes. The table gives each
kernel's T(FL)OP/s, its % of the library measured in the same run, its gain over the row before, and the roofline's
floor. The notebook imports it (`import bench_04`). With --record the rows go to build/results/04.json, section
"steps" (results/04.json with COURSE_RECORD=1). The tile arithmetic and the layout tables need no GPU.
"""
from __future__ import annotations

import argparse
import sys
from dataclasses import dataclass

from harness import bench, build, catalog, check, results, roofline

SECTION = "steps"
BASELINES = {"fp16": "cuBLAS FP16", "int8": "torch._int_mm"}
PROBLEMS = {"fp16": catalog.FP16_K8, "int8": catalog.INT8_K16}


# ----------------------------------------------------------------------------------------------
# Arithmetic the notebook checks without a GPU

@dataclass(frozen=True)
class Step:
    """One kernel's tiling: a BM×BN block tile, warps of WM×WN, tiles `row_bytes` of K deep, `stages` of them."""
    name: str
    bm: int = 128
    bn: int = 128
    wm: int = 64
    wn: int = 64
    row_bytes: int = 128
    stages: int = 1
    pad: int = 0

    @property
    def warps(self) -> int:
        return self.bm * self.bn // (self.wm * self.wn)

    def smem_bytes(self) -> int:
        return self.stages * (self.bm + self.bn) * (self.row_bytes + self.pad)

    def mmas_per_tile(self, elem_bytes: int) -> int:
        """mma.sync m16n8 instructions one warp issues per shared tile (K step: 32 bytes)."""
        return (self.wm // 16) * (self.wn // 8) * (self.row_bytes // 32)

    def flop_per_smem_byte(self, elem_bytes: int) -> float:
        """FLOPs per byte a warp reads from shared memory: its A rows and B rows feed WM·WN outputs."""
        return 2 * self.wm * self.wn / (elem_bytes * (self.wm + self.wn))

    def flop_per_l2_byte(self, elem_bytes: int) -> float:
        """FLOPs per byte a block reads from L2 / DRAM: its tile rows of x and W feed BM·BN outputs."""
        return 2 * self.bm * self.bn / (elem_bytes * (self.bm + self.bn))


STEPS = [Step("04.1 WMMA", pad=16), Step("04.2 mma.sync"), Step("04.3 + double buffer", stages=2),
         Step("fast (cp.async)", bn=256, stages=3, pad=16), Step("fast (copy engine)", bn=256, stages=4)]


def tiles() -> str:
    """Per kernel: warps, shared memory, MMAs per tile and the FLOPs each byte read brings (FP16 / INT8 alike)."""
    out = [f"{'kernel':<22} {'BM×BN':>8} {'warps':>5} {'stages':>6} {'smem B':>7} {'mma/tile/warp':>13} "
           f"{'FLOP/B smem':>11} {'FLOP/B L2':>10}"]
    for s in STEPS:
        out.append(f"{s.name:<22} {f'{s.bm}x{s.bn}':>8} {s.warps:>5} {s.stages:>6} {s.smem_bytes():>7} "
                   f"{s.mmas_per_tile(2):>13} {s.flop_per_smem_byte(2):>11.1f} {s.flop_per_l2_byte(2):>10.1f}")
    out.append("(FP16; INT8 moves half the bytes per multiply-add, so both intensities double.)")
    return "\n".join(out)


def mma_lanes(lane: int) -> dict:
    """Which elements of an m16n8k16 FP16 mma.sync a lane holds (PTX ISA, "Matrix fragments for mma.m16n8k16"):
    (row, k) of A for a0..a3, (k, col) of B for b0, b1, (row, col) of C for c0..c3; two halves per A/B register."""
    g, t = lane // 4, lane % 4
    a = [(g + 8 * (r % 2), 2 * t + 8 * (r // 2)) for r in range(4)]
    b = [(2 * t + 8 * r, g) for r in range(2)]
    c = [(g + 8 * (e // 2), 2 * t + e % 2) for e in range(4)]
    return {"a": a, "b": b, "c": c}


def lane_table(lanes=(0, 1, 4, 5, 31)) -> str:
    out = [f"{'lane':>4} {'g,t':>5}  A registers a0..a3 (row, first k)   B b0, b1 (first k, col)   C c0..c3 (row, col)"]
    for L in lanes:
        m = mma_lanes(L)
        out.append(f"{L:>4} {f'{L // 4},{L % 4}':>5}  {' '.join(f'{r},{k}' for r, k in m['a']):<34} "
                   f"{' '.join(f'{k},{c}' for k, c in m['b']):<25} {' '.join(f'{r},{c}' for r, c in m['c'])}")
    return "\n".join(out)


def bank_groups(layout: str, chunk: int = 0, rows=range(8)) -> list[int]:
    """The 16-byte bank group (0-7: banks 4q..4q+3) that chunk `chunk` of each of 8 tile rows starts in, as one
    ldmatrix phase reads them: 'plain' 128-byte rows, 'padded' 144-byte rows, or 'swizzled' (chunk XOR row mod 8)."""
    out = []
    for r in rows:
        if layout == "plain":
            addr = r * 128 + chunk * 16
        elif layout == "padded":
            addr = r * 144 + chunk * 16
        elif layout == "swizzled":
            addr = r * 128 + (chunk ^ (r % 8)) * 16
        else:
            raise ValueError(f"layout must be 'plain', 'padded' or 'swizzled', got {layout!r}")
        out.append(addr // 16 % 8)
    return out


def conflicts() -> str:
    """For each layout: the bank groups of the 8 rows one ldmatrix phase reads, and how many passes that takes."""
    out = [f"{'layout':<9} {'chunk':>5}  bank group of rows 0..7   passes"]
    for layout in ("plain", "padded", "swizzled"):
        for chunk in (0, 3):
            g = bank_groups(layout, chunk)
            out.append(f"{layout:<9} {chunk:>5}  {' '.join(map(str, g)):<24} {max(g.count(v) for v in g):>6}")
    return "\n".join(out)


def floor_us(shape, kind: str, c: dict | None = None) -> float:
    prob = PROBLEMS[kind]
    return roofline.floor_us(prob.flops(shape), prob.bytes(shape), c or roofline.ceilings(), kind)


def floors(n: int = 4096, c: dict | None = None) -> str:
    """The roofline's floor at n³ per kind at the ceilings c (this GPU's by default, the same table() uses): the
    prediction."""
    c = c or roofline.ceilings()
    out = [f"ceilings of the {c['gpu']} (measured {c['date'][:10]}): {c['copy_GBps']:,.0f} GB/s, FP16 "
           f"{c['fp16_TFLOPs']} TFLOP/s, INT8 {c['int8_TOPs']} TOP/s"]
    for kind, prob in PROBLEMS.items():
        shape = (n, n, n)
        fl, by = prob.flops(shape), prob.bytes(shape)
        out.append(f"{kind.upper()} at {n}³: {fl / 1e9:,.0f} GFLOP over {by / 1e6:,.0f} MB = {fl / by:,.0f} FLOP/B; "
                   f"floor {floor_us(shape, kind, c):,.0f} µs ({'compute' if fl / roofline.rate(c, kind) / 1e6 >= by / c['copy_GBps'] / 1e3 else 'memory'}-bound)")
    return "\n".join(out)


# One SM of the H100 / H200 (sm_90; an A100's is the same but for 167,936 B of shared memory), as the CUDA occupancy
# calculator (cuda_occupancy.h) counts it: registers go to warps in units of 256, out of 16,384 per scheduler (4 per
# SM); shared memory to blocks in units of 128 bytes, plus 1 KB the system reserves per block.
SM90 = {"regs_per_scheduler": 16384, "schedulers": 4, "smem": 233472, "smem_reserved": 1024, "warps": 64, "blocks": 32}


def per_sm(regs: int, threads: int, smem: int, sm: dict = SM90) -> dict:
    """How many blocks of `threads` threads, `regs` registers each and `smem` bytes of shared memory one SM holds,
    by each limit (cuda_occupancy.h's arithmetic)."""
    warps = -(-threads // 32)
    per_warp = -(-regs * 32 // 256) * 256
    by = {"registers": (sm["regs_per_scheduler"] // per_warp) * sm["schedulers"] // warps,
          "shared memory": sm["smem"] // (-(-(smem + sm["smem_reserved"]) // 128) * 128),
          "warps": sm["warps"] // warps}
    blocks = min(min(by.values()), sm["blocks"])
    return {"blocks": blocks, "warps": blocks * warps, "limit": ", ".join(k for k, v in by.items() if v == blocks)}


# name in ptxas's report -> (row label, threads per block, bytes of shared memory per block)
_FAST_SMEM = 4 * (128 + 256) * 128 + 16 * 4 + 1024  # the copy-engine ring: 4 stages, 2 mbarriers each, 1 KB alignment
KERNELS = {"tc_gemm": [("gemm_wmma_kernel<__half>", "04.1 WMMA FP16", 128, STEPS[0].smem_bytes()),
                       ("gemm_wmma_kernel<signed char>", "04.1 WMMA INT8", 128, STEPS[0].smem_bytes()),
                       ("gemm_mma_kernel<__half, 1>", "04.2 mma.sync FP16", 128, STEPS[1].smem_bytes()),
                       ("gemm_mma_kernel<signed char, 1>", "04.2 mma.sync INT8", 128, STEPS[1].smem_bytes()),
                       ("gemm_mma_kernel<__half, 2>", "04.3 + double buffer FP16", 128, STEPS[2].smem_bytes()),
                       ("gemm_mma_kernel<signed char, 2>", "04.3 + double buffer INT8", 128, STEPS[2].smem_bytes())],
           "tc_fast": [("gemm_mma_kernel<Cfg<256, 128, 4, true>, __half, true, true>", "fast mma.sync FP16", 256, _FAST_SMEM),
                       ("gemm_mma_kernel<Cfg<256, 128, 4, true>, signed char, true, true>", "fast mma.sync INT8", 256,
                        _FAST_SMEM)]}


def registers(arch: str = "sm_90") -> str:
    """ptxas -v of the lesson's kernels (the solutions, as compiled here) and what it allows per SM of the H200:
    registers per thread -> warps per SM -> blocks per SM. Compiles, needs no GPU."""
    out = [f"{'kernel (' + arch + ')':<26} {'registers':>9} {'spills':>6} {'threads':>7} {'smem B':>7} {'warps/SM':>8} "
           f"{'blocks/SM':>9}  limited by"]
    for name, rows in KERNELS.items():
        res = build.load(4, name, solution=True).resources()
        for kernel, label, threads, smem in rows:
            r = res.get(kernel, {}).get(arch)
            if r is None:
                out.append(f"{label:<26} (no ptxas report for {arch}: build.load(4, {name!r}).resources() has what was built)")
                continue
            occ = per_sm(r["registers"], threads, smem)
            out.append(f"{label:<26} {r['registers']:>9} {r['spill_stores']:>6} {threads:>7} {smem:>7} {occ['warps']:>8} "
                       f"{occ['blocks']:>9}  {occ['limit']}")
    out.append("(an SM: 65,536 registers, 233,472 B of shared memory, 64 warps; accumulators alone: 128 registers per lane)")
    return "\n".join(out)


def fast_steps(n: int = 4096) -> str:
    """The fast kernel's extra steps at n³, each measured (the recorded ablation run of tc_fast.cu: results/04.json,
    section "ablate"), against the library of the same run; then its WMMA kernel through the API alone and as shipped
    (fragments filled by ldmatrix in mma.sync's layout, which the WMMA API does not promise)."""
    sec = results.load(4, "ablate", prefer_local=False)
    names = {"mma_cp_async_copies": "128×256 tiles, 3-stage cp.async ring, next fragments in flight, grouped order",
             "mma_copy_engine_padded_rows": "+ copy engine (TMA) and mbarriers, padded rows",
             "mma_shipped": "+ the copy engine's 128-byte swizzle (as shipped)",
             "wmma_copy_engine_padded_rows": "WMMA API only: load/store_matrix_sync, padded rows, copy engine",
             "wmma_shipped": "WMMA fragments filled by ldmatrix, mma.sync layout assumed (shipped)"}
    out = [f"{'kind':<5} {'step of the fast kernel (mma.sync; then its WMMA twin)':<76} {'µs':>8} {'% library':>10}"]
    for kind, dt in (("FP16", "f16"), ("INT8", "s8")):
        rows = [r for r in results.rows_of(sec) if r.shape[0] == n]
        for key, name in names.items():
            r = next((r for r in rows if r.route == f"{dt}_{key}"), None)
            if r is not None:
                out.append(f"{kind:<5} {name:<76} {r.us:>8,.1f} {r.extra['pct_baseline']:>9.1f}%")
    out.append(f"measured on {results.env_line(sec)}")
    return "\n".join(out)


# ----------------------------------------------------------------------------------------------
# On the GPU

def ops(kind: str, solution: bool = True) -> dict:
    """label -> op: the library, the teaching kernels in order, then the fast kernel (always from solutions/)."""
    import torch
    dt = "f16" if kind == "fp16" else "s8"

    def cublas(x, W, out=None):
        return torch.nn.functional.linear(x, W)

    def int_mm(x, W, out=None):
        return torch._int_mm(x, W.t())
    found = {BASELINES[kind]: cublas if kind == "fp16" else int_mm}
    for k in catalog.kernels(4):
        if k.launcher.endswith(dt) and (k.stub or "mma" in k.launcher):
            found[k.label] = catalog.op(k, solution=solution)
    return found


STEP_LABELS = {1: ("04.1 WMMA",), 2: ("04.1 WMMA", "04.2 mma.sync"), 3: ("04.2 mma.sync", "04.3 + cp.async double buffer")}


def step(n: int, size: int = 4096) -> list[dict]:
    """Check and time step n (with the step before it) in FP16 and INT8 against the libraries, and print the table."""
    labels = [f"{p} {d}" for p in STEP_LABELS[n] for d in ("FP16", "INT8")]
    rows = run((size,), only=labels)
    print(table(rows))
    return rows


def run(sizes=(4096,), kinds=("fp16", "int8"), *, solution: bool = True, record: bool = False, reps: int = 50,
        only=None) -> list[dict]:
    """Check every kernel, then time those that pass against the library, per kind, in one run."""
    rows = []
    for kind in kinds:
        prob, base = PROBLEMS[kind], BASELINES[kind]
        timed = {}
        for label, op in ops(kind, solution).items():
            if label != base and only is not None and label not in only:
                continue
            if label != base:
                res = check.check(prob, op)
                print(("PASS " if res.ok else "FAIL ") + label)
                if not res.ok:
                    print(res.first_failure())
                    continue
            timed[label] = op
        rows += bench.compare(prob, timed, [(n, n, n) for n in sizes], baseline=base, reps=reps, verbose=False)
    if record:
        results.record(4, SECTION, rows)
    return rows


def table(rows: list[dict], c: dict | None = None) -> str:
    """Per kind and size: µs, T(FL)OP/s, % of the library (same run), gain over the row before, and the floor at
    the ceilings c of the GPU the rows were measured on (this GPU's by default, as floors())."""
    c = c or roofline.ceilings()
    out = []
    for kind, base in BASELINES.items():
        for shape in sorted({tuple(r["shape"]) for r in rows if r["baseline"] == bench.route_id(base)}):
            at = [r for r in rows if tuple(r["shape"]) == shape and r["baseline"] == bench.route_id(base)]
            fl = floor_us(shape, kind, c)
            out.append(f"{kind.upper()}, M = N = K = {shape[0]}: the roofline's floor is {fl:,.0f} µs "
                       f"({PROBLEMS[kind].flops(shape) / fl / 1e6:,.0f} T(FL)OP/s)")
            out.append(f"  {'kernel':<36} {'µs':>9} {'T(FL)OP/s':>10} {'% library':>10} {'x row before':>13}")
            prev = None
            for r in at:
                gain = f"{prev / r['us']:.2f}" if prev and r["op"] != base else ""
                out.append(f"  {r['op']:<36} {r['us']:>9,.1f} {r['tflops']:>10.1f} {r['pct_baseline']:>9.1f}% "
                           f"{gain:>13}")
                prev = r["us"] if r["op"] != base else prev
    return "\n".join(out)


def chart(rows: list[dict], shape=(4096, 4096, 4096)):
    """Each kernel's % of its library at one shape, FP16 and INT8 side by side."""
    import matplotlib.pyplot as plt
    fig, axes = plt.subplots(1, 2, figsize=(11, 3.6), sharex=True)
    for ax, (kind, base) in zip(axes, BASELINES.items()):
        at = [r for r in rows if tuple(r["shape"]) == tuple(shape) and r["baseline"] == bench.route_id(base)]
        vals = [r["pct_baseline"] for r in at]
        ax.barh(range(len(at)), vals, color=[f"C{i % 10}" for i in range(len(at))])
        for i, v in enumerate(vals):
            ax.text(v + 1, i, f"{v:.0f}%", va="center", fontsize=8)
        ax.set_yticks(range(len(at)), [r["op"] for r in at], fontsize=8)
        ax.invert_yaxis()
        ax.set_xlim(0, 130)
        ax.set_xlabel(f"% of {base} (same run)")
        ax.set_title(f"{kind.upper()}, M = N = K = {shape[0]}", fontsize=9)
    fig.tight_layout()
    return fig


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--sizes", type=int, nargs="+", default=[4096])
    ap.add_argument("--exercises", action="store_true", help="time your kernels/ file instead of the solution")
    ap.add_argument("--record", action="store_true")
    a = ap.parse_args(argv)
    from harness import toolchain
    print(tiles())
    if not toolchain.gpu_available():
        print(f"The benchmark {toolchain.NO_GPU_REASON}.")
        return 0
    rows = run(a.sizes, solution=not a.exercises, record=a.record)
    print(table(rows))
    return 0


if __name__ == "__main__":
    sys.exit(main())
