"""Every loss the README says equals TRL (``loss=grpo|dr-grpo|gspo|dapo|bnpo|cispo|sapo|vespo|luspo``) against TRL's
own ``GRPOTrainer._compute_loss`` (TRL 1.16, a dev extra), value and gradient w.r.t. the log-probs on the same
tensors: ragged masks (one row without a valid token), advantages of both signs and 0, ratios across both clip
edges. The TRL trainer is built with ``object.__new__`` and the attributes ``_compute_loss`` reads; its forward
(``_get_per_token_logps_and_entropies``) is a stand-in that returns the given log-probs and entropies. The options
every loss shares with TRL (``use_bias_correction_kl``, ``off_policy_mask_threshold``, ``top_entropy_quantile``),
the empty-row denominator (``count_empty_rows``) and ``clip_ratio_c`` below ``1 + clip_high``:
tests/test_trl_losses_options.py, on this file's harness. Also: the losses' seam properties and ``scale_rewards`` against hand-computed
advantages. Each loss in a real ``gdro-train`` with ``allocator=rollout-gdro`` and ragged groups (slow):
tests/test_losses.py::test_each_loss_trains_with_rollout_gdro.
"""

from __future__ import annotations

import dataclasses
import math
from collections import defaultdict
from types import SimpleNamespace

import numpy as np
import pytest
import torch

from gdro.loss import (
    BatchCounts,
    BNPOLoss,
    CISPOLoss,
    DAPOLoss,
    DrGRPOLoss,
    GRPOAdvantage,
    GRPOLoss,
    GSPOLoss,
    LossInputs,
    LUSPOLoss,
    SAPOLoss,
    VESPOLoss,
)
from gdro.loss.advantages import group_advantages

F64 = torch.float64
B, T = 8, 6
LENGTHS = [6, 0, 3, 1, 5, 2, 6, 4]  # ragged; row 1 has no valid token


@pytest.fixture(scope="module")
def trl_trainer_class():
    from trl import GRPOTrainer  # a dev extra (pyproject); heavy, so imported once, here

    return GRPOTrainer


class _OneMachine:
    """The accelerator ``_compute_loss`` reads: ``num_processes`` and identity gather/reduce (its metrics)."""

    def __init__(self, num_processes: int = 1):
        self.num_processes = num_processes

    def gather(self, x):
        return x

    gather_for_metrics = gather

    def reduce(self, x, reduction="sum"):
        return x

    def pad_across_processes(self, x, dim=0, pad_index=0):
        return x


# gdro's loss class -> (TRL loss_type, importance_sampling_level); GSPO is TRL's grpo at the sequence level
_KINDS = {"GRPOLoss": ("grpo", "token"), "DrGRPOLoss": ("dr_grpo", "token"), "GSPOLoss": ("grpo", "sequence"),
          "DAPOLoss": ("dapo", "token"), "BNPOLoss": ("bnpo", "token"), "CISPOLoss": ("cispo", "token"),
          "SAPOLoss": ("sapo", "token"), "VESPOLoss": ("vespo", "token"), "LUSPOLoss": ("luspo", None)}


