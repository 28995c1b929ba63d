"""How fast can a kernel read a decode-sized weight matrix? (lessons/08_nf4/stream_probe.cu says why.)

    python dev/probe_stream.py [--quick] [--record]   (--record: results/12.json, section "stream", with
                                                         COURSE_RECORD=1; lesson 12's notebook draws it: bench_12.stream_chart)

Times, in one run, buffers rotated past L2: pure-read kernels (16-byte loads with U in flight; the bulk copy
engine through a shared-memory ring), with and without programmatic dependent launch, next to cuBLAS FP16 at
M = 1 reading the same bytes, on the byte counts of lessons 06-10's weights. Two timings per row: each call
between its own events (bench.time_fn, as every table of the course), and the mean of a chain of 20 calls
between two events (bench.chain_fn), and in a CUDA graph of 20 or more calls (bench.graph_fn: how a serving engine
runs a decode step). % = bytes / time against the copy bandwidth."""
import math
import sys
from pathlib import Path

import torch

from harness import bench, build, results, roofline

SIZES = {"INT4 4096x4096": 8_650_752, "INT4 14336x4096": 30_277_632, "INT4 8192x8192": 34_603_008,
         "INT8 14336x4096": 59_637_760, "INT8 8192x8192": 68_157_440, "FP16 8192x8192": 134_217_728}
if "--quick" in sys.argv:
    SIZES = {k: v for k, v in SIZES.items() if k in ("INT4 8192x8192", "FP16 8192x8192")}


def main():
    mod = build.load_file(build.ROOT / "lessons" / "08_nf4" / "stream_probe.cu", solution=True)  # the bulk reads
    rd = build.load_file(build.ROOT / "harness" / "read_probe.cu", solution=True)  # the ld.global reads
    sms = torch.cuda.get_device_properties(0).multi_processor_count
    bw = roofline.ceilings()["copy_GBps"]
    # At least 8 buffers in rotation: with PDL several launches run at once, and two of them must never read the
    # same buffer (one would hit the L2 lines the other brought in).
    pool_bytes = max(8 * max(SIZES.values()), 640 * 2**20)
    pool = torch.randint(-128, 127, (pool_bytes,), dtype=torch.int8, device="cuda").view(torch.uint8)
    out = torch.empty(16 * sms, dtype=torch.int32, device="cuda")
    variants = {}
    for u in (2, 4, 8):
        for bps in (1, 2, 4, 8):
            variants[f"ldg U={u} grid={bps}xSM"] = ("ldg", dict(grid=bps * sms, unroll=u))
    for st, ch in ((4, 16384), (4, 32768), (8, 8192), (8, 16384), (4, 49152)):
        for bps in (1, 2):
            if st * ch * bps <= 220 * 1024:
                variants[f"bulk S={st} chunk={ch // 1024}K grid={bps}xSM"] = ("bulk", dict(grid=bps * sms, stages=st, chunk=ch))
    rows = []
    for label, nbytes in SIZES.items():
        nsets = max(8, math.ceil(3 * 50 * 2**20 / nbytes))
        stride = (pool_bytes // nsets) // 256 * 256
        bufs = [pool[i * stride: i * stride + nbytes] for i in range(nsets)]
        # cuBLAS FP16 at M = 1 on a weight matrix of these bytes (N = 8192 outputs).
        k = nbytes // 2 // 8192
        wsets = [(torch.randn(1, k, device="cuda", dtype=torch.float16),
                  pool[i * stride: i * stride + 8192 * k * 2].view(torch.float16).view(8192, k)) for i in range(nsets)]
        t = bench.time_fn(lambda x, w: torch.nn.functional.linear(x, w), wsets, chain=True, graph=True)
        res = {"cuBLAS FP16 M=1 (same bytes)": (t.median_us, t.chain_us, t.graph_us)}
        for name, (kind, kw) in variants.items():
            for pdl in (0, 1):
                if pdl and kind == "ldg" and kw["grid"] == sms:
                    continue  # 8 such launches fit on an SM at once: more than the buffers in rotation
                if kind == "ldg":
                    fn = lambda b, kw=kw, pdl=pdl: rd.read_ldg(b, b.numel(), out, kw["grid"], kw["unroll"], pdl)
                else:
                    fn = lambda b, kw=kw, pdl=pdl: mod.read_bulk(b, b.numel(), out, kw["grid"], kw["stages"], kw["chunk"], pdl)
                sets = [(b,) for b in bufs]
                t = bench.time_fn(fn, sets, reps=60, chain=True, graph=True)
                res[name + (" +PDL" if pdl else "")] = (t.median_us, t.chain_us, t.graph_us)
                if t.graph_error:
                    print(f"  {name}: not timed in a CUDA graph: {t.graph_error}")
        print(f"\n{label}: {nbytes / 1e6:.1f} MB, floor {nbytes / bw / 1e3:.1f} µs at {bw:.0f} GB/s copy")
        pct = lambda us: 100 * nbytes / bw / 1e3 / us if us else float("nan")
        for name, (t1, tc, tg) in sorted(res.items(), key=lambda kv: kv[1][1]):
            print(f"  {name:<36} per call {t1:7.2f} µs {pct(t1):5.1f}%   chain {tc:7.2f} µs {pct(tc):5.1f}%   "
                  f"graph {tg or float('nan'):7.2f} µs {pct(tg):5.1f}%", flush=True)
            rows.append(dict(size=label, bytes=nbytes, variant=name, per_call_us=round(t1, 2), chain_us=round(tc, 2),
                             graph_us=tg and round(tg, 2)))
    if "--record" in sys.argv:
        results.record(12, "stream", rows, copy_GBps=bw)


if __name__ == "__main__":
    main()
