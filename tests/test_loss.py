"""GRPO loss (paper Eq. 4-7): REINFORCE limit, clip regions, aggregation, accumulation, KL; and pass@k."""

from __future__ import annotations

import itertools
import math

import numpy as np
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from gdro.grading.passk import mean_at_k, pass_at_k
from gdro.loss import (
    AGG_MODES,
    GRPOAdvantage,
    GRPOLoss,
    aggregate,
    aggregation_denom,
    clipped_surrogate,
    grpo_loss,
    kl_penalty,
    per_response_mean,
)

torch.set_num_threads(1)
CLIP = {"clip_low": 0.2, "clip_high": 0.28}


def _batch(seed: int, b: int = 5, t: int = 6, v: int = 7) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Real logits (B, T, V), sampled tokens (B, T), and a ragged mask whose row 0 has no valid token."""
    g = torch.Generator().manual_seed(seed)
    logits = torch.randn(b, t, v, generator=g, dtype=torch.float64)
    tokens = torch.randint(0, v, (b, t), generator=g)
    lengths = torch.tensor([0, *torch.randint(1, t + 1, (b - 1,), generator=g).tolist()])
    mask = (torch.arange(t)[None, :] < lengths[:, None]).to(torch.float64)
    return logits, tokens, mask


def _logp(logits: torch.Tensor, tokens: torch.Tensor) -> torch.Tensor:
    return torch.log_softmax(logits, dim=-1).gather(-1, tokens.unsqueeze(-1)).squeeze(-1)


# ----------------------------------------------------------------------------- REINFORCE limit at ratio 1
@pytest.mark.parametrize("agg", AGG_MODES)
def test_gradient_at_ratio_one_is_reinforce(agg: str) -> None:
    logits, tokens, mask = _batch(0)
    adv = torch.tensor([0.3, 1.5, -0.7, 0.0, -2.0], dtype=torch.float64)
    logits.requires_grad_(True)
    logp = _logp(logits, tokens)
    loss, stats, _ = grpo_loss(logp, logp.detach(), adv, mask, **CLIP, beta_kl=0.0, agg=agg)
    loss.backward()
    # -sum_{b,t} w_bt A_b grad(logp_bt), grad_logits(logp) = onehot(y) - softmax, with the mode's weights w_bt
    lengths = mask.sum(-1)
    if agg == "token-mean":
        w = mask / mask.sum()
    elif agg == "seq-mean-token-mean":
        w = mask / lengths.clamp_min(1)[:, None] / (lengths > 0).sum()
    else:
        w = mask / mask.shape[0]
    onehot = torch.nn.functional.one_hot(tokens, logits.shape[-1]).to(torch.float64)
    want = -(w * adv[:, None])[..., None] * (onehot - torch.softmax(logits.detach(), -1))
    torch.testing.assert_close(logits.grad, want, rtol=1e-10, atol=1e-12)
    assert stats["clip_frac"].item() == 0.0
    assert stats["ratio_mean"].item() == pytest.approx(1.0)


# ----------------------------------------------------------------------------- clip regions
@pytest.mark.parametrize(
    ("adv", "ratio", "clipped"),
    [
        (1.0, 1.5, True),  # A > 0, rho > 1 + clip_high: clipped, no gradient
        (-1.0, 0.5, True),  # A < 0, rho < 1 - clip_low: clipped, no gradient
        (1.0, 1.1, False),  # inside the trust region
        (-1.0, 0.9, False),
        (1.0, 0.5, False),  # A > 0, rho below the range: the unclipped branch is the max, gradient flows
        (-1.0, 1.5, False),  # A < 0, rho above the range: unclipped (no dual-clip), gradient flows
    ],
)
def test_clip_regions(adv: float, ratio: float, clipped: bool) -> None:
    old = torch.zeros(1, 1, dtype=torch.float64)
    logp = torch.full((1, 1), math.log(ratio), dtype=torch.float64, requires_grad=True)
    a = torch.tensor([adv], dtype=torch.float64)
    loss, is_clipped = clipped_surrogate(logp, old, a, 0.2, 0.28)
    loss.sum().backward()
    assert bool(is_clipped.item()) is clipped
    if clipped:
        assert logp.grad.item() == 0.0
        bound = 1.28 if adv > 0 else 0.8
        assert loss.item() == pytest.approx(-adv * bound)
    else:
        assert logp.grad.item() == pytest.approx(-adv * ratio)  # d(-A rho)/d logp = -A rho
        assert loss.item() == pytest.approx(-adv * ratio)


def test_dual_clip_caps_negative_advantages() -> None:
    old = torch.zeros(1, 2, dtype=torch.float64)
    logp = torch.tensor([[math.log(5.0), math.log(2.0)]], dtype=torch.float64, requires_grad=True)
    a = torch.tensor([-1.0], dtype=torch.float64)
    loss, clipped = clipped_surrogate(logp, old, a, 0.2, 0.28, clip_ratio_c=3.0)
    loss.sum().backward()
    torch.testing.assert_close(loss, torch.tensor([[3.0, 2.0]], dtype=torch.float64))
    assert clipped.tolist() == [[True, False]]
    assert logp.grad.tolist() == [[0.0, 2.0]]
    with pytest.raises(ValueError, match="clip_ratio_c must be > 1"):
        clipped_surrogate(logp, old, a, 0.2, 0.28, clip_ratio_c=0.5)


# ----------------------------------------------------------------------------- aggregation on hand values
def test_aggregation_modes_hand_example() -> None:
    inf, nan = float("inf"), float("nan")
    values = torch.tensor([[1.0, 2.0, inf], [4.0, nan, 6.0], [7.0, 8.0, 9.0]])
    mask = torch.tensor([[1, 1, 0], [1, 0, 0], [0, 0, 0]])  # 3 valid tokens; row 2 has none
    assert aggregate(values, mask, "token-mean").item() == pytest.approx((1 + 2 + 4) / 3)
    # per-sequence means 1.5 and 4.0, over the 2 sequences with a valid token
    assert aggregate(values, mask, "seq-mean-token-mean").item() == pytest.approx((1.5 + 4.0) / 2)
    # per-sequence sums 3, 4, 0 over all 3 sequences
    assert aggregate(values, mask, "seq-mean-token-sum").item() == pytest.approx((3 + 4 + 0) / 3)
    assert aggregate(values, mask, "token-mean", denom=10.0).item() == pytest.approx(0.7)
    assert aggregate(values, mask, "seq-mean-token-mean", denom=4.0).item() == pytest.approx(5.5 / 4)
    assert [aggregation_denom(mask, m) for m in AGG_MODES] == [3.0, 2.0, 3.0]
    assert aggregate(values, torch.zeros_like(mask), "token-mean").item() == 0.0  # empty: 0, not NaN
    with pytest.raises(ValueError, match="mode must be one of"):
        aggregate(values, mask, "sum")
    with pytest.raises(ValueError, match="denom must be"):
        aggregate(values, mask, "token-mean", denom=0.0)


# ----------------------------------------------------------------------------- gradient accumulation
@pytest.mark.parametrize("agg", AGG_MODES)
def test_microbatch_accumulation_with_global_denom(agg: str) -> None:
    logits, tokens, mask = _batch(1, b=7)
    g = torch.Generator().manual_seed(2)
    adv = torch.randn(7, generator=g, dtype=torch.float64)
    old = _logp(logits, tokens) + 0.3 * torch.randn(7, 6, generator=g, dtype=torch.float64)  # some clipping
    ref = _logp(logits, tokens) + 0.5 * torch.randn(7, 6, generator=g, dtype=torch.float64)
    kw = {**CLIP, "beta_kl": 0.1, "agg": agg}

    full_logits = logits.clone().requires_grad_(True)
    full_loss, full_stats, _ = grpo_loss(_logp(full_logits, tokens), old, adv, mask, ref_logp=ref, **kw)
    full_loss.backward()
    assert full_stats["clip_frac"].item() > 0

    denom, token_denom = aggregation_denom(mask, agg), aggregation_denom(mask, "token-mean")
    acc_logits = logits.clone().requires_grad_(True)
    acc_loss, acc_stats = torch.zeros((), dtype=torch.float64), dict.fromkeys(full_stats, 0.0)
    for sl in (slice(0, 2), slice(2, 3), slice(3, 7)):
        loss, stats, _ = grpo_loss(
            _logp(acc_logits[sl], tokens[sl]),
            old[sl],
            adv[sl],
            mask[sl],
            ref_logp=ref[sl],
            denom=denom,
            token_denom=token_denom,
            **kw,
        )
        loss.backward()
        acc_loss = acc_loss + loss.detach()
        acc_stats = {k: acc_stats[k] + stats[k] for k in stats}
    torch.testing.assert_close(acc_loss, full_loss.detach())
    torch.testing.assert_close(acc_logits.grad, full_logits.grad)
    for key in full_stats:
        torch.testing.assert_close(acc_stats[key], full_stats[key], msg=key)


def test_grpo_loss_kl_term_and_stats() -> None:
    logits, tokens, mask = _batch(3)
    logp = _logp(logits, tokens)
    ref = logp + 0.2
    adv = torch.ones(5, dtype=torch.float64)
    with pytest.raises(ValueError, match="ref_logp is required"):
        grpo_loss(logp, logp, adv, mask, **CLIP, beta_kl=0.01)
    base, s0, _ = grpo_loss(logp, logp, adv, mask, **CLIP, beta_kl=0.0)
    assert s0["kl"].item() == 0.0
    logged, s1, _ = grpo_loss(logp, logp, adv, mask, **CLIP, beta_kl=0.0, ref_logp=ref)
    assert logged.item() == base.item() and s1["kl"].item() > 0  # KL logged, not in the loss
    with_kl, s2, _ = grpo_loss(logp, logp, adv, mask, **CLIP, beta_kl=0.5, ref_logp=ref)
    k3 = math.exp(0.2) - 0.2 - 1.0
    assert s2["kl"].item() == pytest.approx(k3)
    assert with_kl.item() == pytest.approx(base.item() + 0.5 * k3)
    assert all(v.dim() == 0 and not v.requires_grad for v in s2.values())


def test_per_response_signals_are_reductions_of_the_loss_terms() -> None:
    logp = torch.tensor([[0.0, math.log(2.0), 0.0], [0.0, 0.0, 0.0]])
    old = torch.zeros(2, 3)
    mask = torch.tensor([[1, 1, 0], [1, 1, 1]])
    _, _, tokens = grpo_loss(logp, old, torch.tensor([1.0, -2.0]), mask, **CLIP, beta_kl=0.0, ref_logp=old,
                             kl_estimator="k1")
    # row 0: tokens rho = 1 (loss -1) and rho = 2 clipped to 1.28 (loss -1.28); row 1: 3 x (+2)
    torch.testing.assert_close(per_response_mean(tokens.pg, mask), torch.tensor([(-1.0 - 1.28) / 2, 2.0]))
    torch.testing.assert_close(per_response_mean(tokens.kl, mask), torch.tensor([math.log(2.0) / 2, 0.0]))
    _, _, no_ref = grpo_loss(logp, old, torch.tensor([1.0, -2.0]), mask, **CLIP, beta_kl=0.0)
    assert no_ref.kl is None
    # Eq. 16 multipliers scale the surrogate linearly: the weighted loss terms over w are the unweighted ones
    w = torch.tensor([3.0, 0.5])
    _, _, weighted = grpo_loss(logp, old, torch.tensor([1.0, -2.0]) * w, mask, **CLIP, beta_kl=0.0)
    torch.testing.assert_close(per_response_mean(weighted.pg, mask) / w, per_response_mean(tokens.pg, mask))


# ----------------------------------------------------------------------------- KL estimators
def test_kl_estimators_hand_values() -> None:
    logp = torch.tensor([[math.log(0.5), math.log(0.3)]])
    ref = torch.tensor([[math.log(0.25), math.log(0.3)]])
    l2 = math.log(2.0)
    for name in ("k1", "kl"):
        torch.testing.assert_close(kl_penalty(logp, ref, name), torch.tensor([[l2, 0.0]]))
    for name in ("k2", "mse"):
        torch.testing.assert_close(kl_penalty(logp, ref, name), torch.tensor([[0.5 * l2**2, 0.0]]))
    for name in ("k3", "low_var_kl"):  # exp(-ln 2) + ln 2 - 1
        torch.testing.assert_close(kl_penalty(logp, ref, name), torch.tensor([[0.5 + l2 - 1.0, 0.0]]))
    with pytest.raises(ValueError, match="estimator must be one of"):
        kl_penalty(logp, ref, "k4")


@settings(max_examples=50, deadline=None)
@given(
    st.lists(st.floats(-30, 0, allow_nan=False), min_size=2, max_size=16).filter(lambda x: len(x) % 2 == 0)
)
def test_k3_nonnegative_and_clamped(xs: list[float]) -> None:
    t = torch.tensor(xs, dtype=torch.float64).view(2, -1)
    logp = t[0:1].clone().requires_grad_(True)
    k3 = kl_penalty(logp, t[1:2], "low_var_kl")
    assert (k3 >= 0).all() and (k3 <= 10).all()
    k3.sum().backward()
    assert torch.isfinite(logp.grad).all()
    assert kl_penalty(t[0:1], t[0:1], "k3").abs().max().item() == 0.0


# ----------------------------------------------------------------------------- GRPOLoss
@pytest.mark.parametrize(
    ("key", "value", "message"),
    [
        ("clip_low", -0.1, "clip_low must be in (0, 1), got -0.1"),
        ("clip_low", 1.0, "clip_low must be in (0, 1), got 1.0"),
        ("clip_high", 0.0, "clip_high must be > 0, got 0.0"),
        ("beta_kl", -0.001, "beta_kl must be >= 0, got -0.001"),
        ("kl_estimator", "k4", "kl_estimator must be one of"),
        ("agg", "mean", "agg must be one of"),
        ("clip_ratio_c", 1.0, "clip_ratio_c must be > 1"),
    ],
)
def test_loss_config_validation_names_the_key(key: str, value: object, message: str) -> None:
    with pytest.raises(ValueError) as info:
        GRPOLoss(**{key: value})
    assert str(info.value).startswith(message)


def test_loss_config_defaults() -> None:
    cfg = GRPOLoss()
    assert (cfg.clip_low, cfg.clip_high, cfg.beta_kl, cfg.kl_estimator, cfg.agg) == (
        0.2,
        0.28,
        0.001,
        "low_var_kl",
        "token-mean",
    )
    assert cfg.clip_ratio_c is None
    adv = GRPOAdvantage()  # the advantage keys moved to advantage=grpo (#50)
    assert adv.norm_adv_by_std and adv.eps == 1e-6 and not adv.unbiased_std and adv.scale_rewards == "group"


# ----------------------------------------------------------------------------- pass@k / mean@k
def _brute_pass_at_k(n: int, c: int, k: int) -> float:
    """Fraction of the k-subsets of n samples (the first c correct) that contain a correct sample."""
    subsets = list(itertools.combinations(range(n), k))
    return sum(any(i < c for i in s) for s in subsets) / len(subsets)


def test_pass_at_k_matches_enumeration() -> None:
    triples = [(n, c, k) for n in range(1, 9) for c in range(n + 1) for k in range(1, n + 1)]
    for n, c, k in triples:
        assert pass_at_k(n, c, k) == pytest.approx(_brute_pass_at_k(n, c, k), abs=1e-12), (n, c, k)
    n, c, k = (np.array(col) for col in zip(*triples, strict=True))
    got = pass_at_k(n, c, k)  # elementwise on arrays
    assert isinstance(got, np.ndarray) and got.shape == n.shape
    np.testing.assert_allclose(got, [_brute_pass_at_k(*t) for t in triples], atol=1e-12)


def test_pass_at_k_edges_and_large_n() -> None:
    assert pass_at_k(10, 0, 3) == 0.0
    assert pass_at_k(10, 8, 3) == 1.0  # k > n - c
    assert pass_at_k(4, 1, 1) == pytest.approx(0.25)
    assert pass_at_k(np.array([4, 8]), np.array([1, 0]), 2).tolist() == pytest.approx([0.5, 0.0])
    n, c, k = 100_000, 37, 1_000  # binomials far beyond float range; compare with log-gamma
    log_ratio = (
        math.lgamma(n - c + 1) - math.lgamma(n - c - k + 1) - math.lgamma(n + 1) + math.lgamma(n - k + 1)
    )
    assert pass_at_k(n, c, k) == pytest.approx(1.0 - math.exp(log_ratio), rel=1e-9)
    assert 0.0 < pass_at_k(10**6, 1, 1) < 1e-5


@pytest.mark.parametrize(
    ("args", "match"),
    [
        ((4, 1, 0), "k must be >= 1"),
        ((4, -1, 1), "c must be >= 0"),
        ((4, 5, 1), "c must be <= n"),
        ((4, 1, 5), "k must be <= n"),
        ((4, 1.5, 1), "c must be integer-valued"),
    ],
)
def test_pass_at_k_validation(args: tuple, match: str) -> None:
    with pytest.raises(ValueError, match=match):
        pass_at_k(*args)


def test_mean_at_k() -> None:
    assert mean_at_k(3, 8) == pytest.approx(0.375)
    np.testing.assert_allclose(mean_at_k(np.array([0, 4, 8]), 8), [0.0, 0.5, 1.0])
    with pytest.raises(ValueError, match="c must be <= n"):
        mean_at_k(9, 8)
    with pytest.raises(ValueError, match="n must be >= 1"):
        mean_at_k(0, 0)
