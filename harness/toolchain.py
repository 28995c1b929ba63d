"""Find the CUDA toolkit that matches torch, and describe the machine.

torch.utils.cpp_extension reads CUDA_HOME once, when it is first imported, and otherwise guesses
from `which nvcc`. That guess is wrong whenever nvcc is a wrapper script (as /usr/local/bin/nvcc is
on the course's CI machines) or comes from pip. So the harness decides CUDA_HOME itself, before
that import, and says plainly when the nvcc it found and torch's CUDA disagree.
"""
from __future__ import annotations

import functools
import hashlib
import importlib.util
import logging
import os
import platform
import re
import shutil
import subprocess
import sys
from dataclasses import dataclass, field
from pathlib import Path


# The course's root: its build/ folder holds what the harness makes (kernel caches, the cudart link).
ROOT = Path(os.environ.get("COURSE_ROOT", Path(__file__).resolve().parent.parent))


class ToolchainError(RuntimeError):
    """The CUDA toolkit is missing or does not match torch."""


@dataclass
class Toolchain:
    cuda_home: Path
    nvcc: Path
    nvcc_version: str  # "13.0"
    source: str  # how it was found, for the environment report
    torch_cuda: str | None  # torch.version.cuda, e.g. "13.0"
    warnings: list[str] = field(default_factory=list)

    @property
    def lib_dir(self) -> Path:
        for sub in ("lib64", "lib"):
            if (self.cuda_home / sub).is_dir():
                return self.cuda_home / sub
        return self.cuda_home / "lib64"


def _nvcc_version(nvcc: Path) -> str | None:
    try:
        out = subprocess.run([str(nvcc), "--version"], capture_output=True, text=True, timeout=60).stdout
    except (OSError, subprocess.SubprocessError):
        return None
    m = re.search(r"release (\d+\.\d+)", out)
    return m.group(1) if m else None


def _resolve_wrapper(nvcc: Path) -> Path:
    """Follow symlinks and one-line `exec /real/nvcc "$@"` wrapper scripts to the real binary."""
    nvcc = nvcc.resolve()
    try:
        head = nvcc.read_bytes()[:4096]
    except OSError:
        return nvcc
    if head.startswith(b"#!"):
        m = re.search(rb"exec\s+(\S+/nvcc)\b", head)
        if m and Path(m.group(1).decode()).exists():
            return Path(m.group(1).decode()).resolve()
    return nvcc


def _candidates() -> list[tuple[str, Path]]:
    """CUDA homes to try, best first."""
    out: list[tuple[str, Path]] = []
    for var in ("CUDA_HOME", "CUDA_PATH"):
        if os.environ.get(var):
            out.append((f"${var}", Path(os.environ[var])))
    # nvcc from pip (cuda-toolkit[nvcc,cccl]), installed next to torch: matches torch by construction.
    spec = importlib.util.find_spec("nvidia")
    for root in (spec.submodule_search_locations or []) if spec else []:
        for sub in sorted(Path(root).glob("cu*")):
            out.append(("pip package nvidia-cuda-nvcc", sub))
    out.append(("/usr/local/cuda", Path("/usr/local/cuda")))
    which = shutil.which("nvcc")
    if which:
        out.append((f"nvcc on PATH ({which})", _resolve_wrapper(Path(which)).parent.parent))
    return out