def _trl(cls, loss, *, ga: int = 1, spg: int = 1, processes: int = 1):
    """A ``GRPOTrainer`` with only what ``_compute_loss`` reads, set from gdro's ``loss`` (TRL's names)."""
    t = object.__new__(cls)
    kind, level = _KINDS[type(loss).__name__]
    attributes = {
        "loss_type": kind, "beta": loss.beta_kl, "epsilon_low": getattr(loss, "clip_low", 0.2),
        "epsilon_high": loss.ratio_max if kind == "cispo" else getattr(loss, "clip_high", 0.2),
        "importance_sampling_level": level or loss.level, "top_entropy_quantile": loss.top_entropy_quantile,
        "off_policy_mask_threshold": loss.off_policy_mask_threshold,
        "use_vllm": False, "vllm_importance_sampling_correction": False, "aux_loss_enabled": False,
        "_entropy_bonus_enabled": False, "max_completion_length": getattr(loss, "max_new_tokens", T),
        "current_gradient_accumulation_steps": ga,
        "args": SimpleNamespace(use_bias_correction_kl=loss.use_bias_correction_kl,
                                delta=getattr(loss, "clip_ratio_c", None),
                                sapo_temperature_pos=getattr(loss, "tau_pos", 1.0),
                                sapo_temperature_neg=getattr(loss, "tau_neg", 1.05), steps_per_generation=spg,
                                vespo_k_pos=getattr(loss, "k_pos", 2.0), vespo_lambda_pos=getattr(loss, "lambda_pos", 3.0),
                                vespo_k_neg=getattr(loss, "k_neg", 3.0), vespo_lambda_neg=getattr(loss, "lambda_neg", 2.0)),
        "model": SimpleNamespace(training=True), "accelerator": _OneMachine(processes),
        "_metrics": {"train": defaultdict(list), "eval": defaultdict(list)},
    }
    for name, value in attributes.items():
        setattr(t, name, value)
    return t


def _trl_loss(trainer, logp, old, ref, mask, adv, num_items: float, entropy=None) -> torch.Tensor:
    """TRL's ``_compute_loss`` on one micro-batch whose forward returns ``logp`` (its rows' token log-probs) and
    ``entropy`` (zeros when None)."""
    rows = logp.shape[0]

    def forward(model, input_ids, attention_mask, logits_to_keep, **kwargs):
        assert logits_to_keep == logp.shape[1] and input_ids.shape[0] == rows
        return logp, torch.zeros_like(logp) if entropy is None else entropy, None

    trainer._get_per_token_logps_and_entropies = forward
    inputs = {
        "prompt_ids": torch.zeros(rows, 1, dtype=torch.long), "prompt_mask": torch.ones(rows, 1, dtype=torch.long),
        "completion_ids": torch.zeros(rows, logp.shape[1], dtype=torch.long), "completion_mask": mask.long(),
        "advantages": adv, "old_per_token_logps": old, "num_items_in_batch": torch.tensor(num_items, dtype=F64),
    }
    if trainer.beta != 0.0:
        inputs["ref_per_token_logps"] = ref
    return trainer._compute_loss(trainer.model, inputs)


def _batch(seed: int = 0):
    """Log-probs, π_old with ratios from ~0.45 to ~2.2 (past 1 - 0.2 and 1 + 0.28, and past CISPO's test cap of
    1.3), π_ref, the ragged mask, and advantages of both signs with one 0."""
    g = torch.Generator().manual_seed(seed)
    logp = -0.2 - 2.5 * torch.rand(B, T, generator=g, dtype=F64)
    log_ratio = torch.linspace(-0.8, 0.8, B * T, dtype=F64)[torch.randperm(B * T, generator=g)].view(B, T)
    old = logp - log_ratio
    ref = logp + 0.4 * torch.randn(B, T, generator=g, dtype=F64)
    mask = (torch.arange(T)[None, :] < torch.tensor(LENGTHS)[:, None]).to(F64)
    adv = torch.tensor([1.3, -0.7, 0.4, -1.1, 0.0, 2.0, -0.3, -1.6], dtype=F64)
    return logp, old, ref, mask, adv


