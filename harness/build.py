"""Compile a lesson's CUDA file with nvcc into a shared library, fast, cached, with readable errors.

Why it is fast: the .cu file includes only CUDA headers and exposes plain C launchers that take raw pointers,
so nvcc builds it straight into a shared library, with a few generated C wrappers (each calls one launcher and
checks the launch), and Python calls the wrappers through ctypes. No Python binding is compiled and no torch
header is parsed. A build whose inputs did not change is reused without running nvcc.

Every command (notebooks, run, grade, test) shares one kernel cache: build/cache/ in the repository, or the folder
named by COURSE_CACHE. A failed build leaves nothing behind, so building again compiles again.

A kernel file marks each launcher it exports with EXPORT (defined as `extern "C"` in the file):

    EXPORT void gemm_naive(const float* x, const float* W, float* y, int M, int N, int K,
                           cudaStream_t stream);

`load()` parses those declarations and returns a module whose functions check their arguments
(a `const float*` must be a contiguous float32 CUDA tensor, and so on), pass the current CUDA
stream for a trailing `cudaStream_t`, and raise if the launch failed.
"""
from __future__ import annotations

import contextlib
import ctypes
import hashlib
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

from . import toolchain

ROOT = Path(os.environ.get("COURSE_ROOT", Path(__file__).resolve().parent.parent))
BUILD_VERSION = "2"  # bump when the generated wrappers or flags change, to invalidate caches
KEEP_BUILDS = 8  # cached builds kept per kernel file; older ones are removed
CUDA_FLAGS = ["-O3", "-lineinfo", "-Xptxas=-v"]
# The language settings every kernel file is compiled with (torch's extension builder used the same ones, and the
# lessons' half-precision code is written against them: no implicit __half operators or conversions).
NVCC_BASE = ["-D__CUDA_NO_HALF_OPERATORS__", "-D__CUDA_NO_HALF_CONVERSIONS__", "-D__CUDA_NO_BFLOAT16_CONVERSIONS__",
             "-D__CUDA_NO_HALF2_OPERATORS__", "--expt-relaxed-constexpr", "-std=c++20"]
WRAPPER_PREFIX = "course_launch_"


def _show(p: Path) -> str:
    return str(p.relative_to(ROOT)) if p.is_relative_to(ROOT) else str(p)


class BuildError(RuntimeError):
    """The kernel file could not be found, parsed or bound."""


class CompileError(BuildError):
    """nvcc rejected the source. The message holds only the compiler's
    diagnostics, pointing at the learner's own file, and the offending lines."""


class NoGPUError(RuntimeError):
    pass


def cache_root() -> Path:
    """The kernel cache: build/cache/ in the repository unless COURSE_CACHE names another folder."""
    return Path(os.environ.get("COURSE_CACHE") or ROOT / "build" / "cache").resolve()


# Set by the command-line entry points: a cold compile takes seconds on a small machine, so they say it started.
ANNOUNCE_COMPILES = False


def use_solutions() -> bool:
    """COURSE_SOLUTIONS=1 makes every load() take solutions/ (CI, classroom demos)."""
    return os.environ.get("COURSE_SOLUTIONS", "") not in ("", "0")


# ----------------------------------------------------------------------------------------------
# Finding files

def lessons_known() -> list[int]:
    """The lessons of the course: those with a notebook folder under lessons/."""
    return sorted(int(p.name[:2]) for p in (ROOT / "lessons").glob("[0-9][0-9]_*") if p.is_dir())


def unknown_lessons(lessons) -> str | None:
    """One line naming those of `lessons` (numbers, or strings from a command line) that do not exist; None if all do."""
    known = lessons_known()
    bad = [str(n) for n in lessons if not str(n).strip().isdigit() or int(n) not in known]
    if not bad:
        return None
    return (f"there is no lesson {', '.join(bad)}: the lessons are "
            + (f"{known[0]:02d} to {known[-1]:02d}" if known else "missing (no lessons/ folder)"))


