"""Check that an edit to a kernel file left its default build the same code: compile the file as a git revision
had it and as it is now to PTX, for each architecture the harness builds it for (sm_80 and sm_90, or sm_90a for a
file that REQUIRES it), and compare the PTX with comments and debug lines dropped.

    python dev/compare_ptx.py [--rev HEAD] [-D FLAG ...] solutions/06_fused_int8/w8a16_fast.cu ...

Prints one line per file and architecture (identical / DIFFERENT, with the first differing lines) and exits 1 if
any differ. The flags are the harness's (harness/build.py) and torch's extension flags, without -lineinfo."""
from __future__ import annotations

import argparse
import difflib
import re
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
TORCH_FLAGS = ["-D__CUDA_NO_HALF_OPERATORS__", "-D__CUDA_NO_HALF_CONVERSIONS__", "-D__CUDA_NO_BFLOAT16_CONVERSIONS__",
               "-D__CUDA_NO_HALF2_OPERATORS__", "--expt-relaxed-constexpr", "-std=c++17"]


def archs(text: str) -> list[str]:
    m = re.search(r"REQUIRES:\s*sm_(\d)(\d)(a?)\b", text)
    return [f"sm_{m.group(1)}{m.group(2)}a"] if m and m.group(3) else ["sm_80", "sm_90"]


def ptx(text: str, arch: str, flags: list[str]) -> list[str]:
    with tempfile.TemporaryDirectory() as d:
        src, out = Path(d) / "k.cu", Path(d) / "k.ptx"
        src.write_text(text)
        cmd = ["nvcc", "-O3", "-ptx", f"-arch={arch}", *TORCH_FLAGS, *flags, str(src), "-o", str(out)]
        r = subprocess.run(cmd, capture_output=True, text=True)
        if r.returncode:
            raise SystemExit(f"nvcc failed ({arch}):\n{r.stderr[-3000:]}")
        lines = out.read_text().splitlines()
    keep = []
    for ln in lines:
        ln = ln.split("//", 1)[0].rstrip()
        if ln and not ln.lstrip().startswith((".loc", ".file")):
            keep.append(ln)
    return keep


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("files", nargs="+")
    ap.add_argument("--rev", default="HEAD")
    ap.add_argument("-D", dest="defines", action="append", default=[])
    a = ap.parse_args()
    flags = [f"-D{d}" for d in a.defines]
    bad = 0
    for f in a.files:
        rel = Path(f).resolve().relative_to(ROOT)
        old = subprocess.run(["git", "show", f"{a.rev}:{rel}"], cwd=ROOT, capture_output=True, text=True, check=True).stdout
        new = (ROOT / rel).read_text()
        for arch in archs(new):
            p_old, p_new = ptx(old, arch, flags), ptx(new, arch, flags)
            if p_old == p_new:
                print(f"{rel} {arch}: identical PTX ({len(p_new)} lines)")
            else:
                bad += 1
                diff = list(difflib.unified_diff(p_old, p_new, "before", "after", n=1, lineterm=""))
                print(f"{rel} {arch}: DIFFERENT PTX ({len(diff)} diff lines)\n" + "\n".join(diff[:40]))
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
