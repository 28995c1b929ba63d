"""This GPU's ceilings, measured once and cached, and the roofline plot.

A kernel can go no faster than the larger of (FLOPs / compute rate) and (bytes / bandwidth).
Datasheet numbers are leads; the ceilings here are measured: a large device-to-device copy for the copy
bandwidth (bytes read + bytes written), a kernel that only reads (harness/read_probe.cu) for the read bandwidth,
the floor of a decode kernel, which reads its weights and writes almost nothing, and cuBLAS through torch for each
compute type.
"""
from __future__ import annotations

import json
import os
import re
import subprocess
import time
import warnings
from pathlib import Path

import torch

from . import build, toolchain

RESULTS = build.ROOT / "results"  # shipped recordings: one folder per GPU (ceilings.json, NN.json, ncu/)
LOCAL = build.ROOT / "build" / "results"  # your own runs, one folder per GPU the same way
REFERENCE_GPU = "NVIDIA H200"  # the GPU whose recording the prose quotes and every GPU-less machine shows


class NoCeilings(LookupError):
    """A percentage or floor was asked of a section or GPU whose ceilings are not known: never another GPU's."""


def gpu_slug(gpu: str) -> str:
    """A GPU's name as a folder name: "NVIDIA H200" -> "H200", "NVIDIA H100 80GB HBM3" -> "H100_80GB_HBM3"."""
    return re.sub(r"[^A-Za-z0-9]+", "_", re.sub(r"^NVIDIA\s+", "", gpu)).strip("_")


def this_gpu() -> str | None:
    """The name of the GPU this process runs on, or None without one."""
    return torch.cuda.get_device_name() if toolchain.gpu_available() else None


def recording_dir(gpu: str | None = None) -> Path:
    """Where the recording shipped for `gpu` (the reference GPU by default) lives: results/<gpu>/."""
    return RESULTS / gpu_slug(gpu or REFERENCE_GPU)


def local_dir(gpu: str | None = None) -> Path:
    """Where your own runs on `gpu` (this one by default) land: build/results/<gpu>/ (build/results/no_gpu/ for
    what runs without one)."""
    gpu = gpu or this_gpu()
    return LOCAL / (gpu_slug(gpu) if gpu else "no_gpu")


def recorded_gpus() -> list[str]:
    """The GPUs with a shipped recording, the reference first."""
    names = [json.loads(p.read_text())["gpu"] for p in sorted(RESULTS.glob("*/ceilings.json"))]
    return sorted(names, key=lambda g: (g != REFERENCE_GPU, g))


KINDS = {  # ceiling name -> (label, dtype of A and B)
    "fp32": "FP32 (CUDA cores, cuBLAS, TF32 off)",
    "tf32": "TF32 tensor cores (cuBLAS)",
    "fp16": "FP16 tensor cores (cuBLAS, FP32 accumulate)",
    "int8": "INT8 tensor cores (torch._int_mm)",
}


def _cache_file(gpu: str) -> Path:
    return build.cache_root() / "ceilings" / f"{gpu_slug(gpu)}.json"