def lesson_dir(lesson: int | str, solution: bool) -> Path:
    num = f"{int(lesson):02d}"
    base = ROOT / ("solutions" if solution else "kernels")
    hits = sorted(base.glob(f"{num}_*"))
    if not hits:
        raise BuildError(f"no folder for lesson {num} under {base}")
    return hits[0]


def source_path(lesson: int | str, name: str | None = None, solution: bool = False) -> Path:
    d = lesson_dir(lesson, solution)
    if name is None:
        cus = sorted(d.glob("*.cu"))
        if len(cus) != 1:
            raise BuildError(f"{d} holds {len(cus)} .cu files; name one: {[p.stem for p in cus]}")
        return cus[0]
    p = d / (name if name.endswith(".cu") else name + ".cu")
    if not p.exists():
        raise BuildError(f"{p} does not exist; files there: {[q.name for q in d.glob('*.cu')]}")
    return p


def prebuild(lesson: int | str, name: str, flag_sets: dict, *, solution: bool = True) -> dict:
    """Compile one kernel file under several -D flag sets in parallel child processes (for tuning
    sweeps); later load() calls with the same flags hit the cache. Returns {variant: error text} for
    the builds that failed."""
    import concurrent.futures as cf

    def one(flags):
        code = (f"from harness import build; build.load({int(lesson)}, {name!r}, solution={solution}, "
                f"extra_cuda_flags={list(flags)!r})")
        return subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT)

    with cf.ThreadPoolExecutor(max(1, min(len(flag_sets), os.cpu_count() or 1))) as ex:
        done = dict(zip(flag_sets, ex.map(one, flag_sets.values())))
    return {k: r.stderr[-2000:] for k, r in done.items() if r.returncode}


def load_python(lesson: int | str, name: str, *, solution: bool | None = None):
    """Import lesson `lesson`'s Python exercise file `name`.py (yours in kernels/, or the solution),
    fresh on every call so that edits show without restarting the notebook."""
    import importlib.util
    solution = use_solutions() if solution is None else solution
    path = lesson_dir(lesson, solution) / f"{name}.py"
    if not path.exists():
        raise BuildError(f"{path} does not exist")
    spec = importlib.util.spec_from_file_location(f"course_l{int(lesson):02d}_{name}_{'sol' if solution else 'ex'}", path)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


# ----------------------------------------------------------------------------------------------
# Parsing EXPORT declarations

_DTYPES = {  # pointer base type -> torch dtype name
    "float": "float32", "double": "float64", "__half": "float16", "half": "float16",
    "__nv_bfloat16": "bfloat16", "nv_bfloat16": "bfloat16",
    "int8_t": "int8", "signed char": "int8", "char": "int8", "uint8_t": "uint8", "unsigned char": "uint8",
    "int16_t": "int16", "short": "int16", "int": "int32", "int32_t": "int32", "uint32_t": "int32",
    "unsigned": "int32", "unsigned int": "int32", "int64_t": "int64", "long long": "int64",
    "void": None,  # any dtype
}
_INTS = {"int", "int32_t", "unsigned", "unsigned int", "uint32_t", "int64_t", "long long", "size_t", "long"}
_FLOATS = {"float", "double"}
_EXPORT_RE = re.compile(r"^\s*EXPORT\s+void\s+(\w+)\s*\(([^)]*)\)", re.M | re.S)
# Exports that set how a file's launchers launch rather than launch anything: set_pdl(1) makes the launchers of the
# kernels that call pdl_wait() use programmatic dependent launch (lesson 11).
SETTINGS = frozenset({"set_pdl"})


@dataclass(frozen=True)
class Param:
    name: str
    kind: str  # "ptr", "int", "float", "stream"
    ctype: str  # as written, e.g. "const float*"
    dtype: str | None = None  # torch dtype name for pointers (None: any)
    const: bool = False


@dataclass(frozen=True)
class Export:
    name: str
    params: tuple[Param, ...]
    line: int

    @property
    def signature(self) -> str:
        return f"{self.name}({', '.join(p.ctype + ' ' + p.name for p in self.params)})"


