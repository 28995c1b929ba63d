"""Machine-readable results, one file per lesson, written by the benchmark code itself.

Every measured row is stored with the GPU, driver, torch and nvcc versions and the date, so no
number in a notebook or the README is typed by hand: `python -m harness.results readme` rebuilds
the README's tables from these files.

Where results go: `build/results/` by default (your own runs); `results/` (the recorded reference
runs shipped with the course) only when COURSE_RECORD=1, so a learner's run never overwrites them.
"""
from __future__ import annotations

import json
import os
import re
import sys
import time
from pathlib import Path

from . import build, toolchain

RECORDED = build.ROOT / "results"
LOCAL = build.ROOT / "build" / "results"


def _dir(recorded: bool | None = None) -> Path:
    if recorded is None:
        recorded = os.environ.get("COURSE_RECORD", "") not in ("", "0")
    return RECORDED if recorded else LOCAL


def _file(lesson: int | str, d: Path) -> Path:
    return d / f"{int(lesson):02d}.json"


def record(lesson: int | str, section: str, rows: list[dict], **extra) -> Path:
    """Store `rows` as `section` of lesson `lesson`'s results (other sections are kept)."""
    d = _dir()
    d.mkdir(parents=True, exist_ok=True)
    f = _file(lesson, d)
    data = json.loads(f.read_text()) if f.exists() else {"lesson": f"{int(lesson):02d}", "sections": {}}
    data["sections"][section] = {
        "env": toolchain.describe(),
        "date": time.strftime("%Y-%m-%d %H:%M:%S UTC", time.gmtime()),
        "rows": rows, **extra}
    f.write_text(json.dumps(data, indent=1))
    return f


def load(lesson: int | str, section: str | None = None, *, prefer_local: bool = True):
    """Results of a lesson: your own run's if there is one (prefer_local), else the recorded ones. A recording run
    (COURSE_RECORD=1) shows what it records, never an older local result."""
    prefer_local = prefer_local and _dir() != RECORDED
    for d in ([LOCAL, RECORDED] if prefer_local else [RECORDED]):
        f = _file(lesson, d)
        if f.exists():
            data = json.loads(f.read_text())
            if section is None:
                return data
            if section in data["sections"]:
                return data["sections"][section]
    raise FileNotFoundError(f"no results for lesson {int(lesson):02d}" + (f", section {section!r}" if section else ""))


def env_line(sec: dict) -> str:
    e = sec["env"]
    return (f"{e.get('gpu')}, driver {e.get('driver')}, torch {e.get('torch')} (CUDA {e.get('torch_cuda')}), "
            f"nvcc {e.get('nvcc')}, {sec['date'][:10]}")


def show(lesson: int | str, section: str, *, prefer_local: bool = True) -> str:
    """The stored table of a section with the line saying where and with what it was measured."""
    from . import bench

    sec = load(lesson, section, prefer_local=prefer_local)
    return f"Measured on {env_line(sec)}:\n{bench.table(sec['rows'])}"


# ----------------------------------------------------------------------------------------------
# README tables

def ladder_markdown(lesson_sections: list[tuple[int, str]], shape_desc: str, baseline_label: str) -> str:
    rows, env = [], None
    for lesson, section in lesson_sections:
        sec = load(lesson, section, prefer_local=False)
        env = env or env_line(sec)
        rows += [(lesson, r) for r in sec["rows"] if r["desc"] == shape_desc]
    seen, out = set(), []
    out.append(f"| lesson | kernel | {shape_desc} GFLOP/s | % of {baseline_label} |")
    out.append("|---|---|---:|---:|")
    for lesson, r in rows:
        if r["op"] in seen:
            continue
        seen.add(r["op"])
        out.append(f"| {lesson:02d} | {r['op']} | {r['tflops'] * 1000:,.0f} | {r['pct_baseline']:.1f}% |")
    out.append(f"\nMeasured on {env}.")
    return "\n".join(out)


def bench_markdown(lesson: int, section: str) -> str:
    """Every row of one recorded benchmark section: shape, kernel, time, TFLOP/s, % of its baseline."""
    sec = load(lesson, section, prefer_local=False)
    base = sec["rows"][0]["baseline"]
    out = [f"| shape | kernel | µs | TFLOP/s (TOP/s) | % of {base} |", "|---|---|---:|---:|---:|"]
    for r in sec["rows"]:
        out.append(f"| {r['desc']} | {r['op']} | {r['us']:,.1f} | {r['tflops']:,.1f} | {r['pct_baseline']:.1f}% |")
    out.append(f"\nMeasured on {env_line(sec)}.")
    return "\n".join(out)


def mma_peak_markdown(prefer_local: bool = False) -> str:
    """Lesson 04: what the tensor-core instructions can do alone (tools/probe_mma.py), the GEMMs against that,
    both kernels on either pipeline, and what each part of the mma.sync kernel's K loop costs (tools/tune_tc.py --ablate)."""
    sec = load(4, "mma_peak", prefer_local=prefer_local)
    out = ["| instruction, issued from registers alone | best T(FL)OP/s | ops per SM per clock | at ILP, warps per SM |",
           "|---|---:|---:|---|"]
    for kind, b in sec["best"].items():
        out.append(f"| {kind} | {b['tops']:,.1f} | {b['ops_per_clk_per_sm']:,} | {b['ilp']}, {b['warps_per_sm']} |")
    out += ["", "| GEMM, same run | n³ | T(FL)OP/s | % of its instruction's best |", "|---|---:|---:|---:|"]
    for r in sec["gemms"]:
        out.append(f"| {r['op']} | {r['n']} | {r['tops']:,.1f} | {r['pct_of_probe']:.1f}% of {r['probe_kind']} |")
    out.append(f"\ncuBLAS FP16 issues Hopper's `wgmma` (HGMMA: lesson 04, section 4), not `mma.sync`: its percentage compares it "
               f"with the `mma.sync` ceiling. Measured on {env_line(sec)}.")
    try:
        ab = load(4, "ablate", prefer_local=prefer_local)
    except FileNotFoundError:
        return "\n".join(out)
    out += ["", "| both kernels on the two pipelines, then the mma.sync kernel with parts of its K loop switched off "
            "(wrong results, timed only) "
            "| n³ | µs | % of baseline |",
            "|---|---:|---:|---:|"]
    for r in ab["rows"]:
        out.append(f"| {r['op']} | {r['shape'][0]} | {r['us']:,.1f} | {r['pct_baseline']:.1f}% of {r['baseline']} |")
    out.append(f"\nMeasured on {env_line(ab)}.")
    return "\n".join(out)


