"""The GRPO loop: plain Python components in, metrics out. No Hydra here.

One step reads like the algorithm (architecture.md):
sample prompts → allocate rollouts → generate (ragged) → reward → group advantages →
loss weights → clipped-surrogate update → controller updates → log.
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import torch
from tqdm.auto import tqdm

from gdro.advantages import group_advantages
from gdro.evaluation import EvalConfig, evaluate
from gdro.loss import LossConfig
from gdro.policy import OptimConfig, ppo_update
from gdro.rollout.base import Generator, SamplingParams


@dataclass(frozen=True)
class RunConfig:
    """Top-level run settings (conf/train.yaml)."""

    seed: int = 0
    steps: int = 100
    prompts_per_step: int = 32
    rollouts_per_prompt: int = 8  # n̄: the mean rollout budget per prompt
    threads: int | None = None  # torch intra-op threads (None = torch's default)
    save_final: bool = True  # save the final policy to <run_dir>/checkpoint
    progress: bool = True

    def __post_init__(self) -> None:
        if self.steps < 0:
            raise ValueError(f"steps must be >= 0, got {self.steps}")
        if self.prompts_per_step < 1:
            raise ValueError(f"prompts_per_step must be >= 1, got {self.prompts_per_step}")
        if self.rollouts_per_prompt < 1:
            raise ValueError(f"rollouts_per_prompt must be >= 1, got {self.rollouts_per_prompt}")
        if self.threads is not None and self.threads < 1:
            raise ValueError(f"threads must be >= 1 or null, got {self.threads}")


def derive_seed(seed: int, *keys: int) -> int:
    """A 63-bit seed for (run seed, purpose, step...) — independent streams, no Python hash()."""
    return int(np.random.SeedSequence([seed, *keys]).generate_state(2, dtype=np.uint64)[0] >> np.uint64(1))


STREAM_SAMPLER, STREAM_ROLLOUT, STREAM_UPDATE = 1, 2, 3


@dataclass
class Trainer:
    run: RunConfig
    policy: torch.nn.Module
    tokenizer: Any
    engine: Generator
    reward: Any
    sampler: Any
    allocator: Any
    classifier: Any
    train_problems: Sequence
    test_problems: Sequence
    loss_cfg: LossConfig
    optim_cfg: OptimConfig
    eval_cfg: EvalConfig
    train_sampling: SamplingParams
    logger: Any
    run_dir: Path
    ref_model: torch.nn.Module | None = None

    def fit(self) -> list[dict[str, Any]]:
        """Train for ``run.steps`` steps; returns the logged rows."""
        run, rows = self.run, []
        rng_sampler = np.random.default_rng(derive_seed(run.seed, STREAM_SAMPLER))
        rng_update = np.random.default_rng(derive_seed(run.seed, STREAM_UPDATE))
        optimizer, scheduler = self.optim_cfg.make(self.policy.parameters())
        pad_id = self.engine.pad_id
        self.sampler.bind(len(self.train_problems))
        if hasattr(self.sampler, "bind_levels"):  # the oracle control only: it reads the generator's labels
            self.sampler.bind_levels([p.level for p in self.train_problems])
        self.classifier.bind([p.uid for p in self.train_problems])
        self.allocator.bind_labels(self.classifier.bin_labels())
        max_new = self.train_sampling.max_new_tokens
        if self.eval_cfg.at_start:
            rows.append(self._log({"step": 0, **self._evaluate()}))
        bar = tqdm(range(1, run.steps + 1), desc="gdro-train", disable=not run.progress, dynamic_ncols=True)
        for step in bar:
            t0 = time.perf_counter()
            # 1. which prompts; their difficulty bins from history up to step-1; rollouts per prompt (ragged)
            ids = self.sampler.sample(run.prompts_per_step, rng_sampler, self.classifier)
            bins = self.classifier.bins(ids)
            n = self.allocator.allocate(len(ids), bins)
            probs = [self.train_problems[i] for i in ids]
            # 2. sample from the current policy
            roll = self.engine.generate(
                [p.prompt for p in probs], n, seed=derive_seed(run.seed, STREAM_ROLLOUT, step), sampling=self.train_sampling
            )
            t_gen = time.perf_counter() - t0
            # 3. verifiable reward and GRPO advantages over each prompt's own group (Eq. 3)
            scored = self.reward.score(roll.texts, [probs[g].answer for g in roll.group_index], roll.finished)
            n_correct = np.bincount(roll.group_index, weights=scored.correct.astype(np.float64), minlength=len(ids))
            rewards = torch.as_tensor(scored.rewards, dtype=torch.float32)
            gidx = torch.as_tensor(roll.group_index)
            adv = group_advantages(
                rewards, gidx, len(probs),
                norm_by_std=self.loss_cfg.norm_adv_by_std, eps=self.loss_cfg.adv_eps, unbiased_std=self.loss_cfg.unbiased_std,
            )
            # 4. the data adversary's multipliers on the advantages (ones for uniform GRPO; Eq. 16), then the update
            tc = time.perf_counter()
            mult = self.sampler.loss_weights(bins, roll.group_index)
            t_ctrl = time.perf_counter() - tc
            t1 = time.perf_counter()
            stats, signals = ppo_update(
                self.policy, optimizer, scheduler, roll, adv * torch.as_tensor(mult, dtype=adv.dtype),
                self.loss_cfg, self.optim_cfg, temperature=self.train_sampling.temperature, pad_id=pad_id,
                rng=rng_update, ref_model=self.ref_model, adv_signal=adv,
            )
            t_upd = time.perf_counter() - t1
            # 5. controllers observe the step (signals: Eq. 6 with and without KL, and the failure rate)
            tc = time.perf_counter()
            signals["pg_kl"] = signals["pg_loss"] + self.loss_cfg.beta_kl * signals["kl"]
            signals["failure_rate"] = 1.0 - scored.correct.astype(np.float64)
            self.sampler.update(bins=bins, group_index=roll.group_index, signals=signals, correct=scored.correct)
            self.allocator.update(bins=bins, group_index=roll.group_index, signals=signals, correct=scored.correct, n=n)
            self.classifier.update(ids, n_correct.astype(np.int64), np.asarray(n, dtype=np.int64))
            t_ctrl += time.perf_counter() - tc
            self.engine.sync_weights(self.policy)
            row = {"step": step, **stats, **self._rollout_metrics(roll, scored, n_correct, adv, max_new)}
            row.update(self.reward.metrics(scored))
            row.update(self.sampler.metrics())
            row.update(self.allocator.metrics())
            row.update(self.classifier.metrics())
            row.update({"time/gen_s": t_gen, "time/update_s": t_upd, "time/controller_s": t_ctrl,
                        "time/step_s": time.perf_counter() - t0})
            if step == run.steps or (self.eval_cfg.every and step % self.eval_cfg.every == 0):
                row.update(self._evaluate())
            rows.append(self._log(row))
            bar.set_postfix({"reward": f"{row['reward/mean']:.3f}", **self._eval_postfix(rows)})
        if run.save_final:
            self.save(self.run_dir / "checkpoint")
        return rows

    def _evaluate(self) -> dict[str, float]:
        t0 = time.perf_counter()
        out = evaluate(self.engine, self.test_problems, self.reward, self.eval_cfg, self.train_sampling.max_new_tokens)
        out["time/eval_s"] = time.perf_counter() - t0
        return out

    @staticmethod
    def _rollout_metrics(roll, scored, n_correct: np.ndarray, adv: torch.Tensor, max_new: int) -> dict[str, float]:
        sizes = roll.group_sizes
        g_mean = n_correct / np.maximum(sizes, 1)
        return {
            "reward/mean": float(scored.rewards.mean()),
            "reward/std": float(scored.rewards.std()),
            "rollout/len_mean": float(roll.lengths.mean()),
            "rollout/len_max": float(roll.lengths.max()),
            "rollout/n_total": float(len(roll)),
            "rollout/n_prompts": float(len(sizes)),
            "rollout/n_per_prompt_mean": float(sizes.mean()),
            "rollout/clip_len_frac": float((roll.lengths >= max_new).mean()),
            "rollout/solved_frac": float((g_mean == 1).mean()),
            "rollout/unsolved_frac": float((g_mean == 0).mean()),
            "train/adv_abs_mean": float(adv.abs().mean()),
        }

    @staticmethod
    def _eval_postfix(rows: list[dict[str, Any]]) -> dict[str, str]:
        for r in reversed(rows):
            for k, v in r.items():
                if k.startswith("eval/mean@") and "/level_" not in k:
                    return {k.removeprefix("eval/"): f"{v:.1f}"}
        return {}

    def _log(self, row: dict[str, Any]) -> dict[str, Any]:
        return self.logger.log(row)

    def save(self, path: Path) -> None:
        """The final policy as a HF checkpoint (loadable by ``model.name_or_path=<path>``)."""
        self.policy.save_pretrained(path, safe_serialization=True)
        self.tokenizer.save_pretrained(path)
