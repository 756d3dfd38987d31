"""Prompt-GDRO: the bandit math (paper Eq. 12–16) and the ``PromptGDRO`` / ``UniformSampler`` controllers."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from gdro.common.interfaces import BinSpec, PromptPool, StepFeedback
from gdro.controllers.bandit import bin_means, ema, exp_weights, mixed_distribution
from gdro.controllers.samplers import PromptGDRO, UniformSampler

SCORES = st.lists(st.floats(-50, 50, allow_nan=False), min_size=1, max_size=12).map(np.array)
ETA = st.floats(0.01, 5.0)
GAMMA = st.floats(0.001, 1.0)


def prompts(num_prompts: int) -> PromptPool:
    """A pool of ``num_prompts`` prompts (only its size matters to the samplers)."""
    return PromptPool(tuple(f"p{i}" for i in range(num_prompts)))


def spec(num_bins: int, labels: list[str] | None = None, num_pass_bins: int | None = None) -> BinSpec:
    """``num_bins`` bins labelled ``"0"``.. (or ``labels``), all pass-rate ordered unless ``num_pass_bins`` says."""
    labels = [str(b) for b in range(num_bins)] if labels is None else labels
    return BinSpec(tuple(labels), num_bins if num_pass_bins is None else num_pass_bins)


def feedback(ids: np.ndarray, bins: np.ndarray, group_index: np.ndarray, correct: np.ndarray,
             pg_loss: np.ndarray | None = None, kl: np.ndarray | None = None, beta_kl: float = 0.0) -> StepFeedback:
    """A step's ``StepFeedback``: rollouts per prompt counted from ``group_index``; pg_loss and kl zero if not given."""
    group_index = np.asarray(group_index, dtype=np.int64)
    rows = len(group_index)
    return StepFeedback(ids=ids, bins=bins, n=np.bincount(group_index, minlength=len(bins)), group_index=group_index,
                        correct=correct, pg_loss=np.zeros(rows) if pg_loss is None else pg_loss,
                        kl=np.zeros(rows) if kl is None else kl, beta_kl=beta_kl)


class FixedBins:
    """Test data standing in for the difficulty classifier: a fixed bin per prompt id (0 = hardest)."""

    def __init__(self, bins: list[int] | np.ndarray, num_bins: int):
        self._bins = np.asarray(bins, dtype=np.int64)
        self.num_bins = num_bins

    def bin_spec(self) -> BinSpec:
        return spec(self.num_bins)

    def all_bins(self) -> np.ndarray:
        return self._bins.copy()

    def bins(self, ids: np.ndarray) -> np.ndarray:
        return self._bins[np.asarray(ids)]


def step(s: PromptGDRO, clf: FixedBins, rng: np.random.Generator, loss_of_bin: np.ndarray, n: int = 4) -> np.ndarray:
    """One trainer-like step with a per-rollout loss that depends only on the bin; returns the multipliers.

    The loss is fed as ``pg_loss`` (the one signal that is not derived from ``correct``), so the samplers stepped
    here are built with ``signal="pg_loss"``; the default (failure_rate) is what test_metrics_after_update feeds.
    """
    ids = s.sample(32, rng, clf)
    bins = clf.bins(ids)
    gi = np.repeat(np.arange(len(ids)), n)
    w = s.loss_weights(bins, gi)
    s.update(feedback(ids, bins, gi, rng.random(len(gi)) < 0.5, pg_loss=loss_of_bin[bins[gi]]))
    return w


# ---------------------------------------------------------------- pure math


@settings(max_examples=200, deadline=None)
@given(scores=SCORES, eta=ETA, gamma=GAMMA)
def test_mixed_distribution_on_simplex_with_floor(scores: np.ndarray, eta: float, gamma: float) -> None:
    q = mixed_distribution(scores, eta, gamma)
    assert np.all(np.isfinite(q))
    assert q.sum() == pytest.approx(1.0, abs=1e-12)
    assert np.all(q >= gamma / len(scores) - 1e-15)