def ceilings_markdown() -> str:
    from . import roofline
    c = roofline.recorded()
    e = c["env"]
    return (f"| ceiling | measured |\n|---|---:|\n| copy bandwidth (read + write) | {c['copy_GBps']:,.0f} GB/s |\n"
            f"| FP32, CUDA cores (cuBLAS, TF32 off) | {c['fp32_TFLOPs']} TFLOP/s |\n"
            f"| TF32 tensor cores (cuBLAS) | {c['tf32_TFLOPs']} TFLOP/s |\n"
            f"| FP16 tensor cores (cuBLAS) | {c['fp16_TFLOPs']} TFLOP/s |\n"
            f"| INT8 tensor cores (torch._int_mm) | {c['int8_TOPs']} TOP/s |\n\n"
            f"Measured on {c['gpu']}, driver {e.get('driver')}, torch {e.get('torch')}, nvcc {e.get('nvcc')}, "
            f"{c['date'][:10]}.")


def _copy_GBps() -> float:
    """Lesson 00's recorded copy bandwidth: one denominator for every README table. (Each run also measures the copy
    at its start; those vary by up to 3% from run to run: NOTES.md, "The copy measurement from run to run".)"""
    from . import roofline
    return roofline.recorded()["copy_GBps"]


def _pct(row: dict) -> float:
    """A row's GB/s as % of lesson 00's copy bandwidth."""
    return 100 * row["gbs"] / _copy_GBps()


W8A16_COLUMNS = ["cuBLAS FP16 (FP16 weights)", "(a) unfused Python", "(b) unfused cuBLAS", "(c) separate CUDA",
                 "(d) fused W8A16"]


def w8a16_markdown(section: str = "table") -> str:
    """Lesson 06's four ways, one line per shape and M: µs of each, then the fused kernel's % of copy
    bandwidth and its speedups over (b) and over cuBLAS on FP16 weights."""
    sec = load(6, section, prefer_local=False)
    by = {}
    for r in sec["rows"]:
        by.setdefault((r["shape"][2], r["shape"][1], r["shape"][0]), {})[r["op"]] = r
    out = ["| K × N | M | " + " | ".join(c.replace(" (FP16 weights)", " on FP16 W") for c in W8A16_COLUMNS)
           + " | (d) % copy bw | (d) vs (b) | (d) vs cuBLAS FP16 |", "|---|---:|" + "---:|" * (len(W8A16_COLUMNS) + 3)]
    for (K, N, M), ops in by.items():
        d, cub = ops["(d) fused W8A16"], ops["cuBLAS FP16 (FP16 weights)"]
        out.append(f"| {K} × {N} | {M} | " + " | ".join(f"{ops[c]['us']:,.1f}" for c in W8A16_COLUMNS)
                   + f" | {_pct(d):.1f}% | {d['speedup_vs_b']:.2f}× | {cub['us'] / d['us']:.2f}× |")
    out.append(f"\nµs, median; weights rotated past L2. Measured on {env_line(sec)}.")
    return "\n".join(out)


W8A16_TILES_OP = "(e) fused GEMV, 16-row tiles"


def w8a16_tiles_markdown(section: str = "table") -> str:
    """Lesson 06's decode GEMV on row-major weights against the same kernel on weights in 16-row tiles (M ≤ 16)."""
    sec = load(6, section, prefer_local=False)
    rows = {(r["op"], tuple(r["shape"])): r for r in sec["rows"]}
    out = ["| K × N | M | cuBLAS FP16 on FP16 W | (d) GEMV, row-major q | (d) % copy bw | (e) GEMV, 16-row tiles | "
           "(e) % copy bw | (e) vs (d) | (e) vs cuBLAS FP16 |", "|---|---:|---:|---:|---:|---:|---:|---:|---:|"]
    for (op, s), e in rows.items():
        if op != W8A16_TILES_OP:
            continue
        d, cub = rows[("(d) fused, GEMV kernel", s)], rows[("cuBLAS FP16 (FP16 weights)", s)]
        out.append(f"| {s[2]} × {s[1]} | {s[0]} | {cub['us']:,.1f} | {d['us']:,.1f} | {_pct(d):.1f}% | "
                   f"{e['us']:,.1f} | {_pct(e):.1f}% | {d['us'] / e['us']:.2f}× | {cub['us'] / e['us']:.2f}× |")
    out.append(f"\nµs, median; weights rotated past L2; (d) and (e) are the same kernel, same arithmetic, on the same "
               f"bytes in two orders. Measured on {env_line(sec)}.")
    return "\n".join(out)