def parse_exports(src: str, filename: str = "<source>") -> list[Export]:
    exports = []
    for m in _EXPORT_RE.finditer(src):
        line = src.count("\n", 0, m.start()) + 1
        params = []
        raw = m.group(2).strip()
        for i, p in enumerate([] if raw in ("", "void") else raw.split(",")):
            p = " ".join(p.replace("__restrict__", "").split())
            pm = re.match(r"^(.*?)(\w+)$", p)
            if not pm or not pm.group(1).strip():
                raise BuildError(f"{filename}:{line}: cannot read parameter {i + 1} of {m.group(1)}: '{p}' "
                                 "(write `type name`, e.g. `const float* x`)")
            ctype, pname = pm.group(1).strip(), pm.group(2)
            const = ctype.startswith("const ")
            base = ctype.removeprefix("const ").replace("*", "").strip()
            if ctype.count("*") > 1 or "&" in ctype or "[" in ctype:
                raise BuildError(f"{filename}:{line}: {m.group(1)}: cannot bind parameter '{p}': use pointers, "
                                 "int, int64_t, float or a trailing cudaStream_t")
            if ctype.count("*") == 1:
                if base not in _DTYPES:
                    raise BuildError(f"{filename}:{line}: {m.group(1)}: pointer type '{ctype}' of '{pname}' "
                                     f"is not one the harness can bind ({', '.join(sorted(_DTYPES))})")
                params.append(Param(pname, "ptr", ctype, _DTYPES[base], const))
            elif ctype == "cudaStream_t":
                params.append(Param(pname, "stream", ctype))
            elif base in _INTS:
                params.append(Param(pname, "int", ctype))
            elif base in _FLOATS:
                params.append(Param(pname, "float", ctype))
            else:
                raise BuildError(f"{filename}:{line}: {m.group(1)}: cannot bind parameter '{p}': use pointers, "
                                 "int, int64_t, float or a trailing cudaStream_t")
        if any(p.kind == "stream" for p in params[:-1]):
            raise BuildError(f"{filename}:{line}: {m.group(1)}: cudaStream_t must be the last parameter")
        exports.append(Export(m.group(1), tuple(params), line))
    return exports


_WIDE = ("int64_t", "long long", "size_t", "long")


def _c_type(p: Param) -> str:
    """The type a launcher's prototype gets in the wrappers: C linkage needs only the ABI to agree
    (every pointer is a pointer)."""
    if p.kind in ("ptr", "stream"):
        return "void*"
    if p.kind == "int":
        return "long long" if p.ctype in _WIDE else "int"
    return p.ctype


def _wrappers(exports: list[Export]) -> str:
    """C source of one wrapper per launcher: it calls the launcher, then returns the launch's CUDA error (after a
    device synchronize when asked), so that Python can raise it. Arguments arrive as void*, long long and double."""
    lines = [
        "#include <cuda_runtime.h>",
        "static int course_check(int sync) {",
        "  cudaError_t e = cudaGetLastError();",
        "  if (e == cudaSuccess && sync) e = cudaDeviceSynchronize();",
        "  return (int)e;",
        "}",
        'extern "C" const char* course_error_name(int e) { return cudaGetErrorName((cudaError_t)e); }',
        'extern "C" int course_stream_query(void* s) { return (int)cudaStreamQuery((cudaStream_t)s); }',
        'extern "C" int course_sync(void) { return course_check(1); }',
        'extern "C" const char* course_error_string(int e) { return cudaGetErrorString((cudaError_t)e); }',
    ]
    wire = {"ptr": "void*", "stream": "void*", "int": "long long", "float": "double"}
    for ex in exports:
        lines.append(f'extern "C" void {ex.name}({", ".join(_c_type(p) for p in ex.params)});')
        args = "".join(f"{wire[p.kind]} a{i}, " for i, p in enumerate(ex.params))
        casts = ", ".join(f"a{i}" if p.kind in ("ptr", "stream") else f"({_c_type(p)})a{i}"
                          for i, p in enumerate(ex.params))
        lines.append(f'extern "C" int {WRAPPER_PREFIX}{ex.name}({args}int sync) {{ {ex.name}({casts}); '
                     f'return course_check(sync); }}')
    return "\n".join(lines) + "\n"