@functools.lru_cache(maxsize=1)
def find() -> Toolchain:
    import torch

    torch_cuda = torch.version.cuda
    if torch_cuda is None:
        raise ToolchainError(
            f"torch {torch.__version__} is a CPU-only build: it cannot build or run CUDA kernels. "
            "Install the CUDA build pinned in requirements.txt (./course setup does this)."
        )
    tried = []
    for source, home in _candidates():
        nvcc = home / "bin" / "nvcc"
        if not nvcc.exists():
            tried.append(f"{home} ({source}): no bin/nvcc")
            continue
        if not (home / "include" / "cuda_runtime.h").exists():
            tried.append(f"{home} ({source}): no include/cuda_runtime.h")
            continue
        ver = _nvcc_version(nvcc)
        if ver is None:
            tried.append(f"{home} ({source}): `nvcc --version` failed")
            continue
        tc = Toolchain(home.resolve(), nvcc, ver, source, torch_cuda)
        if ver.split(".")[0] != torch_cuda.split(".")[0]:
            msg = (f"nvcc {ver} at {nvcc} ({source}) does not match torch's CUDA {torch_cuda}: "
                   "extensions built with it may fail to load or run.")
            if source.startswith("$"):  # the user chose it explicitly: respect it, but say so
                tc.warnings.append(msg)
            else:
                tried.append(msg)
                continue
        elif ver != torch_cuda:
            tc.warnings.append(f"nvcc {ver} and torch's CUDA {torch_cuda} differ in the minor version; "
                               "this works, but the pinned cuda-toolkit in requirements.txt matches exactly.")
        inc = home / "include"
        if not ((inc / "nv" / "target").exists() or (inc / "cccl" / "nv" / "target").exists()):
            # cuda_fp16.h and mma.h include <nv/target>: without CCCL every half-precision lesson fails
            tried.append(f"{home} ({source}): no CCCL headers (include/nv/target); "
                         "pip installs them with cuda-toolkit[cccl]")
            continue
        _export(tc)
        _export_link_dir(tc)
        return tc
    raise ToolchainError(
        f"No CUDA toolkit matching torch's CUDA {torch_cuda} was found. Tried:\n  - " + "\n  - ".join(tried)
        + "\nInstall the pinned one with `pip install -r requirements.txt` (it brings nvcc as "
        "cuda-toolkit[nvcc,cccl]), or point CUDA_HOME at a CUDA " + torch_cuda + " toolkit."
    )


def _export(tc: Toolchain) -> None:
    os.environ["CUDA_HOME"] = str(tc.cuda_home)
    # torch runs `ninja` from PATH. The pinned one lives beside this interpreter (pip's ninja package),
    # which is not on PATH when .venv/bin/python is run without activating the venv.
    front = [str(tc.cuda_home / "bin")]
    try:
        import ninja
        front.append(ninja.BIN_DIR)
    except (ImportError, AttributeError):
        pass
    front.append(str(Path(sys.executable).parent))
    rest = [p for p in os.environ.get("PATH", "").split(os.pathsep) if p and p not in front]
    os.environ["PATH"] = os.pathsep.join(front + rest)
    # torch.utils.cpp_extension froze its own guess at import: correct it if it was imported already.
    mod = sys.modules.get("torch.utils.cpp_extension")
    if mod is not None:
        mod.CUDA_HOME = str(tc.cuda_home)
    # Without a GPU, cpp_extension logs "No CUDA runtime is found" on import: expected here, not news.
    logging.getLogger("torch.utils.cpp_extension").setLevel(logging.ERROR)
    # torch's extension builder (load_inline, as a learner calls it) builds for the architectures the course builds
    # for; without this it asks the GPU, and without a GPU it fails.
    os.environ.setdefault("TORCH_CUDA_ARCH_LIST", ";".join(arch_list()))


def _export_link_dir(tc: Toolchain) -> None:
    d = cudart_link_dir(tc)
    if d is not None and str(d) not in os.environ.get("LIBRARY_PATH", "").split(os.pathsep):
        os.environ["LIBRARY_PATH"] = os.pathsep.join(p for p in (str(d), os.environ.get("LIBRARY_PATH")) if p)


def cudart_link_dir(tc: Toolchain | None = None) -> Path | None:
    """A folder holding the libcudart.so link that `-lcudart` needs (build/cudart/), or None where the toolkit has
    one. pip's CUDA ships libcudart.so.13 alone, and torch's extension builder links every CUDA extension with
    -lcudart; find() puts this folder on LIBRARY_PATH, so that a plain load_inline links too."""
    tc = tc or find()
    if (tc.lib_dir / "libcudart.so").exists():
        return None
    real = sorted(tc.lib_dir.glob("libcudart.so.*"))
    if not real:
        return None
    d = ROOT / "build" / "cudart" / hashlib.sha1(str(real[0]).encode()).hexdigest()[:10]
    link = d / "libcudart.so"
    if not link.exists():
        d.mkdir(parents=True, exist_ok=True)
        tmp = d / f".tmp{os.getpid()}"
        tmp.unlink(missing_ok=True)
        tmp.symlink_to(real[0])
        tmp.rename(link)
    return d


