"""This GPU's ceilings, measured once and cached, and the roofline plot.

A kernel can go no faster than the larger of (FLOPs / compute rate) and (bytes / bandwidth).
Datasheet numbers are leads; the ceilings here are measured: a large device-to-device copy for
bandwidth (bytes read + bytes written), and cuBLAS through torch for each compute type.
"""
from __future__ import annotations

import json
import os
import re
import time
import warnings
from pathlib import Path

import torch

from . import build, toolchain

RECORDED = build.ROOT / "results" / "ceilings"  # shipped with the course (the H100's)
REFERENCE_GPU = "NVIDIA H100 80GB HBM3"

KINDS = {  # ceiling name -> (label, dtype of A and B)
    "fp32": "FP32 (CUDA cores, cuBLAS, TF32 off)",
    "tf32": "TF32 tensor cores (cuBLAS)",
    "fp16": "FP16 tensor cores (cuBLAS, FP32 accumulate)",
    "int8": "INT8 tensor cores (torch._int_mm)",
}


def _slug(name: str) -> str:
    return re.sub(r"[^A-Za-z0-9]+", "_", name).strip("_")


def _cache_file(gpu: str) -> Path:
    return build.cache_root() / "ceilings" / f"{_slug(gpu)}.json"


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


def measure(n: int = 8192, copy_bytes: int = 2**30) -> dict:
    """Measure copy bandwidth and cuBLAS rates on this GPU (about 10 s on an H100)."""
    gen = torch.Generator(device="cuda").manual_seed(0)
    out = {"gpu": torch.cuda.get_device_name(), "env": toolchain.describe(),
           "date": time.strftime("%Y-%m-%d %H:%M:%S UTC", time.gmtime())}
    src = torch.randn(copy_bytes // 4, device="cuda", generator=gen)
    dst = torch.empty_like(src)
    ms = _time_ms(lambda: dst.copy_(src))
    out["copy_GBps"] = round(2 * copy_bytes / ms / 1e6, 1)
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
    return out


def recorded(gpu: str = REFERENCE_GPU) -> dict:
    p = RECORDED / f"{_slug(gpu)}.json"
    if not p.exists():
        raise FileNotFoundError(f"no recorded ceilings for {gpu} in {RECORDED}")
    return json.loads(p.read_text())


def off_recorded(c: dict, tolerance: float = 0.02) -> str | None:
    """A warning when c's copy bandwidth is more than `tolerance` away from the one recorded for the same GPU model
    (None when it is close, or when that model has no recording)."""
    try:
        ref = recorded(c["gpu"])
    except FileNotFoundError:
        return None
    d = c["copy_GBps"] / ref["copy_GBps"] - 1
    if abs(d) <= tolerance:
        return None
    return (f"copy bandwidth measured now: {c['copy_GBps']:,.0f} GB/s, {100 * d:+.1f}% from the {ref['copy_GBps']:,.0f} "
            f"recorded on this GPU model ({ref['date'][:10]}), so every '% of copy bandwidth' is off by as much. Other "
            f"work on the GPU can cause it (and one such run was on a fresh machine, lessons/00_setup_and_roofline/notes.md): measure again with "
            f"roofline.ceilings(remeasure=True).")


def ceilings(remeasure: bool = False) -> dict:
    """This GPU's ceilings (measured once, then read from the cache); the recorded H100's without a GPU."""
    if not toolchain.gpu_available():
        return recorded()
    gpu = torch.cuda.get_device_name()
    f = _cache_file(gpu)
    if f.exists() and not remeasure:
        return json.loads(f.read_text())
    c = measure()
    if (msg := off_recorded(c)) is not None:
        warnings.warn(msg, stacklevel=2)
    f.parent.mkdir(parents=True, exist_ok=True)
    f.write_text(json.dumps(c, indent=1))
    if records_ceilings():
        RECORDED.mkdir(parents=True, exist_ok=True)
        (RECORDED / f"{_slug(gpu)}.json").write_text(json.dumps(c, indent=1))
    return c


def records_ceilings() -> bool:
    """Whether this run ships the ceilings it measures: lesson 00's reference recording only. Every README table's
    "% copy bw" is against that one measurement; a later lesson's recording measures the copy again at its start
    (its notebook prints it) but must not replace lesson 00's, or its own tables would call its measurement
    lesson 00's. `harness.run` names the notebook it executes in COURSE_NOTEBOOK."""
    recording = os.environ.get("COURSE_RECORD", "") not in ("", "0")
    return recording and os.environ.get("COURSE_NOTEBOOK", "").startswith("00_")


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
