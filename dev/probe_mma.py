"""How fast can mma.sync multiply on this GPU? (dev/mma_probe.cu says why.)

    python dev/probe_mma.py [--quick] [--record]   (--record: results/04.json, section "mma_peak", with
                                                       COURSE_RECORD=1; lesson 04's notebook runs it)
    python dev/probe_mma.py --ncu                   (one launch each of kinds 0, 2, 3 at 8 and 16 warps per SM, ILP 4: for ncu)

Times, in one run: the tensor-core instructions issued from registers alone (no memory in the loop), over
ILP independent accumulator chains per warp and warps per SM; then lesson 04's kernels, cuBLAS FP16 and
torch._int_mm on 8192³ and 4096³. Reports TFLOP/s (or TOP/s), FLOP per SM per clock cycle (clock64() in the
probe: independent of the clock the GPU ran at) and each GEMM against the probe's best of its instruction."""
import sys
from pathlib import Path

import torch

from harness import bench, build, results
from harness.problems import torch_int_mm, torch_linear

KINDS = {0: "mma.sync m16n8k16 FP16->FP32", 1: "mma.sync m16n8k16 FP16->FP16", 2: "mma.sync m16n8k32 INT8->INT32",
         3: "wmma 16x16x16 FP16->FP32"}
OPS_PER_INST = {0: 2 * 16 * 8 * 16, 1: 2 * 16 * 8 * 16, 2: 2 * 16 * 8 * 32, 3: 2 * 16 * 16 * 16}
QUICK = "--quick" in sys.argv