@settings(max_examples=200, deadline=None)
@given(scores=SCORES, eta=ETA, gamma=GAMMA, shift=st.floats(-100, 100), data=st.data())
def test_mixed_distribution_shift_invariant_and_active(
    scores: np.ndarray, eta: float, gamma: float, shift: float, data: st.DataObject
) -> None:
    np.testing.assert_allclose(mixed_distribution(scores + shift, eta, gamma), mixed_distribution(scores, eta, gamma),
                               rtol=1e-9, atol=1e-12)
    active = np.array(data.draw(st.lists(st.booleans(), min_size=len(scores), max_size=len(scores))))
    if active.any():
        q = mixed_distribution(scores, eta, gamma, active=active)
        assert q.sum() == pytest.approx(1.0) and np.all(q[~active] == 0)
        assert np.all(q[active] >= gamma / active.sum() - 1e-15)


@settings(max_examples=200, deadline=None)
@given(scores=SCORES, eta=ETA, gamma=GAMMA, bump=st.floats(0, 20), clip=st.sampled_from([None, 0.5, 3.0]),
       data=st.data())
def test_mixed_distribution_monotone_in_own_score(
    scores: np.ndarray, eta: float, gamma: float, bump: float, clip: float | None, data: st.DataObject
) -> None:
    b = data.draw(st.integers(0, len(scores) - 1))
    up = scores.copy()
    up[b] += bump
    q0, q1 = mixed_distribution(scores, eta, gamma, clip), mixed_distribution(up, eta, gamma, clip)
    assert q1[b] >= q0[b] - 1e-12
    others = np.arange(len(scores)) != b
    assert np.all(q1[others] <= q0[others] + 1e-12)


def test_exp_weights_eq14() -> None:
    s = np.array([-2.0, 0.0, 1.0, 10.0])
    np.testing.assert_allclose(exp_weights(s, 0.5), np.exp(0.5 * s))
    np.testing.assert_allclose(exp_weights(s, 0.5, clip=1.0), np.exp(0.5 * np.array([-1.0, 0.0, 1.0, 1.0])))
    assert np.isinf(exp_weights(np.array([1e4]), 1.0))[0]  # no warning, Eq. 16's cap takes it from here


def test_ema_eq12_first_observation_initialises() -> None:
    prev = np.array([0.0, 1.0, 2.0])
    init = np.array([False, True, True])
    obs = np.array([True, True, False])
    new, new_init = ema(prev, np.array([5.0, 3.0, np.nan]), 0.25, obs, init)
    np.testing.assert_allclose(new, [5.0, 0.75 * 1.0 + 0.25 * 3.0, 2.0])
    np.testing.assert_array_equal(new_init, [True, True, True])
    assert prev[0] == 0.0  # inputs untouched


@settings(max_examples=150, deadline=None)
@given(data=st.data(), num_bins=st.integers(1, 6))
def test_bin_means_eq13_matches_loop(data: st.DataObject, num_bins: int) -> None:
    g = data.draw(st.integers(0, 20))
    bins = data.draw(st.lists(st.integers(0, num_bins - 1), min_size=g, max_size=g))
    vals = data.draw(st.lists(st.floats(-10, 10), min_size=g, max_size=g))
    mean, count = bin_means(np.array(vals), np.array(bins, dtype=np.int64), num_bins)
    for b in range(num_bins):
        mine = [v for v, x in zip(vals, bins) if x == b]
        assert count[b] == len(mine)
        assert (np.isnan(mean[b]) if not mine else mean[b] == pytest.approx(sum(mine) / len(mine)))


# ---------------------------------------------------------------- controller


def test_persistently_harder_bin_gains_weight() -> None:
    clf, rng = FixedBins(np.arange(120) % 4, 4), np.random.default_rng(0)
    s = PromptGDRO(active="all", signal="pg_loss")
    s.bind(prompts(120), clf.bin_spec())
    for _ in range(3):  # every bin observed (first observation initialises the EMA), all equal
        step(s, clf, rng, np.zeros(4))
    history = [s.weights()[2]]
    for _ in range(15):  # from now on bin 2 is persistently harder: its EMA score climbs towards 1
        step(s, clf, rng, np.array([0.0, 0.0, 1.0, 0.0]))
        history.append(s.weights()[2])
    assert history[0] == pytest.approx(0.25) and np.all(np.diff(history) > 0)
    assert s.weights().argmax() == 2
    w = s.loss_weights(np.array([0, 2]), np.array([0, 0, 1, 1]))
    assert w[2] > w[0]