def w8a8_markdown(section: str = "table") -> str:
    """Lesson 06's W8A8 rows (M > 16): ours against PyTorch's quantize + torch._int_mm + scaling."""
    sec = load(6, section, prefer_local=False)
    ours = [r for r in sec["rows"] if r["op"].startswith("W8A8 ours")]
    rows = {(r["op"], tuple(r["shape"])): r for r in sec["rows"]}
    out = ["| K × N | M | ours: quantize + INT8 GEMM, µs | torch: quantize + `_int_mm` + scale, µs | ours vs torch | "
           "`_int_mm` alone, µs | fused W8A16, µs |", "|---|---:|---:|---:|---:|---:|---:|"]
    for r in ours:
        s = tuple(r["shape"])
        alone = rows.get(("W8A8 torch._int_mm alone (x quantized beforehand)", s))
        out.append(f"| {s[2]} × {s[1]} | {s[0]} | {r['us']:,.1f} | "
                   f"{rows[('W8A8 torch (quantize + _int_mm + scale)', s)]['us']:,.1f} | {r['speedup_vs_torch']:.2f}× | "
                   f"{alone['us'] if alone else float('nan'):,.1f} | {rows[('(d) fused W8A16', s)]['us']:,.1f} |")
    out.append(f"\nµs, median; weights rotated past L2. Measured on {env_line(sec)}.")
    return "\n".join(out)


W4A16_COLUMNS = ["cuBLAS FP16 (FP16 weights)", "dequantize + cuBLAS", "tinygemm (_weight_int4pack_mm, bf16)", "Marlin",
                 "(06) fused W8A16 (INT8 weights)", "(07) fused W4A16", "(07) fused W4A16, zero points"]


def _times(d, key):
    """A row's speedup over a baseline as a table cell ("–" where the baseline did not run)."""
    return f"{d[key]:.2f}×" if d.get(key) else "–"


def w4a16_markdown(section: str = "table") -> str:
    """Lesson 07's table, one line per shape and M: µs of each route, then the fused W4A16 kernel's % of copy
    bandwidth and its speedups over cuBLAS on FP16 weights, tinygemm and Marlin."""
    sec = load(7, section, prefer_local=False)
    by = {}
    for r in sec["rows"]:
        by.setdefault((r["shape"][2], r["shape"][1], r["shape"][0]), {})[r["op"]] = r
    names = {"cuBLAS FP16 (FP16 weights)": "cuBLAS FP16", "tinygemm (_weight_int4pack_mm, bf16)": "tinygemm (bf16)",
             "(06) fused W8A16 (INT8 weights)": "06 fused W8A16", "(07) fused W4A16": "07 fused W4A16",
             "(07) fused W4A16, zero points": "07 with zero points"}
    out = ["| K × N | M | " + " | ".join(names.get(c, c) for c in W4A16_COLUMNS)
           + " | 07 % copy bw | 07 vs cuBLAS FP16 | 07 vs tinygemm | 07 vs Marlin |",
           "|---|---:|" + "---:|" * (len(W4A16_COLUMNS) + 4)]
    for (K, N, M), ops in by.items():
        d = ops["(07) fused W4A16"]
        cell = lambda c: f"{ops[c]['us']:,.1f}" if c in ops else "–"
        out.append(f"| {K} × {N} | {M} | " + " | ".join(cell(c) for c in W4A16_COLUMNS)
                   + f" | {_pct(d):.1f}% | {d['speedup_vs_cublas']:.2f}× | {_times(d, 'speedup_vs_tinygemm')} | "
                   f"{_times(d, 'speedup_vs_marlin')} |")
    out.append(f"\nµs, median; weights rotated past L2. Measured on {env_line(sec)}.")
    return "\n".join(out)


W4A16_ROWS_OP, W4A16_TILES_OP = "(07) GEMV, row-major", "(07) GEMV, 16-row tiles"


def w4a16_tiles_markdown(section: str = "table") -> str:
    """Lesson 07's decode GEMV on row-major packed weights against the same kernel on weights in 16-row tiles
    (M ≤ 16), with cuBLAS FP16, tinygemm and Marlin from the same run."""
    sec = load(7, section, prefer_local=False)
    rows = {(r["op"], tuple(r["shape"])): r for r in sec["rows"]}
    out = ["| K × N | M | cuBLAS FP16 | tinygemm (bf16) | Marlin | GEMV, row-major | % copy bw | GEMV, 16-row tiles | "
           "% copy bw | tiles vs row-major | tiles vs cuBLAS FP16 | tiles vs tinygemm | tiles vs Marlin |",
           "|---|---:|" + "---:|" * 11]
    for (op, s), e in rows.items():
        if op != W4A16_TILES_OP:
            continue
        d, cub = rows[(W4A16_ROWS_OP, s)], rows[("cuBLAS FP16 (FP16 weights)", s)]
        us = lambda op: f"{rows[(op, s)]['us']:,.1f}" if (op, s) in rows else "–"
        out.append(f"| {s[2]} × {s[1]} | {s[0]} | {cub['us']:,.1f} | {us('tinygemm (_weight_int4pack_mm, bf16)')} | "
                   f"{us('Marlin')} | {d['us']:,.1f} | {_pct(d):.1f}% | {e['us']:,.1f} | {_pct(e):.1f}% | "
                   f"{d['us'] / e['us']:.2f}× | {cub['us'] / e['us']:.2f}× | {_times(e, 'speedup_vs_tinygemm')} | "
                   f"{_times(e, 'speedup_vs_marlin')} |")
    out.append(f"\nµs, median; weights rotated past L2; the two GEMVs are the same kernel, same arithmetic, on the same "
               f"bytes in two orders (on tiles at M ≤ 8, where a shape has more units of 32 outputs than blocks fit at "
               f"once, one generation of blocks computes them all: lesson 07, section 6). Measured on {env_line(sec)}.")
    return "\n".join(out)


