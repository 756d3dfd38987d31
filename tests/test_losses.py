"""The loss seam (``loss=grpo|gspo|dr-grpo``): each loss against a reference computed by hand or with plain
loops, independent of gdro/loss; ragged groups, Prompt-GDRO's multipliers and micro-batches (mini-batch
denominators) with each; ``loss=grpo`` equal to the GRPO loss of before the seam to the bit; a real
``ppo_update`` and real runs (these also of ``loss=dapo|bnpo|cispo|sapo``, which tests/test_trl_losses.py
checks against TRL's own code).
"""

from __future__ import annotations

import copy
import dataclasses
import json
import math
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import torch

from gdro.common.rollouts import SamplingParams
from gdro.loss import (
    AGG_MODES,
    BatchCounts,
    DrGRPOAdvantage,
    DrGRPOLoss,
    GRPOAdvantage,
    GRPOLoss,
    GSPOLoss,
    Loss,
    LossInputs,
    aggregation_denom,
    grpo_loss,
    per_response_mean,
)
from gdro.loss.advantages import group_advantages
from gdro.models.loading import ModelSpec, load_model
from gdro.policy import Forward, OptimConfig, ppo_update
from gdro.rollout.hf import HFGenerator
from tests.conftest import REPO

torch.set_num_threads(1)
F64 = torch.float64


def _t(rows: list[list[float]]) -> torch.Tensor:
    return torch.tensor(rows, dtype=F64)


def _k3(logp: float, ref: float) -> float:
    return math.exp(ref - logp) - (ref - logp) - 1.0


def _random_batch(seed: int, b: int = 7, t: int = 5, spread: float = 0.05):
    """Token log-probs, π_old ``spread`` from them (some ratios far enough to clip) and π_ref near them, a
    ragged mask whose row 0 has no valid token, and advantages of both signs."""
    g = torch.Generator().manual_seed(seed)
    logp = -torch.rand(b, t, generator=g, dtype=F64) * 3
    old = logp + spread * torch.randn(b, t, generator=g, dtype=F64)
    ref = logp + 0.3 * torch.randn(b, t, generator=g, dtype=F64)
    lengths = torch.tensor([0, *torch.randint(1, t + 1, (b - 1,), generator=g).tolist()])
    mask = (torch.arange(t)[None, :] < lengths[:, None]).to(F64)
    adv = torch.randn(b, generator=g, dtype=F64)
    return logp, old, ref, mask, adv


# ----------------------------------------------------------------------------------- plain-loop references
def gspo_reference(logp, old, ref, mask, adv, *, clip_low, clip_high, beta_kl):
    """GSPO with seq-mean-token-mean, in Python floats: ``(loss, d loss / d logp)``."""
    b, t = len(mask), len(mask[0])
    seqs = [i for i in range(b) if sum(mask[i]) > 0]
    loss, grad = 0.0, [[0.0] * t for _ in range(b)]
    for i in seqs:
        toks = [j for j in range(t) if mask[i][j]]
        s = math.exp(sum(logp[i][j] - old[i][j] for j in toks) / len(toks))
        a = adv[i]
        unclipped, clipped = -a * s, -a * min(max(s, 1 - clip_low), 1 + clip_high)
        kl = sum(_k3(logp[i][j], ref[i][j]) for j in toks) / len(toks)
        loss += (max(unclipped, clipped) + beta_kl * kl) / len(seqs)
        for j in toks:  # d s / d logp_ij = s / |y_i|; d k3 / d logp = 1 - exp(ref - logp)
            pg = -a * s / len(toks) if unclipped >= clipped else 0.0
            grad[i][j] = (pg + beta_kl * (1 - math.exp(ref[i][j] - logp[i][j])) / len(toks)) / len(seqs)
    return loss, grad