def _unequal_counts_update(share_norm: bool) -> PromptGDRO:
    """200 prompts in bin 0 and 5 in bin 1, with the same per-prompt loss 0.3."""
    s = PromptGDRO(share_norm=share_norm, active="all", signal="pg_loss")
    s.bind(prompts(205), spec(2))
    bins = np.array([0] * 200 + [1] * 5)
    gi = np.repeat(np.arange(205), 4)
    for _ in range(5):
        s.update(feedback(np.arange(205), bins, gi, np.zeros(len(gi), bool), pg_loss=np.full(len(gi), 0.3)))
    return s


def test_no_frequency_bias_by_default() -> None:
    s = _unequal_counts_update(share_norm=False)
    np.testing.assert_allclose(s.weights(), [0.5, 0.5])
    w = s.loss_weights(np.array([0] * 200 + [1] * 5), np.repeat(np.arange(205), 4))
    np.testing.assert_allclose(w, 1.0)


def test_share_norm_has_documented_inverse_frequency_bias() -> None:
    q = _unequal_counts_update(share_norm=True).weights()
    assert q[1] > 0.9 and q[0] < 0.1  # the rare bin's score is 0.3 / (5/205) vs 0.3 / (200/205)


def test_batch_mean_and_raw_multipliers() -> None:
    bins, gi = np.array([0, 1, 2, 1]), np.array([0, 0, 1, 1, 1, 2, 3, 3])
    scores = {"scores": np.array([4.0, 0.0, -1.0]), "initialized": np.ones(3, bool)}
    big = PromptGDRO(weight_cap=1e9, active="all")
    big.bind(prompts(4), spec(3))
    big.load_state_dict({**big.state_dict(), **scores})
    w = big.loss_weights(bins, gi)
    assert w.mean() == pytest.approx(1.0)
    q = big.weights()
    np.testing.assert_allclose(w, q[bins[gi]] / q[bins[gi]].mean())
    capped = PromptGDRO(weight_cap=1.5)
    capped.bind(prompts(4), spec(3))
    capped.load_state_dict({**capped.state_dict(), **scores})
    assert capped.loss_weights(bins, gi).max() == pytest.approx(1.5)
    raw = PromptGDRO(weight_norm="raw", weight_cap=10.0)
    raw.bind(prompts(4), spec(3))
    raw.load_state_dict({**raw.state_dict(), **scores})
    np.testing.assert_allclose(raw.loss_weights(bins, gi), np.minimum(np.exp(0.65 * scores["scores"]), 10.0)[bins[gi]])


def test_active_present_mixes_over_present_bins_only() -> None:
    s = PromptGDRO(gamma=0.2)
    s.bind(prompts(10), spec(5))
    s.loss_weights(np.array([1, 3, 3]), np.array([0, 1, 2]))
    m = s.metrics()
    np.testing.assert_allclose([m[f"gdro/weight/{b}"] for b in range(5)], [0, 0.5, 0, 0.5, 0])


def test_resample_matches_q_on_nonempty_bins_chi_square() -> None:
    # 5 bins, bin 3 empty in the pool; scores make q far from uniform.
    pool = np.array([0] * 7 + [1] * 3 + [2] * 12 + [4] * 4)
    clf = FixedBins(pool, 5)
    s = PromptGDRO(mode="resample", gamma=0.05)
    s.bind(prompts(len(pool)), clf.bin_spec())
    s.load_state_dict({**s.state_dict(), "scores": np.array([1.0, 3.0, 0.0, 5.0, -1.0]), "initialized": np.ones(5, bool)})
    q = s.weights() * np.array([1, 1, 1, 0, 1])
    q /= q.sum()
    ids = s.sample(20_000, np.random.default_rng(123), clf)
    got = np.bincount(pool[ids], minlength=5)
    assert got[3] == 0
    nonempty = np.array([0, 1, 2, 4])
    expected = 20_000 * q[nonempty]
    chi2 = ((got[nonempty] - expected) ** 2 / expected).sum()
    assert chi2 < 16.27  # chi-square, df = 3, alpha = 0.001
    # within a bin, prompts are uniform: bin 2 holds 12 prompts -> df = 11, alpha = 0.001 critical value 31.26
    inside = np.bincount(ids[pool[ids] == 2], minlength=len(pool))[pool == 2]
    chi2_in = ((inside - inside.mean()) ** 2 / inside.mean()).sum()
    assert chi2_in < 31.26
    np.testing.assert_array_equal(s.loss_weights(pool[:3], np.array([0, 1, 2])), 1.0)
    assert s.metrics()["gdro/weight/3"] == 0.0


