"""Starting point of SmolLM2-135M-Instruct on a task: answer-format rate and accuracy per level (no training).

    python experiments/smollm2-pilots/baseline.py --task add --levels 1 2 3 --per-level 64 --max-new 48

One sample per held-out prompt (T=1.0, top_k off, top_p 1), chat template with its default system prompt (as gdro
formats a prompt: one user turn). Prints one JSON line per level and an overall line; ``--out`` also writes every
completion (jsonl). Metrics: ``boxed`` a complete \\boxed{} present; ``finished`` the end token (<|im_end|>, id 2)
emitted within the limit; ``acc`` boxed answer right and finished (gdro's reward: answer_mode=boxed,
require_eos); ``acc_noeos`` boxed answer right; ``acc_any`` the last integer of the text right. ``eot`` counts
completions that contain <|endoftext|> (id 0), which does not stop generation.
"""

from __future__ import annotations

import argparse
import json
import time

import numpy as np
import torch
from common import chat_ids, heldout, load, load_avg, sample, score

ENDOFTEXT = 0


def summarize(rows: list[dict]) -> dict:
    keys = ("boxed", "finished", "correct", "correct_noeos", "correct_any")
    out = {"n": len(rows)}
    for k in keys:
        out[{"correct": "acc", "correct_noeos": "acc_noeos", "correct_any": "acc_any"}.get(k, k)] = round(
            100 * float(np.mean([r[k] for r in rows])), 1)
    out["mean_len"] = round(float(np.mean([r["len"] for r in rows])), 1)
    out["eot"] = sum(r["eot"] for r in rows)
    return out


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--task", default="add")
    ap.add_argument("--levels", type=int, nargs="+", default=[1, 2, 3])
    ap.add_argument("--per-level", type=int, default=64)
    ap.add_argument("--max-new", type=int, default=48)
    ap.add_argument("--temperature", type=float, default=1.0)
    ap.add_argument("--top-p", type=float, default=1.0)
    ap.add_argument("--top-k", type=int, default=0)
    ap.add_argument("--system", default=None, help="a system prompt instead of the template's default")
    ap.add_argument("--seed", type=int, default=0, help="sampling seed")
    ap.add_argument("--data-seed", type=int, default=1234)
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--batch", type=int, default=64)
    ap.add_argument("--model-dir", default=None, help="another model dir (e.g. a pilot's checkpoint)")
    ap.add_argument("--out", default=None, help="write every completion here (jsonl)")
    args = ap.parse_args()
    torch.set_num_threads(args.threads)
    if args.model_dir:
        from pathlib import Path

        import common
        common.MODEL_DIR = Path(args.model_dir)
    model, tok = load()
    items = heldout(args.task, args.levels, args.per_level, seed=args.data_seed)
    ids = chat_ids(tok, [it.prompt for it in items], system=args.system)
    la = load_avg()
    t0 = time.time()
    comps, texts, fins, sec = sample(model, tok, ids, max_new=args.max_new, temperature=args.temperature, top_p=args.top_p,
                                     top_k=args.top_k, bf16=True,
                                     batch=args.batch, seed=args.seed)
    rows = []
    for it, c, t, f in zip(items, comps, texts, fins):
        r = score(t, it.gold, f)
        r.update(level=it.level, len=len(c), eot=int(ENDOFTEXT in c), prompt=it.prompt, gold=it.gold, text=t)
        rows.append(r)
    head = {"task": args.task, "max_new": args.max_new, "T": args.temperature, "top_p": args.top_p, "top_k": args.top_k, "system": args.system,
            "prompt_tokens": len(ids[0]), "example_prompt": items[0].prompt}
    print(json.dumps(head), flush=True)
    for lv in args.levels:
        print(json.dumps({"level": lv, **summarize([r for r in rows if r["level"] == lv])}), flush=True)
    print(json.dumps({"level": "all", **summarize(rows), "gen_s": round(sec, 1), "wall_s": round(time.time() - t0, 1),
                      "load1": round(la, 2)}), flush=True)
    if args.out:
        with open(args.out, "w") as fh:
            for r in rows:
                fh.write(json.dumps(r) + "\n")


if __name__ == "__main__":
    main()
