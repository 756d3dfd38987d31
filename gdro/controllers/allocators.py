"""Rollout allocators: how many rollouts each prompt of a step receives (paper §3.3, §4.3).

- ``FixedAllocator``: GRPO's constant group size.
- ``RolloutGDRO``: one exponential-weights instance per difficulty bin over integer arms n ∈ [n_min, n_max],
  an exact-budget selection of one arm per bin present (DP, Eq. 19), and a live shadow price μ (Eq. 20–21).
- ``SqrtAllocator``: the square-root (Neyman) law of Theorem 4.2, n_b ∝ √v_b, with v_b estimated online.
- ``KnapsackAllocator``: Knapsack RL (arXiv 2509.25849), per *prompt* from its success rate (beyond the paper).

All allocate from the *current* batch's bins (classified before generation) and spend the step's budget
exactly: Σ_b count_b · n_b = n̄ · #prompts, the budget each derives from the mean n̄ (``rollouts_per_prompt``) passed
with every call. n̄ is checked once, before a run (``check_budget``), not at every step.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import numpy as np

from gdro.common.interfaces import SIGNALS, BinSpec, DifficultyClassifier, StepFeedback
from gdro.controllers.bandit import bin_means, mixed_distribution
from gdro.controllers.budget import check_budget_feasible, exact_budget_select, sqrt_allocation, weighted_se
from gdro.controllers.knapsack import knapsack_allocate, rollout_value
from gdro.controllers.per_prompt import PerPromptAllocator

MU_TARGETS = ("budget", "rest")  # what Rollout-GDRO's shadow price measures consumption against (Eq. 21)
JOINTS = ("per_bin", "per_prompt")  # how Eq. 19's DP weighs each bin's arm log-probability


class FixedAllocator:
    """Every prompt gets n̄ rollouts (GRPO's group size)."""

    def bind(self, bins: BinSpec) -> None:
        """A fixed allocation reports no per-bin metrics."""

    def check_budget(self, n_bar: int) -> None:
        if n_bar < 1:
            raise ValueError(f"the mean budget must be >= 1 rollout per prompt, got {n_bar}")

    def allocate(self, ids: np.ndarray, bins: np.ndarray, n_bar: int,
                 classifier: DifficultyClassifier | None = None) -> np.ndarray:
        """Per-prompt rollout counts for a step's prompts (their ids, bins and history are unused here)."""
        return np.full(len(bins), n_bar, dtype=np.int64)

    def update(self, feedback: StepFeedback) -> None:
        """A fixed allocation does not adapt."""

    def metrics(self) -> dict[str, float]:
        return {}

    def state_dict(self) -> dict[str, Any]:
        return {}

    def load_state_dict(self, state: Mapping[str, Any]) -> None:
        """Nothing to restore."""


class _BinAllocator:
    """Shared parts: arms, budget checks, per-step bookkeeping and diagnostics.

    A step may allocate in several rounds (``filter=dynamic``); a bin allocator then learns from its last round's
    arms and bins, with each bin's signal over every group of that bin the step trained on (a bin the last round
    did not hold is not updated)."""

    def __init__(self, n_min: int, n_max: int):
        check_budget_feasible(n_min, n_min, n_max)  # validates n_min >= 1 and n_min <= n_max
        self.n_min, self.n_max = int(n_min), int(n_max)
        self.n_bar = 0  # the mean budget n̄, from allocate()
        self.arms = np.arange(self.n_min, self.n_max + 1, dtype=np.int64)
        self.labels: list[str] = []
        self._last: dict[str, Any] = {}

    def check_budget(self, n_bar: int) -> None:
        """n_min ≤ n̄ ≤ n_max (Eq. 19 is then feasible); raised before a run starts."""
        check_budget_feasible(n_bar, self.n_min, self.n_max)

    def _step_budget(self, bins: np.ndarray, n_bar: int) -> tuple[np.ndarray, int]:
        """The step's bins as a flat array and its budget n̄ · #prompts."""
        bins = np.asarray(bins, dtype=np.int64).reshape(-1)
        if len(bins) < 1:
            raise ValueError("a step needs at least one prompt")
        self.n_bar = int(n_bar)
        return bins, self.n_bar * len(bins)

    def _present(self, bins: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        uniq, inverse, counts = np.unique(np.asarray(bins, dtype=np.int64), return_inverse=True, return_counts=True)
        return uniq, inverse, counts

    def _record(self, uniq: np.ndarray, counts: np.ndarray, n_b: np.ndarray) -> None:
        self._last = {"bins": uniq, "counts": counts, "n_b": n_b}

    def _bin_mean(self, per_rollout: np.ndarray, group_index: np.ndarray, bins: np.ndarray) -> np.ndarray:
        """Eq. 17–18 for the bins allocated this step: each prompt's mean over its rollouts, then the mean over
        the bin's prompts (NaN for a bin with no rollouts)."""
        bins = np.asarray(bins, dtype=np.int64)
        g = len(bins)
        per_prompt = np.bincount(group_index, weights=np.asarray(per_rollout, dtype=np.float64), minlength=g)
        per_prompt /= np.maximum(np.bincount(group_index, minlength=g), 1)
        mean, _ = bin_means(per_prompt, bins, int(max(bins.max(), self._last["bins"].max())) + 1)
        return mean[self._last["bins"]]

    def _common_metrics(self) -> dict[str, float]:
        if not self._last:
            return {}
        uniq, counts, n_b = self._last["bins"], self._last["counts"], self._last["n_b"]
        q = counts / counts.sum()
        total = float((counts * n_b).sum())
        out: dict[str, float] = {}
        for b, c, n in zip(uniq, counts, n_b):
            label = self.labels[b] if b < len(self.labels) else str(b)
            out[f"gdro/rollouts/{label}"] = float(n)
            out[f"gdro/budget_share/{label}"] = float(c * n / total)
        acc = self._last.get("acc")
        if acc is not None:
            p = np.nan_to_num(acc, nan=0.5)
            sigma = np.sqrt(p * (1 - p))
            wse, wse_uniform = weighted_se(q, sigma, n_b), weighted_se(q, sigma, np.full(len(n_b), self.n_bar))
            out["gdro/wse"] = float(wse)
            out["gdro/wse_uniform"] = float(wse_uniform)
            if wse_uniform > 0:
                out["gdro/wse_ratio"] = float(wse / wse_uniform)
        return out

    def bind(self, bins: BinSpec) -> None:
        """Names of the classifier's bins, for metric keys."""
        self.labels = list(bins.labels)


class RolloutGDRO(_BinAllocator):
    """Rollout-GDRO (Eq. 17–21): per-bin exponential weights over arms, exact-budget DP, shadow price μ.

    ``score_update``:
      - ``lagrangian`` (default): a full-information update of every arm of each bin observed this step, an EMA
        (rate ``beta_ema``) toward (ℓ̄_b − μ)(n − n̄): the Lagrangian of "spend the budget where the loss is"
        (Eq. 19–20 with a loss linear in n). Bins whose loss exceeds the shadow price μ prefer arms above n̄,
        the others below; μ rises while the arm distributions ask for more than n̄ (Eq. 21). Measured on the
        toy task, the two single-arm updates below never leave n̄: the deterministic DP picks n̄ at the start
        (all scores equal), only the chosen arm is updated, and it keeps winning (docs/rollout-gdro.md);
      - ``official``: the chosen arm's score accumulates ``mean_loss_b − μ (n_b − n̄)`` (adversarial: arms that
        met high loss gain; the released code), no EMA;
      - ``paper``: Eq. 20's bandit loss L_b(n) = −Ĵ_b + μ n = mean_loss_b + μ n is *minimised*: the chosen arm's
        score moves by an EMA (rate ``beta_ema``, Appendix A "arm score EMA decay 0.4") toward −L_b(n_b).
    ``consumption`` (what μ sees, Eq. 21): ``expected`` — Σ_b q̂_b E_{p_b}[n], the budget the arm distributions
    ask for before the exact projection (default; it differs from n̄, so μ steers), or ``realized`` — the
    projected allocation (the released code; always n̄, so μ never moves: μ frozen at ``mu_init``).

    Dual dynamics (issue #36; defaults are the paper's Eq. 19 and 21, unchanged):
      - ``mu_target``: what μ's consumption is measured against. ``budget`` (Eq. 21): n̄. ``rest``: what the arm
        distributions ask for at rest (every score equal: the γ-mixed uniform over the arms, the grid's mean
        (n_min + n_max) / 2 — 7 for [2, 12] — not n̄ = 4 when the grid is lopsided around n̄). With ``budget`` and a
        lopsided grid μ climbs until every bin prefers small arms; with ``rest`` μ centres the bins' preferences
        (some above their rest mean, some below) and the exact projection alone meets the budget.
      - ``joint``: how Eq. 19's DP weighs the bins' log-probabilities. ``per_bin`` (the paper and the released
        code): each bin's log p_b(n_b) once, so the budget's surplus or deficit lands where one bin's log-prob
        costs least, in practice the bin with the most prompts. ``per_prompt``: each bin's log-prob times its
        prompt count (the joint probability of every prompt's arm, as if each prompt drew its own).
    """

    def __init__(self, n_min: int = 2, n_max: int = 24, eta: float = 0.65, gamma: float = 0.01,
                 alpha_mu: float = 0.05, mu_init: float = 0.0, beta_ema: float = 0.4, score_update: str = "lagrangian",
                 consumption: str = "expected", signal: str = "failure_rate", mu_target: str = "budget",
                 joint: str = "per_bin"):
        super().__init__(n_min, n_max)
        checks = [("eta", eta > 0, "must be > 0"), ("gamma", 0 < gamma <= 1, "must be in (0, 1]"),
                  ("alpha_mu", alpha_mu >= 0, "must be >= 0"), ("beta_ema", 0 < beta_ema <= 1, "must be in (0, 1]"),
                  ("score_update", score_update in ("lagrangian", "official", "paper"),
                   "must be lagrangian | official | paper"),
                  ("consumption", consumption in ("expected", "realized"), "must be expected | realized"),
                  ("signal", signal in SIGNALS, f"must be one of {SIGNALS}"),
                  ("mu_target", mu_target in MU_TARGETS, f"must be one of {MU_TARGETS}"),
                  ("joint", joint in JOINTS, f"must be one of {JOINTS}")]
        for key, ok, why in checks:
            if not ok:
                raise ValueError(f"{key} {why}, got {locals()[key]!r}")
        self.eta, self.gamma, self.alpha_mu, self.beta_ema = eta, gamma, alpha_mu, beta_ema
        self.score_update, self.consumption, self.signal = score_update, consumption, signal
        self.mu_target, self.joint = mu_target, joint
        self.mu = float(mu_init)
        self.scores: dict[int, np.ndarray] = {}

    def arm_probs(self, b: int) -> np.ndarray:
        """p_b = (1 − γ) softmax(η S_b) + γ / A over the arms (one EXP3P instance per bin)."""
        s = self.scores.get(int(b))
        if s is None:
            s = np.zeros(len(self.arms))
        return mixed_distribution(s, self.eta, self.gamma)

    def rest_consumption(self) -> float:
        """E[n] under the arm distribution at rest (all scores equal): the mean of the arm grid."""
        return float(mixed_distribution(np.zeros(len(self.arms)), self.eta, self.gamma) @ self.arms)

    def allocate(self, ids: np.ndarray, bins: np.ndarray, n_bar: int,
                 classifier: DifficultyClassifier | None = None) -> np.ndarray:
        """One arm per bin present (ids and per-prompt history unused: the arms are per bin)."""
        bins, budget = self._step_budget(bins, n_bar)
        uniq, inverse, counts = self._present(bins)
        probs = np.stack([self.arm_probs(b) for b in uniq])
        # Eq. 19: maximise the joint arm probability under the exact budget (each bin's log-prob once, or once per
        # prompt with joint=per_prompt)
        logp = np.log(probs) if self.joint == "per_bin" else np.log(probs) * counts[:, None]
        n_b = exact_budget_select(logp, counts, self.arms, budget, prefer=self.n_bar)
        self._record(uniq, counts, n_b)
        self._last["expected"] = float((counts / counts.sum()) @ (probs @ self.arms))
        return n_b[inverse]

    def update(self, feedback: StepFeedback) -> None:
        if not self._last:
            return
        bins, group_index = feedback.bins, feedback.group_index
        uniq, n_b = self._last["bins"], self._last["n_b"]
        losses = self._bin_mean(feedback.signal(self.signal), group_index, bins)
        rel = (self.arms - self.n_bar) / self.n_bar  # relative extra budget of each arm
        for b, n, loss in zip(uniq, n_b, losses):
            if np.isnan(loss):
                continue
            s = self.scores.setdefault(int(b), np.zeros(len(self.arms)))
            a = int(n) - self.n_min
            if self.score_update == "lagrangian":
                s[:] = (1 - self.beta_ema) * s + self.beta_ema * (loss - self.mu) * rel
            elif self.score_update == "official":
                s[a] += loss - self.mu * (n - self.n_bar)
            else:
                s[a] = (1 - self.beta_ema) * s[a] + self.beta_ema * -(loss + self.mu * n)
        realised = float((self._last["counts"] * n_b).sum() / self._last["counts"].sum())
        consumed = self._last["expected"] if self.consumption == "expected" else realised
        target = self.n_bar if self.mu_target == "budget" else self.rest_consumption()
        self.mu = self.mu + self.alpha_mu * (consumed - target)  # Eq. 21 (dual ascent on the budget)
        self._last["consumed"] = consumed
        self._last["acc"] = self._bin_mean(feedback.correct, group_index, bins)

    def metrics(self) -> dict[str, float]:
        out = self._common_metrics()
        out["gdro/mu"] = self.mu
        if "consumed" in self._last:
            out["gdro/consumption"] = self._last["consumed"]
        return out

    def state_dict(self) -> dict[str, Any]:
        return {"mu": self.mu, "scores": {int(b): s.tolist() for b, s in self.scores.items()}}

    def load_state_dict(self, state: Mapping[str, Any]) -> None:
        self.mu = float(state["mu"])
        self.scores = {int(b): np.asarray(s, dtype=np.float64) for b, s in state["scores"].items()}


class RolloutGDROVariance(RolloutGDRO):
    """BEYOND THE PAPER: Rollout-GDRO whose arm score is a bin's reward variance (``allocator=rollout-gdro-variance``):
    ``signal`` is ``frontier`` (each group's 4p̂(1 − p̂)) or ``informative`` (the bin's share of groups with signal),
    so that rollouts move toward bins that are still learning. Everything else is :class:`RolloutGDRO`'s; its paper
    default and the released code's signal are unchanged there (docs/allocation.md)."""

    def __init__(self, n_min: int = 2, n_max: int = 24, eta: float = 0.65, gamma: float = 0.01,
                 alpha_mu: float = 0.05, mu_init: float = 0.0, beta_ema: float = 0.4, score_update: str = "lagrangian",
                 consumption: str = "expected", signal: str = "frontier", mu_target: str = "budget",
                 joint: str = "per_bin"):
        if signal not in ("frontier", "informative"):
            raise ValueError(f"signal must be frontier | informative (a variance signal), got {signal!r}")
        super().__init__(n_min, n_max, eta, gamma, alpha_mu, mu_init, beta_ema, score_update, consumption, signal,
                         mu_target, joint)


class SqrtAllocator(_BinAllocator):
    """Square-root law (Theorem 4.2, Eq. 30): n_b ∝ √v_b under the same mean budget, exact integers in bounds.

    v_b is the per-rollout reward variance p_b (1 − p_b) of bin b, with p_b an EMA (rate ``beta_ema``) of the
    bin's realised accuracy; a bin never observed gets ``v_prior`` (0.25 = the maximum, so it is explored).
    """

    def __init__(self, n_min: int = 2, n_max: int = 24, beta_ema: float = 0.4, v_prior: float = 0.25):
        super().__init__(n_min, n_max)
        if not 0 < beta_ema <= 1:
            raise ValueError(f"beta_ema must be in (0, 1], got {beta_ema}")
        if not 0 <= v_prior <= 0.25:
            raise ValueError(f"v_prior must be in [0, 0.25], got {v_prior}")
        self.beta_ema, self.v_prior = beta_ema, v_prior
        self.p: dict[int, float] = {}

    def variance(self, b: int) -> float:
        p = self.p.get(int(b))
        return self.v_prior if p is None else p * (1 - p)

    def allocate(self, ids: np.ndarray, bins: np.ndarray, n_bar: int,
                 classifier: DifficultyClassifier | None = None) -> np.ndarray:
        """n_b ∝ √v_b per bin present (ids and per-prompt history unused: v_b is per bin)."""
        bins, _ = self._step_budget(bins, n_bar)
        uniq, inverse, counts = self._present(bins)
        v = np.array([self.variance(b) for b in uniq])
        n_b = sqrt_allocation(v, counts, self.n_bar, self.n_min, self.n_max)
        self._record(uniq, counts, n_b)
        return n_b[inverse]

    def update(self, feedback: StepFeedback) -> None:
        if not self._last:
            return
        self._last["acc"] = self._bin_mean(feedback.correct, feedback.group_index, feedback.bins)
        for b, acc in zip(self._last["bins"], self._last["acc"]):
            old = self.p.get(int(b))
            self.p[int(b)] = acc if old is None else (1 - self.beta_ema) * old + self.beta_ema * acc

    def metrics(self) -> dict[str, float]:
        out = self._common_metrics()
        if self._last:
            for b in self._last["bins"]:
                label = self.labels[b] if b < len(self.labels) else str(b)
                out[f"gdro/variance/{label}"] = self.variance(b)
        return out

    def state_dict(self) -> dict[str, Any]:
        return {"p": {int(b): p for b, p in self.p.items()}}

    def load_state_dict(self, state: Mapping[str, Any]) -> None:
        self.p = {int(b): float(p) for b, p in state["p"].items()}


class KnapsackAllocator(PerPromptAllocator):
    """Knapsack RL (Li et al., arXiv 2509.25849): per prompt, value(n, p) = (1 − pⁿ − (1 − p)ⁿ)·p(1 − p)² with p its
    per-rollout success rate (``classifier.success_rate``); Σ_i value(n_i, p_i) maximised by DP at the exact step
    budget n̄ · G with n_i ∈ [n_min, n_max] (gdro/controllers/knapsack.py, where the differences from the official
    code are listed).

    ``unseen``: ``prior`` — a never-seen prompt enters the DP at the classifier's stated prior ``unseen_p``;
    ``fixed`` — it is pinned at n̄ (the official code's treatment of prompts without a valid history).
    ``floor_credit``: False is the official objective (a prompt left at n_min is worth 0).
    Stateless: the history lives in the classifier.
    """

    def __init__(self, n_min: int = 2, n_max: int = 24, floor_credit: bool = True, unseen: str = "prior"):
        super().__init__(n_min, n_max)
        if unseen not in ("prior", "fixed"):
            raise ValueError(f"unseen must be prior | fixed, got {unseen!r}")
        self.floor_credit, self.unseen = bool(floor_credit), unseen

    def allocate(self, ids: np.ndarray, bins: np.ndarray, n_bar: int,
                 classifier: DifficultyClassifier) -> np.ndarray:
        """The DP's allocation for the prompts ``ids`` from their success rates; Σ n = n̄ · G exactly."""
        ids, bins = self._inputs(ids, bins)
        p = classifier.success_rate(ids)
        lo, hi = np.full(len(ids), self.n_min), np.full(len(ids), self.n_max)
        if self.unseen == "fixed":
            pinned = ~classifier.seen(ids)
            lo[pinned] = hi[pinned] = n_bar
        n = knapsack_allocate(p, int(n_bar) * len(ids), lo, hi, floor_credit=self.floor_credit)
        return self._keep(bins, n, p, n_bar)

    def metrics(self) -> dict[str, float]:
        """``gdro/knapsack/value`` (Σ value at the allocation), ``value_uniform`` (the same at n̄), ``p_mean``;
        ``gdro/rollouts/<bin>``: mean rollouts per prompt of each bin (the mechanism table's key)."""
        if not self._rounds:
            return {}
        bins, n, p, n_bar = self._step()
        value, uniform = (float(rollout_value(m.astype(np.float64), p).sum()) for m in (n, n_bar))
        out = {"gdro/knapsack/value": value, "gdro/knapsack/value_uniform": uniform,
               "gdro/knapsack/p_mean": float(p.mean())}
        return out | self._rollouts_per_bin(bins, n)
