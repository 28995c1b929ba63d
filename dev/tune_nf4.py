"""Lesson 08 tuning: build the fused NF4 GEMV with other -D settings (NF4_SPREAD, NF4_R, NF4_MIN_BLOCKS, NF4_WARPS,
NF4_PERSIST, NF4_LOAD_BRANCH), check each, and time it at decode shapes, weights rotated past L2, next to cuBLAS FP16
on FP16 weights and lesson 07's W4A16 GEMV (the same bytes, INT4 instead of NF4) in the same run.

    python dev/tune_nf4.py [-DNF4_SPREAD=1 ...]   the GEMV on bitsandbytes' layout (gemv_nf4)
    python dev/tune_nf4.py --persist              the GEMV on 16-row tiles (gemv_nf4_tiles) at M <= 8: one
                                                    generation of looping blocks (shipped) against a block per unit,
                                                    32-output units, and the two forms of the loads' guard; per call
                                                    and in a CUDA graph, outputs compared bit for bit with shipped
"""
import sys

import torch

from harness import bench, build, catalog, check, roofline

VARIANTS = {"shipped": [], "one table (conflicts)": ["-DNF4_SPREAD=0"], "16 outputs per block": ["-DNF4_R=1"],
            "1 block per SM": ["-DNF4_MIN_BLOCKS=1"], "4 warps": ["-DNF4_WARPS=4"]}
SHAPES = [(1, 8192, 8192), (8, 8192, 8192), (16, 8192, 8192), (1, 14336, 4096), (1, 4096, 14336)]
PERSIST = "--persist" in sys.argv
if PERSIST:  # what lessons/08_nf4/notes.md (, fourth session) compares
    VARIANTS = {"shipped": [], "a block per unit": ["-DNF4_PERSIST=0"], "32-output units": ["-DNF4_R=2"],
                "loads predicated": ["-DNF4_LOAD_BRANCH=0"], "loads under one branch": ["-DNF4_LOAD_BRANCH=1"]}
    SHAPES = [(m, n, k) for n, k in ((8192, 8192), (14336, 4096), (28672, 4096), (4096, 14336)) for m in (1, 4)]
extra = [a for a in sys.argv[1:] if a.startswith("-D")]
if extra:
    VARIANTS = {"command line " + " ".join(extra): extra}

for name, err in build.prebuild(8, "nf4_fast", VARIANTS).items():
    print(f"build {name} failed:\n{err}")
bw = roofline.ceilings()["copy_GBps"]
prob = catalog.NF4_TILES if PERSIST else catalog.NF4_LINEAR  # the tiles problem's inputs are quant.NF4Tiles
w4 = catalog.W4A16.bind(build.load(7, "w4a16_fast", solution=True).linear_w4a16)
base = {s: bench.time_fn(torch.nn.functional.linear, bench.input_sets(catalog.FP16, s), reps=50).median_us for s in SHAPES}
int4 = {s: bench.time_fn(w4, bench.input_sets(catalog.W4A16, s), reps=50).median_us for s in SHAPES}
for s in SHAPES:
    print(f"M={s[0]} N={s[1]} K={s[2]}: cuBLAS FP16 {base[s]:.1f} µs, lesson 07 W4A16 {int4[s]:.1f} µs")
ref_out = {}  # PERSIST: the shipped build's outputs, which every variant must match bit for bit
for name, flags in VARIANTS.items():
    mod = build.load(8, "nf4_fast", solution=True, extra_cuda_flags=flags)
    op = prob.bind(mod.gemv_nf4_tiles if PERSIST else mod.gemv_nf4)
    res = check.check(prob, op)
    if not res.ok:
        print(f"FAIL {name}\n{res.first_failure()}")
        continue
    regs = {k: (v["sm_90"]["registers"], v["sm_90"]["spill_stores"]) for k, v in mod.resources().items() if "gemv" in k}
    cells = []
    for s in SHAPES:
        sets = bench.input_sets(prob, s)
        out = op(*sets[0]) if PERSIST else None  # a fresh output
        same = out is None or torch.equal(ref_out.setdefault(s, out), out)
        tm = bench.time_fn(op, sets, reps=50, graph=PERSIST)
        t = tm.median_us
        cells.append(f"M={s[0]} N={s[1]} K={s[2]}: {t:6.1f} µs {100 * prob.bytes(s) / bw / 1e3 / t:5.1f}% "
                     f"{base[s] / t:4.2f}x cuBLAS, {int4[s] / t:4.2f}x W4A16" +
                     (f" | graph {tm.graph_us:6.1f} µs {100 * prob.bytes(s) / bw / 1e3 / tm.graph_us:5.1f}%"
                      f"{'' if same else ' OUTPUT DIFFERS from shipped'}" if PERSIST else ""))
    print(f"{name:<22} {regs}\n    " + "\n    ".join(cells), flush=True)