def _time_ms(fn, reps=10) -> float:
    # One warm-up call, as lesson 00's recorded ceilings were measured. A 0.5 s warm-up was tried (lessons/00_setup_and_roofline/notes.md, "The copy
    # measurement from run to run"): the copy did not move, and FP16 fell from ~733 to ~645 TFLOP/s as the clocks
    # settled under load, below what cuBLAS reaches in the course's own tables: no ceiling for a roofline.
    fn()
    torch.cuda.synchronize()
    ts = []
    for _ in range(reps):
        s, e = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        s.record()
        fn()
        e.record()
        e.synchronize()
        ts.append(s.elapsed_time(e))
    return sorted(ts)[len(ts) // 2]


def _smi(query: str) -> float | None:
    """One number nvidia-smi reports for GPU 0 (e.g. "clocks.sm", in MHz), or None where it cannot say."""
    try:
        out = subprocess.run(["nvidia-smi", f"--query-gpu={query}", "--format=csv,noheader,nounits", "-i",
                              str(torch.cuda.current_device())], capture_output=True, text=True, timeout=30).stdout
        return float(out.strip().splitlines()[0])
    except (OSError, subprocess.SubprocessError, ValueError, IndexError):
        return None


def read_bandwidth(buf: torch.Tensor) -> tuple[float, str]:
    """The read bandwidth of this GPU in GB/s: the fastest of a few launch shapes of the pure-read kernel
    (harness/read_probe.cu) over `buf` (uint8, far larger than the L2), and that shape's name."""
    mod = build.load_file(build.ROOT / "harness" / "read_probe.cu", solution=True)
    sms = torch.cuda.get_device_properties(buf.device).multi_processor_count
    out = torch.empty(8 * sms, dtype=torch.int32, device=buf.device)
    best = None
    for blocks_per_sm in (2, 4, 8):
        for unroll in (4, 8):
            ms = _time_ms(lambda: mod.read_ldg(buf, buf.numel(), out, blocks_per_sm * sms, unroll, 0))
            if best is None or ms < best[0]:
                best = (ms, f"ld.global, {unroll} loads of 16 bytes in flight per thread, {blocks_per_sm} blocks of 256 per SM")
    return round(buf.numel() / best[0] / 1e6, 1), best[1]


def measure(n: int = 8192, copy_bytes: int = 2**30) -> dict:
    """Measure copy and read bandwidth and cuBLAS rates on this GPU (about 10 s on an H100 or H200), with the SM count and
    the SM clock read while FP16 matrix products run (the clock a kernel under load gets)."""
    gen = torch.Generator(device="cuda").manual_seed(0)
    p = torch.cuda.get_device_properties(0)
    out = {"gpu": torch.cuda.get_device_name(), "env": toolchain.describe(),
           "date": time.strftime("%Y-%m-%d %H:%M:%S UTC", time.gmtime())}
    src = torch.randn(copy_bytes // 4, device="cuda", generator=gen)
    dst = torch.empty_like(src)
    ms = _time_ms(lambda: dst.copy_(src))
    out["copy_GBps"] = round(2 * copy_bytes / ms / 1e6, 1)
    out["read_GBps"], out["read_kernel"] = read_bandwidth(src.view(torch.uint8))
    del src, dst
    a32, b32 = torch.randn(n, n, device="cuda", generator=gen), torch.randn(n, n, device="cuda", generator=gen)
    old = torch.backends.cuda.matmul.allow_tf32
    try:
        torch.backends.cuda.matmul.allow_tf32 = False
        out["fp32_TFLOPs"] = round(2 * n**3 / _time_ms(lambda: a32 @ b32, 5) / 1e9, 1)
        torch.backends.cuda.matmul.allow_tf32 = True
        out["tf32_TFLOPs"] = round(2 * n**3 / _time_ms(lambda: a32 @ b32) / 1e9, 1)
    finally:
        torch.backends.cuda.matmul.allow_tf32 = old
    a16, b16 = a32.half(), b32.half()
    out["fp16_TFLOPs"] = round(2 * n**3 / _time_ms(lambda: a16 @ b16) / 1e9, 1)
    a8 = torch.randint(-128, 128, (n, n), device="cuda", dtype=torch.int8, generator=gen)
    b8 = torch.randint(-128, 128, (n, n), device="cuda", dtype=torch.int8, generator=gen).T.contiguous().T
    out["int8_TOPs"] = round(2 * n**3 / _time_ms(lambda: torch._int_mm(a8, b8)) / 1e9, 1)
    out["sms"] = p.multi_processor_count
    for _ in range(200):  # about 0.3 s of queued work: the clock is read while it runs
        a16 @ b16
    clock = _smi("clocks.sm")
    torch.cuda.synchronize()
    out["clock_MHz"], out["max_clock_MHz"] = clock, _smi("clocks.max.sm")
    return out


# What a section stores of the ceilings it was measured against (the env is the section's own).
SECTION_KEYS = ("gpu", "date", "copy_GBps", "read_GBps", "fp32_TFLOPs", "tf32_TFLOPs", "fp16_TFLOPs", "int8_TOPs", "sms",
                "clock_MHz", "max_clock_MHz")


def compact(c: dict) -> dict:
    """The ceilings as a results section stores them: the GPU, the date measured, the rates, SM count and clock."""
    return {k: c[k] for k in SECTION_KEYS if k in c}


def recorded(gpu: str | None = None) -> dict:
    """The ceilings recorded for `gpu` (the reference GPU's by default): results/<gpu>/ceilings.json."""
    gpu = gpu or REFERENCE_GPU
    p = recording_dir(gpu) / "ceilings.json"
    if not p.exists():
        raise NoCeilings(f"no recorded ceilings for {gpu} ({p.relative_to(build.ROOT)} does not exist); the GPUs "
                         f"recorded: {recorded_gpus()}")
    return json.loads(p.read_text())


def of_section(sec: dict) -> dict:
    """The ceilings a results section was measured against, as it stores them. Never another GPU's: a section that
    stores none is an error, not a fallback."""
    c = sec.get("ceilings")
    if not c:
        raise NoCeilings(f"this section (measured on {sec.get('env', {}).get('gpu')}, {sec.get('date')}) stores no "
                         f"ceilings, so no percentage of a ceiling can be computed for it")
    return c


def off_recorded(c: dict, tolerance: float = 0.02) -> str | None:
    """A warning when c's copy bandwidth is more than `tolerance` away from the one recorded for the same GPU model
    (None when it is close, or when that model has no recording)."""
    try:
        ref = recorded(c["gpu"])
    except NoCeilings:
        return None
    d = c["copy_GBps"] / ref["copy_GBps"] - 1
    if abs(d) <= tolerance:
        return None
    return (f"copy bandwidth measured now: {c['copy_GBps']:,.0f} GB/s, {100 * d:+.1f}% from the {ref['copy_GBps']:,.0f} "
            f"recorded on this GPU model ({ref['date'][:10]}), so every '% of copy bandwidth' is off by as much. Other "
            f"work on the GPU can cause it (and one such run was on a fresh machine, lessons/00_setup_and_roofline/notes.md): measure again with "
            f"roofline.ceilings(remeasure=True).")


def ceilings(remeasure: bool = False) -> dict:
    """This GPU's ceilings (measured once, then read from the cache). Without a GPU: the reference GPU's recorded
    ones, whose "gpu" says so."""
    if not toolchain.gpu_available():
        return recorded()
    gpu = torch.cuda.get_device_name()
    f = _cache_file(gpu)
    if f.exists() and not remeasure:
        c = json.loads(f.read_text())
        if "read_GBps" in c:  # a cache written before the read bandwidth was measured is measured again
            return c
    c = measure()
    if (msg := off_recorded(c)) is not None:
        warnings.warn(msg, stacklevel=2)
    f.parent.mkdir(parents=True, exist_ok=True)
    f.write_text(json.dumps(c, indent=1))
    if records_ceilings():
        d = recording_dir(gpu)
        d.mkdir(parents=True, exist_ok=True)
        (d / "ceilings.json").write_text(json.dumps(c, indent=1))
    return c


def records_ceilings() -> bool:
    """Whether this run ships the ceilings it measures: lesson 00's recording only (results/<gpu>/ceilings.json).
    Every section stores the ceilings its rows were measured against; lesson 00's are the ones its notebook
    prints and the README's ceilings table shows. `harness.run` names the notebook it executes in COURSE_NOTEBOOK."""
    recording = os.environ.get("COURSE_RECORD", "") not in ("", "0")
    return recording and os.environ.get("COURSE_NOTEBOOK", "").startswith("00_")


def bandwidth(c: dict) -> tuple[float, str]:
    """The bandwidth that sets the floor of a kernel that reads its bytes (a decode kernel reads its weights and
    writes almost nothing): the GPU's read bandwidth, and "read"; for ceilings measured before the read bandwidth
    was (an older recording), that same GPU's copy bandwidth, and "copy", so that a table says which."""
    return (c["read_GBps"], "read") if c.get("read_GBps") else (c["copy_GBps"], "copy")


def rate(c: dict, kind: str) -> float:
    """TFLOP/s (or TOP/s) ceiling for a compute kind."""
    return c["int8_TOPs"] if kind == "int8" else c[f"{kind}_TFLOPs"]


def floor_us(flops: float, nbytes: float, c: dict, kind: str = "fp32") -> float:
    """The roofline's lower bound on time: max(compute time, memory time), in µs."""
    return max(flops / (rate(c, kind) * 1e6), nbytes / (c["copy_GBps"] * 1e3))


def plot(points: list[dict] | None = None, c: dict | None = None, kinds=("fp32", "fp16", "int8"), ax=None,
         title: str | None = None):
    """Roofline: attainable TFLOP/s against arithmetic intensity (FLOP/byte), log-log.

    points: dicts with 'label', 'flops', 'bytes', 'us' (a measured kernel), e.g. from bench rows."""
    import matplotlib.pyplot as plt
    import numpy as np

    c = c or ceilings()
    if ax is None:
        _, ax = plt.subplots(figsize=(7, 4.5))
    bw = c["copy_GBps"] / 1e3  # TB/s
    ai = np.logspace(-2, 4, 200)
    styles = {"fp32": "C0", "tf32": "C4", "fp16": "C1", "int8": "C2"}
    for k in kinds:
        peak = rate(c, k)
        ax.plot(ai, np.minimum(peak, bw * ai), color=styles[k], lw=1.5,
                label=f"{KINDS[k].split(' (')[0]}: {peak:g} T{'OP' if k == 'int8' else 'FLOP'}/s")
    for i, p in enumerate(points or []):
        x = p["flops"] / p["bytes"]
        y = p["flops"] / p["us"] / 1e6
        ax.scatter([x], [y], color=f"C{(i + 5) % 10}", zorder=5, s=30)
        ax.annotate(p["label"], (x, y), textcoords="offset points", xytext=(5, -3 - 9 * (i % 2)), fontsize=7)
    ax.set_xscale("log")
    ax.set_yscale("log")
    ax.set_xlabel("arithmetic intensity (FLOP / byte of DRAM traffic)")
    ax.set_ylabel("TFLOP/s")
    ax.set_ylim(1e-2, max(rate(c, k) for k in kinds) * 2)
    ax.grid(True, which="both", lw=0.3)
    ax.set_title(title or f"Roofline of {c['gpu']} (copy {c['copy_GBps']:g} GB/s, measured {c['date'][:10]})",
                 fontsize=9)
    ax.legend(fontsize=7, loc="lower right")
    return ax


def points_from_rows(rows: list[dict], problem) -> list[dict]:
    """Turn bench rows into roofline points."""
    return [dict(label=f"{r['op']} {r['desc']}", flops=problem.flops(tuple(r["shape"])),
                 bytes=problem.bytes(tuple(r["shape"])), us=r["us"]) for r in rows]
