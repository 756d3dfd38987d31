"""GRPO advantages over ragged groups (paper Eq. 3) against a slow, readable per-group reference."""

from __future__ import annotations

import math

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from gdro.loss.advantages import group_advantages, group_sizes

torch.set_num_threads(1)


def reference_advantages(
    rewards: list[float], groups: list[int], norm_by_std: bool, eps: float, unbiased: bool
) -> list[float]:
    """Eq. 3 written group by group in plain Python."""
    out = [0.0] * len(rewards)
    for g in set(groups):
        rows = [i for i, gi in enumerate(groups) if gi == g]
        vals = [rewards[i] for i in rows]
        n = len(vals)
        mean = sum(vals) / n
        if n == 1:
            continue  # a group of one carries no relative signal: A = 0
        ddof = 1 if unbiased else 0
        std = math.sqrt(sum((v - mean) ** 2 for v in vals) / (n - ddof))
        for i in rows:
            out[i] = (rewards[i] - mean) / (std + eps) if norm_by_std else rewards[i] - mean
    return out


@st.composite
def ragged_batch(draw: st.DrawFn) -> tuple[list[float], list[int], int]:
    """Random group sizes (including 0 and 1), rows shuffled so groups are not contiguous."""
    sizes = draw(st.lists(st.integers(0, 7), min_size=1, max_size=8))
    binary = draw(st.booleans())
    reward = st.sampled_from([0.0, 1.0]) if binary else st.floats(-5, 5, allow_nan=False, width=32)
    groups = [g for g, s in enumerate(sizes) for _ in range(s)]
    rewards = draw(st.lists(reward, min_size=len(groups), max_size=len(groups)))
    perm = draw(st.permutations(list(range(len(groups)))))
    return [rewards[p] for p in perm], [groups[p] for p in perm], len(sizes)


@settings(max_examples=150, deadline=None)
@given(
    batch=ragged_batch(), norm_by_std=st.booleans(), unbiased=st.booleans(), eps=st.sampled_from([1e-6, 0.1])
)
def test_matches_reference(
    batch: tuple[list[float], list[int], int], norm_by_std: bool, unbiased: bool, eps: float
) -> None:
    rewards, groups, num_groups = batch
    got = group_advantages(
        torch.tensor(rewards, dtype=torch.float64),
        torch.tensor(groups, dtype=torch.long),
        num_groups,
        norm_by_std=norm_by_std,
        eps=eps,
        unbiased_std=unbiased,
    )
    want = torch.tensor(
        reference_advantages(rewards, groups, norm_by_std, eps, unbiased), dtype=torch.float64
    )
    assert got.shape == (len(rewards),)
    assert not torch.isnan(got).any()
    torch.testing.assert_close(got, want, rtol=1e-7, atol=1e-7)
    if len(rewards):
        # group-relative: advantages sum to 0 within every group
        sums = torch.zeros(num_groups, dtype=torch.float64).index_add_(0, torch.tensor(groups), got)
        torch.testing.assert_close(sums, torch.zeros_like(sums), rtol=0, atol=1e-6)


def test_hand_example_population_and_bessel() -> None:
    # group 0 = {1, 0} at rows 0 and 3, group 1 = {1, 1, 0, 0} at rows 1, 2, 4, 5 (interleaved)
    r = torch.tensor([1.0, 1.0, 1.0, 0.0, 0.0, 0.0])
    g = torch.tensor([0, 1, 1, 0, 1, 1])
    pop = group_advantages(r, g, eps=0.0)  # population std = 0.5 in both groups
    torch.testing.assert_close(pop, torch.tensor([1.0, 1.0, 1.0, -1.0, -1.0, -1.0]))
    bessel = group_advantages(r, g, eps=0.0, unbiased_std=True)
    s0, s1 = math.sqrt(0.5), math.sqrt(1.0 / 3.0)  # sqrt(0.5/1), sqrt(1/3)
    want = torch.tensor([0.5 / s0, 0.5 / s1, 0.5 / s1, -0.5 / s0, -0.5 / s1, -0.5 / s1])
    torch.testing.assert_close(bessel, want)
    torch.testing.assert_close(
        group_advantages(r, g, norm_by_std=False), torch.tensor([0.5, 0.5, 0.5] + [-0.5] * 3)
    )


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
@pytest.mark.parametrize("unbiased", [False, True])
@pytest.mark.parametrize("eps", [0.0, 1e-6])
@pytest.mark.parametrize("norm_by_std", [False, True])
def test_degenerate_groups_are_exactly_zero(
    dtype: torch.dtype, unbiased: bool, eps: float, norm_by_std: bool
) -> None:
    # constant groups whose float64 sum / n rounds (3 x 0.1, 7 x 2.2), a group of one, an empty group (id 3)
    r = torch.tensor([0.1, 0.7, 0.1, 0.1, -3.3] + [2.2] * 7, dtype=dtype)
    g = torch.tensor([0, 1, 0, 0, 2, 4, 4, 4, 4, 4, 4, 4])
    adv = group_advantages(r, g, 5, norm_by_std=norm_by_std, eps=eps, unbiased_std=unbiased)
    assert not torch.isnan(adv).any()
    assert torch.equal(adv, torch.zeros_like(r))  # exact zeros, not just close