class _Library:
    """A built kernel library: one Python callable per launcher, raising RuntimeError when the launch failed."""

    _WIRE = {"ptr": ctypes.c_void_p, "stream": ctypes.c_void_p, "int": ctypes.c_longlong, "float": ctypes.c_double}

    def __init__(self, so: Path, exports: list[Export]):
        import torch  # noqa: F401  (loads the CUDA runtime the library links against)

        self.dll = ctypes.CDLL(str(so), mode=os.RTLD_NOW | os.RTLD_LOCAL)
        for f in (self.dll.course_error_name, self.dll.course_error_string):
            f.argtypes, f.restype = [ctypes.c_int], ctypes.c_char_p
        self.dll.course_stream_query.argtypes, self.dll.course_stream_query.restype = [ctypes.c_void_p], ctypes.c_int
        self.dll.course_sync.argtypes, self.dll.course_sync.restype = [], ctypes.c_int
        for ex in exports:
            fn = getattr(self.dll, WRAPPER_PREFIX + ex.name)
            fn.argtypes = [self._WIRE[p.kind] for p in ex.params] + [ctypes.c_int]
            fn.restype = ctypes.c_int
            setattr(self, ex.name, self._caller(ex.name, fn, bool(ex.params) and ex.params[-1].kind == "stream"))

    def _raise(self, name: str, err: int):
        raise RuntimeError(f"{name}: CUDA error {self.dll.course_error_name(err).decode()}: "
                           f"{self.dll.course_error_string(err).decode()}")

    def _caller(self, name: str, fn, has_stream: bool):
        def call(*args):
            sync, stream = bool(args[-1]), args[-2] if has_stream else None  # None: the default stream
            err = fn(*args[:-1], 0)  # the launch's own error (a bad configuration) comes back at once
            if err:
                self._raise(name, err)
            if sync:  # wait for the kernel, polling, so a hang is reported instead of waited on forever
                wait_for_stream(lambda: self.dll.course_stream_query(stream), name)
                err = self.dll.course_sync()
                if err:
                    self._raise(name, err)
        return call


class KernelHang(RuntimeError):
    """A launch ran past hang_limit_s(): it never returns, and the GPU is still running it."""


def hang_limit_s() -> float:
    """How long one launch under check may take before it is called hung (COURSE_CHECK_TIMEOUT, seconds). A right
    kernel takes milliseconds on the check shapes; a hung one (a wrong mbarrier parity, a __syncthreads() some
    threads never reach, a loop that never ends) never returns, and a plain synchronize would wait with it."""
    try:
        return max(1.0, float(os.environ.get("COURSE_CHECK_TIMEOUT", "30")))
    except ValueError:
        return 30.0


def hang_message(what: str, limit_s: float) -> str:
    return (f"{what} has run for {limit_s:.0f} s without finishing: it hangs (a wrong mbarrier parity, a "
            "__syncthreads() that some threads of a block never reach, a loop whose exit condition never comes "
            "true). The GPU is still running it, so every later CUDA call would wait behind it: restart the "
            "notebook's kernel (Kernel → Restart). grade.check_isolated() runs a check in a child process, where a "
            "hang costs nothing but the time limit (COURSE_CHECK_TIMEOUT seconds).")


_NOT_READY = 600  # cudaErrorNotReady: the stream still has work


def wait_for_stream(query, what: str, limit_s: float | None = None):
    """Poll `query()` (a cudaStreamQuery-like call: 600 while work runs) until the work is done, sleeping between
    polls (a notebook's interrupt button works), and raise KernelHang after limit_s."""
    limit_s = hang_limit_s() if limit_s is None else limit_s
    t0, nap = time.monotonic(), 1e-5
    while query() == _NOT_READY:
        if time.monotonic() - t0 > limit_s:
            raise KernelHang(hang_message(what, limit_s))
        time.sleep(nap)
        nap = min(2 * nap, 0.02)


