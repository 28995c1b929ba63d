"""Lesson 11 measurements: a Llama-shaped decode step with each weight format, in the same run on the same weights
(harness.decode.run_benchmark; the notebook runs the same code).

    python tools/bench_decode.py [--layers 32] [--batch 1 4 16] [--ctx 512] [--formats fp16 ... marlin nf4_bnb]
                                 [--record]

With --record the rows go to results/11.json ("decode", "accuracy"; COURSE_RECORD=1 for the shipped file).
"""
import argparse
import time

import torch

from harness import decode, results


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--layers", type=int, default=None, help="default: Llama-3-8B's 32, fewer if memory is short")
    ap.add_argument("--batch", type=int, nargs="+", default=[1, 4, 16])
    ap.add_argument("--ctx", type=int, default=512)
    ap.add_argument("--steps", type=int, default=64)
    ap.add_argument("--formats", nargs="+", default=list(decode.FORMATS), choices=list(decode.ALL_FORMATS),
                    help="the course's formats by default; 'marlin' and 'nf4_bnb' add the third-party baselines")
    ap.add_argument("--exercises", action="store_true", help="lesson 11's ops from your kernels/ files")
    ap.add_argument("--no-accuracy", action="store_true")
    ap.add_argument("--record", action="store_true")
    a = ap.parse_args()
    cfg = decode.LLAMA3_8B
    cfg = decode.replace(cfg, n_layers=a.layers) if a.layers else \
        decode.fit_layers(cfg, torch.cuda.mem_get_info()[0], ("w8a16",))
    t0 = time.time()
    rows, acc = decode.run_benchmark(cfg, a.formats, a.batch, a.ctx, a.steps, not a.no_accuracy,
                                     solution=not a.exercises)
    print(f"{cfg.n_layers} layers, {time.time() - t0:.0f} s")
    if a.record:
        print("wrote", results.record(11, "decode", rows, config=dict(cfg.__dict__)))
        if acc:
            print("wrote", results.record(11, "accuracy", acc, config=dict(cfg.__dict__)))


if __name__ == "__main__":
    main()