LOSSES = {
    # TRL's grpo: each response's token mean over all the responses, an empty one included (count_empty_rows)
    "grpo": GRPOLoss(beta_kl=0.04, agg="seq-mean-token-mean", count_empty_rows=True),
    "grpo-delta": GRPOLoss(beta_kl=0.0, clip_high=0.2, agg="seq-mean-token-mean", count_empty_rows=True,
                           clip_ratio_c=1.6),
    "dr-grpo": DrGRPOLoss(max_new_tokens=10, beta_kl=0.04),
    # GSPO's recipe clip (3e-4 / 4e-4) clips nearly every response here; a wider one leaves some of each
    "gspo": GSPOLoss(beta_kl=0.04, clip_low=0.2, clip_high=0.28, count_empty_rows=True),
    "gspo-recipe": GSPOLoss(beta_kl=0.0, count_empty_rows=True),
    "dapo": DAPOLoss(beta_kl=0.04),
    "dapo-delta": DAPOLoss(beta_kl=0.0, clip_ratio_c=1.6),
    "bnpo": BNPOLoss(beta_kl=0.04, clip_high=0.2),
    "cispo": CISPOLoss(beta_kl=0.04, ratio_max=1.3),
    "sapo": SAPOLoss(beta_kl=0.04, tau_pos=1.0, tau_neg=1.05),
    "sapo-no-kl": SAPOLoss(beta_kl=0.0, tau_pos=2.0, tau_neg=3.5),
    "vespo": VESPOLoss(beta_kl=0.04),
    "vespo-no-kl": VESPOLoss(beta_kl=0.0, k_pos=1.5, lambda_pos=0.5, k_neg=0.25, lambda_neg=4.0),
    "luspo": LUSPOLoss(beta_kl=0.04, clip_low=0.2, clip_high=0.28),
    "luspo-recipe": LUSPOLoss(beta_kl=0.0),
    "luspo-token-delta": LUSPOLoss(beta_kl=0.04, clip_low=0.2, clip_high=0.28, clip_ratio_c=1.5, level="token"),
}


def _tol(name: str) -> dict[str, float]:
    """1e-9, but 1e-6 (relative) for SAPO's default 1.05: TRL's ``torch.where`` on two Python floats makes its
    temperatures float32 (1.0499999523), 1e-7 apart from gdro's float64 1.05."""
    return {"rtol": 1e-6, "atol": 1e-9} if name == "sapo" else {"rtol": 1e-9, "atol": 1e-9}


def _ours(loss, logp, old, ref, mask, adv, counts, parts, entropy=None):
    """gdro's loss summed over the micro-batches ``parts`` (row lists) of a mini-batch with ``counts``, and its
    gradient w.r.t. ``logp``."""
    x = logp.detach().clone().requires_grad_(True)
    total = torch.zeros((), dtype=F64)
    for rows in parts:
        value, _, _ = loss.compute(LossInputs(x[rows], old[rows], mask[rows], adv[rows],
                                              ref[rows] if loss.beta_kl > 0 else None,
                                              entropy=None if entropy is None else entropy[rows]), counts)
        total = total + value
    total.backward()
    return total.detach(), x.grad


def _theirs(trainer, logp, old, ref, mask, adv, num_items, parts, *, scale: float = 1.0, entropy=None):
    """TRL's losses summed over its micro-batches ``parts`` (gradient accumulation; processes averaged by
    ``scale``), and the gradient w.r.t. ``logp``."""
    x = logp.detach().clone().requires_grad_(True)
    total = torch.zeros((), dtype=F64)
    for rows in parts:
        leaf = x[rows].detach().clone().requires_grad_(True)
        value = _trl_loss(trainer, leaf, old[rows], ref[rows], mask[rows], adv[rows], num_items,
                          None if entropy is None else entropy[rows]) * scale
        value.backward()
        x.grad = torch.zeros_like(x) if x.grad is None else x.grad
        x.grad[rows] += leaf.grad
        total = total + value.detach()
    return total, x.grad