def test_zero_reward_batch_and_empty_batch() -> None:
    assert torch.equal(group_advantages(torch.zeros(8), torch.arange(8) % 2), torch.zeros(8))
    empty = group_advantages(torch.zeros(0), torch.zeros(0, dtype=torch.long), 3)
    assert empty.shape == (0,)


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16, torch.float32, torch.float64])
def test_dtype_preserved(dtype: torch.dtype) -> None:
    r = torch.tensor([1.0, 0.0, 0.0, 1.0, 1.0], dtype=dtype)
    adv = group_advantages(r, torch.tensor([0, 0, 1, 1, 1], dtype=torch.int32))
    assert adv.dtype == dtype
    assert torch.isfinite(adv).all()


def test_group_sizes() -> None:
    g = torch.tensor([2, 0, 2, 2, 4])
    assert torch.equal(group_sizes(g), torch.tensor([1, 0, 3, 0, 1]))
    assert torch.equal(group_sizes(g, 6), torch.tensor([1, 0, 3, 0, 1, 0]))
    assert group_sizes(g).dtype == torch.long
    assert group_sizes(torch.zeros(0, dtype=torch.long)).shape == (0,)


@pytest.mark.parametrize(
    ("kwargs", "match"),
    [
        ({"rewards": torch.zeros(3), "group_index": torch.zeros(4, dtype=torch.long)}, "group_index shape"),
        (
            {"rewards": torch.zeros(2, 2), "group_index": torch.zeros(4, dtype=torch.long)},
            "rewards must be 1-D",
        ),
        (
            {"rewards": torch.zeros(3, dtype=torch.long), "group_index": torch.zeros(3, dtype=torch.long)},
            "rewards must have a floating dtype",
        ),
        (
            {"rewards": torch.zeros(3), "group_index": torch.zeros(3)},
            "group_index must have an integer dtype",
        ),
        (
            {"rewards": torch.zeros(3), "group_index": torch.tensor([0, -1, 1])},
            "group_index must be non-negative",
        ),
        (
            {"rewards": torch.zeros(3), "group_index": torch.tensor([0, 2, 1]), "num_groups": 2},
            "num_groups=2",
        ),
        ({"rewards": torch.zeros(3), "group_index": torch.tensor([0, 0, 1]), "num_groups": -1}, "num_groups"),
        (
            {"rewards": torch.zeros(3), "group_index": torch.tensor([0, 0, 1]), "eps": -1e-3},
            "eps must be >= 0",
        ),
        (
            {"rewards": torch.tensor([0.0, float("nan"), 1.0]), "group_index": torch.tensor([0, 0, 1])},
            "rewards must be finite",
        ),
    ],
)
def test_validation(kwargs: dict, match: str) -> None:
    with pytest.raises(ValueError, match=match):
        group_advantages(**kwargs)


def test_group_sizes_validation() -> None:
    with pytest.raises(ValueError, match="group_index must be non-negative"):
        group_sizes(torch.tensor([0, -2]))
    with pytest.raises(ValueError, match="group_index must be < num_groups"):
        group_sizes(torch.tensor([0, 3]), 3)