def gpu_available() -> bool:
    import torch
    return torch.cuda.is_available() and torch.cuda.device_count() > 0


def gpu_required() -> bool:
    """REQUIRE_GPU=1 turns every 'skipped: no GPU' into a failure (used on the reference GPU)."""
    return os.environ.get("REQUIRE_GPU", "") not in ("", "0")


NO_GPU_REASON = "needs a CUDA GPU: none is visible here (torch.cuda.is_available() is False)"


def arch_list() -> list[str]:
    """Compute capabilities to build for: this GPU's, or sm_80 and sm_90 where there is none."""
    env = os.environ.get("COURSE_ARCH_LIST")
    if env:
        return [a for a in re.split(r"[;\s,]+", env) if a]
    if gpu_available():
        import torch
        major, minor = torch.cuda.get_device_capability()
        return [f"{major}.{minor}"]
    return ["8.0", "9.0"]


def driver_version() -> str | None:
    try:
        out = subprocess.run(["nvidia-smi", "--query-gpu=driver_version", "--format=csv,noheader"],
                             capture_output=True, text=True, timeout=30).stdout.strip()
        return out.splitlines()[0] if out else None
    except (OSError, subprocess.SubprocessError):
        return None


def describe() -> dict:
    """Versions and hardware, recorded with every measured result."""
    import torch

    info = {
        "python": platform.python_version(),
        "torch": torch.__version__,
        "torch_cuda": torch.version.cuda,
        "gpu": None,
        "driver": driver_version(),
    }
    try:
        tc = find()
        info.update(nvcc=tc.nvcc_version, cuda_home=str(tc.cuda_home), nvcc_source=tc.source)
    except ToolchainError as e:
        info.update(nvcc=None, toolchain_error=str(e))
    ninja = shutil.which("ninja")  # after find(): the PATH torch will use
    try:
        info["ninja"] = subprocess.run([ninja, "--version"], capture_output=True, text=True,
                                       timeout=30).stdout.strip() or None if ninja else None
        info["ninja_path"] = ninja
    except (OSError, subprocess.SubprocessError):
        info["ninja"] = None
    if gpu_available():
        p = torch.cuda.get_device_properties(0)
        info.update(gpu=p.name, capability=f"{p.major}.{p.minor}", sms=p.multi_processor_count,
                    memory_gib=round(p.total_memory / 2**30, 1),
                    l2_mib=round(getattr(p, "L2_cache_size", 0) / 2**20, 1))
    return info


def report() -> str:
    """A human-readable check of the toolchain and GPU (`./course doctor` adds the baselines: harness.doctor)."""
    info = describe()
    lines = [f"python {info['python']}, torch {info['torch']} (CUDA {info['torch_cuda']})"]
    if info.get("nvcc"):
        lines.append(f"nvcc {info['nvcc']} from {info['cuda_home']} (found via {info['nvcc_source']})")
        for w in find().warnings:
            lines.append("warning: " + w)
    else:
        lines.append("nvcc: NOT FOUND\n" + info.get("toolchain_error", ""))
    lines.append(f"ninja {info['ninja']}" if info.get("ninja")
                 else "ninja: NOT FOUND (pip install ninja; torch needs it to build extensions)")
    if info["gpu"]:
        lines.append(f"GPU {info['gpu']} (sm_{info['capability'].replace('.', '')}, {info['sms']} SMs, "
                     f"{info['memory_gib']} GiB, L2 {info['l2_mib']} MiB), driver {info['driver']}")
        if float(info["capability"]) < 8.0:
            lines.append("warning: the course needs Ampere (sm_80) or newer; some kernels will refuse to load.")
    else:
        lines.append("GPU: none. Kernels will compile (for sm_80 and sm_90) and CPU cells will run; "
                     "cells that launch kernels are skipped and show the reference GPU's recorded results.")
    lines.append(f"building for: {', '.join('sm_' + a.replace('.', '') for a in arch_list())}")
    return "\n".join(lines)


if __name__ == "__main__":
    print(report())
