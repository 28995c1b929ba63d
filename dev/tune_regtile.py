"""Lesson 03 tuning: build the fast register-tiled kernel (regtile_fast.cu) with any -D macros given
on the command line, check each, and time them against cuBLAS FP32 in one run.
What earlier sweeps found is in lessons/03_register_tiling/notes.md."""
import sys

import torch

from harness import bench, build, catalog, check

torch.backends.cuda.matmul.allow_tf32 = False
prob = catalog.FP32
VARIANTS = {"as shipped": []}
extra = [a for a in sys.argv[1:] if a.startswith("-D")]
if extra:
    VARIANTS["command line " + " ".join(extra)] = extra
ops = {"cuBLAS FP32": lambda x, W, out=None: torch.nn.functional.linear(x, W)}
for vname, flags in VARIANTS.items():
    mod = build.load(3, "regtile_fast", solution=True, extra_cuda_flags=flags)
    for launcher in ("gemm_regtile_wide_bk8", "gemm_regtile_wide"):
        op = prob.bind(getattr(mod, launcher), f"{launcher[12:]} {vname}")
        res = check.check(prob, op)
        print(("PASS " if res.ok else "FAIL ") + op.__name__, "" if res.ok else res)
        if res.ok:
            ops[op.__name__] = op
sizes = [int(s) for s in sys.argv[1:] if s.isdigit()] or [4096]
bench.compare(prob, ops, [(n, n, n) for n in sizes], baseline="cuBLAS FP32")