def dr_grpo_reference(logp, old, ref, mask, adv, *, clip_low, clip_high, beta_kl, max_len):
    """Dr. GRPO in Python floats: token sums over B × L, ``(loss, d loss / d logp)``."""
    b, t = len(mask), len(mask[0])
    loss, grad = 0.0, [[0.0] * t for _ in range(b)]
    for i in range(b):
        for j in range(t):
            if not mask[i][j]:
                continue
            rho, a = math.exp(logp[i][j] - old[i][j]), adv[i]
            unclipped, clipped = -a * rho, -a * min(max(rho, 1 - clip_low), 1 + clip_high)
            loss += (max(unclipped, clipped) + beta_kl * _k3(logp[i][j], ref[i][j])) / (b * max_len)
            pg = -a * rho if unclipped >= clipped else 0.0
            grad[i][j] = (pg + beta_kl * (1 - math.exp(ref[i][j] - logp[i][j]))) / (b * max_len)
    return loss, grad


def advantages_reference(
    rewards: list[float], groups: list[int], *, by_std: bool, eps: float = 1e-6
) -> list[float]:
    """Eq. 3 (population std), or only centred, with loops over each group's members."""
    out = []
    for i, g in enumerate(groups):
        members = [rewards[k] for k in range(len(rewards)) if groups[k] == g]
        mean = sum(members) / len(members)
        std = math.sqrt(sum((r - mean) ** 2 for r in members) / len(members))
        centred = rewards[i] - mean
        out.append(0.0 if abs(centred) < 1e-12 else (centred / (std + eps) if by_std else centred))
    return out


def _run(loss: Loss, logp, old, ref, mask, adv, counts=None):
    x = logp.detach().clone().requires_grad_(True)
    counts = counts or BatchCounts.of(mask.sum(-1).long().numpy())
    value, stats, terms = loss.compute(LossInputs(x, old, mask, adv, ref), counts)
    value.backward()
    return value.detach(), x.grad, stats, terms


# ---------------------------------------------------------------------------------------- GSPO
def test_gspo_hand_example():
    """Four responses, clip 0.1 / 0.2, no KL; every number below is worked out by hand.

    row 0: log-ratios 0.3, 0.1 -> s = e^0.2 = 1.2214 > 1.2, A = +1: clipped, l = -1.2, no gradient
           (token-level GRPO would still pass the gradient of its second token, ratio e^0.1 = 1.105)
    row 1: log-ratios -0.3, 0, 0 -> s = e^-0.1 = 0.9048 in range, A = -2: l = 2 e^-0.1,
           d l / d logp_t = 2 e^-0.1 / 3
    row 2: no valid token: not counted
    row 3: log-ratio ln 0.85 -> s = 0.85 < 0.9, A = -2: clipped, l = -A (1 - 0.1) = 1.8
    loss = (-1.2 + 2 e^-0.1 + 1.8) / 3 (the three responses with tokens)
    """
    old = torch.zeros(4, 3, dtype=F64)
    logp = _t([[0.3, 0.1, 0.0], [-0.3, 0.0, 0.0], [0.0, 0.0, 0.0], [math.log(0.85), 0.0, 0.0]])
    mask = _t([[1, 1, 0], [1, 1, 1], [0, 0, 0], [1, 0, 0]])
    adv = torch.tensor([1.0, -2.0, 0.5, -2.0], dtype=F64)
    loss, grad, stats, terms = _run(
        GSPOLoss(clip_low=0.1, clip_high=0.2, beta_kl=0.0), logp, old, None, mask, adv
    )
    assert loss.item() == pytest.approx((-1.2 + 2 * math.exp(-0.1) + 1.8) / 3, rel=1e-12)
    want = torch.zeros(4, 3, dtype=F64)
    want[1] = 2 * math.exp(-0.1) / 3 / 3
    torch.testing.assert_close(grad, want, rtol=1e-12, atol=1e-15)
    assert stats["seq_clip_frac"].item() == pytest.approx(2 / 3)  # rows 0 and 3 of the 3 with tokens
    assert stats["clip_frac"].item() == pytest.approx(3 / 6)  # their 3 of the 6 valid tokens
    assert stats["seq_ratio_mean"].item() == pytest.approx((math.exp(0.2) + math.exp(-0.1) + 0.85) / 3)
    assert stats["kl"].item() == 0.0 and terms.kl is None
    # the controllers' per-response signal is each response's own clipped term
    torch.testing.assert_close(
        per_response_mean(terms.pg, mask)[[0, 1, 3]], torch.tensor([-1.2, 2 * math.exp(-0.1), 1.8], dtype=F64)
    )


