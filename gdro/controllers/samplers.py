"""Prompt samplers: which prompts a training step uses, and how strongly each prompt's rollouts count.

``UniformSampler`` is GRPO's data loader: shuffled epochs without replacement. ``PromptGDRO`` is the
paper's data adversary (§3.2, Eq. 12–16): an exponential-weights distribution over difficulty bins,
applied either as per-rollout advantage multipliers (``reweight``, the paper's mode) or by drawing
prompts from the bins (``resample``). The contract is ``gdro.common.interfaces.PromptSampler``; the trainer calls::

    sampler.bind(pool, classifier.bin_spec())                            # once: the pool's uids, the bins
    ids = sampler.sample(count, rng, classifier)
    w   = sampler.loss_weights(bins, group_index)                         # (N,) advantage multipliers
    sampler.update(feedback)                                              # gdro.common.interfaces.StepFeedback
    sampler.metrics(); sampler.state_dict(); sampler.load_state_dict(state)
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

from gdro.common.interfaces import SIGNALS, BinSpec, DifficultyClassifier, PromptPool, StepFeedback
from gdro.controllers.bandit import bin_means, ema, exp_weights, mixed_distribution

MODES = ("reweight", "resample")
WEIGHT_NORMS = ("batch_mean", "raw")
ACTIVE_SETS = ("present", "all")


class UniformSampler:
    """Uniform over prompts: a fresh permutation each epoch, consumed in order (a shuffled loader)."""

    def __init__(self, shuffle: bool = True):
        self.shuffle = shuffle
        self.num_prompts = 0
        self._order = np.zeros(0, dtype=np.int64)
        self._pos = 0
        self.epoch = 0

    reads_labels = False

    def bind(self, pool: PromptPool, bins: BinSpec | None = None) -> None:
        """Attach to a prompt pool (before the first ``sample``); bins are unused."""
        self._attach(len(pool))

    def _attach(self, num_prompts: int) -> None:
        if num_prompts < 1:
            raise ValueError(f"num_prompts must be >= 1 (the training split is empty), got {num_prompts}")
        self.num_prompts = num_prompts
        self._order = np.zeros(0, dtype=np.int64)
        self._pos = 0
        self.epoch = 0

    def sample(self, count: int, rng: np.random.Generator, classifier: DifficultyClassifier | None = None
               ) -> np.ndarray:
        """``count`` prompt indices; an epoch boundary inside a step starts the next permutation."""
        if self.num_prompts == 0:
            raise RuntimeError("bind(num_prompts) must be called before sample()")
        out = []
        while len(out) < count:
            if self._pos >= len(self._order):
                self._order = rng.permutation(self.num_prompts) if self.shuffle else np.arange(self.num_prompts)
                self._pos = 0
                self.epoch += 1
            take = min(count - len(out), len(self._order) - self._pos)
            out.extend(self._order[self._pos : self._pos + take].tolist())
            self._pos += take
        return np.asarray(out, dtype=np.int64)

    def loss_weights(self, bins: np.ndarray | None, group_index: np.ndarray) -> np.ndarray:
        """Per-rollout multipliers on the advantages: all ones for plain GRPO."""
        return np.ones(len(group_index), dtype=np.float64)

    def update(self, feedback: StepFeedback) -> None:
        """Uniform sampling does not adapt."""

    def metrics(self) -> dict[str, float]:
        return {"data/epoch": float(self.epoch)}

    def state_dict(self) -> dict[str, Any]:
        return {"order": self._order.copy(), "pos": self._pos, "epoch": self.epoch, "num_prompts": self.num_prompts}

    def load_state_dict(self, state: Mapping[str, Any]) -> None:
        self._order = np.asarray(state["order"], dtype=np.int64).copy()
        self._pos = int(state["pos"])
        self.epoch = int(state["epoch"])
        self.num_prompts = int(state["num_prompts"])


def _one_of(key: str, value: str, choices: tuple[str, ...]) -> None:
    if value not in choices:
        raise ValueError(f"{key} must be one of {choices}, got {value!r}")


class PromptGDRO:
    """Prompt-GDRO: EMA-debiased exponential weights over difficulty bins (paper Eq. 12–16).

    Defaults are paper Appendix A (η=0.65, γ=0.01, β=0.12, ω_max=15). Where the paper and the official
    code differ, the default follows the code and the paper's variant is one keyword away:

    - ``weight_norm="batch_mean"`` (code): rollout i gets ``q(g_i)`` of Eq. 15, renormalised to mean 1 over
      the batch's rollouts, then capped at ``weight_cap``. ``"raw"`` (Eq. 16): ``min(ω(g_i), ω_max)``.
    - ``active="present"`` (code): the softmax and the γ-mixing run over the K bins present in the batch.
      ``"all"``: over all B bins.
    - ``clip=None``: the paper's C in Eq. 14 is never given; the code does not clip.
    - ``share_norm=False``: the paper's Appendix A and the code divide the bin-mean loss by the realised
      share q̂(b) (floored at ``share_floor`` here). The bin mean of Eq. 13 is already intensive, so this
      *re-introduces* an inverse-frequency bias (a rare bin's score is inflated by 1/q̂, and for signed,
      near-zero signals its noise is amplified). Off by default; on to reproduce the code.

    ``signal`` names the per-rollout ``StepFeedback.signal`` that feeds Eq. 13 (``pg_loss``: the code's
    clipped-PG-only loss; ``pg_kl``: Eq. 6 with the KL term; ``failure_rate``; ``frontier``: the group's 4·p̂(1 − p̂)).
    ``mode="resample"`` draws each slot's bin from q over the non-empty bins, then a prompt uniformly inside
    it (with replacement across slots), and leaves all advantage multipliers at 1.
    """

    def __init__(
        self,
        eta: float = 0.65,
        gamma: float = 0.01,
        beta_ema: float = 0.12,
        clip: float | None = None,
        share_norm: bool = False,
        share_floor: float = 0.01,
        weight_cap: float = 15.0,
        mode: str = "reweight",
        weight_norm: str = "batch_mean",
        signal: str = "failure_rate",
        active: str = "present",
    ):
        if not eta > 0:
            raise ValueError(f"eta must be > 0, got {eta}")
        for key, value in (("gamma", gamma), ("beta_ema", beta_ema), ("share_floor", share_floor)):
            if not 0 < value <= 1:
                raise ValueError(f"{key} must be in (0, 1], got {value}")
        if not weight_cap >= 1:
            raise ValueError(f"weight_cap must be >= 1, got {weight_cap}")
        if clip is not None and not clip > 0:
            raise ValueError(f"clip must be > 0 or None, got {clip}")
        _one_of("mode", mode, MODES)
        _one_of("weight_norm", weight_norm, WEIGHT_NORMS)
        _one_of("signal", signal, SIGNALS)
        _one_of("active", active, ACTIVE_SETS)
        self.eta, self.gamma, self.beta_ema, self.clip = eta, gamma, beta_ema, clip
        self.share_norm, self.share_floor, self.weight_cap = share_norm, share_floor, weight_cap
        self.mode, self.weight_norm, self.signal, self.active = mode, weight_norm, signal, active
        self._uniform = UniformSampler()
        self._size(0, None, 0)

    def _size(self, num_bins: int, labels: Sequence[str] | None, num_pass_bins: int) -> None:
        """(Re)size the per-bin state; 0 = not sized yet. The first ``num_pass_bins`` bins are ordered by pass
        rate (Eq. 32 uses only those; a classifier may append e.g. an "unseen" bin)."""
        if labels is not None and len(labels) != num_bins:
            raise ValueError(f"labels must have num_bins={num_bins} entries, got {len(labels)}")
        self.num_bins, self.num_pass_bins = int(num_bins), int(num_pass_bins)
        self.labels = [str(x) for x in labels] if labels is not None else [str(b) for b in range(num_bins)]
        self._scores, self._initialized = np.zeros(num_bins), np.zeros(num_bins, dtype=bool)
        self._last: dict[str, Any] = {}  # this step's q, share, pass rate, max multiplier: for metrics()

    reads_labels = False

    def bind(self, pool: PromptPool, bins: BinSpec) -> None:
        """Attach to a prompt pool and the classifier's bins (0 = hardest), and clear all scores."""
        self._uniform.bind(pool)
        self._size(bins.num_bins, bins.labels, bins.num_pass_bins)

    def weights(self) -> np.ndarray:
        """Current q_t over all B bins (Eq. 15 with K = B): on the simplex, every entry ≥ γ/B."""
        self._require_bound()
        return mixed_distribution(self._scores, self.eta, self.gamma, self.clip)

    def sample(self, count: int, rng: np.random.Generator, classifier: DifficultyClassifier | None = None
               ) -> np.ndarray:
        """``count`` prompt ids: a shuffled epoch (``reweight``) or draws from q_t over bins (``resample``)."""
        if self._uniform.num_prompts == 0:
            raise RuntimeError("bind(pool, bins) must be called before sample()")
        if self.mode == "reweight":
            return self._uniform.sample(count, rng)
        if classifier is None:
            raise ValueError("classifier is required when mode='resample'")
        pool = np.asarray(classifier.all_bins(), dtype=np.int64)
        if pool.shape != (self._uniform.num_prompts,):
            raise ValueError(f"classifier.all_bins() must have num_prompts={self._uniform.num_prompts} entries, "
                             f"got shape {pool.shape}")
        members = np.bincount(self._check_bins(pool), minlength=self.num_bins)
        q = self.weights() * (members > 0)
        q /= q.sum()
        slot_bins = rng.choice(self.num_bins, size=count, p=q)
        by_bin = np.argsort(pool, kind="stable")  # prompt ids grouped by bin, bin b at [start_b, start_b + n_b)
        starts = np.cumsum(members) - members
        ids = by_bin[starts[slot_bins] + rng.integers(0, members[slot_bins])]
        self._last.update(q=q, multiplier_max=1.0)
        return ids.astype(np.int64)

    def loss_weights(self, bins: np.ndarray, group_index: np.ndarray) -> np.ndarray:
        """Per-rollout advantage multipliers (Eq. 16), from the scores of previous steps.

        ``bins`` (G,) is each prompt's bin, ``group_index`` (N,) each rollout's prompt. ``resample``: ones.
        """
        bins, group_index = self._check_batch(bins, group_index)
        if self.mode == "resample" or len(group_index) == 0:
            w = np.ones(len(group_index))
        else:
            row_bins = bins[group_index]
            present = np.bincount(row_bins, minlength=self.num_bins) > 0
            q = mixed_distribution(
                self._scores, self.eta, self.gamma, self.clip, present if self.active == "present" else None
            )
            if self.weight_norm == "batch_mean":
                w = q[row_bins] / q[row_bins].mean()
            else:
                w = exp_weights(self._scores, self.eta, self.clip)[row_bins]
            w = np.minimum(w, self.weight_cap)
            self._last["q"] = q
        self._last["multiplier_max"] = float(w.max()) if w.size else 1.0
        return w

    def update(self, feedback: StepFeedback) -> None:
        """Observe a step: bin-mean signal (Eq. 13), optional share normalisation, EMA (Eq. 12).

        Per-prompt signal = mean over its rollouts of ``feedback.signal(self.signal)``; prompts without rollouts
        are skipped.
        """
        bins, group_index = self._check_batch(feedback.bins, feedback.group_index)
        sig = feedback.signal(self.signal)
        correct = feedback.correct.astype(np.float64)
        n_rows = np.bincount(group_index, minlength=len(bins))
        per_prompt = np.bincount(group_index, weights=sig, minlength=len(bins)) / np.maximum(n_rows, 1)
        has = n_rows > 0
        mean, count = bin_means(per_prompt[has], bins[has], self.num_bins)
        share = count / max(int(count.sum()), 1)
        if self.share_norm:
            mean = mean / np.maximum(share, self.share_floor)
        self._scores, self._initialized = ema(self._scores, mean, self.beta_ema, count > 0, self._initialized)
        row_bins = bins[group_index]
        rows = np.bincount(row_bins, minlength=self.num_bins)
        hits = np.bincount(row_bins, weights=correct, minlength=self.num_bins)
        self._last.update(share=share, passrate=np.where(rows > 0, hits / np.maximum(rows, 1), np.nan))

    def metrics(self) -> dict[str, float]:
        """``gdro/…`` diagnostics of the step just taken (weights, shares, scores, pass rates, Eq. 32)."""
        out: dict[str, float] = {"data/epoch": float(self._uniform.epoch)} if self.mode == "reweight" else {}
        q, share, passrate = self._last.get("q"), self._last.get("share"), self._last.get("passrate")
        for b, label in enumerate(self.labels):
            if q is not None:
                out[f"gdro/weight/{label}"] = float(q[b])
            if share is not None:
                out[f"gdro/share/{label}"] = float(share[b])
            if self._initialized[b]:
                out[f"gdro/score/{label}"] = float(self._scores[b])
            if passrate is not None and not np.isnan(passrate[b]):
                out[f"gdro/passrate/{label}"] = float(passrate[b])
        if q is not None:
            nz = q[q > 0]
            out["gdro/weight_entropy"] = float(-(nz * np.log(nz)).sum())
            p = self.num_pass_bins  # Eq. 32: Δμ = μ_weight − μ_data over the pass-rate bins 0 (hardest) … P−1,
            if share is not None and q[:p].sum() > 0 and share[:p].sum() > 0:  # each renormalised over them
                idx = np.arange(p)
                out["gdro/lead_lag"] = float(idx @ q[:p] / q[:p].sum() - idx @ share[:p] / share[:p].sum())
        if "multiplier_max" in self._last:
            out["gdro/multiplier_max"] = float(self._last["multiplier_max"])
        return out

    def state_dict(self) -> dict[str, Any]:
        return {
            "num_bins": self.num_bins,
            "num_pass_bins": self.num_pass_bins,
            "labels": list(self.labels),
            "scores": self._scores.copy(),
            "initialized": self._initialized.copy(),
            "uniform": self._uniform.state_dict(),
        }

    def load_state_dict(self, state: Mapping[str, Any]) -> None:
        self.num_bins, self.num_pass_bins = int(state["num_bins"]), int(state["num_pass_bins"])
        self.labels = [str(x) for x in state["labels"]]
        self._scores = np.asarray(state["scores"], dtype=np.float64).copy()
        self._initialized = np.asarray(state["initialized"], dtype=bool).copy()
        self._uniform.load_state_dict(state["uniform"])
        self._last = {}

    def _require_bound(self) -> None:
        if self.num_bins == 0:
            raise RuntimeError("PromptGDRO has no bins yet: call bind(pool, classifier.bin_spec()) first")

    def _check_bins(self, bins: np.ndarray) -> np.ndarray:
        if bins.size and (bins.min() < 0 or bins.max() >= self.num_bins):
            raise ValueError(f"bins must lie in [0, num_bins={self.num_bins}), got [{bins.min()}, {bins.max()}]")
        return bins

    def _check_batch(self, bins: np.ndarray, group_index: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        self._require_bound()
        bins = self._check_bins(np.asarray(bins, dtype=np.int64).reshape(-1))
        group_index = np.asarray(group_index, dtype=np.int64).reshape(-1)
        if group_index.size and (group_index.min() < 0 or group_index.max() >= len(bins)):
            raise ValueError(f"group_index must lie in [0, len(bins)={len(bins)}), "
                             f"got [{group_index.min()}, {group_index.max()}]")
        return bins, group_index
