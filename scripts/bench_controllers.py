"""Benchmark: the GDRO controllers' own work per training step (no model, no generation).

    python scripts/bench_controllers.py [--prompts 512] [--pool 14100] [--bins 10] [--steps 200]

Per step it times exactly what the trainer calls: ``sampler.sample`` → ``classifier.bins`` →
``allocator.allocate`` → ``sampler.loss_weights`` → ``sampler.update`` → ``allocator.update`` →
``classifier.update`` (and both ``metrics()``), on a synthetic pool whose
prompts have fixed true pass rates (so bins evolve as a real run's would). Prints the median and p90
milliseconds per step for each configuration. Target: ≤ 5 ms per step at 512 prompts and 10 bins (11 arms
for Rollout-GDRO); the paper's code adds ≈ 0.31 s (Prompt-GDRO) and ≈ 0.40 s (Rollout-GDRO) per step.
"""

from __future__ import annotations

import argparse
import time

import numpy as np

from gdro.allocators import FixedAllocator, RolloutGDRO, SqrtAllocator
from gdro.difficulty import OnlineDifficultyClassifier
from gdro.samplers import PromptGDRO, UniformSampler


def run(sampler, classifier, *, prompts: int, pool: int, n: int, steps: int, seed: int = 0,
        allocator=None) -> np.ndarray:
    rng = np.random.default_rng(seed)
    true_p = rng.beta(0.5, 0.5, size=pool)
    allocator = allocator or FixedAllocator(n)
    sampler.bind(pool)
    classifier.bind([f"uid/{i}" for i in range(pool)])
    allocator.bind_labels(classifier.bin_labels())
    times = []
    for _ in range(steps):
        t0 = time.perf_counter()
        ids = sampler.sample(prompts, rng, classifier)
        bins = classifier.bins(ids)
        counts = allocator.allocate(prompts, bins)
        group_index = np.repeat(np.arange(prompts), counts)
        t_a = time.perf_counter() - t0
        correct = rng.random(len(group_index)) < true_p[ids][group_index]  # (not timed: the policy's part)
        signals = {"pg_loss": rng.normal(size=len(group_index)), "failure_rate": 1.0 - correct}
        t0 = time.perf_counter()
        sampler.loss_weights(bins, group_index)
        sampler.update(bins=bins, group_index=group_index, signals=signals, correct=correct)
        allocator.update(bins=bins, group_index=group_index, signals=signals, correct=correct, n=counts)
        n_correct = np.bincount(group_index, weights=correct.astype(float), minlength=prompts).astype(np.int64)
        classifier.update(ids, n_correct, counts)
        sampler.metrics()
        allocator.metrics()
        times.append(t_a + time.perf_counter() - t0)
    return np.asarray(times[5:]) * 1e3


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--prompts", type=int, default=512)
    ap.add_argument("--pool", type=int, default=14100)
    ap.add_argument("--n", type=int, default=4, help="rollouts per prompt")
    ap.add_argument("--steps", type=int, default=200)
    args = ap.parse_args()
    edges = [0.1, 0.2, 0.3, 0.4, 0.5, 0.6, 0.7, 0.8, 0.9]
    configs = {
        "uniform (classifier only)": (UniformSampler, lambda: None),
        "prompt-gdro reweight": (lambda: PromptGDRO(mode="reweight"), lambda: None),
        "prompt-gdro resample": (lambda: PromptGDRO(mode="resample"), lambda: None),
        "rollout-gdro (11 arms)": (UniformSampler, lambda: RolloutGDRO(n_bar=args.n, n_min=2, n_max=3 * args.n)),
        "sqrt allocator": (UniformSampler, lambda: SqrtAllocator(n_bar=args.n, n_min=2, n_max=3 * args.n)),
        "joint: prompt- + rollout-gdro": (lambda: PromptGDRO(mode="reweight"),
                                          lambda: RolloutGDRO(n_bar=args.n, n_min=2, n_max=3 * args.n)),
    }
    print(f"{args.prompts} prompts/step, n̄ = {args.n}, pool {args.pool}, 10 bins (+unseen), {args.steps} steps")
    for name, (make_sampler, make_alloc) in configs.items():
        for est in ("any_correct", "unbiased_passk"):
            clf = OnlineDifficultyClassifier(edges=edges, window=50, estimator=est, hysteresis=0.03, unseen="separate")
            ms = run(make_sampler(), clf, prompts=args.prompts, pool=args.pool, n=args.n, steps=args.steps,
                     allocator=make_alloc())
            print(f"  {name:30s} {est:15s} median {np.median(ms):6.2f} ms   p90 {np.percentile(ms, 90):6.2f} ms")


if __name__ == "__main__":
    main()