NF4_TILES_OP = "(08) fused NF4 GEMV, 16-row tiles"
NF4_DQ_OP = "(08) fused NF4 GEMV, tiles, double-quantized absmax"  # recorded since 11-24 (bitsandbytes' compress_statistics)
BNB_DEQUANT_OP, BNB_LINEAR_OP = "bitsandbytes dequantize_4bit", "bitsandbytes matmul_4bit"  # harness.bnb's rows
NF4_MOVE_OP = "the same bytes, no decoding (floor)"  # tools/stream_probe.cu's expand, timed by tools/bench_nf4.py


def nf4_markdown() -> str:
    """Lesson 08's two tables: the NF4 dequantize kernels (µs, % of copy bandwidth), and the fused NF4 GEMV against
    cuBLAS FP16, dequantize + cuBLAS and lesson 07's W4A16 GEMV."""
    out = []
    sec = load(8, "dequant", prefer_local=False)
    ops = list(dict.fromkeys(r["op"] for r in sec["rows"]))
    short = lambda op: op.replace("08 NF4 dequantize, ", "")
    smem, vs = "08 NF4 dequantize, codebook in shared memory", BNB_DEQUANT_OP in ops  # bitsandbytes: recorded since 11-23
    tree, floor = "08 NF4 dequantize, decision tree", NF4_MOVE_OP in ops  # the floor: recorded since 11-24
    out += ["| N × K | " + " | ".join(short(o) for o in ops) + " |" + (" shared memory vs bitsandbytes |" if vs else "")
            + (" shared memory vs decision tree | floor vs decision tree |" if floor else ""),
            "|---|" + "---:|" * (len(ops) + vs + 2 * floor)]
    for shape in dict.fromkeys(tuple(r["shape"]) for r in sec["rows"]):
        cells = {r["op"]: r for r in sec["rows"] if tuple(r["shape"]) == shape}
        out.append(f"| {shape[0]} × {shape[1]} | " + " | ".join(
            f"{cells[o]['us']:,.1f} ({_pct(cells[o]):.0f}%)" for o in ops) + " |"
            + (f" {cells[BNB_DEQUANT_OP]['us'] / cells[smem]['us']:.2f}× |" if vs else "")
            + (f" {cells[tree]['us'] / cells[smem]['us']:.2f}× | {cells[tree]['us'] / cells[NF4_MOVE_OP]['us']:.2f}× |"
               if floor else ""))
    out.append(f"\nNF4 → FP16, µs (% of copy bandwidth); packed input rotated past L2"
               + ("; bitsandbytes' kernel on the same bytes" if vs else "")
               + ("; the floor moves the same bytes through the same loop with no decoding (`tools/stream_probe.cu`), so "
                  "no kernel of this loop is faster than the tree by more than the last column" if floor else "")
               + f". Measured on {env_line(sec)}.\n")
    sec = load(8, "gemv", prefer_local=False)
    ops = list(dict.fromkeys(r["op"] for r in sec["rows"]))
    tiles = NF4_TILES_OP in ops  # recorded since the tiled layout was added
    vs, dq = tiles and BNB_LINEAR_OP in ops, NF4_DQ_OP in ops
    extra = (" | tiles vs row-major | tiles vs cuBLAS FP16 | tiles % copy bw |" if tiles else " |") + (
        " tiles vs bitsandbytes |" if vs else "") + (" double-quantized vs cuBLAS FP16 |" if dq else "")
    out += ["| K × N | M | " + " | ".join(ops) + " | NF4 vs cuBLAS FP16" + extra,
            "|---|---:|" + "---:|" * (len(ops) + 1 + 3 * tiles + vs + dq)]
    for shape in dict.fromkeys(tuple(r["shape"]) for r in sec["rows"]):
        cells = {r["op"]: r for r in sec["rows"] if tuple(r["shape"]) == shape}
        row, tile = cells["(08) fused NF4 GEMV"], cells.get(NF4_TILES_OP)
        out.append(f"| {shape[2]} × {shape[1]} | {shape[0]} | " + " | ".join(f"{cells[o]['us']:,.1f}" for o in ops)
                   + f" | {row['speedup_vs_cublas']:.2f}×"
                   + (f" | {row['us'] / tile['us']:.2f}× | {tile['speedup_vs_cublas']:.2f}× | {_pct(tile):.1f}% |"
                      if tile else " |")
                   + (f" {cells[BNB_LINEAR_OP]['us'] / tile['us']:.2f}× |" if vs else "")
                   + (f" {cells[NF4_DQ_OP]['speedup_vs_cublas']:.2f}× |" if dq else ""))
    out.append(f"\nµs, median; weights rotated past L2; the two NF4 GEMVs are the same arithmetic on the same bytes in two "
               f"orders (on tiles at M ≤ 8, where a shape has more units of 16 outputs than blocks fit at once, one "
               f"generation of blocks computes them all: lesson 08, section 5)"
               + ("; bitsandbytes' matmul_4bit runs the kernel the library picks for the shape and GPU (here a SIMT GEMV "
                  "at M ≤ 4, except an mma kernel at M = 4 on N 14336; an mma kernel or dequantize + cuBLAS at M = 16)"
                  if vs else "")
               + ("; double-quantized: the same weights with each absmax an 8-bit code (bitsandbytes' "
                  "compress_statistics), 4.13 bits per weight instead of 4.5" if dq else "")
               + f". Measured on {env_line(sec)}.")
    return "\n".join(out)


