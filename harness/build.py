"""Compile a lesson's CUDA file with torch's load_inline, fast, cached, with readable errors.

The kernel file is load_inline's CUDA source as it stands: it includes only CUDA headers and exposes plain C launchers
that take raw pointers. The C++ source is a binding generated from the file's EXPORT declarations: one Python function
per launcher, taking torch tensors. Neither includes a torch header, which costs seconds in every translation unit that
does (even from a precompiled header); the binding's calls into torch (reading a tensor, its checks, torch's current
stream) are in the binding runtime, harness/binding.cpp, built once per torch and Python (build/binding/).

Why it is fast: the binding depends only on the EXPORT declarations, so each kernel file's load_inline build directory
is named by the file and its declarations, and ninja recompiles only what changed. After an edit to a kernel, nvcc
compiles the .cu file alone and the binding's object is linked again as it was. Each finished build is then kept under
the hash of everything that went into it, and a build whose inputs did not change is imported without running ninja.

Every command (notebooks, run, grade, test) shares one kernel cache: build/cache/ in the repository, or the folder
named by COURSE_CACHE. A failed build leaves no finished build behind, so building again compiles again.

A kernel file marks each launcher it exports with EXPORT (defined as `extern "C"` in the file):

    EXPORT void gemm_naive(const float* x, const float* W, float* y, int M, int N, int K,
                           cudaStream_t stream);

`load()` parses those declarations and returns a module whose functions check their arguments
(a `const float*` must be a contiguous float32 CUDA tensor, and so on), pass the current CUDA
stream for a trailing `cudaStream_t`, and raise if the launch failed.
"""
from __future__ import annotations

import contextlib
import fcntl
import hashlib
import importlib.util
import os
import re
import shutil
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

from . import toolchain

ROOT = toolchain.ROOT
HERE = Path(__file__).resolve().parent
BUILD_VERSION = "3"  # bump when the generated binding or flags change, to invalidate caches
KEEP_BUILDS = 8  # cached builds kept per kernel file; older ones are removed
KEEP_NINJA_DIRS = 4  # load_inline build directories kept per kernel file (one per set of EXPORT declarations)
CUDA_FLAGS = ["-O3", "-lineinfo", "-Xptxas=-v"]
# The language settings every kernel file is compiled with (torch's extension builder adds the same ones, and the
# lessons' half-precision code is written against them: no implicit __half operators or conversions). Passed
# explicitly, so that every torch version builds the same code.
NVCC_BASE = ["-D__CUDA_NO_HALF_OPERATORS__", "-D__CUDA_NO_HALF_CONVERSIONS__", "-D__CUDA_NO_BFLOAT16_CONVERSIONS__",
             "-D__CUDA_NO_HALF2_OPERATORS__", "--expt-relaxed-constexpr", "-std=c++20"]
CXX_FLAGS = ["-O2"]


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
_UNSIGNED = ("unsigned", "unsigned int", "uint32_t", "size_t")


def _c_type(p: Param) -> str:
    """The type a launcher's prototype gets in the binding: C linkage needs only the ABI to agree
    (every pointer is a pointer)."""
    if p.kind in ("ptr", "stream"):
        return "void*"
    if p.kind == "int":
        return "long long" if p.ctype in _WIDE else "int"
    return p.ctype.removeprefix("const ").strip()


def _c_string(s: str) -> str:
    return '"' + s.replace("\\", "\\\\").replace('"', '\\"') + '"'


