"""Cold and cached compile time of every lesson's exercise file (kernels/NN_*/*.cu), one at a time, as a table.

    python dev/compile_times.py [--solutions] [LESSON ...]

Cold: a fresh, empty kernel cache (a temporary folder), so nvcc runs in full. Cached: the same
file loaded again in a new process, which finds the build in that cache (what every later notebook, grade or test
run pays). Run it alone on the machine: each cold compile uses every core. The load column is the 1-minute load
average just before the cold compile: on a busy machine the times stretch with it.
"""
import os
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
t0 = time.perf_counter()
m = build.load_file(sys.argv[1], solution={sol})
print(f"@@ {{time.perf_counter() - t0:.3f}} {{int(m.cached)}}")
"""


def one(path: Path, cache: Path, solution: bool) -> tuple[float, bool]:
    env = dict(os.environ, COURSE_CACHE=str(cache), PYTHONPATH=str(ROOT))
    p = subprocess.run([sys.executable, "-c", TIMED.format(sol=solution), str(path)], capture_output=True, text=True,
                       env=env, cwd=ROOT)
    line = next((l for l in p.stdout.splitlines() if l.startswith("@@ ")), None)
    if line is None:
        raise RuntimeError(f"{path}: {(p.stderr or p.stdout)[-1500:]}")
    secs, cached = line.split()[1:]
    return float(secs), cached == "1"


def main(argv):
    solution = "--solutions" in argv
    wanted = {int(a) for a in argv if a.isdigit()}
    files = [p for p in sorted((ROOT / ("solutions" if solution else "kernels")).glob("[0-9][0-9]_*/*.cu"))
             if not wanted or int(p.parent.name[:2]) in wanted]
    print(f"{os.cpu_count()} CPU cores; each file loaded in a fresh process (torch already imported)\n")
    print(f"{'file':<48} {'cold s':>8} {'cached s':>9} {'load':>6}")
    rows = []
    for path in files:
        with tempfile.TemporaryDirectory() as cache:
            load = os.getloadavg()[0]
            try:
                cold, was = one(path, Path(cache), solution)
                cached, hit = one(path, Path(cache), solution)
            except RuntimeError as e:
                print(f"{build._show(path):<48} failed: {str(e).splitlines()[-1][:80]}")
                continue
        assert not was and hit, f"{path}: the first load must compile and the second must hit the cache"
        rows.append((path, cold, cached))
        print(f"{build._show(path):<48} {cold:8.1f} {cached:9.2f} {load:6.1f}", flush=True)
    if rows:
        print(f"\n{'slowest cold':<48} {max(r[1] for r in rows):8.1f}\n{'slowest cached':<48} "
              f"{max(r[2] for r in rows):>18.2f}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