@pytest.mark.parametrize("name", list(LOSSES))
def test_each_loss_equals_trls_compute_loss(trl_trainer_class, name):
    """One optimiser step over the whole batch: TRL with one micro-batch (``gradient_accumulation_steps = 1``,
    ``num_items_in_batch`` = the batch's valid tokens); gdro with the rows cut into three micro-batches that
    each divide by the mini-batch's counts. Value and gradient equal to 1e-9 (``_tol``)."""
    loss = LOSSES[name]
    logp, old, ref, mask, adv = _batch()
    counts = BatchCounts.of(np.array(LENGTHS))
    got, got_grad = _ours(loss, logp, old, ref, mask, adv, counts, [[3, 0], [5, 1, 7], [2, 4, 6]])
    want, want_grad = _theirs(_trl(trl_trainer_class, loss), logp, old, ref, mask, adv, float(sum(LENGTHS)),
                              [list(range(B))])
    torch.testing.assert_close(got, want, **_tol(name))
    torch.testing.assert_close(got_grad, want_grad, **_tol(name))
    assert want_grad[1].abs().sum() == 0 and got_grad[mask == 0].abs().sum() == 0
    if name.startswith(("grpo", "dapo", "bnpo")):  # the batch reaches both clip edges: some tokens have no gradient
        ratio = torch.exp(logp - old)
        assert ((ratio < 0.8) & (adv[:, None] < 0) & (mask > 0)).any()
        assert ((ratio > 1.0 + loss.clip_high) & (adv[:, None] > 0) & (mask > 0)).any()
        if loss.beta_kl == 0:  # a clipped token has no gradient (with a KL it keeps the KL's)
            assert (got_grad[mask > 0] == 0).any()


@pytest.mark.parametrize("name", ["grpo", "dr-grpo", "gspo", "dapo", "cispo", "sapo", "vespo", "luspo",
                                  "luspo-token-delta"])
@pytest.mark.parametrize("ga, processes", [(2, 1), (1, 2)])
def test_trls_accumulation_and_steps_per_generation(trl_trainer_class, name, ga, processes):
    """Two optimiser steps per generation batch (TRL ``steps_per_generation = 2 · gradient_accumulation_steps``;
    gdro ``optim.mini_batches = 2``), each of 4 rows cut into ``ga`` micro-batches on each of ``processes``
    processes (TRL's losses summed over accumulation, averaged over processes). dapo and cispo divide by the
    generation batch's tokens / 2 (``BatchCounts.step_token_share`` given the step's lengths); sapo's
    mean over equal micro-batches is gdro's mean over the mini-batch (grpo's, gspo's, luspo's and dr-grpo's too)."""
    loss = LOSSES[name]
    logp, old, ref, mask, adv = _batch(1)
    trainer = _trl(trl_trainer_class, loss, ga=ga, spg=2 * ga, processes=processes)
    for mb in ([0, 1, 2, 3], [4, 5, 6, 7]):
        counts = BatchCounts.of(np.array(LENGTHS)[mb], step_lengths=np.array(LENGTHS))
        got, got_grad = _ours(loss, logp, old, ref, mask, adv, counts, [mb[::-1]])
        parts = [mb[:2], mb[2:]]  # ga micro-batches on each process, or one on each of two processes
        want, want_grad = _theirs(trainer, logp, old, ref, mask, adv, float(sum(LENGTHS)), parts,
                                  scale=1.0 / processes)
        torch.testing.assert_close(got, want, **_tol(name))
        torch.testing.assert_close(got_grad, want_grad, **_tol(name))


def test_step_token_share_is_the_mini_batch_tokens_without_step_counts():
    lengths = np.array(LENGTHS)
    assert BatchCounts.of(lengths).step_token_share() == float(sum(LENGTHS))
    assert BatchCounts(3, 3, 7).step_token_share() == 7.0
    assert BatchCounts.of(lengths[:3], step_lengths=lengths).step_token_share() == 27 * 3 / 8
    assert BatchCounts.of(lengths[:3], step_lengths=lengths)[:3] == BatchCounts.of(lengths[:3])[:3]


@pytest.mark.parametrize("name", list(LOSSES))
def test_multipliers_scale_each_response_and_zero_advantage_has_no_gradient(name):
    """The seam's rules (docs/extending.md): linear in A for a positive factor per response (Prompt-GDRO's
    multipliers), and no gradient at A = 0 without a KL (``optim.skip_zero_adv``)."""
    loss = dataclasses.replace(LOSSES[name], beta_kl=0.0)
    logp, old, _, mask, adv = _batch(2)
    counts = BatchCounts.of(np.array(LENGTHS))
    w = torch.tensor([0.5, 3.0, 1.0, 0.2, 2.5, 1.7, 0.9, 1.3], dtype=F64)
    runs = []
    for a in (adv, adv * w, torch.zeros_like(adv)):
        x = logp.clone().requires_grad_(True)
        value, stats, terms = loss.compute(LossInputs(x, old, mask, a), counts)
        value.backward()
        runs.append((x.grad, terms.pg, stats))
    torch.testing.assert_close(runs[1][0], runs[0][0] * w[:, None], rtol=1e-12, atol=1e-14)
    torch.testing.assert_close(runs[1][1], runs[0][1] * w[:, None], rtol=1e-12, atol=1e-14)
    assert runs[2][0].abs().sum() == 0 and runs[2][1].abs().sum() == 0
    assert {"pg_loss", "kl", "ratio_mean"} <= runs[0][2].keys()


