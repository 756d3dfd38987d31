"""Benchmark: the GDRO controllers' own work per training step (no model, no generation).

    python scripts/bench_controllers.py [--prompts 512] [--pool 14100] [--n 4] [--steps 200]

Per step it times exactly what the trainer calls: ``sampler.sample`` → ``classifier.bins`` →
``allocator.allocate`` → ``sampler.loss_weights`` → ``sampler.update`` → ``allocator.update`` →
``classifier.update`` (one ``StepFeedback``; and both ``metrics()``), on a synthetic pool whose
prompts have fixed true pass rates (so bins evolve as a real run's would). Prints the median and p90
milliseconds per step for each configuration. Target: ≤ 5 ms per step at 512 prompts and 10 bins (11 arms
for Rollout-GDRO); the paper's code adds ≈ 0.31 s (Prompt-GDRO) and ≈ 0.40 s (Rollout-GDRO) per step.

The controllers are built as ``gdro-train`` builds them, from the option files (conf/classifier/passk.yaml,
conf/sampler/*.yaml, conf/allocator/*.yaml: the settings a run uses), with the workload's n̄, the arms' upper
bound at 3 × n̄ and the classifier's estimator (each of the two is timed) as the only overrides.
"""

from __future__ import annotations

import argparse
import time
from pathlib import Path

import numpy as np
from hydra import compose, initialize_config_dir

from gdro.common.interfaces import PromptPool, StepFeedback
from gdro.compose.build import build_components
from gdro.controllers.allocators import FixedAllocator

CONF = Path(__file__).resolve().parent.parent / "conf"


def run(sampler, classifier, *, prompts: int, pool: int, n: int, steps: int, seed: int = 0,
        allocator=None) -> np.ndarray:
    rng = np.random.default_rng(seed)
    true_p = rng.beta(0.5, 0.5, size=pool)
    allocator = allocator or FixedAllocator()
    prompt_pool = PromptPool(tuple(f"uid/{i}" for i in range(pool)))
    classifier.bind(prompt_pool)
    sampler.bind(prompt_pool, classifier.bin_spec())
    allocator.bind(classifier.bin_spec())
    times = []
    for _ in range(steps):
        t0 = time.perf_counter()
        ids = sampler.sample(prompts, rng, classifier)
        bins = classifier.bins(ids)
        counts = allocator.allocate(ids, bins, n, classifier)
        group_index = np.repeat(np.arange(prompts), counts)
        t_a = time.perf_counter() - t0
        correct = rng.random(len(group_index)) < true_p[ids][group_index]  # (not timed: the policy's part)
        pg_loss = rng.normal(size=len(group_index))
        t0 = time.perf_counter()
        sampler.loss_weights(bins, group_index)
        feedback = StepFeedback(ids=ids, bins=bins, n=counts, group_index=group_index, correct=correct,
                                pg_loss=pg_loss, kl=np.zeros(len(group_index)), beta_kl=0.0)
        sampler.update(feedback)
        allocator.update(feedback)
        classifier.update(feedback)
        sampler.metrics()
        allocator.metrics()
        times.append(t_a + time.perf_counter() - t0)
    return np.asarray(times[5:]) * 1e3


def components(overrides: list[str]):
    """Classifier, sampler and allocator as ``gdro-train`` builds them: the YAML option files plus ``overrides``."""
    with initialize_config_dir(config_dir=str(CONF), version_base="1.3", job_name="bench_controllers"):
        cfg = compose(config_name="train", overrides=overrides)
    return build_components(cfg)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--prompts", type=int, default=512)
    ap.add_argument("--pool", type=int, default=14100)
    ap.add_argument("--n", type=int, default=4, help="rollouts per prompt")
    ap.add_argument("--steps", type=int, default=200)
    args = ap.parse_args()
    arms = f"allocator.n_max={3 * args.n}"  # 3 × n̄, as the option files set it for n̄ = 8 (11 arms at n̄ = 4)
    configs = {
        "uniform (classifier only)": ["sampler=uniform", "allocator=fixed"],
        "prompt-gdro reweight": ["sampler=prompt-gdro", "sampler.mode=reweight", "allocator=fixed"],
        "prompt-gdro resample": ["sampler=prompt-gdro", "sampler.mode=resample", "allocator=fixed"],
        f"rollout-gdro (n_max {3 * args.n})": ["sampler=uniform", "allocator=rollout-gdro", arms],
        "sqrt allocator": ["sampler=uniform", "allocator=sqrt", arms],
        "joint: prompt- + rollout-gdro": ["sampler=prompt-gdro", "allocator=rollout-gdro", arms],
    }
    print(f"{args.prompts} prompts/step, n̄ = {args.n}, pool {args.pool}, 10 bins (+unseen), {args.steps} steps")
    for name, overrides in configs.items():
        for est in ("any_correct", "unbiased_passk"):
            parts = components([f"prompts_per_step={args.prompts}", f"rollouts_per_prompt={args.n}",
                                f"classifier.estimator={est}", *overrides])
            ms = run(parts.sampler, parts.classifier, prompts=args.prompts, pool=args.pool, n=args.n,
                     steps=args.steps, allocator=parts.allocator)
            print(f"  {name:30s} {est:15s} median {np.median(ms):6.2f} ms   p90 {np.percentile(ms, 90):6.2f} ms")


if __name__ == "__main__":
    main()
