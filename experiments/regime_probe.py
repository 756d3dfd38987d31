"""The paper regime's start: the training pool's pass@8 bins at the warm start (issue #36's preset criterion).

    python experiments/regime_probe.py [--samples 16] [--threads 2] [--seed 0] [data overrides: min_level=7 max_level=12 ...]

Samples ``--samples`` completions of every *training* prompt of ``CopyTask(**overrides)`` at T = 1 (the training
temperature) from the shipped warm start, estimates each prompt's pass@8 without bias from them (as
``classifier.estimator=unbiased_passk k=8`` does from its window), bins it with the paper's edges 0.1 … 0.9 and
prints the pool's share per bin, the share in accbin_0–2 and in accbin_5+, and the same per level. The paper starts
with most prompts in accbin_0 and the high bins, the rarely solved frontier, under 20% of the data.
"""

from __future__ import annotations

import argparse
import json

import numpy as np
import torch

from gdro.common.rollouts import SamplingParams
from gdro.controllers.bins import make_edges, passk_from_window, raw_bins
from gdro.controllers.difficulty import PAPER_EDGES
from gdro.data.synthetic import CopyTask
from gdro.grading.rewards import MathVerifyReward
from gdro.models.loading import ModelSpec, load_model
from gdro.rollout.hf import HFGenerator


def _value(text: str):
    try:
        return json.loads(text)
    except json.JSONDecodeError:
        return text


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--samples", type=int, default=16)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("overrides", nargs="*", help="CopyTask keyword arguments, key=value")
    args = ap.parse_args()
    torch.set_num_threads(args.threads)
    task = CopyTask(**{k: _value(v) for k, v in (o.split("=", 1) for o in args.overrides)})
    probs = task.train()
    model, tok = load_model(ModelSpec("tiny", max_prompt_len=64, max_new_tokens=16))
    engine = HFGenerator(model, tok, use_chat_template=True, max_prompt_len=64, shared_prefix=True, prune_every=4)
    roll = engine.generate([p.prompt for p in probs], [args.samples] * len(probs), seed=args.seed,
                           sampling=SamplingParams(temperature=1.0, max_new_tokens=16))
    scored = MathVerifyReward().score(roll.texts, [probs[g].answer for g in roll.group_index], roll.finished)
    c = scored.correct.reshape(len(probs), args.samples).sum(1)
    p8 = passk_from_window(c, np.full(len(probs), args.samples), 8)
    edges = np.asarray(PAPER_EDGES)
    bins = raw_bins(np.round(p8, 12), make_edges(PAPER_EDGES, None))  # the classifier's own binning
    level = np.array([p.level for p in probs])
    share = np.bincount(bins, minlength=len(edges) + 1) / len(bins)
    print(f"pool {len(probs)} prompts, {args.samples} samples each at T = 1; mean per-rollout accuracy "
          f"{c.sum() / c.size / args.samples:.3f}")
    print("accbin share: " + "  ".join(f"{b}:{100 * s:4.1f}" for b, s in enumerate(share)))
    print(f"accbin_0-2: {100 * share[:3].sum():.1f}%   accbin_5+: {100 * share[5:].sum():.1f}%")
    for lv in np.unique(level):
        at = level == lv
        print(f"  L{lv:<2d} n={int(at.sum()):3d}  mean@{args.samples} {100 * c[at].mean() / args.samples:5.1f}  "
              f"mean pass@8 {100 * p8[at].mean():5.1f}  mean accbin {bins[at].mean():4.1f}")


if __name__ == "__main__":
    main()