@pytest.mark.parametrize(("make", "message"), [
    (lambda: DAPOLoss(clip_low=1.5), "clip_low must be in"),
    (lambda: BNPOLoss(beta_kl=-1.0), "beta_kl must be >= 0"),
    (lambda: CISPOLoss(ratio_max=0.0), "ratio_max must be > 0"),
    (lambda: SAPOLoss(tau_neg=float("inf")), "tau_neg must be > 0"),
    (lambda: GRPOAdvantage(scale_rewards="std"), "scale_rewards must be one of"),
    (lambda: CISPOLoss(kl_estimator="k9"), "kl_estimator must be one of"),
    (lambda: GRPOAdvantage(norm_adv_by_std=False, scale_rewards="batch"), "must not be 'batch'"),
])
def test_bad_values_name_the_key(make, message):
    with pytest.raises(ValueError, match=message):
        make()


# ---------------------------------------------------------------------------------------- scale_rewards
# Eight responses in four ragged, interleaved groups (row: group, reward):
#   g0 rows 0, 3, 7: rewards 1, 0, 1  mean 2/3, centred 1/3, -2/3, 1/3; population std sqrt(2)/3
#   g1 row 2:        reward 0         a group of one: 0
#   g2 rows 4, 5:    rewards 1, 1     zero variance: 0
#   g3 rows 1, 6:    rewards 0, 1     mean 1/2, centred -1/2, 1/2; std 1/2
# The whole step's rewards 1,0,0,0,1,1,1,1: mean 5/8, population variance 15/64 (Bessel: 15/56).
REWARDS = torch.tensor([1.0, 0.0, 0.0, 0.0, 1.0, 1.0, 1.0, 1.0], dtype=F64)
GROUPS = torch.tensor([0, 3, 1, 0, 2, 2, 3, 0])
CENTRED = [1 / 3, -1 / 2, 0.0, -2 / 3, 0.0, 0.0, 1 / 2, 1 / 3]


@pytest.mark.parametrize("make", [GRPOAdvantage])  # every loss's advantages: advantage=grpo's (#50)
def test_scale_rewards_hand_values(make):
    eps = 1e-6
    group_std = [math.sqrt(2) / 3, 0.5, 0.0, math.sqrt(2) / 3, 0.0, 0.0, 0.5, math.sqrt(2) / 3]
    want = {
        ("group", False): [c / (s + eps) for c, s in zip(CENTRED, group_std, strict=True)],
        ("batch", False): [c / (math.sqrt(15 / 64) + eps) for c in CENTRED],
        ("batch", True): [c / (math.sqrt(15 / 56) + eps) for c in CENTRED],
        ("none", False): CENTRED,
    }
    for (scale, unbiased), values in want.items():
        got = make(scale_rewards=scale, unbiased_std=unbiased)(REWARDS, GROUPS, 4)
        torch.testing.assert_close(got, torch.tensor(values, dtype=F64), rtol=1e-12, atol=1e-15)
        assert got[[2, 4, 5]].eq(0).all()  # a group of one and a zero-variance group: exactly 0
    batch32 = make(scale_rewards="batch")(REWARDS.float(), GROUPS, 4)
    assert batch32.dtype == torch.float32


