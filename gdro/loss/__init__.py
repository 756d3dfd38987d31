"""Policy losses, one file each, behind one seam (``loss=<name>``; docs/extending.md, "A loss"), and the advantage
estimators they read, an axis of their own (``advantage=<name>``):

- ``base``: the :class:`Loss` Protocol, and what the update hands a loss (:class:`LossInputs`,
  :class:`BatchCounts`);
- ``terms``: what losses are made of: clipped surrogate, KL estimators, aggregation modes, ``grpo_loss``;
- ``grpo``: :class:`GRPOLoss`, ``loss=grpo`` (the default; paper Eq. 3-7);
- ``gspo``: :class:`GSPOLoss`, ``loss=gspo`` (sequence-level ratio and clip; arXiv 2507.18071);
- ``dr_grpo``: :class:`DrGRPOLoss`, ``loss=dr-grpo`` (centred advantages, constant normaliser; arXiv
  2503.20783);
- ``trl``: :class:`TRLLoss`, what the losses of TRL's ``loss_type``s share (the KL, the reduction);
  ``dapo``: :class:`DAPOLoss`, ``loss=dapo``; ``bnpo``: :class:`BNPOLoss`, ``loss=bnpo``; ``cispo``:
  :class:`CISPOLoss`, ``loss=cispo``; ``sapo``: :class:`SAPOLoss`, ``loss=sapo``; ``vespo``: :class:`VESPOLoss`,
  ``loss=vespo``; ``luspo``: :class:`LUSPOLoss`, ``loss=luspo`` (each as TRL 1.16 computes it);
- ``options``: :class:`LossOptions`, the options every loss shares with TRL's trainer (``use_bias_correction_kl``,
  ``off_policy_mask_threshold``, ``top_entropy_quantile``; off by default);
- ``advantages``: the estimators as pure functions over ragged groups; ``advantage_estimators``: their configs,
  ``advantage=grpo|dr-grpo|rloo|reinforce-pp|grpo-passk`` (:class:`AdvantageEstimator`).
"""

from gdro.loss.advantage_estimators import (
    AdvantageEstimator,
    DrGRPOAdvantage,
    GRPOAdvantage,
    GRPOPassKAdvantage,
    ReinforcePPAdvantage,
    RLOOAdvantage,
)
from gdro.loss.base import BatchCounts, Loss, LossInputs, Objective
from gdro.loss.bnpo import BNPOLoss
from gdro.loss.cispo import CISPOLoss
from gdro.loss.dapo import DAPOLoss
from gdro.loss.dr_grpo import DrGRPOLoss
from gdro.loss.grpo import GRPOLoss
from gdro.loss.gspo import GSPOLoss
from gdro.loss.luspo import LUSPOLoss
from gdro.loss.options import LossOptions
from gdro.loss.sapo import SAPOLoss
from gdro.loss.terms import (
    AGG_MODES,
    KL_ESTIMATORS,
    TokenTerms,
    aggregate,
    aggregation_denom,
    check_hyper,
    clipped_surrogate,
    grpo_loss,
    kl_penalty,
    kl_term,
    per_response_mean,
)
from gdro.loss.trl import TRLLoss
from gdro.loss.vespo import VESPOLoss

__all__ = [
    "AGG_MODES", "KL_ESTIMATORS", "AdvantageEstimator", "BNPOLoss", "BatchCounts", "CISPOLoss", "DAPOLoss",
    "DrGRPOAdvantage", "DrGRPOLoss", "GRPOAdvantage", "GRPOLoss", "GRPOPassKAdvantage", "GSPOLoss", "LUSPOLoss", "Loss",
    "LossInputs", "LossOptions", "Objective", "RLOOAdvantage", "ReinforcePPAdvantage", "SAPOLoss", "TRLLoss",
    "TokenTerms", "VESPOLoss", "aggregate", "aggregation_denom", "check_hyper", "clipped_surrogate", "grpo_loss",
    "kl_penalty", "kl_term", "per_response_mean",
]