@pytest.mark.parametrize("seed", range(6))
def test_gspo_matches_the_loop_reference(seed: int):
    logp, old, ref, mask, adv = _random_batch(seed, spread=0.1)
    hyper = {"clip_low": 0.01, "clip_high": 0.02, "beta_kl": 0.05}
    loss, grad, stats, _ = _run(GSPOLoss(**hyper), logp, old, ref, mask, adv)
    want, want_grad = gspo_reference(
        logp.tolist(), old.tolist(), ref.tolist(), mask.tolist(), adv.tolist(), **hyper
    )
    assert loss.item() == pytest.approx(want, rel=1e-10, abs=1e-12)
    torch.testing.assert_close(grad, torch.tensor(want_grad, dtype=F64), rtol=1e-9, atol=1e-12)
    assert 0.0 < stats["seq_clip_frac"].item() < 1.0  # both branches exercised


def test_gspo_at_one_optimiser_step_is_grpo_with_sequence_means():
    """π_old = π_θ: s = 1, nothing clipped, and the gradient is GRPO's with seq-mean-token-mean."""
    logp, _, _, mask, adv = _random_batch(3)
    gspo = _run(GSPOLoss(beta_kl=0.0), logp, logp, None, mask, adv)
    grpo = _run(GRPOLoss(beta_kl=0.0, agg="seq-mean-token-mean"), logp, logp, None, mask, adv)
    torch.testing.assert_close(gspo[0], grpo[0], rtol=1e-12, atol=1e-14)
    torch.testing.assert_close(gspo[1], grpo[1], rtol=1e-12, atol=1e-14)
    assert gspo[2]["seq_clip_frac"].item() == 0.0 and gspo[2]["seq_ratio_mean"].item() == pytest.approx(1.0)


# ---------------------------------------------------------------------------------------- Dr. GRPO
def test_dr_grpo_hand_example():
    """Three responses, L = 4, clip 0.2 / 0.28, no KL; B × L = 12.

    row 0: 2 tokens at ratio 1, A = +1: l = -1 each; gradient -1/12 each
    row 1: 4 tokens, ratio 1.5 on the first (clipped at 1.28 for A = +0.5: l = -0.64, no gradient), 1 on
           the others (l = -0.5, gradient -0.5/12)
    row 2: 1 token at ratio 0.5, A = -1: -A rho = 0.5 vs -A 0.8 = 0.8: clipped, l = 0.8, no gradient
    loss = (-2 - 0.64 - 1.5 + 0.8) / 12: a long response weighs by its length; one divisor for all
    """
    old = torch.zeros(3, 4, dtype=F64)
    logp = _t([[0, 0, 0, 0], [math.log(1.5), 0, 0, 0], [math.log(0.5), 0, 0, 0]])
    mask = _t([[1, 1, 0, 0], [1, 1, 1, 1], [1, 0, 0, 0]])
    adv = torch.tensor([1.0, 0.5, -1.0], dtype=F64)
    loss, grad, stats, _ = _run(DrGRPOLoss(max_new_tokens=4, beta_kl=0.0), logp, old, None, mask, adv)
    assert loss.item() == pytest.approx((-2 - 0.64 - 1.5 + 0.8) / 12, rel=1e-12)
    want = _t([[-1 / 12, -1 / 12, 0, 0], [0, -0.5 / 12, -0.5 / 12, -0.5 / 12], [0, 0, 0, 0]])
    torch.testing.assert_close(grad, want, rtol=1e-12, atol=1e-15)
    assert stats["clip_frac"].item() == pytest.approx(2 / 7)
    assert stats["pg_loss"].item() == pytest.approx(loss.item())


