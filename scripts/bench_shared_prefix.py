"""Time the reference forward and the GRPO update with ``optim.shared_prefix`` on vs off (issue #11).

A realistic toy step: 32 prompts x 8 rollouts of the copy task from the real HF engine (the tiny model), β = 0.001
(so the update runs the reference pass too), default micro-batching (128 rows). Prints the median of ``--repeats``
runs of each phase, and the log-prob agreement of the two paths. CPU timings are noisy under load: repeat.

    python scripts/bench_shared_prefix.py --threads 2 --repeats 5
"""

from __future__ import annotations

import argparse
import copy
import statistics
import time

import numpy as np
import torch

from gdro.data.synthetic import CopyTask
from gdro.loss import LossConfig
from gdro.models import ModelSpec, load_model
from gdro.policy import OptimConfig, logprobs_no_grad, ppo_update
from gdro.rollout.base import SamplingParams
from gdro.rollout.hf import HFGenerator


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--prompts", type=int, default=32)
    ap.add_argument("--n", type=int, default=8)
    ap.add_argument("--repeats", type=int, default=5)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--micro-batch-size", type=int, default=128)
    args = ap.parse_args()
    torch.set_num_threads(args.threads)
    model, tok = load_model(ModelSpec("tiny", max_prompt_len=64, max_new_tokens=16), train=True)
    ref = copy.deepcopy(model).eval().requires_grad_(False)
    engine = HFGenerator(model, tok, use_chat_template=True, max_prompt_len=64)
    problems = CopyTask().sample_problems(args.prompts, np.random.default_rng(0))
    roll = engine.generate([p.prompt for p in problems], [args.n] * args.prompts, seed=0,
                           sampling=SamplingParams(temperature=1.0, max_new_tokens=16))
    p_tok = sum(len(roll.prompt_token_ids[g]) for g in roll.group_index)
    print(f"{len(roll)} rows, prompt tokens {p_tok}, completion tokens {int(roll.lengths.sum())}")
    rows = np.arange(len(roll))
    adv = torch.randn(len(roll), generator=torch.Generator().manual_seed(0))
    loss_cfg = LossConfig(beta_kl=0.001)
    times: dict[bool, dict[str, list[float]]] = {True: {"ref": [], "update": []}, False: {"ref": [], "update": []}}
    lps = {}
    for _ in range(args.repeats):
        for shared in (False, True):
            t0 = time.perf_counter()
            lps[shared] = logprobs_no_grad(ref, roll, rows, args.micro_batch_size, engine.pad_id, 1.0,
                                           shared_prefix=shared)
            times[shared]["ref"].append(time.perf_counter() - t0)
            policy = copy.deepcopy(model).train()
            cfg = OptimConfig(lr=1e-4, warmup_steps=0, micro_batch_size=args.micro_batch_size, shared_prefix=shared)
            opt, sched = cfg.make(policy.parameters())
            t0 = time.perf_counter()
            ppo_update(policy, opt, sched, roll, adv, loss_cfg, cfg, temperature=1.0, pad_id=engine.pad_id,
                       rng=np.random.default_rng(0), ref_model=ref)
            times[shared]["update"].append(time.perf_counter() - t0)
    diff = max(float((a - b).abs().max()) for a, b in zip(lps[False], lps[True]) if len(a))
    print(f"max |log-prob diff| shared vs unshared: {diff:.2e}")
    for phase in ("ref", "update"):
        off, on = statistics.median(times[False][phase]), statistics.median(times[True][phase])
        print(f"{phase:>6}: off {off:.3f}s  on {on:.3f}s  speed-up x{off / on:.2f}   "
              f"(off {[round(t, 3) for t in times[False][phase]]}, on {[round(t, 3) for t in times[True][phase]]})")


if __name__ == "__main__":
    main()
