"""What the lesson notebooks load in their first cell: `%load_ext harness.notebook`.

It registers the `%%gpu` cell magic, the first line of every cell tagged `gpu` (cells that launch kernels). With a
GPU the cell runs as written; `%%gpu sm_90a` runs it only on a GPU of compute capability 9.0 (an H100 or H200:
wgmma and the copy engine). Elsewhere it is not run: it prints one line saying why and shows again the outputs
recorded on the reference GPU, read from this notebook's file on disk. So JupyterLab behaves like `./course run`,
and running a notebook top to bottom on a CPU machine keeps the recorded outputs instead of replacing them with
CUDA errors. Paths the notebook displays are shown relative to the course root (no machine's folders in outputs).
"""
from __future__ import annotations

import ast
import json
import pathlib
import sys
from pathlib import Path

from . import build, toolchain

# The first words of the line shown in place of a skipped cell's run (harness.run writes the same line): recorded
# outputs shown again drop these lines, so rerunning a cell never stacks them.
SKIP_PREFIX = "[skipped here"


def skip_line(recorded: bool, reason: str = toolchain.NO_GPU_REASON) -> str:
    return (f"{SKIP_PREFIX}: this cell {reason}."
            + (" The output below was recorded on the reference GPU.]\n" if recorded else "]\n"))


def _src(cell) -> str:
    s = cell.get("source", "")
    return "".join(s) if isinstance(s, list) else s


def _norm(source: str) -> str:
    return "\n".join(l.rstrip() for l in source.strip().splitlines())


def notebook_file(folder: Path | None = None) -> Path | None:
    """The lesson notebook of the kernel's folder (one NN_*.ipynb per lesson folder), or None."""
    hits = sorted((folder or Path.cwd()).glob("[0-9][0-9]_*.ipynb"))
    return hits[0] if len(hits) == 1 else None


def recorded_outputs(source: str, folder: Path | None = None) -> list[dict] | None:
    """The stored outputs of the cell whose source is `source`, from the notebook file on disk, without the lines
    that said the cell was skipped. None when no unedited cell of that source is stored."""
    nb = notebook_file(folder)
    if nb is None:
        return None
    want = _norm(source)
    cells = [c for c in json.loads(nb.read_text()).get("cells", [])
             if c.get("cell_type") == "code" and _norm(_src(c)) == want]
    if not cells:
        return None
    outs = []
    for o in cells[0].get("outputs", []):
        if o.get("output_type") == "stream":
            text = o.get("text", "")
            text = "".join(text) if isinstance(text, list) else text
            text = "".join(l for l in text.splitlines(keepends=True) if not l.startswith(SKIP_PREFIX))
            if text:
                outs.append(dict(o, text=text))
        elif o.get("output_type") in ("display_data", "execute_result"):
            outs.append(o)
    return outs


class _Recorded:
    """An execute_result shown again with the data it had."""

    def __init__(self, data: dict, metadata: dict):
        self.data = {k: "".join(v) if isinstance(v, list) else v for k, v in data.items()}
        self.metadata = metadata

    def _repr_mimebundle_(self, include=None, exclude=None):
        return self.data, self.metadata


def _replay(outputs: list[dict]):
    """Emit stored outputs again, in order; returns the execute_result's object (the cell's value) if any."""
    from IPython.display import publish_display_data
    value = None
    for o in outputs:
        kind = o["output_type"]
        if kind == "stream":
            stream = sys.stderr if o.get("name") == "stderr" else sys.stdout
            stream.write(o["text"])
            stream.flush()
        elif kind == "display_data":
            publish_display_data({k: "".join(v) if isinstance(v, list) else v for k, v in o.get("data", {}).items()},
                                 o.get("metadata", {}))
        else:
            value = _Recorded(o.get("data", {}), o.get("metadata", {}))
    return value


def _run(shell, body: str):
    """Run a cell body in the notebook's namespace; the value of a last bare expression is returned (and so shown
    as the cell's result, as if the cell had no magic line)."""
    code = shell.transform_cell(body)
    tree = ast.parse(code)
    last = None
    if tree.body and isinstance(tree.body[-1], ast.Expr) and not code.rstrip().endswith(";"):
        last = ast.Expression(tree.body.pop().value)
    ns = shell.user_ns
    exec(compile(tree, "<gpu cell>", "exec"), ns)
    return eval(compile(last, "<gpu cell>", "eval"), ns) if last is not None else None


def _why_not(line: str) -> str | None:
    """Why this machine cannot run a `%%gpu <line>` cell, or None when it can."""
    if not toolchain.gpu_available():
        return toolchain.NO_GPU_REASON
    want = line.strip()
    if not want:
        return None
    if want != "sm_90a":
        raise ValueError(f"%%gpu {want}: the only requirement a cell can name is sm_90a")
    import torch
    cap = torch.cuda.get_device_capability()
    if cap == (9, 0):
        return None
    return (f"needs a GPU of compute capability 9.0 (sm_90a: an H100 or H200); this {torch.cuda.get_device_name()} "
            f"is sm_{cap[0]}{cap[1]}")


def gpu(line: str, cell: str):
    """%%gpu [sm_90a]: run this cell only where a CUDA GPU (of compute capability 9.0 with sm_90a) is visible;
    elsewhere show its recorded outputs."""
    from IPython import get_ipython
    shell = get_ipython()
    why = _why_not(line)
    if why is None:
        return _run(shell, cell)
    if toolchain.gpu_required() and not toolchain.gpu_available():
        raise RuntimeError(f"REQUIRE_GPU=1, but this cell {why}")
    source = "%%gpu" + (f" {line}" if line.strip() else "") + "\n" + cell
    outs = recorded_outputs(source)
    sys.stdout.write(skip_line(bool(outs), why))
    if outs is None:
        sys.stdout.write("(no recorded output for this cell as it now reads: run it on a GPU to see one)\n")
    sys.stdout.flush()
    return _replay(outs or [])


def _path_text(p, printer, cycle):
    shown = p.relative_to(build.ROOT) if p.is_absolute() and p.is_relative_to(build.ROOT) else p
    printer.text(f"{type(p).__name__}('{shown}')")


def load_ipython_extension(shell):
    shell.register_magic_function(gpu, magic_kind="cell", magic_name="gpu")
    plain = shell.display_formatter.formatters["text/plain"]
    plain.for_type(pathlib.PurePath, _path_text)
