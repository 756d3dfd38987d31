"""Per-level solve rates of a checkpoint on plain vs sticky copy strings (issue #12's frontier toy).

    python experiments/frontier_warmstart.py [--model tiny] [--max-level 13] [--per-level 64] [--threads 2]

Samples 8 completions per held-out problem of ``CopyTask(max_level, test_per_level, sticky_frac=0.5)`` at T = 1
(the training temperature) and prints, per level, mean@8 / pass@8 of the plain strings (no repeated adjacent digit)
and of the sticky ones (two or more), and the share of problems on the frontier (0 < solve rate < 1).
"""

from __future__ import annotations

import argparse

import numpy as np
import torch

from gdro.common.rollouts import SamplingParams
from gdro.data.synthetic import CopyTask, adjacent_repeats
from gdro.grading.rewards import MathVerifyReward
from gdro.models.loading import ModelSpec, load_model
from gdro.rollout.hf import HFGenerator


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--model", default="tiny")
    ap.add_argument("--max-level", type=int, default=13)
    ap.add_argument("--per-level", type=int, default=64)
    ap.add_argument("--threads", type=int, default=2)
    args = ap.parse_args()
    torch.set_num_threads(args.threads)
    model, tok = load_model(ModelSpec(args.model, max_prompt_len=64, max_new_tokens=16))
    engine = HFGenerator(model, tok, use_chat_template=True, max_prompt_len=64, shared_prefix=True, prune_every=4)
    task = CopyTask(max_level=args.max_level, test_per_level=args.per_level, sticky_frac=0.5)
    probs = task.test()
    roll = engine.generate([p.prompt for p in probs], [8] * len(probs), seed=0,
                           sampling=SamplingParams(temperature=1.0, max_new_tokens=16))
    scored = MathVerifyReward().score(roll.texts, [probs[g].answer for g in roll.group_index], roll.finished)
    rate = scored.correct.reshape(len(probs), 8).mean(1)
    level = np.array([p.level for p in probs])
    rep = np.array([adjacent_repeats(p.answer) for p in probs])

    def cell(sel: np.ndarray) -> str:
        if not sel.any():
            return "      -       "
        return f"{100 * rate[sel].mean():5.1f} / {100 * (rate[sel] > 0).mean():5.1f} (n={int(sel.sum()):2d})"

    print("level | plain mean@8 / pass@8 | sticky mean@8 / pass@8 | on the frontier")
    for lv in range(1, args.max_level + 1):
        at = level == lv
        frontier = 100 * ((rate[at] > 0) & (rate[at] < 1)).mean()
        print(f"{lv:5d} | {cell(at & (rep == 0))} | {cell(at & (rep >= 2))} | {frontier:4.0f}%")


if __name__ == "__main__":
    main()
