"""What one launch costs the caller: the load_inline binding (harness.build) against the ctypes path it replaced.

    python dev/call_overhead.py [--calls N]

Both launch the same 1-element kernel (out[0] = a * x[0] + b[0], lesson 00's scale_add at n = 1), so the time is the
call's: the argument checks, the launch and its check. The ctypes path is rebuilt here as the harness had it until
the switch to load_inline (nvcc straight to a shared library with extern "C" wrappers, each argument checked in
Python, the wrapper called through ctypes); it is kept in this script only, to be measured against.

Printed per route: eager, the wall time per call of N back-to-back calls (the GPU runs them as fast as they come,
so this is the CPU's cost per launch), and in a CUDA graph, the replay time per launch of a graph of 100 captured
launches (the CPU cost is gone; what is left is the GPU's per-kernel cost, the same for both). torch's own
one-element op is printed beside them for scale. Needs a GPU.
"""
import contextlib
import ctypes
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

import torch  # noqa: E402

from harness import build, toolchain  # noqa: E402

KERNEL = r'''#include <cuda_runtime.h>
#define EXPORT extern "C"
__global__ void scale_add_kernel(const float* x, const float* b, float* out, float a, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) out[i] = a * x[i] + b[i];
}
EXPORT void scale_add(const float* x, const float* b, float* out, float a, int n, cudaStream_t stream) {
    scale_add_kernel<<<(n + 255) / 256, 256, 0, stream>>>(x, b, out, a, n);
}
'''

WRAPPER = r'''#include <cuda_runtime.h>
extern "C" void scale_add(void*, void*, void*, float, int, void*);
extern "C" int course_launch_scale_add(void* a0, void* a1, void* a2, double a3, long long a4, void* a5, int sync) {
  scale_add(a0, a1, a2, (float)a3, (int)a4, a5);
  cudaError_t e = cudaGetLastError();
  if (e == cudaSuccess && sync) e = cudaDeviceSynchronize();
  return (int)e;
}
'''


def ctypes_route(folder: Path):
    """The ctypes path as the harness had it: the library, and a caller doing the Python checks it did."""
    tc = toolchain.find()
    (folder / "k.cu").write_text(KERNEL)
    (folder / "w.cpp").write_text(WRAPPER)
    arch = torch.cuda.get_device_capability()
    link = [f"-L{tc.lib_dir}", f"-Xlinker=-rpath,{tc.lib_dir}", "-cudart", "shared"]
    d = toolchain.cudart_link_dir()
    if d:
        link.insert(0, f"-L{d}")
    subprocess.run([str(tc.nvcc), *build.NVCC_BASE, f"-gencode=arch=compute_{arch[0]}{arch[1]},code=sm_{arch[0]}{arch[1]}",
                    "-Xcompiler", "-fPIC", "-O3", "-shared", str(folder / "k.cu"), str(folder / "w.cpp"), "-o",
                    str(folder / "k.so"), *link], check=True)
    dll = ctypes.CDLL(str(folder / "k.so"), mode=os.RTLD_NOW | os.RTLD_LOCAL)
    fn = dll.course_launch_scale_add
    fn.argtypes = [ctypes.c_void_p] * 3 + [ctypes.c_double, ctypes.c_longlong, ctypes.c_void_p, ctypes.c_int]
    fn.restype = ctypes.c_int
    export = build.parse_exports(KERNEL)[0]
    params = export.params[:-1]

    def call(*args):  # harness/build.py's KernelFunction.__call__ before load_inline, unchanged
        conv, device = [], None
        for p, a in zip(params, args):
            where = f"{export.name}(): argument '{p.name}' ({p.ctype})"
            if p.kind == "ptr":
                if not isinstance(a, torch.Tensor):
                    raise TypeError(where)
                want = getattr(torch, p.dtype) if p.dtype else None
                if want is not None and a.dtype != want:
                    raise TypeError(where)
                if not a.is_contiguous():
                    raise ValueError(where)
                if a.device.type != "cuda":
                    raise ValueError(where)
                if device is None:
                    device = a.device
                elif a.device != device:
                    raise ValueError(where)
                if not p.const and a.numel() > 0 and torch._debug_has_internal_overlap(a) == 1:
                    raise ValueError(where)
                conv.append(a.data_ptr())
            elif p.kind == "int":
                if isinstance(a, bool) or not isinstance(a, int):
                    raise TypeError(where)
                if not -2**31 <= a < 2**31:
                    raise OverflowError(where)
                conv.append(a)
            else:
                conv.append(float(a))
        if not toolchain.gpu_available():
            raise RuntimeError("no GPU")
        major, minor = torch.cuda.get_device_capability()  # the module's capability check
        if major + minor / 10 < 8.0:
            raise RuntimeError("capability")
        conv.append(torch.cuda.current_stream(device).cuda_stream)
        sync = os.environ.get("COURSE_SYNC", "") not in ("", "0")
        with torch.cuda.device(device) if device is not None else contextlib.nullcontext():
            err = fn(*conv, int(sync))
        if err:
            raise RuntimeError(f"CUDA error {err}")
    return call


def eager_us(f, calls: int) -> float:
    for _ in range(200):
        f()
    torch.cuda.synchronize()
    t0 = time.perf_counter()
    for _ in range(calls):
        f()
    torch.cuda.synchronize()
    return (time.perf_counter() - t0) / calls * 1e6


def graph_us(f, launches: int = 100, replays: int = 200) -> float:
    side = torch.cuda.Stream()
    with torch.cuda.stream(side):
        for _ in range(3):
            f()
    torch.cuda.current_stream().wait_stream(side)
    g = torch.cuda.CUDAGraph()
    with torch.cuda.graph(g):
        for _ in range(launches):
            f()
    g.replay()
    torch.cuda.synchronize()
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    start.record()
    for _ in range(replays):
        g.replay()
    end.record()
    torch.cuda.synchronize()
    return start.elapsed_time(end) * 1e3 / (replays * launches)


def main(argv):
    if not toolchain.gpu_available():
        print("needs a CUDA GPU")
        return 1
    calls = int(argv[argv.index("--calls") + 1]) if "--calls" in argv else 20000
    x, b, out = (torch.randn(1, device="cuda") for _ in range(3))
    with tempfile.TemporaryDirectory() as tmp:
        src = Path(tmp) / "00_setup" / "scale_add.cu"
        src.parent.mkdir()
        src.write_text(KERNEL)
        binding = build.load_file(src).scale_add
        old = ctypes_route(Path(tmp))
        routes = {
            "load_inline binding (harness.build)": lambda: binding(x, b, out, 2.0, 1),
            "ctypes path (before load_inline)": lambda: old(x, b, out, 2.0, 1),
            "torch.add(b, x, alpha=2.0, out=out)": lambda: torch.add(b, x, alpha=2.0, out=out),
        }
        binding(x, b, out, 2.0, 1)
        torch.testing.assert_close(out, 2.0 * x + b)
        out.zero_()
        old(x, b, out, 2.0, 1)
        torch.testing.assert_close(out, 2.0 * x + b)
        print(f"{torch.cuda.get_device_name()}, torch {torch.__version__}, {calls} calls per eager run, "
              "graphs of 100 launches; median of 5 runs\n")
        print(f"{'route':<40} {'eager µs/call':>14} {'graph µs/launch':>16}")
        for name, f in routes.items():
            e = statistics.median(eager_us(f, calls) for _ in range(5))
            g = statistics.median(graph_us(f) for _ in range(5))
            print(f"{name:<40} {e:14.2f} {g:16.2f}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
