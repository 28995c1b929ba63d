"""The course's main job: execute every lesson notebook in order, headless.

    python -m harness.run [LESSON ...] [--in-place] [--timeout SECONDS]

Executed notebooks go to build/executed/ (the notebook's own file with --in-place, which is how the stored
outputs of the reference GPU are made), figures to build/plots/. Cells tagged `gpu` launch kernels: on a machine
with no GPU they are skipped, and keep the output recorded on the reference GPU under a line saying so;
with REQUIRE_GPU=1 a missing GPU is an error instead. With COURSE_RECORD=1 and --in-place it makes a recording of
this GPU: results/<gpu>/NN.json and results/<gpu>/ncu/ are written, and results/<gpu>/ceilings.json by lesson 00
only (COURSE_NOTEBOOK). dev/record_gpu.sh records every lesson this way.
"""
from __future__ import annotations

import argparse
import os
import re
import sys
import threading
import time
from pathlib import Path

from . import build, notebook, toolchain

LESSONS = build.ROOT / "lessons"
OUT = build.ROOT / "build" / "executed"


def notebooks(selected: list[str] | None = None) -> list[Path]:
    nbs = sorted(p for p in LESSONS.glob("[0-9][0-9]_*/[0-9][0-9]_*.ipynb") if ".ipynb_checkpoints" not in p.parts)
    if selected:
        want = {f"{int(s):02d}" for s in selected}
        nbs = [p for p in nbs if p.name[:2] in want]
    return nbs


def skip_note(cell) -> dict:
    import nbformat
    return nbformat.v4.new_output("stream", name="stdout", text=notebook.skip_line(bool(cell.get("outputs"))))


class _Ticker:
    """Prints a line while one cell runs long (a cold compile, a benchmark), so a wait never looks like a hang."""

    def __init__(self, every: float = 15):
        self.every, self.cell, self.since, self._stop = every, None, 0.0, threading.Event()
        threading.Thread(target=self._loop, daemon=True).start()

    def start(self, index: int):
        self.cell, self.since = index, time.time()

    def stop(self):
        self._stop.set()

    def _loop(self):
        while not self._stop.wait(self.every):
            if self.cell is not None and time.time() - self.since >= self.every:
                print(f"    ... cell {self.cell} running for {time.time() - self.since:.0f} s", flush=True)


def execute(path: Path, out_path: Path, timeout: int, progress: bool = False) -> dict:
    import nbformat
    from nbclient import NotebookClient

    nb = nbformat.read(path, as_version=4)
    have_gpu = toolchain.gpu_available()
    stats = {"cells": 0, "skipped": 0, "error": None}

    ticker = _Ticker() if progress else None

    class Client(NotebookClient):
        async def async_execute_cell(self, cell, cell_index, execution_count=None, store_history=True):
            if cell.cell_type == "code" and "gpu" in cell.metadata.get("tags", []) and not have_gpu:
                stats["skipped"] += 1
                cell.outputs = [skip_note(cell)] + [o for o in cell.get("outputs", [])
                                                     if not o.get("text", "").startswith(notebook.SKIP_PREFIX)]
                return cell
            if cell.cell_type == "code":
                stats["cells"] += 1
                if ticker:
                    ticker.start(cell_index)
            return await super().async_execute_cell(cell, cell_index, execution_count, store_history)

    os.environ["COURSE_NOTEBOOK"] = path.stem  # the kernel inherits it (roofline.records_ceilings)
    # The kernel's own log is for kernel developers: at its default level it warns, for every notebook, that its
    # local connection is not encrypted, which a learner can do nothing about. Its errors still show.
    client = Client(nb, timeout=timeout, kernel_name="python3", resources={"metadata": {"path": str(path.parent)}},
                    extra_arguments=["--IPKernelApp.log_level=ERROR"])
    try:
        client.execute()
    except Exception as e:  # CellExecutionError and friends: keep what ran, report the error
        text = re.sub(r"\x1b\[[0-9;]*m", "", str(e)).strip()  # drop the terminal colour codes
        stats["error"] = text.splitlines()[-1] if text else type(e).__name__
    finally:
        if ticker:
            ticker.stop()
    out_path.parent.mkdir(parents=True, exist_ok=True)
    nbformat.write(nb, out_path)
    return stats


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("lessons", nargs="*", help="lesson numbers (default: all)")
    ap.add_argument("--in-place", action="store_true", help="write outputs into lessons/ (stored outputs)")
    ap.add_argument("--timeout", type=int, default=1800, help="per-cell time limit, seconds")
    a = ap.parse_args(argv)
    why = build.unknown_lessons(a.lessons)
    if why:
        print(f"run: {why}", file=sys.stderr)
        return 3
    print(toolchain.report(), flush=True)
    if not toolchain.gpu_available():
        if toolchain.gpu_required():
            print("REQUIRE_GPU=1 but no GPU is visible: stopping.")
            return 1
        print("\nNo GPU here: every kernel is compiled and every CPU cell runs; cells that launch kernels "
              "are skipped and keep the outputs recorded on the reference GPU.\n")
    failed = 0
    for nb in notebooks(a.lessons):
        t0 = time.time()
        target = nb if a.in_place else OUT / nb.name
        print(f"{nb.name} ...", flush=True)
        s = execute(nb, target, a.timeout, progress=True)
        verdict = "ERROR: " + s["error"] if s["error"] else "ok"
        skipped = f", {s['skipped']} GPU cells skipped (no GPU)" if s["skipped"] else ""
        print(f"{nb.name:<40} {s['cells']} cells run{skipped}, {time.time() - t0:.0f} s: {verdict}  -> "
              f"{target.relative_to(build.ROOT)}", flush=True)
        failed += bool(s["error"])
    print(f"\nfigures: {(build.ROOT / 'build' / 'plots').relative_to(build.ROOT)}/")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
