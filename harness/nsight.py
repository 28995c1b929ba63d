"""Profile one kernel of a lesson with Nsight Compute (ncu) and read back the few metrics that matter.

The profiled program is a small generated script: your setup code, then the code to profile inside
an NVTX range, so ncu sees only those launches (`--nvtx --nvtx-include profile/`) of the kernel you
name (`--kernel-name regex:`). `--clock-control none` keeps the GPU's normal clocks so the durations
ncu reports are comparable with CUDA-event timings.

Where ncu or its hardware counters are not available (no GPU, a container without profiling
permission), `profile()` says why and returns the report recorded on this GPU, or on the reference GPU,
shipped with the course (results/<gpu>/ncu/*.csv), so every Nsight exercise can still be worked.
"""
from __future__ import annotations

import csv
import io
import os
import re
import shutil
import subprocess
import sys
import tempfile
import textwrap
from dataclasses import dataclass, field
from pathlib import Path

from . import build, roofline, toolchain


def recorded_dir(gpu: str | None = None) -> Path:
    """The Nsight reports shipped for `gpu`: results/<gpu>/ncu/."""
    return roofline.recording_dir(gpu) / "ncu"


def local_dir() -> Path:
    """Your own profiles on this GPU: build/results/<gpu>/ncu/."""
    return roofline.local_dir() / "ncu"


def _recording() -> bool:
    return os.environ.get("COURSE_RECORD", "") not in ("", "0")


# Columns ncu adds to every raw-page row: device and launch attributes, not measurements.
_ATTRIBUTES = ("device__", "c2clink__", "nvlink__", "numa__", "profiler__", "pmsampling", "launch__",
               "sm__maximum", "smsp__maximum", "dram__bytes_per")


class NsightUnavailable(RuntimeError):
    pass


@dataclass
class Profile:
    """Metrics of each profiled kernel launch: rows of {metric name: value}."""
    name: str
    rows: list[dict]
    units: dict
    source: str  # "measured now" or "recorded on <GPU> (file)"
    csv_path: Path | None = None
    notes: list[str] = field(default_factory=list)

    def value(self, metric: str, kernel: str | None = None, launch: int = 0) -> float:
        rows = [r for r in self.rows if kernel is None or kernel in r.get("Kernel Name", "")]
        if not rows:
            raise KeyError(f"no profiled launch of a kernel matching {kernel!r} in {self.name}")
        if metric not in rows[launch]:
            raise KeyError(f"metric {metric} was not collected; have: {sorted(k for k in rows[launch] if '__' in k)}")
        return _num(rows[launch][metric])

    def per_kernel(self, metric: str, per: str | None = None) -> dict:
        """{kernel name: metric value} (or metric ÷ `per`, e.g. sectors per request), one per launch."""
        out = {}
        for r in self.rows:
            name = r.get("Kernel Name", "?").split("(")[0].removeprefix("void ")
            v = _num(r.get(metric))
            out[name] = v / _num(r.get(per)) if per else v
        return out

    def table(self, metrics: list[str] | None = None) -> str:
        ms = metrics or sorted({k for r in self.rows for k in r if "__" in k and not k.startswith(_ATTRIBUTES)
                                and not re.search(r"\.(avg|min|max)(\.|$)", k)})
        out = [f"{self.name}: {self.source}"]
        for r in self.rows:
            out.append(f"  kernel {r.get('Kernel Name', '?')[:70]}")
            for m in ms:
                if m in r:
                    out.append(f"    {m:<72} {r[m]:>14} {self.units.get(m, '')}")
        return "\n".join(out + [f"  note: {n}" for n in self.notes])

    def _repr_pretty_(self, p, cycle):
        p.text(self.table())

    def __str__(self):
        return self.table()


def _num(v) -> float:
    try:
        return float(str(v).replace(",", ""))
    except ValueError:
        return float("nan")


def ncu_path() -> str | None:
    found = shutil.which("ncu")
    if found:
        return found
    for cand in sorted(Path("/opt/nvidia").glob("nsight-compute/*/ncu")) + [Path("/usr/local/cuda/bin/ncu")]:
        if cand.exists():
            return str(cand)
    return None


def parse_raw_csv(text: str) -> tuple[list[dict], dict]:
    """ncu --csv --page raw: a header row, a units row, then one row per profiled launch."""
    lines = [l for l in text.splitlines() if l.startswith('"')]
    if len(lines) < 2:
        return [], {}
    rd = list(csv.reader(io.StringIO("\n".join(lines))))
    head, units, data = rd[0], rd[1], rd[2:]
    return [dict(zip(head, r)) for r in data], dict(zip(head, units))