@pytest.mark.parametrize("seed", range(6))
def test_dr_grpo_matches_the_loop_reference(seed: int):
    logp, old, ref, mask, adv = _random_batch(seed, spread=0.3)  # token ratios far enough from 1 to clip
    hyper = {"clip_low": 0.2, "clip_high": 0.28, "beta_kl": 0.05}
    loss, grad, stats, _ = _run(DrGRPOLoss(max_new_tokens=9, **hyper), logp, old, ref, mask, adv)
    want, want_grad = dr_grpo_reference(
        logp.tolist(), old.tolist(), ref.tolist(), mask.tolist(), adv.tolist(), max_len=9, **hyper
    )
    assert loss.item() == pytest.approx(want, rel=1e-10, abs=1e-12)
    torch.testing.assert_close(grad, torch.tensor(want_grad, dtype=F64), rtol=1e-9, atol=1e-12)
    assert stats["clip_frac"].item() > 0


# ------------------------------------------------------------------------------------- advantages, ragged
def test_advantages_hand_example_over_ragged_groups():
    """Groups of 3, 1 and 2 (interleaved rows; group 3 empty): rewards 1,0,0 | 1 | 1,1.

    Dr. GRPO centres only: 2/3, -1/3, -1/3 | 0 | 0, 0. GRPO and GSPO divide by the population std
    sqrt(2/9) + eps.
    """
    rewards = torch.tensor([1.0, 1.0, 0.0, 1.0, 0.0, 1.0])
    groups = torch.tensor([0, 2, 0, 1, 0, 2])
    dr = DrGRPOAdvantage()(rewards, groups, 4)  # loss=dr-grpo's (it selects advantage=dr-grpo; #50)
    torch.testing.assert_close(dr, torch.tensor([2 / 3, 0.0, -1 / 3, 0.0, -1 / 3, 0.0]))
    std = math.sqrt(2 / 9) + 1e-6
    for estimator in (GRPOAdvantage(),):  # loss=grpo's and loss=gspo's (advantage=grpo, the default)
        got = estimator(rewards, groups, 4)
        torch.testing.assert_close(
            got, torch.tensor([2 / 3 / std, 0.0, -1 / 3 / std, 0.0, -1 / 3 / std, 0.0])
        )


@pytest.mark.parametrize("estimator", [GRPOAdvantage(), DrGRPOAdvantage()], ids=lambda x: type(x).__name__)
def test_advantages_match_the_loop_reference(estimator):
    g = torch.Generator().manual_seed(0)
    sizes = [5, 1, 0, 3, 8, 2]  # Rollout-GDRO's ragged n, an empty group among them
    groups = torch.tensor([k for k, n in enumerate(sizes) for _ in range(n)])[torch.randperm(19, generator=g)]
    rewards = torch.randint(0, 2, (19,), generator=g).to(F64)
    got = estimator(rewards, groups, len(sizes))
    want = advantages_reference(rewards.tolist(), groups.tolist(), by_std=not isinstance(estimator, DrGRPOAdvantage))
    torch.testing.assert_close(got, torch.tensor(want, dtype=F64), rtol=1e-12, atol=1e-12)


# ---------------------------------------------------------------------------------------- every loss
LOSSES = [
    GRPOLoss(beta_kl=0.05),
    GRPOLoss(agg="seq-mean-token-mean", clip_ratio_c=3.0, beta_kl=0.05),
    GSPOLoss(clip_low=0.01, clip_high=0.02, beta_kl=0.05),
    GSPOLoss(agg="token-mean", clip_low=0.01),
    DrGRPOLoss(max_new_tokens=6, beta_kl=0.05),
]
IDS = ["grpo", "grpo-seq-dual", "gspo", "gspo-token-mean", "dr-grpo"]


