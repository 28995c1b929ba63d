"""Time kernels and their baselines in one run, the way METHOD.md asks.

- CUDA events around each call, after warm-up; the median of many calls.
- The GPU is kept busy ahead of the CPU (a sleep kernel before each batch), so the Python
  overhead of a launch is not measured as kernel time.
- Inputs rotate among enough sets to exceed the L2 cache several times, so a memory-bound kernel
  is timed reading DRAM, not the cache.
- Decode-sized kernels can also be timed as a model's step runs them: back to back (chain_fn) or replayed from a
  CUDA graph (graph_fn), where the launch of each call is not counted.
- Every row reports time, TFLOP/s, GB/s (against the fewest bytes the problem must move),
  % of the baseline measured in the same run, and % of this GPU's roofline.
"""
from __future__ import annotations

import importlib.util
import math
import re
import statistics
import sys
import time
from dataclasses import dataclass

import torch

from . import build, roofline


@dataclass
class Timing:
    median_us: float
    p10_us: float
    p90_us: float
    calls: int
    redone: int = 0  # batches timed again because the CPU fell behind the GPU (see time_fn)
    chain_us: float | None = None  # per call, back to back (time_fn(chain=True), chain_fn)
    graph_us: float | None = None  # per call, replayed from a CUDA graph (time_fn(graph=True), graph_fn)
    graph_error: str | None = None  # why fn could not be captured, where it could not


_cycles_per_us: float | None = None


def _sleep_us(us: float):
    """Occupy the GPU for about `us` microseconds (so the CPU can queue work ahead of it)."""
    global _cycles_per_us
    if _cycles_per_us is None:
        s, e = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        torch.cuda._sleep(1000)
        s.record()
        torch.cuda._sleep(1_000_000)
        e.record()
        e.synchronize()
        _cycles_per_us = 1_000_000 / max(s.elapsed_time(e) * 1000, 1e-3)
    torch.cuda._sleep(int(us * _cycles_per_us))


def _recalibrate(asked_us: float, slept_us: float):
    """The sleep counts SM clock cycles: calibrated while the clock was low, it comes out shorter once the clock
    rises. Rescale from a sleep that was timed."""
    global _cycles_per_us
    if _cycles_per_us and slept_us > 0 and abs(slept_us / asked_us - 1) > 0.1:
        _cycles_per_us *= asked_us / slept_us


def _queue_behind_sleep(n: int, queue) -> bool:
    """Run queue() (which launches n calls) while the GPU sleeps, then wait for the GPU. False when the CPU was still
    queueing after the sleep had ended: the GPU may then have waited for a launch inside a timed region."""
    # 200 µs of Python per call covers multi-kernel routes (dequantize + GEMM, PyTorch's quantize + _int_mm + scale).
    s0, s1 = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    asked = min(200 * n + 20, 8000)
    s0.record()
    _sleep_us(asked)
    s1.record()
    t0 = time.perf_counter()
    queue()
    queued_us = (time.perf_counter() - t0) * 1e6
    torch.cuda.synchronize()
    slept_us = s0.elapsed_time(s1) * 1000
    _recalibrate(asked, slept_us)
    return queued_us <= slept_us


def time_fn(fn, arg_sets, *, warmup: int = 10, reps: int = 100, batch: int = 20, max_ms: float = 2000,
            chain: bool = False, graph: bool = False) -> Timing:
    """Median time of fn(*arg_sets[i % len(arg_sets)]) over `reps` calls, each between its own two events.
    chain=True also times chains of calls back to back (Timing.chain_us: see chain_fn), graph=True calls replayed
    from a CUDA graph (Timing.graph_us: see graph_fn)."""
    if not arg_sets:
        raise ValueError("time_fn needs at least one argument set")
    fn(*arg_sets[0])  # first call: module load, lazy init
    torch.cuda.synchronize()
    # One timed call, to size the warm-up and the repetitions within the time budget.
    s, e = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    s.record()
    fn(*arg_sets[0])
    e.record()
    e.synchronize()
    est_ms = max(s.elapsed_time(e), 1e-3)
    for i in range(max(1, min(warmup, int(0.1 * max_ms / est_ms)))):
        fn(*arg_sets[i % len(arg_sets)])
    torch.cuda.synchronize()
    reps = max(5, min(reps, int(max_ms / est_ms)))
    times, i, redone, tries = [], 0, 0, 0
    while len(times) < reps:
        n = min(batch, reps - len(times))
        ev = [(torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)) for _ in range(n)]

        def queue(i=i):
            for k, (a, b) in enumerate(ev):
                a.record()
                fn(*arg_sets[(i + k) % len(arg_sets)])
                b.record()
        ok = _queue_behind_sleep(n, queue)
        # A batch the CPU fell behind on (a host hiccup, a slow sleep calibration) is timed again, up to 3 times in a
        # row: on the H100 such a batch turned a 24 µs kernel's median into 214 µs. A route that is always that slow
        # keeps its times.
        if not ok and tries < 3:
            tries, redone = tries + 1, redone + 1
            continue
        tries, i = 0, i + n
        times += [a.elapsed_time(b) * 1000 for a, b in ev]
    times.sort()
    q = lambda f: times[min(len(times) - 1, int(f * len(times)))]
    t = Timing(statistics.median(times), q(0.1), q(0.9), len(times), redone)
    if chain:
        c = chain_fn(fn, arg_sets, start=i)
        t.chain_us, t.redone = c.median_us, t.redone + c.redone
    if graph:
        g = graph_fn(fn, arg_sets, start=i)
        t.graph_us, t.graph_error = (g.median_us, None) if isinstance(g, Timing) else (None, g)
    return t