def probe(mod, src, kind, ilp, warps_per_sm, sms, target_ops=4e11):
    """(TOP/s, ops per SM per clock) of one configuration: blocks of 4 warps, warps_per_sm / 4 blocks per SM."""
    grid = sms * max(1, warps_per_sm // 4)
    warps = grid * 4
    iters = max(64, int(target_ops / (warps * ilp * OPS_PER_INST[kind])))
    out = torch.empty(warps * 32, device="cuda")
    stamps = torch.empty(3 * grid, dtype=torch.int64, device="cuda")
    fn = lambda: mod.mma_peak(src, out, stamps, kind, ilp, grid, 4, iters)
    t = bench.time_fn(fn, [()], reps=10 if QUICK else 20).median_us
    if kind != 1 and not torch.isfinite(out).all():  # FP16 accumulators may overflow to inf; FP32 ones must not
        raise RuntimeError(f"probe kind {kind}: non-finite output")
    ops = warps * iters * ilp * OPS_PER_INST[kind]
    # Each SM's busy span (its first block's start to its last block's end, in its own clock) from the last call.
    st = stamps.view(grid, 3).cpu()
    span = 0
    for sm in st[:, 0].unique():
        mine = st[st[:, 0] == sm]
        span += (mine[:, 2].max() - mine[:, 1].min()).item()
    return ops / t / 1e6, ops / span


def gemm_tflops(fn, n, dtype):
    if dtype == torch.int8:
        sets = [(torch.randint(-127, 128, (n, n), dtype=dtype, device="cuda"),
                 torch.randint(-127, 128, (n, n), dtype=dtype, device="cuda")) for _ in range(2)]
    else:
        sets = [(torch.randn(n, n, dtype=dtype, device="cuda"), torch.randn(n, n, dtype=dtype, device="cuda"))
                for _ in range(2)]
    return 2 * n ** 3 / bench.time_fn(fn, sets, reps=10 if QUICK else 30).median_us / 1e6


def main():
    mod = build.load_file(Path(__file__).with_name("mma_probe.cu"), solution=True)
    sms = torch.cuda.get_device_properties(0).multi_processor_count
    src = torch.randint(-2**31, 2**31 - 1, (512,), dtype=torch.int32, device="cuda")
    # The FP16 kinds read halves in [-1, 1) (random bit patterns would include inf and NaN); the INT8 kind reads
    # random words, four int8 each.
    halves = torch.empty(1024, dtype=torch.float16, device="cuda").uniform_(-1, 1)
    fsrc = halves.view(torch.int32)
    if "--ncu" in sys.argv:  # one launch per kind at 8 and 16 warps per SM, ILP 4: what ncu's pipe metrics say
        for kind in (0, 2, 3):
            for wps in (8, 16):
                grid = sms * wps // 4
                mod.mma_peak(src if kind == 2 else fsrc, torch.empty(grid * 128, device="cuda"),
                             torch.empty(3 * grid, dtype=torch.int64, device="cuda"), kind, 4, grid, 4, 2048)
        torch.cuda.synchronize()
        return
    rows, best = [], {}
    ilps = (1, 2, 4, 8)
    wpss = (4, 8, 16) if QUICK else (4, 8, 12, 16, 24, 32)
    for kind in (0, 2, 3, 1):
        for wps in wpss:
            for ilp in ilps:
                tops, per_clk = probe(mod, src if kind == 2 else fsrc, kind, ilp, wps, sms)
                rows.append(dict(kind=KINDS[kind], ilp=ilp, warps_per_sm=wps, tops=round(tops, 1),
                                 ops_per_clk_per_sm=round(per_clk), clock_GHz=round(tops * 1e12 / (per_clk * sms) / 1e9, 3)))
                if tops > best.get(kind, (0,))[0]:
                    best[kind] = (tops, per_clk, ilp, wps)
                print(f"{KINDS[kind]:<32} ILP {ilp} warps/SM {wps:>2}: {tops:7.1f} T/s  {per_clk:6.0f} ops/clk/SM", flush=True)

    tc = build.load(4, "tc_fast", solution=True)

    def ours(name, dtype):
        f = getattr(tc, name)
        odt = torch.float16 if dtype == torch.float16 else torch.int32
        return lambda x, w: f(x, w, torch.empty(x.shape[0], w.shape[0], dtype=odt, device="cuda"),
                              x.shape[0], w.shape[0], x.shape[1])

    gemms = [("cuBLAS FP16 (F.linear)", torch_linear, torch.float16, 0),
             ("04 mma.sync FP16", ours("gemm_fast_mma_f16", torch.float16), torch.float16, 0),
             ("04 WMMA FP16", ours("gemm_fast_wmma_f16", torch.float16), torch.float16, 3),
             ("torch._int_mm", torch_int_mm, torch.int8, 2),
             ("04 mma.sync INT8", ours("gemm_fast_mma_s8", torch.int8), torch.int8, 2),
             ("04 WMMA INT8", ours("gemm_fast_wmma_s8", torch.int8), torch.int8, 2)]
    gem_rows = []
    for n in ((8192,) if QUICK else (4096, 8192)):
        for name, fn, dt, kind in gemms:
            t = gemm_tflops(fn, n, dt)
            gem_rows.append(dict(op=name, n=n, tops=round(t, 1), pct_of_probe=round(100 * t / best[kind][0], 1),
                                 probe_kind=KINDS[kind]))
    print("\nBest of each instruction (ops per SM per clock; T/s at the clock it ran):")
    for kind, (tops, per_clk, ilp, wps) in best.items():
        print(f"  {KINDS[kind]:<32} {tops:7.1f} T/s  {per_clk:6.0f} ops/clk/SM  (ILP {ilp}, {wps} warps/SM)")
    print("\nGEMMs in the same run (against the probe's best of the instruction they issue; cuBLAS issues wgmma):")
    for r in gem_rows:
        print(f"  {r['op']:<24} {r['n']}^3 {r['tops']:7.1f} T/s  {r['pct_of_probe']:5.1f}% of {r['probe_kind']}")
    if "--record" in sys.argv:
        results.record(4, "mma_peak", rows, gemms=gem_rows,
                       best={KINDS[k]: dict(tops=round(v[0], 1), ops_per_clk_per_sm=round(v[1]), ilp=v[2], warps_per_sm=v[3])
                             for k, v in best.items()})


if __name__ == "__main__":
    main()
