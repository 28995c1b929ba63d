"""Lesson 11's benchmark: a Llama-shaped decode step with each weight format, in the same run on the same weights
(harness.decode.run_benchmark), and each quantized model's logits against the FP16 model's. Its rows are decode
steps (tokens per second, µs per step, the step's floor), not kernel calls: lesson 11's tables render them
(results.decode_markdown, results.decode_accuracy_markdown).

    python lessons/11_decode_capstone/bench_11.py [--layers 32] [--batch 1 4 16] [--ctx 512]
                                                  [--formats fp16 ... marlin nf4_bnb] [--exercises] [--record]

With --record the rows go to build/results/11.json ("decode", "accuracy"; results/11.json with COURSE_RECORD=1).
"""
import argparse
import time

import torch

from harness import decode, results


def run(cfg=None, formats=tuple(decode.FORMATS), batches=(1, 4, 16), ctx=512, steps=64, accuracy=True, *,
        solution: bool = True, record: bool = False):
    """Time the decode step of every format (and compare its logits with accuracy=True); returns (rows, accuracy
    rows), recorded with record=True. cfg: Llama-3-8B's shape with as many layers as fit in this GPU's memory."""
    cfg = cfg or decode.fit_layers(decode.LLAMA3_8B, torch.cuda.mem_get_info()[0], ("w8a16",))
    t0 = time.time()
    rows, acc = decode.run_benchmark(cfg, formats, batches, ctx, steps, accuracy, solution=solution)
    print(f"{cfg.n_layers} layers, {time.time() - t0:.0f} s")
    if record:
        results.record(11, "decode", rows, config=dict(cfg.__dict__))
        if acc:
            results.record(11, "accuracy", acc, config=dict(cfg.__dict__))
    return rows, acc


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--layers", type=int, default=None, help="default: Llama-3-8B's 32, fewer if memory is short")
    ap.add_argument("--batch", type=int, nargs="+", default=[1, 4, 16])
    ap.add_argument("--ctx", type=int, default=512)
    ap.add_argument("--steps", type=int, default=64)
    ap.add_argument("--formats", nargs="+", default=list(decode.FORMATS), choices=list(decode.ALL_FORMATS),
                    help="the course's formats by default; 'marlin' and 'nf4_bnb' add the third-party baselines")
    ap.add_argument("--exercises", action="store_true", help="lesson 11's ops from your kernels/ files")
    ap.add_argument("--no-accuracy", action="store_true")
    ap.add_argument("--record", action="store_true")
    a = ap.parse_args(argv)
    cfg = decode.replace(decode.LLAMA3_8B, n_layers=a.layers) if a.layers else None
    run(cfg, a.formats, a.batch, a.ctx, a.steps, not a.no_accuracy, solution=not a.exercises, record=a.record)
    print(results.decode_markdown(prefer_local=True))


if __name__ == "__main__":
    main()