@pytest.mark.parametrize("loss", LOSSES, ids=IDS)
def test_micro_batches_sum_to_the_mini_batch(loss):
    """Micro-batches (rows in any order) that each divide by the mini-batch's counts give its loss, gradient
    and statistics when summed: gradient accumulation and processes that each hold a part."""
    logp, old, ref, mask, adv = _random_batch(11, b=9, spread=0.3)
    counts = BatchCounts.of(mask.sum(-1).long().numpy())
    full, full_grad, full_stats, _ = _run(loss, logp, old, ref, mask, adv, counts)
    assert full_stats["clip_frac"].item() > 0
    x = logp.detach().clone().requires_grad_(True)
    total, stats = torch.zeros((), dtype=F64), dict.fromkeys(full_stats, 0.0)
    for rows in ([4, 0], [8], [1, 2, 7, 3], [5, 6]):
        value, part, _ = loss.compute(
            LossInputs(x[rows], old[rows], mask[rows], adv[rows], ref[rows]), counts
        )
        value.backward()
        total = total + value.detach()
        stats = {k: stats[k] + part[k] for k in part}
    torch.testing.assert_close(total, full, rtol=1e-12, atol=1e-14)
    torch.testing.assert_close(x.grad, full_grad, rtol=1e-12, atol=1e-14)
    for k in full_stats:
        torch.testing.assert_close(stats[k], full_stats[k], rtol=1e-12, atol=1e-14, msg=k)


@pytest.mark.parametrize("loss", LOSSES, ids=IDS)
def test_prompt_gdro_multipliers_scale_each_response(loss):
    """Multipliers w > 0 on the advantages (Eq. 16) scale each response's term and gradient by w, so that the
    trainer's per-response signal over w is the unweighted one."""
    logp, old, _, mask, adv = _random_batch(5, spread=0.3)
    w = torch.tensor([0.5, 3.0, 1.0, 0.2, 2.5, 1.7, 0.9], dtype=F64)
    no_kl = dataclasses.replace(loss, beta_kl=0.0)
    plain = _run(no_kl, logp, old, None, mask, adv)
    weighted = _run(no_kl, logp, old, None, mask, adv * w)
    torch.testing.assert_close(
        per_response_mean(weighted[3].pg, mask) / w, per_response_mean(plain[3].pg, mask)
    )
    torch.testing.assert_close(weighted[1], plain[1] * w[:, None], rtol=1e-12, atol=1e-14)


def test_grpo_is_the_loss_of_before_the_seam_to_the_bit():
    """``GRPOLoss.compute`` is ``grpo_loss`` with the mini-batch denominators the update used to pass."""
    logp, old, ref, mask, adv = _random_batch(2, b=8)
    for agg in AGG_MODES:
        for kw in ({}, {"clip_ratio_c": 3.0}, {"beta_kl": 0.0}):
            cfg = GRPOLoss(agg=agg, **kw)
            got = cfg.compute(
                LossInputs(logp, old, mask, adv, ref), BatchCounts.of(mask.sum(-1).long().numpy())
            )
            want = grpo_loss(
                logp,
                old,
                adv,
                mask,
                clip_low=0.2,
                clip_high=0.28,
                beta_kl=cfg.beta_kl,
                ref_logp=ref,
                kl_estimator="low_var_kl",
                agg=agg,
                denom=aggregation_denom(mask, agg),
                token_denom=aggregation_denom(mask, "token-mean"),
                clip_ratio_c=cfg.clip_ratio_c,
            )
            assert torch.equal(got[0], want[0]) and got[1].keys() == want[1].keys()
            assert all(torch.equal(got[1][k], want[1][k]) for k in want[1])
            assert torch.equal(got[2].pg, want[2].pg) and torch.equal(got[2].kl, want[2].kl)
    r, gi = torch.tensor([1.0, 0.0, 1.0, 1.0, 0.0]), torch.tensor([0, 0, 1, 1, 1])
    for kw in ({}, {"norm_adv_by_std": False}, {"unbiased_std": True, "eps": 0.0}):
        adv_cfg = GRPOAdvantage(**kw)  # the advantage keys of loss=grpo moved to advantage=grpo (#50)
        want = group_advantages(
            r, gi, 2, norm_by_std=adv_cfg.norm_adv_by_std, eps=adv_cfg.eps, unbiased_std=adv_cfg.unbiased_std
        )
        assert torch.equal(adv_cfg(r, gi, 2), want)