def chain_fn(fn, arg_sets, *, n: int = 20, reps: int = 15, start: int = 0) -> Timing:
    """Time per call of n calls launched back to back between two events (median over `reps` chains), the inputs
    rotating as in time_fn. This is how a model's decode step runs its kernels: each launch is queued while the call
    before it runs, so the fixed cost an isolated call pays between its own events (1.6-1.7 µs on the H100 for a
    kernel reading 9-134 MB: lesson 12's read probe) is not counted. The caller warms up."""
    out, i, tries, redone = [], start, 0, 0
    while len(out) < reps:
        s, e = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)

        def queue(i=i):
            s.record()
            for k in range(n):
                fn(*arg_sets[(i + k) % len(arg_sets)])
            e.record()
        if not _queue_behind_sleep(n, queue) and tries < 3:  # as in time_fn
            tries, redone = tries + 1, redone + 1
            continue
        tries, i = 0, i + n
        out.append(s.elapsed_time(e) * 1000 / n)
    out.sort()
    q = lambda f: out[min(len(out) - 1, int(f * len(out)))]
    return Timing(statistics.median(out), q(0.1), q(0.9), n * len(out), redone)


def graph_fn(fn, arg_sets, *, calls: int = 20, reps: int = 15, start: int = 0) -> Timing | str:
    """Time per call of fn captured in one CUDA graph (at least `calls` calls, the inputs rotating through whole
    passes over arg_sets so that no set is read twice in a row), the graph replayed between two events; median over
    `reps` replays. A serving engine runs a decode step this way: the GPU finds the next kernel ready when one ends,
    where a call between its own events also pays its launch (on the H100, 2.0-3.0 µs more per call of one kernel:
    dev/notes.md, "Timing in a CUDA graph"). Returns why, as a string, where fn cannot be captured (it synchronizes, or
    allocates outside PyTorch's allocator)."""
    S = len(arg_sets)
    n = S * math.ceil(calls / S)
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):  # warm-up off the default stream, as torch.cuda.graph asks
        for k in range(min(S, 3)):
            fn(*arg_sets[(start + k) % S])
    torch.cuda.current_stream().wait_stream(side)
    torch.cuda.synchronize()
    g = torch.cuda.CUDAGraph()
    try:
        with torch.cuda.graph(g):
            for k in range(n):
                fn(*arg_sets[(start + k) % S])
    except RuntimeError as e:
        torch.cuda.synchronize()
        return str(e).splitlines()[0]
    g.replay()
    torch.cuda.synchronize()
    out, tries, redone = [], 0, 0
    while len(out) < reps:
        s, e = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)

        def queue():
            s.record()
            g.replay()
            e.record()
        if not _queue_behind_sleep(1, queue) and tries < 3:  # as in time_fn
            tries, redone = tries + 1, redone + 1
            continue
        tries = 0
        out.append(s.elapsed_time(e) * 1000 / n)
    del g
    out.sort()
    q = lambda f: out[min(len(out) - 1, int(f * len(out)))]
    return Timing(statistics.median(out), q(0.1), q(0.9), n * len(out), redone)