def test_scale_rewards_group_is_todays_advantages_to_the_bit():
    """The default (``group``) is ``group_advantages`` exactly, and ``norm_adv_by_std: false`` is ``none``."""
    g = torch.Generator().manual_seed(3)
    groups = torch.randint(0, 9, (50,), generator=g)
    rewards = torch.randint(0, 2, (50,), generator=g).float()
    for kw in ({}, {"unbiased_std": True, "eps": 1e-4}):
        want = group_advantages(rewards, groups, 10, eps=kw.get("eps", 1e-6),
                                unbiased_std=kw.get("unbiased_std", False))
        assert torch.equal(GRPOAdvantage(**kw)(rewards, groups, 10), want)
    centred = group_advantages(rewards, groups, 10, norm_by_std=False)
    assert torch.equal(GRPOAdvantage(norm_adv_by_std=False)(rewards, groups, 10), centred)
    assert torch.equal(GRPOAdvantage(scale_rewards="none")(rewards, groups, 10), centred)


def test_batch_scale_of_a_constant_batch_is_zero():
    for eps in (0.0, 1e-6):
        got = GRPOAdvantage(scale_rewards="batch", eps=eps)(torch.ones(5), torch.tensor([0, 0, 1, 1, 1]), 2)
        assert torch.equal(got, torch.zeros(5))
    assert GRPOAdvantage(scale_rewards="batch")(torch.ones(0), torch.zeros(0, dtype=torch.long), 0).numel() == 0


@pytest.mark.parametrize("name", list(LOSSES))
@pytest.mark.parametrize("shape", ["token", "sequence"])
def test_the_engine_importance_weight_equals_trls(trl_trainer_class, name, shape):
    """``LossInputs.token_weight`` (optim.engine_is_mode) against TRL's ``importance_sampling_ratio`` under
    ``use_vllm`` and ``vllm_importance_sampling_correction``: the per-token PG loss times the weight, before the KL
    is added; a ``(B, T)`` token weight and a ``(B, 1)`` sequence weight, zeros included (a ``*_mask`` mode)."""
    loss = LOSSES[name]
    logp, old, ref, mask, adv = _batch(3)
    g = torch.Generator().manual_seed(5)
    weight = torch.rand(B, T if shape == "token" else 1, generator=g, dtype=F64) * 3.0
    weight[0, 0] = 0.0
    if shape == "token":  # a padded position's weight is 1 (exp of a masked difference, TRL's and gdro's)
        weight = torch.where(mask > 0, weight, torch.ones_like(weight))
    counts = BatchCounts.of(np.array(LENGTHS))
    x = logp.detach().clone().requires_grad_(True)
    got, _, _ = loss.compute(LossInputs(x, old, mask, adv, ref if loss.beta_kl > 0 else None, weight), counts)
    got.backward()
    trainer = _trl(trl_trainer_class, loss)
    trainer.use_vllm, trainer.vllm_importance_sampling_correction = True, True
    leaf = logp.detach().clone().requires_grad_(True)

    def forward(model, input_ids, attention_mask, logits_to_keep, **kwargs):
        return leaf, torch.zeros_like(leaf), None

    trainer._get_per_token_logps_and_entropies = forward
    inputs = {
        "prompt_ids": torch.zeros(B, 1, dtype=torch.long), "prompt_mask": torch.ones(B, 1, dtype=torch.long),
        "completion_ids": torch.zeros(B, T, dtype=torch.long), "completion_mask": mask.long(), "advantages": adv,
        "old_per_token_logps": old, "num_items_in_batch": torch.tensor(float(sum(LENGTHS)), dtype=F64),
        "importance_sampling_ratio": weight, **({"ref_per_token_logps": ref} if loss.beta_kl else {}),
    }
    want = trainer._compute_loss(trainer.model, inputs)
    want.backward()
    torch.testing.assert_close(got.detach(), want.detach(), **_tol(name))
    torch.testing.assert_close(x.grad, leaf.grad, **_tol(name))
    unweighted, _, _ = loss.compute(LossInputs(logp, old, mask, adv, ref if loss.beta_kl > 0 else None), counts)
    assert not torch.isclose(unweighted, got)  # the weight acts