@pytest.mark.parametrize(
    ("make", "message"),
    [
        (lambda: GSPOLoss(clip_low=1.5), "clip_low must be in (0, 1), got 1.5"),
        (lambda: GSPOLoss(clip_high=0.0), "clip_high must be > 0, got 0.0"),
        (lambda: GSPOLoss(agg="mean"), "agg must be one of"),
        (lambda: GRPOAdvantage(eps=-1.0), "eps must be >= 0, got -1.0"),
        (lambda: DrGRPOLoss(max_new_tokens=0), "max_new_tokens must be >= 1, got 0"),
        (lambda: DrGRPOLoss(max_new_tokens=4, kl_estimator="k4"), "kl_estimator must be one of"),
        (lambda: DrGRPOLoss(max_new_tokens=4, beta_kl=-1.0), "beta_kl must be >= 0, got -1.0"),
    ],
)
def test_bad_values_name_the_key(make, message):
    with pytest.raises(ValueError) as info:
        make()
    assert str(info.value).startswith(message)


def test_every_loss_needs_a_reference_only_with_a_kl():
    logp, old, _, mask, adv = _random_batch(0)
    for loss in (GSPOLoss(), DrGRPOLoss(max_new_tokens=5)):
        with pytest.raises(ValueError, match="ref_logp is required"):
            loss.compute(LossInputs(logp, old, mask, adv), BatchCounts.of(mask.sum(-1).long().numpy()))


# ---------------------------------------------------------------------------------------- a real update
MAX_NEW = 12


@pytest.fixture(scope="module")
def tiny_roll():
    """The tiny model and real rollouts in ragged groups of 3, 0, 1, 5 and 2 rows, one completion emptied."""
    model, tok = load_model(ModelSpec("tiny", max_prompt_len=64, max_new_tokens=MAX_NEW), train=True)
    engine = HFGenerator(model, tok, use_chat_template=True, max_prompt_len=64)
    prompts = ["Copy: " + p for p in ("ab", "abcdefg", "xyz", "hello", "q")]
    roll = engine.generate(
        prompts, [3, 0, 1, 5, 2], seed=0, sampling=SamplingParams(temperature=1.5, max_new_tokens=MAX_NEW)
    )
    comps = [list(c) for c in roll.completion_ids]
    comps[4] = []
    return model, tok, dataclasses.replace(roll, completion_ids=comps)


