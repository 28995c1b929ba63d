"""SmolLM2-135M-Instruct (harness/real_model.py) in every format, with options lesson 11's cell does not take: each
format's greedy answer to a chat prompt, how many of its tokens are FP16's, its perplexity on the real text
(pydoc_data.topics) and, on a GPU, its step's time. Lesson 11 runs the same (bench_11.real_model) with the defaults.

    .venv/bin/python dev/real_model.py                     # on the GPU: the course's kernels; else the CPU references
    .venv/bin/python dev/real_model.py --device cpu        # each format's CPU reference (dequantized weights, PyTorch)
    .venv/bin/python dev/real_model.py --prompt "..." --tokens 48 --ppl-tokens 256 --formats fp16 w4a16
"""
from __future__ import annotations

import argparse
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "lessons" / "11_decode_capstone"))

import torch  # noqa: E402

import bench_11  # noqa: E402
from harness import real_model as rm, results  # noqa: E402


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--prompt", default=rm.PROMPT)
    ap.add_argument("--tokens", type=int, default=40, help="new tokens per answer (greedy; stops at <|im_end|>)")
    ap.add_argument("--ppl-tokens", type=int, default=256, help="tokens of the text the perplexity is measured on")
    ap.add_argument("--formats", nargs="+", default=list(rm.FORMAT_NAMES), choices=rm.FORMAT_NAMES)
    ap.add_argument("--device", choices=("cpu", "cuda"), default="cuda" if torch.cuda.is_available() else "cpu")
    a = ap.parse_args()
    rows = rm.run(a.formats, a.prompt, a.tokens, a.ppl_tokens, a.device)
    print(results.real_model_markdown(rows))
    if a.device == "cuda":
        print("\n" + bench_11.step_time_lines(rows))
    base = rows[0]
    for r in rows[1:]:
        i = r["same_tokens"]
        if i < min(len(r["answer_ids"]), len(base["answer_ids"])):
            print(f"{r['format']} leaves {base['format']} at token {i}: "
                  f"{rm.decode_ids(base['answer_ids'][i:i + 6])!r} → {rm.decode_ids(r['answer_ids'][i:i + 6])!r}")


if __name__ == "__main__":
    main()
