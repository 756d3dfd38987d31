"""Benchmark: the GDRO controllers' own work per training step (no model, no generation).

    python scripts/bench_controllers.py [--prompts 512] [--pool 14100] [--bins 10] [--steps 200]

Per step it times exactly what the trainer calls: ``sampler.sample`` → ``classifier.bins`` →
``sampler.loss_weights`` → ``sampler.update`` → ``classifier.update``, on a synthetic pool whose
prompts have fixed true pass rates (so bins evolve as a real run's would). Prints the median and p90
milliseconds per step for each configuration. Target: ≤ 5 ms per step at 512 prompts and 10 bins
(the paper's code adds ≈ 0.31 s per step for Prompt-GDRO).
"""

from __future__ import annotations

import argparse
import time

import numpy as np

from gdro.difficulty import OnlineDifficultyClassifier
from gdro.samplers import PromptGDRO, UniformSampler


def run(sampler, classifier, *, prompts: int, pool: int, n: int, steps: int, seed: int = 0) -> np.ndarray:
    rng = np.random.default_rng(seed)
    true_p = rng.beta(0.5, 0.5, size=pool)
    sampler.bind(pool)
    classifier.bind([f"uid/{i}" for i in range(pool)])
    times = []
    for _ in range(steps):
        group_index = np.repeat(np.arange(prompts), n)
        t0 = time.perf_counter()
        ids = sampler.sample(prompts, rng, classifier)
        bins = classifier.bins(ids)
        t_a = time.perf_counter() - t0
        correct = rng.random(prompts * n) < true_p[ids][group_index]  # (not timed: the policy's part)
        signals = {"pg_loss": rng.normal(size=prompts * n), "failure_rate": 1.0 - correct}
        t0 = time.perf_counter()
        sampler.loss_weights(bins, group_index)
        sampler.update(bins=bins, group_index=group_index, signals=signals, correct=correct)
        n_correct = np.bincount(group_index, weights=correct.astype(float), minlength=prompts).astype(np.int64)
        classifier.update(ids, n_correct, np.full(prompts, n, dtype=np.int64))
        sampler.metrics()
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
        "uniform (classifier only)": lambda: UniformSampler(),
        "prompt-gdro reweight": lambda: PromptGDRO(mode="reweight"),
        "prompt-gdro resample": lambda: PromptGDRO(mode="resample"),
    }
    print(f"{args.prompts} prompts/step x {args.n} rollouts, pool {args.pool}, 10 bins, {args.steps} steps")
    for name, make in configs.items():
        for est in ("any_correct", "unbiased_passk"):
            clf = OnlineDifficultyClassifier(edges=edges, window=50, estimator=est, hysteresis=0.03)
            ms = run(make(), clf, prompts=args.prompts, pool=args.pool, n=args.n, steps=args.steps)
            print(f"  {name:28s} {est:15s} median {np.median(ms):6.2f} ms   p90 {np.percentile(ms, 90):6.2f} ms")


if __name__ == "__main__":
    main()
