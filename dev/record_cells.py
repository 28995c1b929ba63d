"""Records the stored outputs of some cells of a lesson notebook on this GPU, leaving every other cell's outputs as
they are: the notebook's first code cell (its set-up) and the cells whose source contains PATTERN run in a Jupyter
kernel, in notebook order, and each matched cell's outputs replace its stored ones. For a section added to a lesson
whose other recorded outputs (and the numbers its prose quotes) must not move. Run it as dev/record_gpu.sh runs a
lesson (COURSE_RECORD=1 REQUIRE_GPU=1 COURSE_SOLUTIONS=1, .gpu-wheels installed).

    python3 dev/record_cells.py LESSON PATTERN [--timeout SECONDS]     e.g. python3 dev/record_cells.py 11 real_model
"""
from __future__ import annotations

import argparse
import copy
import os
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from harness import run as course_run  # noqa: E402


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("lesson")
    ap.add_argument("pattern")
    ap.add_argument("--timeout", type=int, default=1800)
    a = ap.parse_args()
    import nbformat
    from nbclient import NotebookClient

    (path,) = course_run.notebooks([a.lesson])
    nb = nbformat.read(path, as_version=4)
    code = [i for i, c in enumerate(nb.cells) if c.cell_type == "code"]
    chosen = [code[0]] + [i for i in code[1:] if a.pattern in nb.cells[i].source]
    if len(chosen) < 2:
        print(f"no code cell of {path.name} contains {a.pattern!r}", file=sys.stderr)
        return 2
    sub = copy.deepcopy(nb)
    sub.cells = [copy.deepcopy(nb.cells[i]) for i in chosen]
    os.environ["COURSE_NOTEBOOK"] = path.stem  # as harness.run sets it for the kernel
    NotebookClient(sub, timeout=a.timeout, kernel_name="python3", resources={"metadata": {"path": str(path.parent)}},
                   extra_arguments=["--IPKernelApp.log_level=ERROR"]).execute()  # raises on a cell's error
    for i, c in zip(chosen[1:], sub.cells[1:]):
        nb.cells[i].outputs = c.outputs
    # numbered as one run from the top (nbval refuses a cell with outputs and no execution count)
    for n, c in enumerate((c for c in nb.cells if c.cell_type == "code"), 1):
        c.execution_count = n
    nbformat.write(nb, path)
    print(f"{path}: recorded {len(chosen) - 1} cells ({', '.join(str(i) for i in chosen[1:])})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