# ----------------------------------------------------------------------------------------------
# The Python side of a launcher

class KernelFunction:
    """Calls one EXPORT launcher after checking every argument against its C declaration."""

    def __init__(self, export: Export, raw, module: "KernelModule"):
        self.export, self._raw, self._module = export, raw, module
        self.__name__ = export.name
        self.__doc__ = f"{export.signature}\n(from {module.path})"

    def __repr__(self):
        return f"<kernel launcher {self.export.signature} from {self._module.path.name}>"

    def __call__(self, *args):
        import torch

        ex = self.export
        params = ex.params[:-1] if ex.params and ex.params[-1].kind == "stream" else ex.params
        if len(args) != len(params):
            raise TypeError(f"{ex.name}() takes {len(params)} arguments ({', '.join(p.name for p in params)}), "
                            f"got {len(args)}. Declaration: {ex.signature}")
        conv, device = [], None
        for p, a in zip(params, args):
            where = f"{ex.name}(): argument '{p.name}' ({p.ctype})"
            if p.kind == "ptr":
                if not isinstance(a, torch.Tensor):
                    raise TypeError(f"{where} must be a torch.Tensor, got {type(a).__name__}")
                want = getattr(torch, p.dtype) if p.dtype else None
                if want is not None and a.dtype != want:
                    raise TypeError(f"{where} must be a {want} tensor, got {a.dtype}")
                if not a.is_contiguous():
                    raise ValueError(f"{where} must be contiguous (shape {tuple(a.shape)}, strides {a.stride()}); "
                                     "call .contiguous() first")
                if a.device.type != "cuda":
                    raise ValueError(f"{where} must be on a CUDA device, got a tensor on {a.device}; use .cuda()")
                if device is None:
                    device = a.device
                elif a.device != device:
                    raise ValueError(f"{where} is on {a.device} but earlier arguments are on {device}")
                if not p.const and a.numel() > 0 and torch._debug_has_internal_overlap(a) == 1:
                    raise ValueError(f"{where} is written by the kernel, so it must not be an expanded view")
                conv.append(a.data_ptr())
            elif p.kind == "int":
                if isinstance(a, bool) or not isinstance(a, int):
                    raise TypeError(f"{where} must be an int, got {type(a).__name__}")
                lim = 2**63 if p.ctype in ("int64_t", "long long", "size_t", "long") else 2**31
                lo = 0 if p.ctype in ("unsigned", "unsigned int", "uint32_t", "size_t") else -lim
                if not lo <= a < lim:
                    raise OverflowError(f"{where} = {a} does not fit in {p.ctype}")
                conv.append(a)
            else:
                if not isinstance(a, (int, float)):
                    raise TypeError(f"{where} must be a number, got {type(a).__name__}")
                conv.append(float(a))
        if not toolchain.gpu_available():
            raise NoGPUError(f"launching {ex.name} needs a CUDA GPU, and this machine has none "
                             "(the kernel compiled; only running it needs the GPU).")
        self._module._check_capability()
        if ex.params and ex.params[-1].kind == "stream":
            dev = device if device is not None else torch.device("cuda", torch.cuda.current_device())
            conv.append(torch.cuda.current_stream(dev).cuda_stream)
        sync = os.environ.get("COURSE_SYNC", "") not in ("", "0")
        with torch.cuda.device(device) if device is not None else contextlib.nullcontext():
            self._raw(*conv, sync)