@pytest.mark.parametrize(
    "loss",
    [GSPOLoss(clip_low=3e-4, clip_high=4e-4), DrGRPOLoss(max_new_tokens=MAX_NEW)],
    ids=["gspo", "dr-grpo"],
)
def test_ppo_update_is_the_same_in_any_micro_batches(tiny_roll, loss):
    """A real two-mini-batch update with a reference: one micro-batch per mini-batch, or micro-batches of 2
    rows, give the same statistics, per-response losses and parameters (float32 rounding apart); GSPO clips
    from the second mini-batch on."""
    model, tok, roll = tiny_roll
    rewards = torch.tensor([1.0, 0, 1, 1, 0, 1, 1, 0, 0, 1, 0], dtype=torch.float32)
    estimator = DrGRPOAdvantage() if isinstance(loss, DrGRPOLoss) else GRPOAdvantage()  # what each loss= selects
    adv = estimator(rewards, torch.as_tensor(roll.group_index), roll.num_groups)
    out = []
    for micro in (128, 2):
        policy, ref = copy.deepcopy(model), copy.deepcopy(model).eval().requires_grad_(False)
        cfg = OptimConfig(
            lr=1e-3, warmup_steps=0, mini_batches=2, micro_batch_size=micro, shared_prefix=False
        )
        opt, sched = cfg.make(policy.parameters())
        stats, losses = ppo_update(
            policy,
            opt,
            sched,
            roll,
            adv,
            loss,
            cfg,
            Forward.bind(cfg, pad_id=tok.pad_token_id, temperature=1.0),
            rng=np.random.default_rng(0),
            ref_model=ref,
        )
        out.append((stats, losses, dict(policy.named_parameters())))
    (s_a, l_a, p_a), (s_b, l_b, p_b) = out
    assert s_a.keys() == s_b.keys()
    for k in s_a:
        if not k.startswith("time/"):
            assert math.isfinite(s_a[k]) and s_b[k] == pytest.approx(s_a[k], rel=1e-4, abs=1e-6), k
    np.testing.assert_allclose(l_b.pg, l_a.pg, rtol=1e-4, atol=1e-6)
    for k in p_a:
        assert (p_b[k] - p_a[k]).abs().max() <= 1e-4, k
    if isinstance(loss, GSPOLoss):
        assert s_a["train/seq_clip_frac"] > 0 and s_a["train/seq_ratio_mean"] != 1.0


# ---------------------------------------------------------------------------------------- real runs
@pytest.mark.slow
@pytest.mark.parametrize("loss", ["gspo", "dr-grpo", "dapo", "bnpo", "cispo", "sapo", "vespo", "luspo"])
def test_each_loss_trains_with_rollout_gdro(loss: str, tmp_path: Path):
    """``gdro-train experiment=smoke loss=<loss> allocator=rollout-gdro`` runs end to end (2 mini-batches per
    step: GSPO's sequence clip acts), with the KL, and logs the loss's metrics at every step. Its 8 prompts a
    step come from a pool of 8, so they recur and Rollout-GDRO's allocation (``allocator.eta=5``) is ragged by
    the 3rd step. (The losses of TRL's ``loss_type``s: tests/test_trl_losses.py.)"""
    run_dir = tmp_path / "run"
    overrides = ["experiment=smoke", f"loss={loss}", "allocator=rollout-gdro", "optim.mini_batches=2",
                 "data.train_size=8", "allocator.eta=5", "progress=false", "eval.at_start=false",
                 "eval.at_end=false", f"hydra.run.dir={run_dir}"]
    proc = subprocess.run([sys.executable, "-m", "gdro.cli.train", *overrides], cwd=REPO, capture_output=True, text=True,
                          timeout=900, check=False)
    assert proc.returncode == 0, proc.stderr[-3000:]
    rows = [json.loads(x) for x in (run_dir / "metrics.jsonl").read_text().splitlines() if x.strip()]
    assert [r["step"] for r in rows] == [1, 2, 3]
    for r in rows:
        assert r["rollout/n_total"] == 8 * 4 and "gdro/mu" in r
        assert all(
            math.isfinite(r[k]) for k in ("train/loss", "train/pg_loss", "train/kl", "train/grad_norm")
        )
    ragged = [sorted({v for k, v in r.items() if k.startswith("gdro/rollouts/")}) for r in rows]
    assert any(len(n) > 1 for n in ragged), ragged
    if loss == "gspo":
        assert any(r["train/seq_clip_frac"] > 0 for r in rows)
    config = (run_dir / "config.yaml").read_text()
    assert f"_target_: gdro.loss.{loss.replace('-', '_')}." in config