def input_sets(problem, shape, *, l2_multiple: float = 3.0, max_sets: int = 32, max_bytes: float = 8e9):
    """Enough fresh input sets that one pass over them exceeds `l2_multiple` × the L2 size."""
    l2 = getattr(torch.cuda.get_device_properties(0), "L2_cache_size", 50 * 2**20)
    per = max(problem.bytes(shape), 1)
    n = max(1, min(max_sets, math.ceil(l2_multiple * l2 / per), int(max_bytes // per) or 1))
    gen = torch.Generator(device="cuda").manual_seed(1234)
    return [problem.make_inputs(shape, gen) for _ in range(n)]


def compare(problem, ops: dict, shapes, *, baseline: str | None = None, ceilings: dict | None = None,
            reps: int = 100, verbose: bool = True) -> list[dict]:
    """Time every op on every shape in one run. `ops` maps a label to a callable op(*inputs).
    Returns rows; prints a table when verbose."""
    baseline = baseline if baseline is not None else next(iter(ops))
    ceilings = ceilings or roofline.ceilings()
    rows = []
    for shape in shapes:
        sets = input_sets(problem, shape)
        timed = {label: time_fn(op, sets, reps=reps) for label, op in ops.items()}
        base_us = timed[baseline].median_us if baseline in timed else None
        for label, t in timed.items():
            fl, by = problem.flops(shape), problem.bytes(shape)
            floor_us = roofline.floor_us(fl, by, ceilings, getattr(problem, "ceiling", "fp32"))
            rows.append(dict(
                route=route_id(label), op=label, shape=list(shape), desc=problem.describe(shape), us=round(t.median_us, 2),
                p10_us=round(t.p10_us, 2), p90_us=round(t.p90_us, 2),
                tflops=round(fl / t.median_us / 1e6, 3), gbs=round(by / t.median_us / 1e3, 1),
                pct_baseline=round(100 * base_us / t.median_us, 1) if base_us else None,
                pct_roofline=round(100 * floor_us / t.median_us, 1) if floor_us else None,
                baseline=route_id(baseline), sets=len(sets)))
        if verbose:
            print(table([r for r in rows if r["shape"] == list(shape)]))
            print()
    return rows


def route_id(label: str) -> str:
    """The route id of a kernel or library call timed by compare, from its label (results.Row.route)."""
    return re.sub(r"[^a-z0-9]+", "_", label.lower()).strip("_")


def table(rows: list[dict]) -> str:
    """A fixed-width table of benchmark rows (the format of the FP32 ladder)."""
    if not rows:
        return "(no rows)"
    base = rows[0].get("baseline") or "baseline"
    base = next((r["op"] for r in rows if r.get("route", r["op"]) == base), base)  # the baseline's label
    w = max([28] + [len(r["op"]) for r in rows])  # long kernel names widen the column instead of shifting the row
    head = f"{'kernel':<{w}} {'shape':<22} {'time µs':>10} {'TFLOP/s':>9} {'GB/s':>8} {'% ' + base:>{max(9, len(base) + 2)}} {'% roofline':>10}"
    out = [head, "-" * len(head)]
    for r in rows:
        pb = "" if r.get("pct_baseline") is None else f"{r['pct_baseline']:.1f}"
        pr = "" if r.get("pct_roofline") is None else f"{r['pct_roofline']:.1f}"
        out.append(f"{r['op']:<{w}} {r['desc']:<22} {r['us']:>10.2f} {r['tflops']:>9.2f} {r['gbs']:>8.0f} "
                   f"{pb:>{max(9, len(base) + 2)}} {pr:>10}")
    return "\n".join(out)


def lesson_module(lesson: int):
    """A lesson's benchmark module, lessons/NN_name/bench_NN.py, imported by its number (the notebook imports it as
    `import bench_NN` from its own folder; the same module object either way once one of them has loaded it)."""
    name = f"bench_{int(lesson):02d}"
    if name in sys.modules:
        return sys.modules[name]
    found = sorted(build.ROOT.glob(f"lessons/{int(lesson):02d}_*/{name}.py"))
    if len(found) != 1:
        raise FileNotFoundError(f"lesson {int(lesson):02d} has {len(found)} benchmark modules lessons/*/{name}.py")
    spec = importlib.util.spec_from_file_location(name, found[0])
    mod = importlib.util.module_from_spec(spec)
    sys.modules[name] = mod
    try:
        spec.loader.exec_module(mod)
    except BaseException:
        del sys.modules[name]
        raise
    return mod