class KernelModule:
    """A compiled kernel file: its EXPORT launchers as attributes, plus build facts."""

    def __init__(self, path: Path, solution: bool, exports: list[Export], ext, build_dir: Path,
                 seconds: float, cached: bool, min_capability: float, exact: bool = False):
        self.path, self.solution, self.exports = path, solution, exports
        self.build_dir, self.build_seconds, self.cached = build_dir, seconds, cached
        self.min_capability, self._ext = min_capability, ext
        self.exact = exact  # built for one architecture's own features (sm_90a): runs on that one only
        for ex in exports:
            setattr(self, ex.name, KernelFunction(ex, getattr(ext, ex.name), self))

    def __repr__(self):
        how = "cached" if self.cached else f"compiled in {self.build_seconds:.1f} s"
        names = ", ".join(e.name for e in self.exports)
        return f"<{'solution' if self.solution else 'exercise'} {_show(self.path)} ({how}): {names}>"

    def _check_capability(self):
        import torch
        major, minor = torch.cuda.get_device_capability()
        if self.exact and (major, minor) != (int(self.min_capability), round(self.min_capability % 1 * 10)):
            raise RuntimeError(f"{self.path.name} uses instructions of compute capability {self.min_capability} only "
                               f"(sm_{int(self.min_capability * 10)}a: wgmma, TMA); this GPU "
                               f"({torch.cuda.get_device_name()}) is sm_{major}{minor}. Study the recorded results of the reference GPU.")
        if major + minor / 10 < self.min_capability:
            raise RuntimeError(f"{self.path.name} needs compute capability {self.min_capability} or newer; "
                               f"this GPU ({torch.cuda.get_device_name()}) is sm_{major}{minor}")

    def resources(self) -> dict:
        """Registers, spills and shared memory per kernel and arch, from ptxas -v (the build log)."""
        log = self.build_dir / "build.log"
        return parse_ptxas(log.read_text(errors="replace")) if log.exists() else {}


# ----------------------------------------------------------------------------------------------
# Building

def _demangle(names: list[str]) -> dict[str, str]:
    tool = shutil.which("c++filt")
    if not tool or not names:
        return {n: n for n in names}
    out = subprocess.run([tool], input="\n".join(names), capture_output=True, text=True).stdout.splitlines()
    return dict(zip(names, out)) if len(out) == len(names) else {n: n for n in names}


def parse_ptxas(log: str) -> dict:
    """{kernel: {arch: {registers, spill_stores, spill_loads, stack, smem}}} from ptxas -v output."""
    res: dict = {}
    cur = None
    for line in log.splitlines():
        m = re.search(r"Compiling entry function '(\w+)' for '(sm_\w+)'", line)
        if m:
            cur = res.setdefault(m.group(1), {}).setdefault(m.group(2), {})
            continue
        if cur is None:
            continue
        m = re.search(r"(\d+) bytes stack frame, (\d+) bytes spill stores, (\d+) bytes spill loads", line)
        if m:
            cur.update(stack=int(m.group(1)), spill_stores=int(m.group(2)), spill_loads=int(m.group(3)))
        m = re.search(r"Used (\d+) registers", line)
        if m:
            cur["registers"] = int(m.group(1))
            sm = re.search(r"(\d+) bytes smem", line)
            cur["smem"] = int(sm.group(1)) if sm else 0
    names = _demangle(list(res))
    return {names[k].split("(")[0].removeprefix("void "): v for k, v in res.items()}


_NOISE = re.compile(r"^(\[\d+/\d+\]|FAILED:|ninja: |Error building extension|subprocess\.|\s*$)")


def clean_compiler_output(text: str, src_path: Path) -> str:
    """Keep the compiler's diagnostics; drop ptxas's report, build-tool progress lines and long command lines."""
    keep = []
    for line in text.splitlines():
        if _NOISE.match(line) or "ptxas info" in line or "detected in the compilation of" in line or re.match(r"^\s+\d+ bytes stack frame", line):
            continue
        if len(line) > 400 and (" -c " in line or "nvcc" in line or "c++" in line):  # a command line
            continue
        if line.startswith(("W1", "I1", "Emitting ninja", "Building extension", "Allowing ninja",
                            "Using envvar", "Detected CUDA", "The input conditions")):
            continue
        keep.append(line)
    out = "\n".join(keep).strip()
    # Show the first offending line of the learner's file with its neighbours.
    m = re.search(re.escape(str(src_path)) + r"\((\d+)\)|" + re.escape(str(src_path)) + r":(\d+):", out)
    if m:
        n = int(m.group(1) or m.group(2))
        src = src_path.read_text().splitlines()
        lo, hi = max(1, n - 2), min(len(src), n + 2)
        snippet = "\n".join(f"{'>>' if i == n else '  '} {i:4d} | {src[i - 1]}" for i in range(lo, hi + 1))
        out += f"\n\n{_show(src_path)}, line {n}:\n{snippet}"
    return out