# Each lesson's decode kernel (06-08: the GEMV on 16-row tiles) and the baselines it is compared with in a graph, per
# lesson: (section, the kernel's op or ops, {column: that baseline's op in this lesson's rows}).
GRAPH_ROUTES = {
    6: ("table", W8A16_TILES_OP, {"cuBLAS FP16": "cuBLAS FP16 (FP16 weights)", "dequantize + cuBLAS": "(b) unfused cuBLAS"}),
    7: ("table", W4A16_TILES_OP, {"cuBLAS FP16": "cuBLAS FP16 (FP16 weights)", "dequantize + cuBLAS": "dequantize + cuBLAS",
                                  "tinygemm": "tinygemm (_weight_int4pack_mm, bf16)", "Marlin": "Marlin"}),
    8: ("gemv", (NF4_TILES_OP, NF4_DQ_OP), {"cuBLAS FP16": "cuBLAS FP16 (FP16 weights)",
                                            "dequantize + cuBLAS": "dequantize NF4 + cuBLAS", "bitsandbytes": BNB_LINEAR_OP}),
    9: ("table", "(09) W4A8", {"cuBLAS FP16": "cuBLAS FP16 (FP16 weights)", "lesson 07": "(07) W4A16",
                               "lesson 06 W8A8": "(06) W8A8", "torch W8A8": "torch W8A8 (quantize + _int_mm + scale)"}),
    10: ("table", "(10) W4A16, fragment order", {"cuBLAS FP16": "cuBLAS FP16 (FP16 weights)",
                                                 "tinygemm": "tinygemm (_weight_int4pack_mm, bf16)", "Marlin": "Marlin",
                                                 "lesson 07": "(07) W4A16"}),
    12: ("table", "(12) W4A16, TMA + wgmma", {"cuBLAS FP16": "cuBLAS FP16 (FP16 weights)", "Marlin": "Marlin",
                                              "lesson 07": "(07) W4A16", "lesson 10": "(10) W4A16, mma.sync"}),
}
GRAPH_KERNELS = {6: "06 W8A16", 7: "07 W4A16", 8: "08 NF4", 9: "09 W4A8", 10: "10 W4A16", 12: "12 W4A16",
                 NF4_DQ_OP: "08 NF4, double-quantized"}


def graph_markdown(lessons=(6, 7, 8), ms=None, shapes=None) -> str:
    """The decode kernels of lessons 06-08 (GEMVs on 16-row tiles), 09, 10 and 12 timed two ways in one run, each with its
    baselines: every call between its own events (the course's tables), and replayed from a CUDA graph as a serving
    engine runs a decode step (bench.graph_fn). Cells read "per call → graph"."""
    cols = list(dict.fromkeys(c for l in lessons for c in GRAPH_ROUTES[l][2]))
    two = lambda a, b, f: f"{f(a)} → {f(b)}"
    out = ["| kernel | K × N | M | µs | % copy bw | " + " | ".join(f"vs {c}" for c in cols) + " |",
           "|---|---|---:|---:|---:|" + "---:|" * len(cols)]
    secs = []
    for l in lessons:
        section, op, base = GRAPH_ROUTES[l]
        ops = op if isinstance(op, tuple) else (op,)
        sec = load(l, section, prefer_local=False)
        secs.append(sec)
        rows = {(r["op"], tuple(r["shape"])): r for r in sec["rows"]}
        for (o, s), r in rows.items():
            if o not in ops or not r.get("graph_us") or (ms and s[0] not in ms) or (shapes and (s[2], s[1]) not in shapes):
                continue
            cells = []
            for c in cols:
                b = rows.get((base.get(c), s))
                cells.append(two(b["us"] / r["us"], b["graph_us"] / r["graph_us"], lambda v: f"{v:.2f}×")
                             if b and b.get("graph_us") else "–")
            out.append(f"| {GRAPH_KERNELS.get(o, GRAPH_KERNELS[l])} | {s[2]} × {s[1]} | {s[0]} | {two(r['us'], r['graph_us'], lambda v: f'{v:,.1f}')} | "
                       f"{two(_pct(r), _pct(r) * r['us'] / r['graph_us'], lambda v: f'{v:.1f}%')} | " + " | ".join(cells) + " |")
    if len(out) == 2:
        return ("(no graph timings recorded yet: `tools/bench_w8a16.py`, `bench_w4a16.py`, `bench_nf4.py`, "
                "`bench_w4a8.py`, `bench_w4a16_pipe.py`, `bench_w4a16_wgmma.py` record them)")
    envs = list(dict.fromkeys(env_line(sec) for sec in secs))
    out.append(f"\nµs, median, per call → in a CUDA graph of 20 or more calls (`bench.graph_fn`); weights rotated past L2; "
               f"each baseline timed both ways in the same run; % of lesson 00's copy bandwidth. Measured on "
               f"{'; '.join(envs)}.")
    return "\n".join(out)


W4A8_COLUMNS = ["cuBLAS FP16 (FP16 weights)", "torch W8A8 (quantize + _int_mm + scale)", "(06) W8A8", "(07) W4A16",
                "(09) W4A8"]


def w4a8_markdown(section: str = "table") -> str:
    """Lesson 09's table: µs of each route per shape and M, then how many times faster W4A8 is than cuBLAS FP16,
    lesson 07's W4A16 and lesson 06's W8A8."""
    sec = load(9, section, prefer_local=False)
    by = {}
    for r in sec["rows"]:
        by.setdefault((r["shape"][2], r["shape"][1], r["shape"][0]), {})[r["op"]] = r
    names = {"cuBLAS FP16 (FP16 weights)": "cuBLAS FP16", "torch W8A8 (quantize + _int_mm + scale)":
             "torch W8A8 (`_int_mm`)", "(06) W8A8": "06 W8A8", "(07) W4A16": "07 W4A16", "(09) W4A8": "09 W4A8"}
    out = ["| K × N | M | " + " | ".join(names[c] for c in W4A8_COLUMNS)
           + " | 09 vs cuBLAS | 09 vs 07 W4A16 | 09 vs 06 W8A8 |", "|---|---:|" + "---:|" * (len(W4A8_COLUMNS) + 3)]
    for (K, N, M), ops in by.items():
        cell = lambda c: f"{ops[c]['us']:,.1f}" if c in ops else "–"
        out.append(f"| {K} × {N} | {M} | " + " | ".join(cell(c) for c in W4A8_COLUMNS)
                   + f" | {ops['(09) W4A8']['speedup_vs_cublas']:.2f}× | {ops['(07) W4A16']['w4a8_speedup']:.2f}× | "
                   f"{ops['(06) W8A8']['w4a8_speedup']:.2f}× |")
    out.append(f"\nµs, median; weights rotated past L2; every quantized route includes its activation quantization. "
               f"Measured on {env_line(sec)}.")
    return "\n".join(out)