def binding_source(exports: list[Export], min_capability: float = 8.0, exact: bool = False) -> str:
    """The C++ source of a kernel file's binding (load_inline's cpp_sources): one Python function per launcher, which
    hands its arguments to the binding runtime's checks and launch (harness/binding.h). It includes no torch header,
    and depends on the EXPORT declarations only."""
    min_cc = round(min_capability * 10)
    code = {"ptr": "p", "int": "i", "float": "f"}
    field = {"ptr": "p", "stream": "p", "int": "i", "float": "f"}
    lines = ["// Generated by harness/build.py from the kernel file's EXPORT declarations: one Python function per",
             "// launcher. The checks, torch's current stream and the launch check are the binding runtime's",
             "// (harness/binding.cpp). In main.cpp this text follows harness/binding.h.", "",
             "static const course_api* course = nullptr;", ""]
    for ex in exports:
        args = [p for p in ex.params if p.kind != "stream"]
        stream = len(args) != len(ex.params)
        lines.append(f'extern "C" void {ex.name}({", ".join(_c_type(p) for p in ex.params) or "void"});')
        casts = ", ".join(f"a[{i}].{field[p.kind]}" if p.kind in ("ptr", "stream") else f"({_c_type(p)})a[{i}].{field[p.kind]}"
                          for i, p in enumerate(ex.params))
        lines.append(f"static void course_launch_{ex.name}(const course_value* a) {{ {'(void)a; ' if not ex.params else ''}"
                     f"{ex.name}({casts}); }}")
        if args:
            lines.append(f"static course_param course_params_{ex.name}[] = {{")
            for p in args:
                bits = 64 if p.ctype in _WIDE else 32
                lines.append(f"    {{{_c_string(p.name)}, '{code[p.kind]}', "
                             f"{_c_string(p.dtype) if p.kind == 'ptr' and p.dtype else 'nullptr'}, "
                             f"{int(p.kind == 'ptr' and not p.const)}, {bits if p.kind == 'int' else 0}, "
                             f"{int(p.kind == 'int' and p.ctype in _UNSIGNED)}, -1}},")
            lines.append("};")
        lines.append(f"static course_launcher course_{ex.name} = {{{_c_string(ex.name)}, {len(args)}, {int(stream)}, "
                     f"{'course_params_' + ex.name if args else 'nullptr'}, {min_cc}, {int(exact)}, "
                     f"course_launch_{ex.name}}};")
        lines.append(f"static PyObject* course_py_{ex.name}(PyObject*, PyObject* const* args, Py_ssize_t nargs) {{")
        lines.append(f"    return course->call(&course_{ex.name}, args, nargs);")
        lines.append("}")
        lines.append("")
    lines.append("static PyMethodDef course_methods[] = {")
    for ex in exports:
        lines.append(f"    {{{_c_string(ex.name)}, (PyCFunction)(void (*)(void))course_py_{ex.name}, METH_FASTCALL, "
                     f"{_c_string(ex.signature)}}},")
    lines += ["    {nullptr, nullptr, 0, nullptr},", "};", "",
              "static PyModuleDef course_module = {PyModuleDef_HEAD_INIT, COURSE_STR(TORCH_EXTENSION_NAME), nullptr, -1,",
              "                                    course_methods};", "",
              "PyMODINIT_FUNC COURSE_CAT(PyInit_, TORCH_EXTENSION_NAME)(void) {",
              "    course = static_cast<const course_api*>(PyCapsule_Import(COURSE_BINDING_CAPSULE, 0));",
              "    if (!course) return nullptr;",
              "    if (course->version != COURSE_BINDING_VERSION) {",
              '        PyErr_SetString(PyExc_ImportError, "the binding runtime is of another version than this binding");',
              "        return nullptr;",
              "    }"]
    for ex in exports:
        lines.append(f"    if (course->prepare(&course_{ex.name}) < 0) return nullptr;")
    lines += ["    return PyModule_Create(&course_module);", "}", ""]
    return "\n".join(lines)


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
    """Calls one EXPORT launcher. The binding checks every argument against the launcher's C declaration; when it
    refuses one, _explain() says which and why."""

    def __init__(self, export: Export, raw, module: "KernelModule"):
        self.export, self._raw, self._module = export, raw, module
        self.__name__ = export.name
        self.__doc__ = f"{export.signature}\n(from {module.path})"

    def __repr__(self):
        return f"<kernel launcher {self.export.signature} from {self._module.path.name}>"

    def __call__(self, *args):
        try:
            stream = self._raw(*args)  # None, or with COURSE_SYNC set the stream the kernel was launched on
        except _REFUSED:
            stream = _REFUSED
        if stream is None:
            return
        if stream is _REFUSED:
            self._explain(args)  # (outside the except clause: the reason is raised alone, not as a second error)
        self._wait(stream)

    def _wait(self, stream: int):
        """COURSE_SYNC: wait for the kernel, polling, so that a hang is reported instead of waited on forever, then
        raise the error it left (a fault is then reported at the launch that made it)."""
        rt = runtime()
        wait_for_stream(lambda: rt.stream_query(stream), self.export.name)
        err = rt.stream_sync(stream)
        if err:
            raise RuntimeError(f"{self.export.name}: CUDA error {rt.error_name(err)}: {rt.error_string(err)}")

    def _explain(self, args):
        """Raise the reason the binding refused `args`: the same checks, in the same order, in words."""
        import torch

        ex = self.export
        params = ex.params[:-1] if ex.params and ex.params[-1].kind == "stream" else ex.params
        if len(args) != len(params):
            raise TypeError(f"{ex.name}() takes {len(params)} arguments ({', '.join(p.name for p in params)}), "
                            f"got {len(args)}. Declaration: {ex.signature}")
        device = None
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
            elif p.kind == "int":
                if isinstance(a, bool) or not isinstance(a, int):
                    raise TypeError(f"{where} must be an int, got {type(a).__name__}")
                lim = 2**63 if p.ctype in _WIDE else 2**31
                lo = 0 if p.ctype in _UNSIGNED else -lim
                if not lo <= a < lim:
                    raise OverflowError(f"{where} = {a} does not fit in {p.ctype}")
            else:
                if not isinstance(a, (int, float)):
                    raise TypeError(f"{where} must be a number, got {type(a).__name__}")
                float(a)  # an int too large for a double raises OverflowError here
        if not toolchain.gpu_available():
            raise NoGPUError(f"launching {ex.name} needs a CUDA GPU, and this machine has none "
                             "(the kernel compiled; only running it needs the GPU).")
        with torch.cuda.device(device) if device is not None else contextlib.nullcontext():
            self._module._check_capability()
        raise RuntimeError(f"{ex.name}: the binding refused these arguments and the checks found no reason "
                           "(a disagreement between harness/build.py and harness/binding.cpp)")


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