def _cudart_link_dir(tc: toolchain.Toolchain) -> Path | None:
    """pip's CUDA ships libcudart.so.13 but no libcudart.so, which `-lcudart` needs: add a link."""
    if (tc.lib_dir / "libcudart.so").exists():
        return None
    real = sorted(tc.lib_dir.glob("libcudart.so.*"))
    if not real:
        return None
    d = cache_root() / "linkdir" / hashlib.sha1(str(real[0]).encode()).hexdigest()[:10]
    d.mkdir(parents=True, exist_ok=True)
    link = d / "libcudart.so"
    if not link.exists():
        tmp = d / f".tmp{os.getpid()}"
        tmp.unlink(missing_ok=True)
        tmp.symlink_to(real[0])
        tmp.rename(link)
    return d


def _prune(parent: Path, prefix: str, keep: Path):
    olds = sorted((p for p in parent.glob(prefix + "*") if p.is_dir() and p != keep),
                  key=lambda p: p.stat().st_mtime, reverse=True)
    for p in olds[KEEP_BUILDS - 1:]:
        shutil.rmtree(p, ignore_errors=True)


_LOADED: dict[Path, _Library] = {}  # libraries this process has loaded, by path (a path is loaded once)


def _gencode(archs: list[str]) -> list[str]:
    """nvcc's targets for compute capabilities such as "8.0", "9.0a" or "8.6+PTX" (PTX kept as well)."""
    out = []
    for a in archs:
        num = a.removesuffix("+PTX").replace(".", "")
        out.append(f"-gencode=arch=compute_{num},code=sm_{num}")
        if a.endswith("+PTX"):
            out.append(f"-gencode=arch=compute_{num},code=compute_{num}")
    return out


def load(lesson: int | str, name: str | None = None, *, solution: bool | None = None,
         extra_cuda_flags: list[str] | None = None, verbose: bool = False) -> KernelModule:
    """Compile (or reuse) lesson `lesson`'s kernel file `name` and return its launchers.

    solution=None follows COURSE_SOLUTIONS; True takes solutions/, False your kernels/ file.
    Loading a solution reads solutions/ only: your exercise file is never touched.
    """
    solution = use_solutions() if solution is None else solution
    path = source_path(lesson, name, solution)
    return load_file(path, solution=solution, extra_cuda_flags=extra_cuda_flags, verbose=verbose)