def pipe_ladder_markdown() -> str:
    """Lesson 10's ladder: µs of each step per shape and M, the step's speedup over the one before, and cuBLAS FP16."""
    sec = load(10, "ladder", prefer_local=False)
    steps = [o for o in dict.fromkeys(r["op"] for r in sec["rows"]) if not o.startswith("cuBLAS")]
    out = ["| K × N | M | cuBLAS FP16 | " + " | ".join(steps) + " | last vs cuBLAS |",
           "|---|---:|---:|" + "---:|" * (len(steps) + 1)]
    for shape in dict.fromkeys(tuple(r["shape"]) for r in sec["rows"]):
        cells = {r["op"]: r for r in sec["rows"] if tuple(r["shape"]) == shape}
        step = lambda o: f"{cells[o]['us']:,.1f}" + (f" ({cells[o]['speedup_vs_previous']:.2f}×)"
                                                     if cells[o].get("speedup_vs_previous") else "")
        out.append(f"| {shape[2]} × {shape[1]} | {shape[0]} | {cells['cuBLAS FP16 (FP16 weights)']['us']:,.1f} | "
                   + " | ".join(step(o) for o in steps) + f" | {cells[steps[-1]]['speedup_vs_cublas']:.2f}× |")
    out.append(f"\nµs, median (in brackets: speedup over the step before); weights rotated past L2. "
               f"Measured on {env_line(sec)}.")
    return "\n".join(out)


PIPE_COLUMNS = ["cuBLAS FP16 (FP16 weights)", "tinygemm (_weight_int4pack_mm, bf16)", "Marlin", "(07) W4A16",
                "(10) W4A16, fragment order"]


def pipe_markdown() -> str:
    """Lesson 10's table: its kernel against cuBLAS FP16, tinygemm, Marlin and lesson 07's W4A16, per shape and M."""
    sec = load(10, "table", prefer_local=False)
    by = {}
    for r in sec["rows"]:
        by.setdefault((r["shape"][2], r["shape"][1], r["shape"][0]), {})[r["op"]] = r
    names = {"cuBLAS FP16 (FP16 weights)": "cuBLAS FP16", "tinygemm (_weight_int4pack_mm, bf16)": "tinygemm (bf16)",
             "Marlin": "Marlin", "(07) W4A16": "07 W4A16", "(10) W4A16, fragment order": "10 W4A16"}
    out = ["| K × N | M | " + " | ".join(names[c] for c in PIPE_COLUMNS)
           + " | 10 % copy bw | 10 vs cuBLAS | 10 vs 07 | 10 vs Marlin |",
           "|---|---:|" + "---:|" * (len(PIPE_COLUMNS) + 4)]
    for (K, N, M), ops in by.items():
        d = ops["(10) W4A16, fragment order"]
        cell = lambda c: f"{ops[c]['us']:,.1f}" if c in ops else "–"
        out.append(f"| {K} × {N} | {M} | " + " | ".join(cell(c) for c in PIPE_COLUMNS)
                   + f" | {_pct(d):.1f}% | {d['speedup_vs_cublas']:.2f}× | "
                   f"{ops['(07) W4A16']['us'] / d['us']:.2f}× | {_times(d, 'speedup_vs_marlin')} |")
    out.append(f"\nµs, median; weights rotated past L2. Measured on {env_line(sec)}.")
    return "\n".join(out)


WGMMA_COLUMNS = {"cuBLAS FP16 (FP16 weights)": "cuBLAS FP16", "Marlin": "Marlin", "(07) W4A16": "07 W4A16",
                 "(10) W4A16, mma.sync": "10 W4A16 (mma.sync)", "(12) W4A16, TMA + wgmma": "12 W4A16 (TMA + wgmma)"}


def wgmma_markdown() -> str:
    """Lesson 12's table: the TMA + wgmma kernel against cuBLAS FP16, Marlin and lessons 07 and 10, per shape and M."""
    sec = load(12, "table", prefer_local=False)
    by = {}
    for r in sec["rows"]:
        by.setdefault((r["shape"][2], r["shape"][1], r["shape"][0]), {})[r["op"]] = r
    ours = "(12) W4A16, TMA + wgmma"
    out = ["| K × N | M | " + " | ".join(WGMMA_COLUMNS.values()) + " | 12 TFLOP/s | 12 vs cuBLAS | 12 vs 10 | 12 vs Marlin |",
           "|---|---:|" + "---:|" * (len(WGMMA_COLUMNS) + 4)]
    for (K, N, M), ops in by.items():
        d = ops[ours]
        cell = lambda c: f"{ops[c]['us']:,.1f}" if c in ops else "–"
        out.append(f"| {K} × {N} | {M} | " + " | ".join(cell(c) for c in WGMMA_COLUMNS)
                   + f" | {d['tflops']:.0f} | {d['speedup_vs_cublas']:.2f}× | {d['speedup_vs_10']:.2f}× "
                   f"| {_times(d, 'speedup_vs_marlin')} |")
    out.append(f"\nµs, median; weights rotated past L2. Measured on {env_line(sec)}.")
    return "\n".join(out)


