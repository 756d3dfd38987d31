"""Generation and training speed of SmolLM2-135M on this CPU (docs/smollm2-pilots.md, "Speed").

    python experiments/smollm2-pilots/speed.py --threads 2 --gen 16x32 32x32 64x32 32x16 32x64 --train 8x72 16x72

Generation: fixed-length sampling (min_new_tokens = max_new_tokens, T=1), new tokens per second, fp32 and bf16
autocast (and bf16 weights). Training: one forward+backward of a micro-batch of length L (fp32 master weights,
fp32 or bf16 autocast), tokens per second. Prints one JSON line per measurement with the 1-minute load average.
"""

from __future__ import annotations

import argparse
import json
import time

import torch
from common import chat_ids, heldout, load, load_avg, sample


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--gen", nargs="*", default=["16x32", "32x32", "64x32", "32x16", "32x64"])
    ap.add_argument("--train", nargs="*", default=["8x72", "16x72"])
    ap.add_argument("--modes", nargs="*", default=["fp32", "bf16-autocast", "bf16-weights"])
    args = ap.parse_args()
    torch.set_num_threads(args.threads)
    model, tok = load()
    items = heldout("add", [1], 64)
    ids = chat_ids(tok, [it.prompt for it in items])
    print(json.dumps({"prompt_tokens": len(ids[0]), "threads": args.threads}), flush=True)
    for mode in args.modes:
        m = model if mode != "bf16-weights" else load(torch.bfloat16)[0]
        for spec in args.gen:
            b, n = (int(x) for x in spec.split("x"))
            sample(m, tok, ids[:4], max_new=4, bf16=mode == "bf16-autocast", batch=4)  # warm-up
            la = load_avg()
            _, _, _, sec = sample(m, tok, ids[:b], max_new=n, min_new=n, bf16=mode == "bf16-autocast", batch=b)
            print(json.dumps({"what": "generate", "mode": mode, "batch": b, "new": n, "s": round(sec, 2),
                              "new_tok_per_s": round(b * n / sec, 1), "load1": round(la, 2)}), flush=True)
    model.train()
    opt_params = [p for p in model.parameters() if p.requires_grad]
    for mode in ("fp32", "bf16-autocast"):
        for spec in args.train:
            b, n = (int(x) for x in spec.split("x"))
            x = torch.randint(100, 40000, (b, n))
            for rep in range(2):  # the first one is a warm-up
                la = load_avg()
                t0 = time.time()
                ctx = torch.autocast("cpu", dtype=torch.bfloat16) if mode == "bf16-autocast" else torch.autocast(
                    "cpu", enabled=False)
                with ctx:
                    logits = model(input_ids=x).logits
                loss = torch.nn.functional.cross_entropy(logits[:, :-1].float().reshape(-1, logits.shape[-1]),
                                                         x[:, 1:].reshape(-1))
                loss.backward()
                sec = time.time() - t0
                for p in opt_params:
                    p.grad = None
            print(json.dumps({"what": "train fwd+bwd", "mode": mode, "batch": b, "len": n, "s": round(sec, 2),
                              "tok_per_s": round(b * n / sec, 1), "load1": round(la, 2)}), flush=True)


if __name__ == "__main__":
    main()