@pytest.mark.parametrize("mode", ["reweight", "resample"])
def test_state_round_trip_gives_identical_future(mode: str) -> None:
    clf = FixedBins(np.arange(50) % 5, 5)
    loss = np.array([0.5, 0.1, 0.9, 0.2, 0.0])
    a = PromptGDRO(mode=mode, signal="pg_loss")
    a.bind(prompts(50), clf.bin_spec())
    rng = np.random.default_rng(7)
    for _ in range(3):
        step(a, clf, rng, loss)
    state = a.state_dict()
    b = PromptGDRO(mode=mode, signal="pg_loss")
    b.load_state_dict(state)
    rng_state = rng.bit_generator.state
    wa = [step(a, clf, rng, loss) for _ in range(3)]
    rng.bit_generator.state = rng_state
    wb = [step(b, clf, rng, loss) for _ in range(3)]
    for x, y in zip(wa, wb):
        np.testing.assert_array_equal(x, y)
    np.testing.assert_array_equal(a.weights(), b.weights())
    np.testing.assert_array_equal(a.sample(40, np.random.default_rng(1), clf), b.sample(40, np.random.default_rng(1), clf))


def test_metrics_after_update() -> None:
    s = PromptGDRO(gamma=0.1, active="all")
    s.bind(prompts(6), spec(3, labels=["hard", "mid", "easy"]))
    bins, gi = np.array([0, 0, 0, 2]), np.repeat(np.arange(4), 2)
    w = s.loss_weights(bins, gi)
    correct = np.array([1, 0, 0, 0, 0, 0, 1, 1], bool)
    s.update(feedback(np.array([0, 1, 2, 5]), bins, gi, correct, pg_loss=np.full(8, 7.0)))  # pg_loss: not read
    m = s.metrics()
    assert sum(m[f"gdro/weight/{k}"] for k in ("hard", "mid", "easy")) == pytest.approx(1.0)
    assert m["gdro/share/hard"] == 0.75 and m["gdro/share/mid"] == 0.0 and m["gdro/share/easy"] == 0.25
    assert m["gdro/passrate/hard"] == pytest.approx(1 / 6) and m["gdro/passrate/easy"] == 1.0
    assert "gdro/passrate/mid" not in m and "gdro/score/mid" not in m
    assert m["gdro/score/hard"] == pytest.approx(5 / 6) and m["gdro/score/easy"] == 0.0  # bin-mean failure rate
    assert m["gdro/lead_lag"] == pytest.approx((0 + 1 + 2) / 3 - 2 * 0.25)  # uniform q before any update
    assert m["gdro/weight_entropy"] == pytest.approx(np.log(3))
    assert m["gdro/multiplier_max"] == w.max() == 1.0


class WithUnseenBin(FixedBins):
    """Test data shaped like a classifier with pass-rate bins 0..P-1 plus a last "unseen" bin."""

    def bin_spec(self) -> BinSpec:
        return spec(4, labels=["0", "1", "2", "unseen"], num_pass_bins=3)


def test_sized_from_bin_spec_and_lead_lag_uses_pass_rate_bins_only() -> None:
    clf = WithUnseenBin([0, 1, 2, 3, 3, 3], 4)
    s = PromptGDRO(active="all")
    s.bind(prompts(6), clf.bin_spec())  # the bins (labels, pass-rate bins) come from the classifier's BinSpec
    assert s.num_bins == 4 and s.num_pass_bins == 3 and s.labels[-1] == "unseen"
    ids = s.sample(6, np.random.default_rng(0), clf)
    bins, gi = clf.bins(ids), np.arange(6)
    s.loss_weights(bins, gi)
    s.update(feedback(ids, bins, gi, np.zeros(6, bool)))  # failure rate 1 everywhere
    m = s.metrics()
    assert m["gdro/share/unseen"] == 0.5 and "gdro/weight/unseen" in m
    # q uniform over 4 bins, renormalised over bins 0..2 -> mean index 1; data: one prompt in each of 0..2 -> 1
    assert m["gdro/lead_lag"] == pytest.approx(0.0)