def _script(setup: str, run: str, solution: bool) -> str:
    return "\n".join([
        "import os, torch",
        f"os.environ.setdefault('COURSE_SOLUTIONS', '{1 if solution else 0}')",
        textwrap.dedent(setup),
        "torch.cuda.synchronize()",
        "torch.cuda.nvtx.range_push('profile')",
        textwrap.dedent(run),
        "torch.cuda.synchronize()",
        "torch.cuda.nvtx.range_pop()",
    ])


def profile(lesson: int | str, name: str, *, setup: str, run: str, kernel: str, metrics: list[str],
            solution: bool | None = None, launch_count: int = 3, timeout: int = 600) -> Profile:
    """Profile launches of kernels matching `kernel` (a regex) made by `run`, collecting `metrics`.
    Falls back to the recorded report when ncu cannot run here."""
    solution = build.use_solutions() if solution is None else solution
    stem = f"{int(lesson):02d}_{name}"
    why = None
    ncu = ncu_path()
    if not toolchain.gpu_available():
        why = toolchain.NO_GPU_REASON
    elif ncu is None:
        why = "ncu (Nsight Compute) is not installed or not on PATH"
    if why is None:
        here = local_dir()
        here.mkdir(parents=True, exist_ok=True)
        with tempfile.NamedTemporaryFile("w", suffix=".py", delete=False) as f:
            f.write(_script(setup, run, solution))
        rep = here / f"{stem}.ncu-rep"
        cmd = [ncu, "--nvtx", "--nvtx-include", "profile/", "--kernel-name", f"regex:{kernel}",
               "--launch-count", str(launch_count), "--clock-control", "none", "--metrics", ",".join(metrics),
               "--force-overwrite", "--export", str(rep), "--csv", "--page", "raw", sys.executable, f.name]
        env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(build.ROOT), os.environ.get("PYTHONPATH", "")]))
        p = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout, env=env)
        os.unlink(f.name)
        rows, units = parse_raw_csv(p.stdout)
        if p.returncode == 0 and rows:
            out = here / f"{stem}.csv"
            out.write_text(p.stdout[p.stdout.index('"'):])
            if _recording():
                rec = recorded_dir(roofline.this_gpu())
                rec.mkdir(parents=True, exist_ok=True)
                (rec / f"{stem}.csv").write_text(out.read_text())
            return Profile(stem, rows, units, f"measured now on {toolchain.describe()['gpu']}", out)
        err = (p.stderr + p.stdout).strip().splitlines()
        why = "ncu failed: " + " | ".join(l for l in err if "ERR" in l or "rror" in l or "==PROF==" in l)[:600] \
            if err else f"ncu exited {p.returncode} and profiled no kernel matching {kernel!r}"
    try:
        prof = load_recorded(lesson, name)
    except NsightUnavailable as e:
        raise NsightUnavailable(f"not measured here ({why}), and {e}") from None
    prof.notes.append(f"not measured here ({why}); showing the recorded report")
    return prof


def latest(lesson: int | str, name: str) -> Profile:
    """Your own most recent profile of this exercise on this GPU if there is one, else the recorded one (this GPU's
    recording if the course ships one, else the reference GPU's). A recording run (COURSE_RECORD=1) shows the
    recorded file it has just written, labelled as such."""
    stem = f"{int(lesson):02d}_{name}"
    f = local_dir() / f"{stem}.csv"
    if f.exists() and not _recording():
        rows, units = parse_raw_csv(f.read_text())
        return Profile(stem, rows, units, f"your profile ({f.relative_to(build.ROOT)})", f)
    return load_recorded(lesson, name)


def load_recorded(lesson: int | str, name: str, gpu: str | None = None) -> Profile:
    """The report recorded on `gpu`; by default this GPU's recording if the course ships one, else the reference
    GPU's. Its source line names the GPU."""
    stem = f"{int(lesson):02d}_{name}"
    this = roofline.this_gpu()
    gpus = [gpu] if gpu else list(dict.fromkeys(([this] if this else []) + [roofline.REFERENCE_GPU]))
    for g in gpus:
        f = recorded_dir(g) / f"{stem}.csv"
        if f.exists():
            rows, units = parse_raw_csv(f.read_text())
            who = "the reference GPU, " if g == roofline.REFERENCE_GPU else ""
            return Profile(stem, rows, units, f"recorded on {who}{g} ({f.relative_to(build.ROOT)})", f)
    raise NsightUnavailable(f"no recorded Nsight report {stem}.csv in "
                            + ", ".join(str(recorded_dir(g).relative_to(build.ROOT)) for g in gpus))


