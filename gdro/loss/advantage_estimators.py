"""The advantage estimators, ``advantage=<name>`` (conf/advantage/*.yaml): how a step's rewards become its ``(N,)``
advantages, an axis apart from the loss (verl: ``algorithm.adv_estimator`` beside ``actor.policy_loss.loss_mode``).

The trainer calls the run's estimator once per step, ``advantage(rewards, group_index, num_groups)``, over *ragged*
groups (response ``i`` answers prompt ``group_index[i]``; Rollout-GDRO gives each prompt its own n), multiplies the
result by Prompt-GDRO's multipliers (Eq. 16) and hands it to the loss (``LossInputs.adv``): every loss reads the
advantages it is given. Each option is a frozen dataclass binding one pure function of gdro/loss/advantages.py:

    grpo          (r - mean_g) / (std_g + eps)   the default (paper Eq. 3); scale_rewards: group | batch | none (TRL)
    dr-grpo       r - mean_g                     Dr. GRPO (arXiv 2503.20783); what loss=dr-grpo selects
    rloo          r_i - mean_{j != i} r_j        leave-one-out baseline (arXiv 2402.14740; verl rloo)
    reinforce-pp  whitened over the batch        REINFORCE++ (arXiv 2501.03262; verl reinforce_plus_plus[_baseline])
    grpo-passk    r_max - r_2nd, best only       verl grpo_passk (arXiv 2503.19595)

A group of one response gets advantage 0 under every estimator except ``reinforce-pp`` with ``baseline: none``.
``min_group`` is the smallest group an estimator is defined on: a run whose allocator can give a prompt fewer
rollouts is refused in one line before anything loads (gdro.compose.build, :func:`check_group_sizes`); ``grpo`` and
``dr-grpo`` accept groups of one as gdro always did (Eq. 3 defines their advantage as 0).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import ClassVar, Protocol, runtime_checkable

import numpy as np
import torch

from gdro.loss.advantages import (
    BASELINES,
    check_scale,
    group_advantages,
    passk_advantages,
    reinforce_pp_advantages,
    rloo_advantages,
    scaled_advantages,
)

__all__ = ["AdvantageEstimator", "DrGRPOAdvantage", "GRPOAdvantage", "GRPOPassKAdvantage", "RLOOAdvantage",
           "ReinforcePPAdvantage", "check_group_sizes", "groups_with_gradient"]


@runtime_checkable
class AdvantageEstimator(Protocol):
    """An advantage estimator (``advantage=<name>``: ``conf/advantage/<name>.yaml``)."""

    name: ClassVar[str]  # its option name, for messages

    @property
    def min_group(self) -> int:
        """The fewest responses a group needs for the estimator to be defined (1: any group)."""
        ...

    def __call__(self, rewards: torch.Tensor, group_index: torch.Tensor, num_groups: int) -> torch.Tensor:
        """``(N,)`` advantages of ``rewards`` ``(N,)``, response ``i`` in group ``group_index[i]`` of ``num_groups``."""
        ...


def _check_eps(eps: float) -> None:
    if not (eps >= 0.0 and math.isfinite(eps)):
        raise ValueError(f"eps must be >= 0, got {eps}")


def check_group_sizes(estimator: AdvantageEstimator, smallest: int, key: str) -> None:
    """Refuse (ValueError, one line led by ``key=smallest``) a run whose smallest group, ``smallest`` responses as
    ``key`` sets it, is below what ``estimator`` is defined on (an estimator without ``min_group``: any group)."""
    need = getattr(estimator, "min_group", 1)
    if smallest < need:
        why, name = getattr(estimator, "why_min_group", ""), getattr(estimator, "name", type(estimator).__name__)
        raise ValueError(f"{key}={smallest}: advantage={name} needs groups of {need} or more responses, and a "
                         f"prompt may get {smallest} here{': ' + why if why else ''}; set {key} >= {need}")


def groups_with_gradient(estimator: AdvantageEstimator, mixed: np.ndarray, adv: torch.Tensor,
                         group_index: np.ndarray, num_groups: int) -> np.ndarray:
    """Which of ``num_groups`` groups carry gradient (a non-zero advantage): for an estimator whose zero groups are
    exactly those whose rewards are all equal (grpo, dr-grpo, rloo, reinforce-pp with the group baseline), the
    ``mixed`` groups, as the ledger always counted; else (``grpo-passk``: a tie at the top gives a mixed group no
    gradient; ``reinforce-pp`` with ``baseline: none``: an unmixed group has one) the groups with a non-zero advantage."""
    if getattr(estimator, "zero_iff_equal", True):
        return np.asarray(mixed, dtype=bool)
    nonzero = np.zeros(num_groups, dtype=bool)
    np.logical_or.at(nonzero, np.asarray(group_index, dtype=np.int64), adv.detach().cpu().numpy() != 0)
    return nonzero


@dataclass(frozen=True)
class GRPOAdvantage:
    """GRPO's group-normalised advantages (paper Eq. 3; ``gdro.loss.advantages.scaled_advantages``).

    scale_rewards: TRL's ``group`` (each group's std, Eq. 3) | ``batch`` (the step's std) | ``none`` (centred only).
    norm_adv_by_std: verl's ``norm_adv_by_std_in_grpo``; ``false`` is ``scale_rewards: none``. eps: ε added to the std.
    unbiased_std: Bessel-corrected std (verl, TRL) instead of the paper's population std.
    """

    name: ClassVar[str] = "grpo"
    min_group: ClassVar[int] = 1

    scale_rewards: str = "group"
    norm_adv_by_std: bool = True
    eps: float = 1e-6
    unbiased_std: bool = False

    def __post_init__(self) -> None:
        _check_eps(self.eps)
        check_scale(self.scale_rewards, self.norm_adv_by_std)

    def __call__(self, rewards: torch.Tensor, group_index: torch.Tensor, num_groups: int) -> torch.Tensor:
        return scaled_advantages(rewards, group_index, num_groups, eps=self.eps, unbiased_std=self.unbiased_std,
                                 scale=self.scale_rewards if self.norm_adv_by_std else "none")


@dataclass(frozen=True)
class DrGRPOAdvantage:
    """Dr. GRPO's advantages, ``r - mean_g`` over each prompt's group: no std (the question-level bias removed)."""

    name: ClassVar[str] = "dr-grpo"
    min_group: ClassVar[int] = 1

    def __call__(self, rewards: torch.Tensor, group_index: torch.Tensor, num_groups: int) -> torch.Tensor:
        return group_advantages(rewards, group_index, num_groups, norm_by_std=False)


@dataclass(frozen=True)
class RLOOAdvantage:
    """RLOO: each response against the mean of the *other* responses of its group (``rloo_advantages``)."""

    name: ClassVar[str] = "rloo"
    min_group: ClassVar[int] = 2
    why_min_group: ClassVar[str] = "a leave-one-out baseline needs another response, a lone one would get 0"

    def __call__(self, rewards: torch.Tensor, group_index: torch.Tensor, num_groups: int) -> torch.Tensor:
        return rloo_advantages(rewards, group_index, num_groups)


@dataclass(frozen=True)
class ReinforcePPAdvantage:
    """REINFORCE++: rewards (``baseline: group``: minus each group's mean) whitened over the step's whole batch
    (``reinforce_pp_advantages``, where the variant and its differences from verl are stated).

    baseline: ``group`` (verl ``reinforce_plus_plus_baseline``) | ``none`` (verl ``reinforce_plus_plus``, outcome
    reward). eps: ε added to the batch std. unbiased_std: Bessel-corrected batch std (verl's ``masked_whiten``).
    """

    name: ClassVar[str] = "reinforce-pp"
    why_min_group: ClassVar[str] = ("baseline=group centres each response on its group's mean, a lone one would get 0 "
                                    "(advantage.baseline=none whitens the raw rewards, for groups of any size)")

    baseline: str = "group"
    eps: float = 1e-6
    unbiased_std: bool = True

    def __post_init__(self) -> None:
        if self.baseline not in BASELINES:
            raise ValueError(f"baseline must be one of {BASELINES}, got {self.baseline!r}")
        _check_eps(self.eps)

    @property
    def min_group(self) -> int:
        return 2 if self.baseline == "group" else 1

    @property
    def zero_iff_equal(self) -> bool:
        """Whether a group's advantages are all 0 exactly when its rewards are all equal (groups_with_gradient)."""
        return self.baseline == "group"

    def __call__(self, rewards: torch.Tensor, group_index: torch.Tensor, num_groups: int) -> torch.Tensor:
        return reinforce_pp_advantages(rewards, group_index, num_groups, baseline=self.baseline, eps=self.eps,
                                       unbiased_std=self.unbiased_std)


@dataclass(frozen=True)
class GRPOPassKAdvantage:
    """verl's ``grpo_passk``: only each group's best response gets ``r_max - r_2nd`` (over its group's std + eps with
    ``norm_adv_by_std``), every other 0 (``passk_advantages``). Defaults are verl's (std division, Bessel)."""

    name: ClassVar[str] = "grpo-passk"
    min_group: ClassVar[int] = 2
    zero_iff_equal: ClassVar[bool] = False  # tied best responses: a mixed group with no gradient
    why_min_group: ClassVar[str] = "r_max - r_2nd needs a second response, verl raises on a group of one"

    norm_adv_by_std: bool = True
    eps: float = 1e-6
    unbiased_std: bool = True

    def __post_init__(self) -> None:
        _check_eps(self.eps)

    def __call__(self, rewards: torch.Tensor, group_index: torch.Tensor, num_groups: int) -> torch.Tensor:
        return passk_advantages(rewards, group_index, num_groups, norm_by_std=self.norm_adv_by_std, eps=self.eps,
                                unbiased_std=self.unbiased_std)
