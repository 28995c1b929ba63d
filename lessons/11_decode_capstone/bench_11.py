"""Lesson 11's benchmark: a Llama-shaped decode step with each weight format, in the same run on the same weights
(harness.decode.run_benchmark), with Marlin's and bitsandbytes' layers where they are installed, and each quantized
model's logits against the FP16 model's. Its rows are decode steps (tokens per second, µs per step, the step's
floor, the GPU time per kind of kernel), not kernel calls: lesson 11's tables render them
(results.decode_markdown, results.decode_accuracy_markdown) and its charts draw them (time_chart, speed_chart).
ops_rows times the three small kernels, teaching file against the step's fast file, per call.

    python lessons/11_decode_capstone/bench_11.py [--layers 32] [--batch 1 4 16] [--ctx 512]
                                                  [--formats fp16 ... marlin nf4_bnb] [--exercises] [--record]
    python lessons/11_decode_capstone/bench_11.py --real-model [--exercises] [--record]

--real-model runs SmolLM2-135M in every format instead (real_model: harness.real_model.run), on the GPU if there is
one, else each format's CPU reference.

With --record the rows go to build/results/11.json ("decode", "accuracy", "ops", "real_model"; results/11.json with
COURSE_RECORD=1).
"""
import argparse
import sys
import time
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))  # the repository root, run as a script
from harness import catalog, decode, diagrams, real_model as rm, results, roofline  # noqa: E402
from harness.baselines import bnb, marlin  # noqa: E402

# The kinds of kernel a step's time is split into (decode.kernel_breakdown), bottom of the bar first.
KINDS = ("linear layers", "attention", "add + RMSNorm", "SiLU · up", "embedding, argmax, position")
KIND_COLORS = ("#4C72B0", "#C44E52", "#55A868", "#DD8452", "#8172B3", "#BBBBBB")


def default_formats() -> list[str]:
    """The course's formats, then the third-party baselines this machine has (their layers need the packages)."""
    have = [name for name, why in (("marlin", marlin.unavailable()), ("nf4_bnb", bnb.unavailable())) if why is None]
    return list(decode.FORMATS) + have


def run(cfg=None, formats=None, batches=(1, 4, 16), ctx=512, steps=64, accuracy=True, *,
        solution: bool = True, record: bool = False):
    """Time the decode step of every format (and compare its logits with accuracy=True); returns (rows, accuracy
    rows), recorded with record=True. cfg: Llama-3-8B's shape with as many layers as fit in this GPU's memory."""
    cfg = cfg or decode.fit_layers(decode.LLAMA3_8B, torch.cuda.mem_get_info()[0], ("w8a16",))
    formats = default_formats() if formats is None else formats
    t0 = time.time()
    rows, acc = decode.run_benchmark(cfg, formats, batches, ctx, steps, accuracy, solution=solution)
    print(f"{cfg.n_layers} layers, {time.time() - t0:.0f} s")
    if record:
        results.record(11, "decode", rows, config=dict(cfg.__dict__))
        if acc:
            results.record(11, "accuracy", acc, config=dict(cfg.__dict__))
    return rows, acc


def _graph_us(fn, calls: int) -> float:
    """µs per call of fn replayed from a CUDA graph of `calls` back-to-back calls (no Python between kernels)."""
    fn()
    torch.cuda.synchronize()
    g = torch.cuda.CUDAGraph()
    with torch.cuda.graph(g):
        for _ in range(calls):
            fn()
    return decode.time_calls(g.replay, 1) / calls


def ops_rows(batches=(1, 16), ctx=512, cfg=decode.LLAMA3_8B, calls=50, *, record: bool = False):
    """µs per call of each small kernel at the step's shapes, the teaching file (solutions/) against the fast file
    the step runs, both launched without PDL, back to back from a CUDA graph."""
    g = torch.Generator("cuda").manual_seed(0)
    teach, fast = decode.cuda_ops(solution=True, teaching=True), decode.cuda_ops(solution=True)
    out = []
    for B in batches:
        cases = {"attention": catalog.ATTENTION.make_inputs((B, ctx, cfg.n_heads, cfg.n_kv_heads), g),
                 "add + RMSNorm": catalog.ADD_RMSNORM.make_inputs((B, cfg.hidden), g),
                 "SiLU · up": catalog.SILU_MUL.make_inputs((B, cfg.intermediate), g)}
        for kind, args in cases.items():
            name = {"attention": "attention", "add + RMSNorm": "add_rmsnorm", "SiLU · up": "silu_mul"}[kind]
            t = {lbl: _graph_us(lambda o=o: getattr(o, name)(*args), calls) for lbl, o in
                 (("teaching", teach), ("fast", fast))}
            out.append({"kind": kind, "batch": B, "ctx": ctx, "us_teaching": t["teaching"], "us_fast": t["fast"],
                        "speedup": t["teaching"] / t["fast"]})
    if record:
        results.record(11, "ops", out)
    return out