@pytest.mark.parametrize(
    ("kwargs", "key"),
    [
        ({"gamma": 0}, "gamma"), ({"gamma": 1.5}, "gamma"), ({"eta": 0}, "eta"), ({"beta_ema": 0}, "beta_ema"),
        ({"weight_cap": 0.5}, "weight_cap"), ({"clip": 0}, "clip"), ({"share_floor": 0}, "share_floor"),
        ({"mode": "mix"}, "mode"), ({"weight_norm": "sum"}, "weight_norm"), ({"signal": "loss"}, "signal"),
        ({"active": "some"}, "active"),
    ],
)
def test_validation_errors_name_the_key(kwargs: dict, key: str) -> None:
    with pytest.raises(ValueError, match=f"^{key} must"):
        PromptGDRO(**kwargs)


def test_runtime_errors_name_the_key() -> None:
    s = PromptGDRO(signal="pg_kl", mode="resample")
    with pytest.raises(RuntimeError, match="bind"):
        s.sample(2, np.random.default_rng(0), FixedBins(np.zeros(4), 2))
    with pytest.raises(RuntimeError, match="bind"):
        s.weights()
    with pytest.raises(ValueError, match="at least one bin"):  # zero bins: refused by the BinSpec itself
        s.bind(prompts(4), spec(0))
    s.bind(prompts(4), spec(2))
    with pytest.raises(ValueError, match="num_bins=2"):  # a classifier with more bins than the sampler was bound to
        s.sample(2, np.random.default_rng(0), FixedBins([0, 1, 2, 0], 3))
    with pytest.raises(ValueError, match="num_prompts=4"):  # ... or another pool
        s.sample(2, np.random.default_rng(0), FixedBins(np.zeros(5), 2))
    with pytest.raises(ValueError, match="num_bins=2"):
        s.update(feedback(np.array([0]), np.array([2]), np.array([0]), np.ones(1, bool)))
    with pytest.raises(ValueError, match="classifier"):
        s.sample(2, np.random.default_rng(0))
    with pytest.raises(ValueError, match="bins"):
        s.loss_weights(np.array([2]), np.array([0]))
    with pytest.raises(ValueError, match="group_index"):
        s.loss_weights(np.array([0]), np.array([1]))


def test_update_reads_the_configured_signal_of_the_feedback() -> None:
    """Eq. 13's input is ``feedback.signal(sampler.signal)``: pg_loss, pg_loss + β·KL, or 1 − correct."""
    bins, gi = np.array([0, 1]), np.array([0, 0, 1, 1])
    correct = np.array([1, 0, 0, 0], bool)
    pg_loss, kl = np.array([0.2, 0.4, -1.0, 1.0]), np.array([1.0, 3.0, 0.0, 2.0])
    expected = {"pg_loss": [0.3, 0.0], "pg_kl": [0.3 + 0.5 * 2.0, 0.0 + 0.5 * 1.0], "failure_rate": [0.5, 1.0]}
    for signal, scores in expected.items():
        s = PromptGDRO(signal=signal, active="all")
        s.bind(prompts(2), spec(2))
        s.update(feedback(np.arange(2), bins, gi, correct, pg_loss=pg_loss, kl=kl, beta_kl=0.5))
        m = s.metrics()  # the first observation of a bin initialises its EMA score to the bin mean
        assert [m["gdro/score/0"], m["gdro/score/1"]] == pytest.approx(scores), signal


@pytest.mark.parametrize("with_bins", [True, False])
def test_uniform_sampler_new_signature_epochs_without_replacement(with_bins: bool) -> None:
    u = UniformSampler()
    with pytest.raises(RuntimeError, match="bind"):
        u.sample(1, np.random.default_rng(0))
    if with_bins:
        u.bind(prompts(10), spec(3))
    else:
        u.bind(prompts(10))  # the bins are optional: uniform sampling never reads them
    rng = np.random.default_rng(0)
    ids = np.concatenate([u.sample(c, rng, FixedBins(np.zeros(10), 1)) for c in (3, 7, 4, 6, 5, 5)])
    for e in range(3):
        assert sorted(ids[10 * e : 10 * (e + 1)].tolist()) == list(range(10))
    np.testing.assert_array_equal(u.loss_weights(np.zeros(2), np.array([0, 0, 1])), np.ones(3))
    u.update(feedback(np.array([4, 7]), np.zeros(2), np.array([0]), np.ones(1, bool)))
    assert u.metrics()["data/epoch"] == 3.0
