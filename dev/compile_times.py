"""Compile times of every lesson's exercise file (kernels/NN_*/*.cu), one at a time, as a table: cold, after an edit,
and cached, each the min and median of several rounds.

    python dev/compile_times.py [--solutions] [--rounds N] [LESSON ...]

Each file is copied into a temporary folder (a lesson folder of the same name, so that it builds as it would in
kernels/) with its own empty kernel cache, and loaded in a fresh process each time (torch imported first, as in a
notebook):
  cold    nothing of this file cached: load_inline builds its binding and its kernel, and links them;
  edit    the file edited (a line appended) and loaded again: nvcc compiles the kernel, the binding is reused;
  cached  the edited file loaded again: its finished build is imported, nothing runs.
The binding runtime (harness/binding.cpp, built once per torch and Python in build/binding/) is not part of any of
them: its one-time build is timed first, in its own folder, when --runtime is given.

Run it alone on the machine if you can: a cold compile uses every core. The load column is the 1-minute load
average before each file's first round: on a busy machine the times stretch with it.
"""
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from harness import build  # noqa: E402

TIMED = """
import sys, time
import torch  # a notebook has it already: not part of loading a kernel
from harness import build
build.runtime()  # built once per torch and Python (--runtime times it)
t0 = time.perf_counter()
m = build.load_file(sys.argv[1], solution={sol})
print(f"@@ {{time.perf_counter() - t0:.3f}} {{int(m.cached)}}")
"""

RUNTIME = """
import time
import torch
from harness import build
t0 = time.perf_counter()
build.runtime()
print(f"@@ {time.perf_counter() - t0:.3f} 0")
"""


def one(code: str, args: list[str], cache: Path, root: Path = ROOT) -> tuple[float, bool]:
    env = dict(os.environ, COURSE_CACHE=str(cache), PYTHONPATH=str(root), COURSE_ROOT=str(root))
    p = subprocess.run([sys.executable, "-c", code, *args], capture_output=True, text=True, env=env, cwd=root)
    line = next((l for l in p.stdout.splitlines() if l.startswith("@@ ")), None)
    if line is None:
        raise RuntimeError(f"{args}: {(p.stderr or p.stdout)[-1500:]}")
    secs, cached = line.split()[1:]
    return float(secs), cached == "1"


def rounds_of(path: Path, solution: bool) -> tuple[float, float, float]:
    code = TIMED.format(sol=solution)
    with tempfile.TemporaryDirectory() as tmp:
        copy = Path(tmp) / path.parent.name / path.name
        copy.parent.mkdir()
        shutil.copyfile(path, copy)
        cache = Path(tmp) / "cache"
        cold, was = one(code, [str(copy)], cache)
        copy.write_text(copy.read_text() + "\n// edited\n")
        edit, was_edit = one(code, [str(copy)], cache)
        cached, hit = one(code, [str(copy)], cache)
    assert not was and not was_edit and hit, f"{path}: cold and edit must compile, and the third load hit the cache"
    return cold, edit, cached


def main(argv):
    solution = "--solutions" in argv
    rounds = 3
    if "--rounds" in argv:
        i = argv.index("--rounds")
        rounds, argv = int(argv[i + 1]), argv[:i] + argv[i + 2:]
    wanted = {int(a) for a in argv if a.isdigit()}
    files = [p for p in sorted((ROOT / ("solutions" if solution else "kernels")).glob("[0-9][0-9]_*/*.cu"))
             if not wanted or int(p.parent.name[:2]) in wanted]
    print(f"{os.cpu_count()} CPU cores; each load in a fresh process (torch already imported); {rounds} rounds; "
          "min / median in seconds\n")
    if "--runtime" in argv:
        with tempfile.TemporaryDirectory() as tmp:  # a fresh repository root: the runtime is built from nothing
            root = Path(tmp) / "root"
            shutil.copytree(ROOT / "harness", root / "harness", ignore=shutil.ignore_patterns("__pycache__"))
            (root / "lessons").mkdir()
            secs, _ = one(RUNTIME, [], Path(tmp) / "cache", root)
        print(f"binding runtime (once per torch and Python): {secs:.1f} s (load {os.getloadavg()[0]:.1f})\n")
    print(f"{'file':<44} {'cold':>11} {'after edit':>11} {'cached':>11} {'load':>5}")
    rows = {p: [] for p in files}
    loads = {}
    for r in range(rounds):
        for path in files:
            loads.setdefault(path, os.getloadavg()[0])
            try:
                rows[path].append(rounds_of(path, solution))
            except RuntimeError as e:
                print(f"{build._show(path):<44} failed: {str(e).splitlines()[-1][:80]}")
    table = []
    for path, got in rows.items():
        if not got:
            continue
        cols = [(min(c), statistics.median(c)) for c in zip(*got)]
        table.append((path, cols))
        print(f"{build._show(path):<44} " + " ".join(f"{lo:5.1f}/{med:<5.1f}" if i < 2 else f"{lo:5.2f}/{med:<5.2f}"
                                                     for i, (lo, med) in enumerate(cols)) + f" {loads[path]:5.1f}")
    if table:
        print(f"\n{'slowest (median)':<44} " + " ".join(f"{max(c[i][1] for _, c in table):11.2f}" for i in range(3)))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