def _rows_at(rows, batch):
    return [r for r in rows if r["batch"] == batch]


def time_chart(rows, batches=(1, 16)):
    """Where the time of a step goes: per format, the GPU time of each kind of kernel (measured without PDL) and, on
    top, what the step took beyond its kernels (launch gaps and each kernel's ramp), one panel per batch."""
    fig, axes = diagrams.figure(12, 1.1 + 0.42 * len(_rows_at(rows, batches[0])), ncols=len(batches))
    for ax, B in zip(axes, batches):
        ax.set_axis_on()
        ax.set_aspect("auto")
        rs = _rows_at(rows, B)[::-1]
        for i, r in enumerate(rs):
            x = 0.0
            total = r["us_graph_nopdl"] or r["us_graph"]
            parts = [r["breakdown_us"].get(k, 0.0) for k in KINDS]
            parts.append(max(total - sum(parts), 0.0))
            for j, v in enumerate(parts):
                ax.barh(i, v / 1000, left=x / 1000, color=KIND_COLORS[j],
                        label=(KINDS + ("between kernels",))[j] if i == 0 else None)
                x += v
        ax.set_yticks(range(len(rs)), [r["label"] for r in rs], fontsize=8)
        if B != batches[0]:
            ax.set_yticklabels([])
        ax.set_xlabel("ms per step (CUDA graph, without PDL)", fontsize=8)
        ax.set_title(f"batch {B}", fontsize=9)
        ax.tick_params(labelsize=8)
    h, lbl = axes[0].get_legend_handles_labels()
    fig.legend(h, lbl, fontsize=8, ncol=len(lbl), loc="lower center", bbox_to_anchor=(0.5, -0.12), frameon=False)
    fig.suptitle("Where the time of a decode step goes (32 layers, 512 cached positions)", fontsize=10)
    return fig


def speed_chart(rows, batches=(1, 4, 16)):
    """Tokens per second of each format against FP16's in the same run, per batch (bars), Marlin's and
    bitsandbytes' layers among them where they were measured."""
    fmts = list(dict.fromkeys(r["format"] for r in rows))
    label = {r["format"]: r["label"] for r in rows}
    fig, ax = diagrams.figure(11, 4.2)
    ax.set_axis_on()
    ax.set_aspect("auto")
    width = 0.8 / len(fmts)
    colors = ("#BBBBBB", "#8172B3", "#4C72B0", "#8FB3E0", "#55A868", "#9CCB8C", "#C44E52", "#DD8452")
    for j, f in enumerate(fmts):
        ys = [next((r["speedup_vs_fp16"] for r in _rows_at(rows, B) if r["format"] == f), 0.0) for B in batches]
        ax.bar([i + (j - (len(fmts) - 1) / 2) * width for i in range(len(batches))], ys, width,
               color=colors[j % len(colors)], label=label[f])
    tok = {B: next(r["tok_s"] for r in _rows_at(rows, B) if r["format"] == "fp16") for B in batches}
    ax.set_xticks(range(len(batches)), [f"batch {B}\n(FP16: {tok[B]:,.0f} tok/s)" for B in batches], fontsize=8)
    ax.set_ylabel("tokens per second, × FP16 (cuBLAS)", fontsize=8)
    ax.axhline(1.0, color=diagrams.PALETTE["line"], lw=0.8)
    ax.tick_params(labelsize=8)
    ax.legend(fontsize=7, ncol=2, loc="upper right")
    ax.set_ylim(0, 1.35 * max(r["speedup_vs_fp16"] for r in rows))
    ax.set_title("Decode tokens per second per weight format, same weights, same run", fontsize=10)
    return fig


def real_model(device=None, *, record: bool = False, **kw) -> list[dict]:
    """SmolLM2-135M-Instruct in every format (harness.real_model.run; on a GPU the course's kernels, on the CPU each
    format's reference); returns its rows (results.real_model_markdown renders them, step_time_lines says where a
    GPU step's time goes). A GPU run is recorded as "real_model" with record=True."""
    rows = rm.run(device=device, **kw)
    if record and rows[0]["device"] == "cuda":
        results.record(11, "real_model", rows, prompt=kw.get("prompt", rm.PROMPT), text=rm.TEXT_TOPIC)
    return rows