@contextlib.contextmanager
def _capture_fds(path: Path):
    """Send this process's stdout/stderr (the C level, where ninja writes) to a file."""
    sys.stdout.flush(), sys.stderr.flush()
    saved = os.dup(1), os.dup(2)
    with open(path, "w") as f:
        os.dup2(f.fileno(), 1), os.dup2(f.fileno(), 2)
        try:
            yield
        finally:
            sys.stdout.flush(), sys.stderr.flush()
            os.dup2(saved[0], 1), os.dup2(saved[1], 2)
            os.close(saved[0]), os.close(saved[1])


@contextlib.contextmanager
def _locked(folder: Path):
    """Hold `folder`'s lock (an OS lock: released when its holder exits, however it exits). Processes building into
    one load_inline build directory take turns, and each finds the other's finished build."""
    folder.mkdir(parents=True, exist_ok=True)
    with open(folder / "course.lock", "w") as f:
        fcntl.flock(f, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(f, fcntl.LOCK_UN)


def _import_so(name: str, so: Path):
    spec = importlib.util.spec_from_file_location(name, so)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def _load_inline(name: str, bdir: Path, log: Path, **kw):
    """torch's load_inline into `bdir`, its build's output (ninja's, the compilers') in `log`; the module it imports
    is not used (see load_file). The caller holds bdir's lock."""
    from torch.utils import cpp_extension

    # torch remembers, per process, the inputs of each module name it built, and renames the module (name_v1, ...) when
    # they change: a new name is a new -DTORCH_EXTENSION_NAME, which would recompile everything. Forget it: the build
    # directory is the record, and ninja rebuilds what changed. That also makes a failed build compile again.
    entries = getattr(getattr(cpp_extension, "JIT_EXTENSION_VERSIONER", None), "entries", None)
    if isinstance(entries, dict):
        entries.pop(name, None)
    (bdir / "lock").unlink(missing_ok=True)  # torch's own lock: a stale one (its builder killed) would block forever
    with _capture_fds(log):
        cpp_extension.load_inline(name, build_directory=str(bdir), no_implicit_headers=True, with_cuda=True,
                                  verbose=True, **kw)


def _link_flags(tc: toolchain.Toolchain) -> list[str]:
    flags = [f"-Wl,-rpath,{tc.lib_dir}", "-Wl,-Bsymbolic"]
    link_dir = toolchain.cudart_link_dir(tc)
    return ([f"-L{link_dir}"] if link_dir else []) + flags


def binding_root() -> Path:
    """Where the binding runtime is built: build/binding/ in the repository, shared by every kernel cache."""
    return (ROOT / "build" / "binding").resolve()


_REFUSED: type | tuple = ()  # the binding runtime's Refused, once it is loaded
_RUNTIME = None


def runtime():
    """The binding runtime (harness/binding.cpp), built with load_inline on first use and then kept, once per torch,
    Python and CUDA toolkit: the one part of the binding that includes torch's headers (about a minute on two busy
    cores; ./course builds it at set-up)."""
    global _RUNTIME, _REFUSED
    if _RUNTIME is not None:
        return _RUNTIME
    tc = toolchain.find()
    import torch

    header, source = (HERE / "binding.h").read_text(), (HERE / "binding.cpp").read_text()
    key = hashlib.sha256("\0".join([BUILD_VERSION, header, source, torch.__version__, sys.version, tc.nvcc_version,
                                    str(tc.cuda_home), " ".join(CXX_FLAGS)]).encode()).hexdigest()
    name = f"course_binding_{key[:12]}"
    bdir = binding_root() / name
    so, done = bdir / f"{name}.so", bdir / "complete"
    if not (so.exists() and done.exists()):
        with _locked(bdir):
            if not done.exists():
                print("[course] building the kernel binding runtime (harness/binding.cpp, once per torch and Python; "
                      "a minute or two) ...", file=sys.stderr, flush=True)
                t0 = time.perf_counter()
                log = bdir / "build.log"
                try:
                    # (no CUDA source; a target stops torch asking the GPU, where there is none, for one)
                    _load_inline(name, bdir, log, cpp_sources=[source], extra_cflags=CXX_FLAGS,
                                 extra_cuda_cflags=_gencode(["8.0"]), extra_include_paths=[str(HERE)],
                                 extra_ldflags=_link_flags(tc))
                except Exception as e:
                    raise BuildError(f"the binding runtime (harness/binding.cpp) did not build:\n"
                                     f"{log.read_text(errors='replace')[-4000:]}\n{e}") from None
                (bdir / "seconds").write_text(f"{time.perf_counter() - t0:.1f}\n")
                done.touch()
                _prune(bdir.parent, "course_binding_", bdir)
    mod = _import_so(name, so)
    sys.modules["course_binding"] = mod  # where a kernel's binding imports the runtime's functions from
    _RUNTIME, _REFUSED = mod, mod.Refused
    return mod


def _prune(parent: Path, prefix: str, keep: Path, n: int = KEEP_BUILDS):
    """Remove all but the n most recently used folders `prefix`* of `parent`; a folder whose lock is held (a build in
    progress, as in parallel builds of one file's variants) is left alone."""
    olds = sorted((p for p in parent.glob(prefix + "*") if p.is_dir() and p != keep),
                  key=lambda p: p.stat().st_mtime, reverse=True)
    for p in olds[n - 1:]:
        lock = p / "course.lock"
        if lock.exists():
            with open(lock) as f:
                try:
                    fcntl.flock(f, fcntl.LOCK_EX | fcntl.LOCK_NB)
                except OSError:
                    continue
                shutil.rmtree(p, ignore_errors=True)
        else:
            shutil.rmtree(p, ignore_errors=True)


_LOADED: dict[Path, object] = {}  # kernel modules this process has imported, by path (a path is imported once)


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

    tc = toolchain.find()  # also exports CUDA_HOME before torch.utils.cpp_extension is imported
    import torch

    rt = runtime()
    targets = _gencode(toolchain.arch_list())
    if exact:  # sm_90a: wgmma and friends exist for that target only
        cc = m.group(1) + m.group(2)
        targets = [f"-gencode=arch=compute_{cc}a,code=sm_{cc}a"]
    # --threads: the targets' device code is compiled side by side (the same code, built in parallel).
    cuda_flags = NVCC_BASE + targets + [f"--threads={min(len(targets), os.cpu_count() or 1)}"] + CUDA_FLAGS + list(
        extra_cuda_flags or [])
    cuda_src = f'#line 1 "{path}"\n{text}'
    cpp_src = binding_source(exports, min_cap, exact)
    # The load_inline build directory: named by the file and everything but its text, so that an edit rebuilds in the
    # same directory and ninja recompiles the .cu file alone. The finished build: named by everything.
    sig = hashlib.sha256("\0".join([BUILD_VERSION, cpp_src, (HERE / "binding.h").read_text(), rt.__name__,
                                    " ".join(cuda_flags + CXX_FLAGS), torch.__version__, sys.version, tc.nvcc_version,
                                    str(tc.cuda_home)]).encode()).hexdigest()
    key = hashlib.sha256(f"{sig}\0{cuda_src}".encode()).hexdigest()
    kind = "sol" if solution else "ex"
    stem = re.sub(r"\W", "_", f"l{path.parent.name[:2]}_{path.stem}_{kind}")
    modname = f"{stem}_{sig[:12]}"
    out = cache_root() / "build" / f"{stem}_{key[:12]}"
    so = out / f"{modname}.so"
    done = out / "complete"  # written last: a folder without it is a build in progress
    t0 = time.perf_counter()
    if not (so.exists() and done.exists()):
        bdir = cache_root() / "ninja" / modname
        with _locked(bdir):
            if not done.exists():  # (another process may have built it while this one waited)
                _build(path, bdir, out, modname, cpp_src, cuda_src, cuda_flags, tc, verbose)
                _prune(bdir.parent, stem + "_", bdir, KEEP_NINJA_DIRS)
        _prune(out.parent, stem + "_", out)
        cached = False
    else:
        os.utime(out)
        cached = True
    ext = _LOADED.get(so)
    if ext is None:
        try:
            ext = _LOADED[so] = _import_so(modname, so)
        except ImportError as e:  # the build said it succeeded but left no loadable module
            raise BuildError(f"{path.name} compiled, but its module could not be loaded: {e}") from None
    return KernelModule(path, solution, exports, ext, out, time.perf_counter() - t0, cached, min_cap, exact)


def _build(path: Path, bdir: Path, out: Path, modname: str, cpp_src: str, cuda_src: str, cuda_flags: list[str],
           tc: toolchain.Toolchain, verbose: bool):
    """Build one kernel file with load_inline in its build directory `bdir`, and keep the result in `out`."""
    if ANNOUNCE_COMPILES:
        print(f"[course] compiling {_show(path)} ...", file=sys.stderr, flush=True)
    log = bdir / "build.log"
    try:
        _load_inline(modname, bdir, log, cpp_sources=[(HERE / "binding.h").read_text(), cpp_src],
                     cuda_sources=[cuda_src], extra_cflags=CXX_FLAGS, extra_cuda_cflags=cuda_flags,
                     extra_ldflags=_link_flags(tc))
    except (RuntimeError, subprocess.CalledProcessError) as e:
        raw = log.read_text(errors="replace") + "\n" + str(e)
        raise CompileError(f"{path.name} did not compile:\n\n" + clean_compiler_output(raw, path)) from None
    except ImportError:
        pass  # the module as load_inline imports it is not the one used; a broken one fails its import below
    output = log.read_text(errors="replace")
    if verbose:
        print(output)
    # ptxas reports the kernels only when nvcc compiled them: a build that relinked what was compiled before (this
    # text, built earlier into this directory) reuses that build's report.
    ptxas = bdir / "ptxas.log"
    if "ptxas info" in output:
        shutil.copyfile(log, ptxas)
    out.mkdir(parents=True, exist_ok=True)
    shutil.copyfile(ptxas if ptxas.exists() else log, out / "build.log")
    (out / "kernel.cu").write_text(cuda_src)
    (out / "binding.cpp").write_text(cpp_src)
    tmp = out / f".{modname}.so.tmp"
    shutil.copyfile(bdir / f"{modname}.so", tmp)
    tmp.replace(out / f"{modname}.so")
    (out / "complete").touch()


if __name__ == "__main__":  # python -m harness.build runtime: build the binding runtime now (./course does at set-up)
    if sys.argv[1:] != ["runtime"]:
        sys.exit("usage: python -m harness.build runtime")
    t0 = time.perf_counter()
    print(runtime().__file__, f"({time.perf_counter() - t0:.0f} s)")