def stream_fit(rows: list[dict], key: str) -> tuple[float, float]:
    """Lesson 12's read probe: t = a + bytes / B through the two largest sizes' fastest plain reads (no PDL, not
    cuBLAS) by `key` ("per_call_us", "chain_us" or "graph_us"). Returns (a in µs, B in TB/s): what of each call is
    not bytes, and the bandwidth the bytes move at."""
    best = {}
    for r in rows:
        if r["variant"].startswith("cuBLAS") or "PDL" in r["variant"] or not r.get(key):
            continue
        best[r["bytes"]] = min(best.get(r["bytes"], float("inf")), r[key])
    if len(best) < 2:
        raise ValueError(f"stream_fit: plain reads of two sizes needed, found {len(best)}")
    (n1, t1), (n2, t2) = sorted(best.items())[-2:]
    if t2 <= t1:
        raise ValueError(f"stream_fit: the larger read ({n2} B, {t2} µs) is not slower than the smaller ({n1} B, {t1} µs)")
    B = (n2 - n1) / (t2 - t1) / 1e6  # bytes per µs → TB/s
    return t2 - n2 / (B * 1e6), B


def stream_markdown() -> str:
    """Lesson 12's read probe: the fastest way found to read each weight size, per call, in a chain of calls and in
    a CUDA graph."""
    sec = load(12, "stream", prefer_local=False)
    bw = _copy_GBps()  # lesson 00's, like _pct (the run's own measurement: sec["copy_GBps"])
    pct = lambda nbytes, us: f"{us:,.1f} ({100 * nbytes / bw / 1e3 / us:.0f}%)"
    out = ["| weights read | floor at copy bw | cuBLAS FP16, M = 1 | best `ld.global` | best bulk copy (TMA) "
           "| cuBLAS, chain | best plain, chain | best with PDL, chain | cuBLAS, graph | best plain, graph "
           "| best with PDL, graph |", "|---|---:|" + "---:|" * 9]
    for size in dict.fromkeys(r["size"] for r in sec["rows"]):
        rows = [r for r in sec["rows"] if r["size"] == size]
        n = rows[0]["bytes"]
        best = lambda f, key: min((r for r in rows if f(r["variant"])), key=lambda r: r[key])
        cub = best(lambda v: v.startswith("cuBLAS"), "per_call_us")
        ldg = best(lambda v: v.startswith("ldg") and "PDL" not in v, "per_call_us")
        blk = best(lambda v: v.startswith("bulk") and "PDL" not in v, "per_call_us")
        plain = best(lambda v: not v.startswith("cuBLAS") and "PDL" not in v, "chain_us")
        pdl = best(lambda v: "PDL" in v, "chain_us")
        g = lambda f: min((r["graph_us"] for r in rows if f(r["variant"]) and r.get("graph_us")), default=None)
        cell = lambda us: pct(n, us) if us else "–"  # "–": no variant of the kind could be captured
        out.append(f"| {size} ({n / 1e6:.1f} MB) | {n / bw / 1e3:.1f} | {pct(n, cub['per_call_us'])} | "
                   f"{pct(n, ldg['per_call_us'])} | {pct(n, blk['per_call_us'])} | {pct(n, cub['chain_us'])} | "
                   f"{pct(n, plain['chain_us'])} | {pct(n, pdl['chain_us'])} | {cell(g(lambda v: v.startswith('cuBLAS')))} | "
                   f"{cell(g(lambda v: not v.startswith('cuBLAS') and 'PDL' not in v))} | {cell(g(lambda v: 'PDL' in v))} |")
    out.append(f"\nµs (in brackets: % of lesson 00's {bw:,.0f} GB/s copy bandwidth). Kernels that only read (`tools/stream_probe.cu`), "
               "the best of each kind over grid sizes, loads in flight and ring depths. Per call: CUDA events around each "
               "call, as every table of the course; chain: 20 back-to-back calls between two events, per call; graph: 20 "
               f"or more calls replayed from one CUDA graph, per call; PDL: programmatic dependent launch. Measured on "
               f"{env_line(sec)}.")
    fits = [stream_fit(sec["rows"], k) for k in ("per_call_us", "chain_us", "graph_us")]
    out.append(f"\nA line t = a + bytes / B through the two largest sizes' best plain reads: a = {fits[0][0]:.1f} µs per "
               f"call, {fits[1][0]:.1f} chained, {fits[2][0]:.1f} in a graph (what of each call is not bytes), B = "
               + " / ".join(f"{b:.2f}" for _, b in fits) + " TB/s.")
    return "\n".join(out)