def load_file(path: Path, *, solution: bool = False, extra_cuda_flags: list[str] | None = None,
              verbose: bool = False) -> KernelModule:
    path = Path(path).resolve()
    text = path.read_text()
    exports = parse_exports(text, str(path))
    if not exports:
        raise BuildError(f"{path} declares no EXPORT launchers (write `EXPORT void name(...)`)")
    m = re.search(r"REQUIRES:\s*sm_(\d)(\d)(a?)\b", text)
    min_cap = int(m.group(1)) + int(m.group(2)) / 10 if m else 8.0
    exact = bool(m and m.group(3))  # sm_90a: wgmma and friends exist for that target only, on any machine

    tc = toolchain.find()
    import torch  # noqa: F401  (the library links against the CUDA runtime torch loads)

    targets = _gencode(toolchain.arch_list())
    flags = CUDA_FLAGS + list(extra_cuda_flags or [])
    if exact:  # sm_90a: wgmma and friends exist for that target only
        cc = m.group(1) + m.group(2)
        targets = [f"-gencode=arch=compute_{cc}a,code=sm_{cc}a"]
    cuda_src = f'#line 1 "{path}"\n{text}'
    wrap_src = _wrappers(exports)
    key = hashlib.sha256("\0".join([BUILD_VERSION, cuda_src, wrap_src, " ".join(NVCC_BASE + targets + flags),
                                    tc.nvcc_version, str(tc.cuda_home)]).encode()).hexdigest()
    kind = "sol" if solution else "ex"
    stem = re.sub(r"\W", "_", f"l{path.parent.name[:2]}_{path.stem}_{kind}")
    modname = f"{stem}_{key[:12]}"
    bdir = cache_root() / "build" / modname
    so = bdir / f"{modname}.so"
    done = bdir / "complete"  # written after the build: another process may be linking the .so right now
    t0 = time.perf_counter()
    if so.exists() and done.exists():
        lib = _LOADED.get(so) or _LOADED.setdefault(so, _Library(so, exports))
        os.utime(bdir)
        return KernelModule(path, solution, exports, lib, bdir, time.perf_counter() - t0, True, min_cap, exact)

    if ANNOUNCE_COMPILES:
        print(f"[course] compiling {_show(path)} ...", file=sys.stderr, flush=True)
    bdir.mkdir(parents=True, exist_ok=True)
    # Every file this process writes carries its pid: two processes (pytest's workers) may build the same module at
    # once, and each must neither read nor clobber the other's half-written output. The finished library and log
    # are moved into place whole.
    pid = os.getpid()
    kernel_cu, wrap_cpp = bdir / f"kernel.{pid}.cu", bdir / f"launch.{pid}.cpp"
    tmp_so, log, mine = bdir / f"{modname}.{pid}.so.tmp", bdir / "build.log", bdir / f"build.{pid}.log"
    kernel_cu.write_text(cuda_src)
    wrap_cpp.write_text(wrap_src)
    link = [f"-L{tc.lib_dir}", f"-Xlinker=-rpath,{tc.lib_dir}", "-cudart", "shared"]
    link_dir = _cudart_link_dir(tc)
    if link_dir:
        link.insert(0, f"-L{link_dir}")
    # --threads: the targets' device code is compiled side by side (the same code, built in parallel).
    # -isystem: the CUDA headers named by the same path as before, so even the line info's file names are unchanged.
    cmd = ([str(tc.nvcc), "-isystem", str(tc.cuda_home / "include")] + NVCC_BASE + targets + ["-Xcompiler", "-fPIC", f"--threads={min(len(targets), os.cpu_count() or 1)}"]
           + flags + ["-shared", str(kernel_cu), str(wrap_cpp), "-o", str(tmp_so)] + link)
    ok = False
    try:
        with open(mine, "w") as out:
            out.write(" ".join(cmd) + "\n")
            out.flush()
            rc = subprocess.run(cmd, stdout=out, stderr=subprocess.STDOUT, cwd=bdir).returncode
        output = mine.read_text(errors="replace")
        if rc != 0:
            raise CompileError(f"{path.name} did not compile:\n\n"
                               + clean_compiler_output(output.split("\n", 1)[1], path))
        tmp_so.replace(so)
        try:
            lib = _Library(so, exports)
        except (OSError, AttributeError) as e:  # the build said it succeeded but left no loadable library
            raise BuildError(f"{path.name} compiled, but its library could not be loaded: {e}") from None
        _LOADED[so] = lib
        ok = True
    finally:
        tmp_so.unlink(missing_ok=True)
        if ok:
            kernel_cu.replace(bdir / "kernel.cu")
            wrap_cpp.replace(bdir / "launch.cpp")
        elif not done.exists():  # nothing good was ever built here: leave no folder behind
            shutil.rmtree(bdir, ignore_errors=True)
        else:
            for f in (kernel_cu, wrap_cpp, mine):
                f.unlink(missing_ok=True)
    if verbose:
        print(output)
    if "ptxas info" in output or not log.exists():
        mine.replace(log)
    else:
        mine.unlink(missing_ok=True)
    done.touch()
    _prune(bdir.parent, stem + "_", bdir)
    return KernelModule(path, solution, exports, lib, bdir, time.perf_counter() - t0, False, min_cap, exact)
