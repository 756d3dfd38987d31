"""Time the toy step's passes under each layout of issue #11's speed work, on the same rollouts.

A realistic toy step: 32 prompts x 8 rollouts of the copy task from the real HF engine (the tiny model), β = 0.001
(so the update runs the reference pass too), default micro-batching (128 rows). Three layouts of the reference
forward and the GRPO update (``ppo_update``, which includes the reference forward):

* ``rows``   — one prompt+completion sequence per row (``optim.shared_prefix=false``);
* ``kv``     — each prompt once per micro-batch, its KV cache expanded to its rows (``optim.pack=false``);
* ``packed`` — each group one span (prompt, then every completion) under a block mask (the default).

And generation of the same request with ``rollout.prune_every`` 0 (one ``generate`` call) and 4 (the default).
Prints the median of ``--repeats`` runs of each, the tokens fed per layout, and the log-prob agreement with
``rows``. CPU timings are noisy under load: run on a quiet machine, repeat.

    python scripts/bench_shared_prefix.py --threads 1 --repeats 5
"""

from __future__ import annotations

import argparse
import copy
import statistics
import time

import numpy as np
import torch

from gdro.common.rollouts import SamplingParams
from gdro.data.synthetic import CopyTask
from gdro.loss import GRPOLoss
from gdro.models.loading import ModelSpec, load_model
from gdro.policy import (
    Forward,
    OptimConfig,
    ppo_update,
)
from gdro.policy.layouts import make_shared_batch, make_token_batch
from gdro.policy.microbatch import group_micro_batches, micro_batches
from gdro.policy.packing import make_packed_batch
from gdro.rollout.hf import HFGenerator

LAYOUTS = {"rows": {"shared_prefix": False}, "kv": {"shared_prefix": True, "pack": False},
           "packed": {"shared_prefix": True, "pack": True}}


def fed_tokens(roll, rows: np.ndarray, micro: int) -> dict[str, int]:
    """Tokens each layout feeds the model (padding included) for ``rows``."""
    return {
        "rows": sum(make_token_batch(roll, p, 0).input_ids.numel() for p in micro_batches(roll, rows, micro)),
        "kv": sum(b.prompt_ids.numel() + b.completion.numel()
                  for b in (make_shared_batch(roll, p, 0) for p in group_micro_batches(roll, rows, micro))),
        "packed": sum(make_packed_batch(roll, p, 0).input_ids.numel() for p in group_micro_batches(roll, rows, micro)),
    }


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--prompts", type=int, default=32)
    ap.add_argument("--n", type=int, default=8)
    ap.add_argument("--repeats", type=int, default=5)
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--micro-batch-size", type=int, default=128)
    args = ap.parse_args()
    torch.set_num_threads(args.threads)
    model, tok = load_model(ModelSpec("tiny", max_prompt_len=64, max_new_tokens=16), train=True)
    ref = copy.deepcopy(model).eval().requires_grad_(False)
    problems = CopyTask().sample_problems(args.prompts, np.random.default_rng(0))
    prompts, n = [p.prompt for p in problems], [args.n] * args.prompts
    sp = SamplingParams(temperature=1.0, max_new_tokens=16)
    engines = {k: HFGenerator(model, tok, use_chat_template=True, max_prompt_len=64, shared_prefix=True,
                              prune_every=k) for k in (0, 4)}
    roll = engines[0].generate(prompts, n, seed=0, sampling=sp)
    pad = engines[0].pad_id
    real = sum(len(roll.prompt_token_ids[g]) for g in range(roll.num_groups)) + int(roll.lengths.sum())
    print(f"{len(roll)} rows; real tokens (each prompt once + completions) {real}")
    rows = np.arange(len(roll))
    fed = fed_tokens(roll, rows, args.micro_batch_size)
    print("tokens fed per pass: " + ", ".join(f"{k} {v} ({real / v:.0%} real)" for k, v in fed.items()))
    adv = torch.randn(len(roll), generator=torch.Generator().manual_seed(0))
    loss_cfg = GRPOLoss(beta_kl=0.001)
    times: dict[str, list[float]] = {f"{p} {k}": [] for p in ("ref", "update") for k in LAYOUTS}
    times |= {f"generate prune_every={k}": [] for k in engines}
    lps = {}
    for rep in range(args.repeats):
        for k, eng in engines.items():
            t0 = time.perf_counter()
            eng.generate(prompts, n, seed=rep, sampling=sp)
            times[f"generate prune_every={k}"].append(time.perf_counter() - t0)
        for name, how in LAYOUTS.items():
            t0 = time.perf_counter()
            fwd = Forward(pad, 1.0, args.micro_batch_size, shared_prefix=how["shared_prefix"],
                          pack=how.get("pack", False))
            lps[name] = fwd.logprobs_no_grad(ref, roll, rows)
            times[f"ref {name}"].append(time.perf_counter() - t0)
            policy = copy.deepcopy(model).train()
            cfg = OptimConfig(lr=1e-4, warmup_steps=0, micro_batch_size=args.micro_batch_size, **how)
            opt, sched = cfg.make(policy.parameters())
            t0 = time.perf_counter()
            ppo_update(policy, opt, sched, roll, adv, loss_cfg, cfg, Forward.bind(cfg, pad_id=pad, temperature=1.0),
                       rng=np.random.default_rng(0), ref_model=ref)
            times[f"update {name}"].append(time.perf_counter() - t0)
    for name in ("kv", "packed"):
        diff = max(float((a - b).abs().max()) for a, b in zip(lps["rows"], lps[name]) if len(a))
        print(f"max |log-prob diff| {name} vs rows: {diff:.2e}")
    print(f"median of {args.repeats} at {args.threads} thread(s), seconds:")
    for key, ts in times.items():
        print(f"  {key:>24}: {statistics.median(ts):.3f}   {[round(t, 3) for t in ts]}")


if __name__ == "__main__":
    main()