def decode_markdown(prefer_local: bool = False) -> str:
    """Lesson 11: tokens per second of the Llama-shaped decode step per weight format and batch, against FP16."""
    sec = load(11, "decode", prefer_local=prefer_local)
    rows = sec["rows"]
    pdl = any(r.get("us_graph_nopdl") for r in rows)
    out = ["| format | batch | tok/s (CUDA graph) | µs / step | vs FP16 | % of floor | "
           + ("µs / step without PDL (vs FP16) | " if pdl else "") + "GEMMs alone, µs | "
           "the rest, µs | eager (Python launches), tok/s | weights, GB |",
           "|---|---:|---:|---:|---:|---:|" + ("---:|" if pdl else "") + "---:|---:|---:|---:|"]
    copy = _copy_GBps()
    for r in rows:
        nopdl = (f"{r['us_graph_nopdl']:,.0f} ({r['speedup_vs_fp16_nopdl']:.2f}×) | " if r.get("us_graph_nopdl")
                 else "– | ") if pdl else ""
        # the floor at lesson 00's copy bandwidth, like _pct (the run's own measurement is in pct_floor)
        floor = 100 * r["step_bytes"] / (copy * 1e3) / r["us_graph"] if "step_bytes" in r else r["pct_floor"]
        out.append(f"| {r['label']} | {r['batch']} | {r['tok_s']:,.1f} | {r['us_graph']:,.0f} | "
                   f"{r['speedup_vs_fp16']:.2f}× | {floor:.0f}% | {nopdl}{r['us_gemm']:,.0f} | "
                   f"{r['us_graph'] - r['us_gemm']:,.0f} | {r['tok_s_eager']:,.1f} | {r['weight_gb']:.2f} |")
    c = sec.get("config", {})
    out.append(f"\n{c.get('n_layers', '?')} layers of Llama-3-8B's shape (hidden {c.get('hidden')}, MLP "
               f"{c.get('intermediate')}, {c.get('n_heads')}/{c.get('n_kv_heads')} heads, vocabulary {c.get('vocab')}), "
               f"random weights, {rows[0]['ctx']} cached positions per sequence, greedy decoding. Floor: the step's "
               f"bytes (weights in the format, KV cache) at lesson 00's copy bandwidth. "
               + ("The course's kernels launch with programmatic dependent launch (lesson 11, section 4b); cuBLAS's "
                  "do not. " if pdl else "") + f"Measured on {env_line(sec)}.")
    return "\n".join(out)


def decode_accuracy_markdown(prefer_local: bool = False) -> str:
    """Lesson 11: each quantized model's logits against the FP16 model's and against its own weights in FP16."""
    sec = load(11, "accuracy", prefer_local=prefer_local)
    out = ["| format | ‖Δ logits‖ / ‖logits‖ vs FP16 (worst step) | min cosine | same top-1 token | "
           "vs its own weights in FP16 (worst step) |", "|---|---:|---:|---:|---:|"]
    for r in sec["rows"]:
        out.append(f"| {r['label']} | {r['vs_fp16_rel_err']:.4f} ({r['vs_fp16_worst_rel_err']:.4f}) | "
                   f"{r['vs_fp16_min_cos']:.4f} | {100 * r['vs_fp16_top1']:.1f}% | {r['vs_twin_rel_err']:.1e} "
                   f"({r['vs_twin_worst_rel_err']:.1e}) |")
    t = sec["rows"][0]["tokens"]
    out.append(f"\n{t[0]} sequences × {t[1]} teacher-forced tokens. Measured on {env_line(sec)}.")
    return "\n".join(out)


README_TABLES = {
    "ceilings": ceilings_markdown,
    "ladder": lambda: ladder_markdown([(1, "bench"), (2, "bench"), (3, "bench")], "M=4096 N=4096 K=4096",
                                      "cuBLAS FP32"),
    "04_f16": lambda: bench_markdown(4, "bench_f16"),
    "04_s8": lambda: bench_markdown(4, "bench_s8"),
    "04_mma_peak": mma_peak_markdown,
    "06_w8a16": w8a16_markdown,
    "06_w8a16_tiles": w8a16_tiles_markdown,
    "06_w8a8": w8a8_markdown,
    "07_w4a16": w4a16_markdown,
    "07_w4a16_tiles": w4a16_tiles_markdown,
    "08_nf4": nf4_markdown,
    "decode_graph": lambda: graph_markdown(ms=(1, 16), shapes=((8192, 8192), (4096, 14336), (14336, 4096))),
    "10_graph": lambda: graph_markdown((10,), ms=(1, 16, 32)),
    "09_w4a8": w4a8_markdown,
    "09_graph": lambda: graph_markdown((9,)),
    "10_ladder": pipe_ladder_markdown,
    "10_w4a16": pipe_markdown,
    "11_decode": decode_markdown,
    "11_accuracy": decode_accuracy_markdown,
    "12_stream": stream_markdown,
    "12_wgmma": wgmma_markdown,
    "12_graph": lambda: graph_markdown((12,), ms=(1, 16, 32)),
}


def update_readme(path: Path = build.ROOT / "README.md", check: bool = False) -> bool:
    """Rewrite each `<!-- table:NAME -->…<!-- /table:NAME -->` block from the recorded results.
    With check=True, only report whether the README is up to date."""
    text = path.read_text()
    new = text
    for name, fn in README_TABLES.items():
        pat = re.compile(rf"(<!-- table:{name} -->).*?(<!-- /table:{name} -->)", re.S)
        if pat.search(new):
            try:
                body = fn()
            except (FileNotFoundError, KeyError) as e:
                body = f"(not recorded yet: {e})"
            new = pat.sub(lambda m: m.group(1) + "\n" + body + "\n" + m.group(2), new)
    if check:
        return new == text
    path.write_text(new)
    return new != text


def save_figure(fig, lesson: int | str, name: str) -> Path:
    """Write a figure to build/plots/<lesson>_<name>.png (for slides and the course report)."""
    d = build.ROOT / "build" / "plots"
    d.mkdir(parents=True, exist_ok=True)
    p = d / f"{int(lesson):02d}_{name}.png"
    fig.savefig(p, dpi=130, bbox_inches="tight")
    return p


if __name__ == "__main__":
    if sys.argv[1:2] == ["readme"]:
        changed = update_readme(check="--check" in sys.argv)
        print("README tables", ("up to date" if changed else "out of date") if "--check" in sys.argv
              else ("updated" if changed else "already up to date"))
        sys.exit(0 if ("--check" not in sys.argv or changed) else 1)
    print("usage: python -m harness.results readme [--check]")

