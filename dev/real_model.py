"""SmolLM2-135M-Instruct (harness/real_model.py) in every format: each format's greedy answer to a chat prompt, the
token where it leaves FP16's answer, and each format's perplexity on the real text (pydoc_data.topics).

    .venv/bin/python dev/real_model.py                     # on the GPU: the course's kernels; else the CPU references
    .venv/bin/python dev/real_model.py --device cpu        # each format's CPU reference (dequantized weights, PyTorch)
    .venv/bin/python dev/real_model.py --prompt "..." --tokens 48 --ppl-tokens 256 --formats fp16 w4a16

On the CPU a few minutes (most of it quantizing the model five times); on a GPU, seconds once the kernels are built.
"""
from __future__ import annotations

import argparse
import math
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import torch  # noqa: E402

from harness import decode, real_model as rm  # noqa: E402


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--prompt", default="What is the capital of France? Answer in one sentence.")
    ap.add_argument("--tokens", type=int, default=40, help="new tokens per answer (greedy; stops at <|im_end|>)")
    ap.add_argument("--ppl-tokens", type=int, default=256, help="tokens of the text the perplexity is measured on")
    ap.add_argument("--formats", nargs="+", default=list(rm.FORMAT_NAMES), choices=rm.FORMAT_NAMES)
    ap.add_argument("--device", choices=("cpu", "cuda"), default="cuda" if torch.cuda.is_available() else "cpu")
    a = ap.parse_args()

    t0 = time.time()
    m = rm.read()
    cfg, w = m.config, rm.fp16_weights(device=a.device)
    prompt = rm.encode(rm.chat_prompt(a.prompt))
    text = rm.text_tokens(a.ppl_tokens).to(a.device)
    where = "the course's kernels (GPU layout)" if a.device == "cuda" else "CPU references (PyTorch's ops)"
    print(f"{m.path.name}: {cfg.n_layers} layers, hidden {cfg.hidden}, {cfg.n_heads}/{cfg.n_kv_heads} heads of "
          f"{cfg.head_dim}; read in {time.time() - t0:.1f} s. Formats on {where}.")
    print(f"prompt ({len(prompt)} tokens): {a.prompt!r}; perplexity on the first {a.ppl_tokens} tokens of "
          f"pydoc_data.topics[{rm.TEXT_TOPIC!r}]\n")

    rows = []
    for fmt in a.formats:
        t = time.time()
        if a.device == "cuda":
            model = rm.gpu_model(fmt, cfg, w, max_seq=max(len(prompt) + a.tokens, a.ppl_tokens) + 2)
            out = rm.generate(cfg, w, prompt, a.tokens, eos=m.eos_id, model=model)
            logits = decode.teacher_forced_logits(model, text[None], graph=True)[:, 0].float()
            del model
        else:
            ref = rm.reference_weights(fmt, cfg, w)
            out = rm.generate(cfg, ref, prompt, a.tokens, fmt, eos=m.eos_id)
            logits = rm.forward(cfg, ref, text[None], fmt)[0].float()
        ppl = math.exp(torch.nn.functional.cross_entropy(logits[:-1], text[1:]).item())
        rows.append((fmt, out, ppl, time.time() - t))
        print(f"  {fmt}: done in {rows[-1][3]:.1f} s", file=sys.stderr)

    base_out, base_ppl = rows[0][1], rows[0][2]
    print(f"{'format':<8} {'perplexity':>10} {'vs ' + rows[0][0]:>9}  same tokens  answer")
    for fmt, out, ppl, _ in rows:
        same = next((i for i, (x, y) in enumerate(zip(out, base_out)) if x != y), min(len(out), len(base_out)))
        ans = rm.decode_ids(out, skip_special=True).replace("\n", " ⏎ ")
        print(f"{fmt:<8} {ppl:>10.3f} {100 * (ppl / base_ppl - 1):>+8.1f}%  {same:>4} / {len(out):<4}  {ans}")
    print()
    for fmt, out, _, _ in rows[1:]:
        same = next((i for i, (x, y) in enumerate(zip(out, base_out)) if x != y), None)
        if same is not None:
            print(f"{fmt} leaves {rows[0][0]} at token {same}: {rm.decode_ids(base_out[same:same + 6])!r} → "
                  f"{rm.decode_ids(out[same:same + 6])!r}")


if __name__ == "__main__":
    main()