def step_time_lines(rows, sec: dict | None = None) -> str:
    """Per format: the step's time at batch 1 against its bytes' floor at the read bandwidth (of the recorded section
    sec's GPU, else this GPU's), what its kernels took on their own, and how many it launches."""
    bw = results.floor_GBps(sec) if sec else roofline.bandwidth(roofline.ceilings())[0]
    out = [f"{'format':<20}{'floor µs':>9}{'graph µs':>10}{'no PDL':>8}{'eager':>8}{'in kernels':>12}{'kernels':>9}"
           f"{'µs / kernel':>13}"]
    for r in rows:
        nopdl = r["us_graph_nopdl"] or r["us_graph"]
        out.append(f"{r['label']:<20}{r['step_bytes'] / (bw * 1e3):>9.1f}{r['us_graph']:>10.1f}{nopdl:>8.1f}"
                   f"{r['us_eager']:>8.1f}{r['kernels_us']:>12.1f}{r['kernels_per_step']:>9.0f}"
                   f"{nopdl / r['kernels_per_step']:>13.2f}")
    out.append(f"Batch 1, {rows[0]['ctx']} cached positions. floor: the step's bytes as the GPU runs it (padded weights, "
               "KV cache) at the read bandwidth of the GPU it ran on. graph: the step in a CUDA graph, with PDL; no PDL: without; "
               "eager: launched from Python; in kernels: the kernels' own GPU time (without PDL).")
    return "\n".join(out)


def real_model_chart(rows):
    """Quality against size: each format's perplexity on the text (lower is better) against the bytes it stores
    for the model, FP16 marked."""
    fig, ax = diagrams.figure(7, 3.6)
    ax.set_axis_on()
    ax.set_aspect("auto")
    for r in rows:
        ax.scatter(r["weight_mb"], r["ppl"], s=36, color="#4C72B0" if r["format"] != "fp16" else "#BBBBBB", zorder=3)
        ax.annotate(r["label"].split(" (")[0], (r["weight_mb"], r["ppl"]), textcoords="offset points",
                    xytext=(6, -12) if r["format"] == "nf4dq" else (6, 4), fontsize=8)  # NF4's twin sits on it
    ax.set_xlabel("weights stored, MB (linear layers in the format; embedding and norms FP16)", fontsize=8)
    ax.set_ylabel("perplexity on the text (lower is better)", fontsize=8)
    ax.set_xlim(0, 1.15 * max(r["weight_mb"] for r in rows))
    ax.set_ylim(0, 1.2 * max(r["ppl"] for r in rows))
    ax.grid(alpha=0.3)
    ax.tick_params(labelsize=8)
    ax.set_title("SmolLM2-135M: quality against weight bytes, per format", fontsize=10)
    return fig


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--layers", type=int, default=None, help="default: Llama-3-8B's 32, fewer if memory is short")
    ap.add_argument("--batch", type=int, nargs="+", default=[1, 4, 16])
    ap.add_argument("--ctx", type=int, default=512)
    ap.add_argument("--steps", type=int, default=64)
    ap.add_argument("--formats", nargs="+", default=None, choices=list(decode.ALL_FORMATS),
                    help="default: the course's formats, then 'marlin' and 'nf4_bnb' where installed")
    ap.add_argument("--exercises", action="store_true", help="lesson 11's ops from your kernels/ files")
    ap.add_argument("--no-accuracy", action="store_true")
    ap.add_argument("--record", action="store_true")
    ap.add_argument("--real-model", action="store_true", help="SmolLM2-135M in every format (harness.real_model)")
    a = ap.parse_args(argv)
    if a.real_model:
        rows = real_model(record=a.record, solution=not a.exercises)
        print(results.real_model_markdown(rows))
        if rows[0]["device"] == "cuda":
            print("\n" + step_time_lines(rows))
        return
    cfg = (decode.replace(decode.LLAMA3_8B, n_layers=a.layers) if a.layers else
           decode.fit_layers(decode.LLAMA3_8B, torch.cuda.mem_get_info()[0], ("w8a16",)))
    rows, _ = run(cfg, a.formats, a.batch, a.ctx, a.steps, not a.no_accuracy, solution=not a.exercises,
                  record=a.record)
    # this run's rows, never a stored table
    print(results.decode_markdown(sec=dict(results.this_run(rows, {}), config=dict(cfg.__dict__))))
    if not a.exercises:
        for r in ops_rows(record=a.record):
            print(f"{r['kind']:<14} B={r['batch']:<3} teaching {r['us_teaching']:6.1f} µs, fast {r['us_fast']:6.1f} µs "
                  f"({r['speedup']:.2f}×)")


if __name__ == "__main__":
    main()