# ----------------------------------------------------------------------------------------------
# SASS: which instructions a compiled kernel really uses (HMMA, IMMA, HGMMA, LDSM, ...).

SASS_OPS = re.compile(r"\b((?:HMMA|IMMA|HGMMA|IGMMA|LDSM|LDGSTS|LDS|STS|LDG|STG|BAR|UTMALDG|UBLKCP|SYNCS)\b(?:\.\w+)*)")


def _triton_bin() -> Path | None:
    """The CUDA binary tools triton's wheel bundles (cuobjdump, nvdisasm, ptxas), found without importing triton."""
    import importlib.util
    try:
        spec = importlib.util.find_spec("triton")
    except (ImportError, ValueError):
        return None
    for loc in (spec.submodule_search_locations or []) if spec else []:
        d = Path(loc) / "backends" / "nvidia" / "bin"
        if d.is_dir():
            return d
    return None


def cuobjdump_path() -> str | None:
    """cuobjdump (with nvdisasm beside it) from the CUDA toolkit, PATH, or the copy triton bundles; pip's nvcc
    package lacks both."""
    for d in (toolchain.find().cuda_home / "bin", Path("/usr/local/cuda/bin")):
        if (d / "cuobjdump").exists() and (d / "nvdisasm").exists():
            return str(d / "cuobjdump")
    if shutil.which("cuobjdump") and shutil.which("nvdisasm"):
        return shutil.which("cuobjdump")
    d = _triton_bin()
    if d and (d / "cuobjdump").exists() and (d / "nvdisasm").exists():
        return str(d / "cuobjdump")
    return None


def _source_key(module) -> str:
    """A kernel file as recorded counts name it: lesson folder and file stem, the same for kernels/ and solutions/."""
    path = Path(module.path)
    return f"{path.parent.name}/{path.stem}"


def recorded_sass(module, arch: str) -> tuple[dict[str, dict[str, int]], str] | None:
    """The SASS counts recorded for this module's kernel file and arch (a `sass` section of results/NN.json whose
    rows name their file), with a line saying where they come from; None if none are recorded."""
    import json
    key = _source_key(module)
    dirs = [roofline.recording_dir(g) for g in roofline.recorded_gpus()]
    for f in (f for d in dirs for f in sorted(d.glob("[0-9][0-9].json"))):
        sec = json.loads(f.read_text())["sections"].get("sass")
        rows = [r for r in (sec or {}).get("rows", []) if r.get("file") == key and r.get("arch") == arch]
        if rows:
            env = sec.get("env", {})
            whose = "" if module.solution else "; they are of solutions/, not your kernels/ file"
            where = (f"recorded from nvcc {env.get('nvcc')}'s build on {sec.get('date', '?')[:10]} "
                     f"({f.relative_to(build.ROOT)}, section sass{whose})")
            return {r["kernel"]: dict(r["ops"]) for r in rows}, where
    return None


def sass_counts(module, arch: str = "sm_90") -> dict[str, dict[str, int]]:
    """{kernel (demangled): {SASS opcode with modifiers: count}} for a module from build.load.
    Counts are static (instructions in the binary, the unrolled loop body included), not executed.
    Without cuobjdump it prints why and returns the counts recorded for the same file and arch; with none recorded
    it raises NsightUnavailable."""
    tool = cuobjdump_path()
    if tool is None:
        why = ("cuobjdump and nvdisasm are not installed (they come with the full CUDA toolkit or with triton, "
               "not with pip's nvcc)")
        rec = recorded_sass(module, arch)
        if rec is None:
            raise NsightUnavailable(f"{why}, and no counts are recorded for {_source_key(module)} ({arch})")
        counts, where = rec
        print(f"{why}: showing the counts {where}")
        return counts
    so = next(module.build_dir.glob("*.so"))
    # cuobjdump runs nvdisasm for -sass: the one beside it, even when neither is on PATH (triton's copies).
    env = dict(os.environ, PATH=os.pathsep.join([str(Path(tool).parent), os.environ.get("PATH", "")]))
    text = subprocess.run([tool, "-sass", "-arch", arch, str(so)], capture_output=True, text=True, check=True,
                          env=env).stdout
    names = re.findall(r"Function : (\S+)", text)
    demangled = build._demangle(names)
    out = {}
    for name, body in zip(names, re.split(r"\s+Function : \S+", text)[1:]):
        counts: dict[str, int] = {}
        for op in SASS_OPS.findall(body):
            counts[op] = counts.get(op, 0) + 1
        out[demangled.get(name, name)] = dict(sorted(counts.items()))
    return out
