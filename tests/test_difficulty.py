"""Online difficulty classifier (paper Eqs. 10–11, hysteresis L227): bins math and the stateful controller."""

from __future__ import annotations

import dataclasses
import json
import math
from fractions import Fraction

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from gdro.common.interfaces import BinSpec, PromptPool, StepFeedback
from gdro.controllers.bins import hysteresis_bins, make_edges, passk_from_window, raw_bins
from gdro.controllers.difficulty import ROUND_DECIMALS, OnlineDifficultyClassifier
from gdro.grading.passk import pass_at_k
from gdro.run.migrations import migrated_state

PAPER = make_edges([0.1, 0.2, 0.3, 0.4, 0.5, 0.6, 0.7, 0.8, 0.9], None)


def pool(*uids: str) -> PromptPool:
    """The training pool as the classifier is bound to it (prompt id i = ``uids[i]``)."""
    return PromptPool(tuple(uids))


# ------------------------------------------------------------------ edges and raw bins
def test_make_edges_from_interior_edges_and_num_bins():
    assert make_edges([0.4, 0.75], None).tolist() == [0.0, 0.4, 0.75, 1.0]
    assert make_edges(None, 4).tolist() == [0.0, 0.25, 0.5, 0.75, 1.0]
    # i / B exactly, not linspace's 0.30000000000000004
    assert make_edges(None, 10).tolist() == PAPER.tolist()
    assert make_edges([], None).tolist() == [0.0, 1.0]


@pytest.mark.parametrize(
    "edges, num_bins, key",
    [
        (None, None, "exactly one of edges / num_bins"),
        ([0.5], 2, "exactly one of edges / num_bins"),
        ([0.5, 0.5], None, "edges must be strictly increasing"),
        ([0.6, 0.4], None, "edges must be strictly increasing"),
        ([0.0, 0.5], None, "edges must lie strictly inside"),
        ([0.5, 1.0], None, "edges must lie strictly inside"),
        ([float("nan")], None, "edges must lie strictly inside"),
        (None, 0, "num_bins must be"),
        (None, 2.5, "num_bins must be"),
    ],
)
def test_make_edges_validation_names_the_key(edges, num_bins, key):
    with pytest.raises(ValueError, match=key):
        make_edges(edges, num_bins)


def test_raw_bins_on_edges_go_up_and_one_is_top_bin():
    p = np.array([0.0, 0.0999, 0.1, 0.3, 0.5, 0.8999, 0.9, 0.999, 1.0])
    assert raw_bins(p, PAPER).tolist() == [0, 0, 1, 3, 5, 8, 9, 9, 9]
    assert raw_bins(np.array([0.3, 0.6, 0.7]), make_edges(None, 10)).tolist() == [3, 6, 7]
    assert raw_bins(np.array([0.0, 1.0]), make_edges([], None)).tolist() == [0, 0]
    with pytest.raises(ValueError, match="p must lie in"):
        raw_bins(np.array([0.5, np.nan]), PAPER)
    with pytest.raises(ValueError, match="p must lie in"):
        raw_bins(np.array([1.01]), PAPER)


# ------------------------------------------------------------------ hysteresis
@pytest.mark.parametrize(
    "prev, p, expected",
    [
        (2, 0.3295, 2),  # bin 2 = [0.2, 0.3): above the upper edge, but within delta: stays
        (2, 0.3305, 3),  # past 0.3 + delta: up one
        (2, 0.1705, 2),  # below the lower edge, within delta: stays
        (2, 0.1695, 1),  # past 0.2 - delta: down one
        (2, 0.75, 7),  # multi-bin jump up goes straight to the raw bin
        (2, 1.0, 9),
        (5, 0.295, 2),  # multi-bin jump down (the official code would keep it in 5: it tests 0.3 - delta)
        (5, 0.0, 0),
        (9, 0.8705, 9),  # top bin: stays within delta of 0.9
        (9, 0.8695, 8),
        (0, 0.1295, 0),  # bottom bin: stays within delta of 0.1
        (0, 0.1305, 1),
        (-1, 0.1295, 1),  # never binned: raw bin
        (4, 0.45, 4),  # inside its own bin: stays
    ],
)
def test_hysteresis_needs_the_margin_both_ways(prev, p, expected):
    assert hysteresis_bins(np.array([p]), np.array([prev]), PAPER, 0.03).tolist() == [expected]


def test_hysteresis_thresholds_exactly_at_the_margin():
    edges, delta = make_edges([0.5], None), 0.125  # exact binary fractions: thresholds 0.375 and 0.625
    p = np.array([0.375, 0.37499, 0.625, 0.62499])
    assert hysteresis_bins(p, np.array([1, 1, 0, 0]), edges, delta).tolist() == [1, 0, 1, 0]


@settings(max_examples=60, deadline=None)
@given(st.lists(st.tuples(st.floats(0, 1), st.integers(-1, 9)), min_size=1, max_size=20))
def test_hysteresis_zero_is_raw_and_moves_only_to_raw(pairs):
    p = np.array([a for a, _ in pairs])
    prev = np.array([b for _, b in pairs])
    raw = raw_bins(p, PAPER)
    assert np.array_equal(hysteresis_bins(p, prev, PAPER, 0.0), raw)
    out = hysteresis_bins(p, prev, PAPER, 0.04)
    assert np.all((out == raw) | (out == prev))


# ------------------------------------------------------------------ pooled pass@k
def test_passk_from_window_matches_passk_plugin_and_nan():
    rng = np.random.default_rng(0)
    n = rng.integers(8, 60, size=200)
    c = rng.integers(0, n + 1)
    assert np.allclose(passk_from_window(c, n, 8), pass_at_k(n, c, 8), rtol=0, atol=1e-12)
    assert np.allclose(passk_from_window(c, n, 1), c / n, rtol=0, atol=1e-12)
    small = passk_from_window(np.array([0, 1, 3, 0]), np.array([0, 4, 4, 7]), 8)
    assert math.isnan(small[0])
    assert np.allclose(small[1:], [1 - 0.75**8, 1 - 0.25**8, 0.0])
    with pytest.raises(ValueError, match="k must be"):
        passk_from_window(c, n, 0)
    with pytest.raises(ValueError, match="correct_sum must satisfy"):
        passk_from_window(np.array([5]), np.array([4]), 2)


def test_unbiased_passk_pools_rollouts_over_visits():
    clf = OnlineDifficultyClassifier(estimator="unbiased_passk", k=8, window=3)
    clf.bind(pool("a"))
    clf.record(np.array([0]), np.array([1]), np.array([4]))  # 4 < k rollouts: plug-in 1 - (3/4)^8
    assert clf.passrate(np.array([0]))[0] == pytest.approx(1 - 0.75**8)
    clf.record(np.array([0]), np.array([0]), np.array([3]))
    clf.record(np.array([0]), np.array([2]), np.array([5]))  # pooled over the window: 3 of 12
    assert clf.passrate(np.array([0]))[0] == pytest.approx(pass_at_k(12, 3, 8))
    clf.record(np.array([0]), np.array([0]), np.array([6]))  # first visit leaves the window: 2 of 14
    assert clf.passrate(np.array([0]))[0] == pytest.approx(pass_at_k(14, 2, 8))


def test_estimate_exactly_on_an_edge_bins_up_despite_float_error():
    # unbiased pass@1 with 1 of 10 correct is exactly 0.1; the float product gives 0.09999999999999998
    assert passk_from_window(np.array([1]), np.array([10]), 1)[0] < 0.1
    clf = OnlineDifficultyClassifier(estimator="unbiased_passk", k=1)
    clf.bind(pool("a"))
    clf.record(np.array([0, 0]), np.array([1, 0]), np.array([5, 5]))
    assert clf.passrate(np.array([0])).tolist() == [0.1] and clf.bins(np.array([0])).tolist() == [1]


# ------------------------------------------------------------------ classifier vs a slow reference
def _ref_estimate(window, estimator, k):
    if estimator == "any_correct":
        return Fraction(sum(c > 0 for c, _ in window), len(window))
    c, n = sum(c for c, _ in window), sum(t for _, t in window)
    if n < k:
        return 1 - (1 - Fraction(c, n)) ** k
    return 1 - Fraction(math.comb(n - c, k), math.comb(n, k))


def _ref_bin(p, prev, edges, delta):
    raw = max(b for b in range(len(edges) - 1) if p >= edges[b])
    if prev is None or p >= edges[prev + 1] + delta or p < edges[prev] - delta:
        return raw
    return prev


class Reference:
    """Recomputes each visited prompt's window, estimate and bin from its full visit list, in plain Python."""

    def __init__(self, size, window, estimator, k, delta, edges, unseen_bin):
        self.hist = {i: [] for i in range(size)}
        self.bin = {i: None for i in range(size)}
        self.p = {i: math.nan for i in range(size)}
        self.args = window, estimator, k, delta, [float(e) for e in edges]
        self.unseen_bin = unseen_bin

    def update(self, visits):
        window, estimator, k, delta, edges = self.args
        for i, c, t in visits:
            self.hist[i].append((c, t))
            win = self.hist[i][-window:] if window else self.hist[i]
            p = float(np.round(float(_ref_estimate(win, estimator, k)), ROUND_DECIMALS))
            self.p[i], self.bin[i] = p, _ref_bin(p, self.bin[i], edges, delta)

    def bins(self):
        return [self.unseen_bin if b is None else b for b in self.bin.values()]


_visit = st.integers(1, 6).flatmap(lambda t: st.tuples(st.integers(0, t), st.just(t)))
_steps = st.integers(1, 5).flatmap(
    lambda size: st.tuples(
        st.just(size),
        st.lists(st.lists(st.tuples(st.integers(0, size - 1), _visit), max_size=6), min_size=1, max_size=8),
    )
)
_config = st.fixed_dictionaries(
    {
        "window": st.sampled_from([0, 1, 3]),
        "estimator": st.sampled_from(["any_correct", "unbiased_passk"]),
        "k": st.sampled_from([1, 4, 8]),
        "hysteresis": st.sampled_from([0.0, 0.03]),
        "unseen": st.sampled_from(["hardest", "separate"]),
        "bins": st.sampled_from(
            [
                {"edges": [0.1, 0.2, 0.3, 0.4, 0.5, 0.6, 0.7, 0.8, 0.9]},
                {"edges": [0.4, 0.75]},
                {"edges": None, "num_bins": 6},
            ]
        ),
    }
)


def _make(cfg, uids):
    clf = OnlineDifficultyClassifier(
        **cfg["bins"],
        window=cfg["window"],
        estimator=cfg["estimator"],
        k=cfg["k"],
        hysteresis=cfg["hysteresis"],
        unseen=cfg["unseen"],
    )
    clf.bind(pool(*uids))
    return clf


def _arrays(step):
    ids = np.array([i for i, _ in step], dtype=np.int64)
    return ids, np.array([c for _, (c, _) in step], dtype=np.int64), np.array([t for _, (_, t) in step])


@settings(max_examples=200, deadline=None)
@given(_steps, _config)
def test_bins_match_slow_reference(steps_and_size, cfg):
    size, steps = steps_and_size
    clf = _make(cfg, [f"idx:{i}" for i in range(size)])
    ref = Reference(
        size,
        cfg["window"],
        cfg["estimator"],
        cfg["k"],
        cfg["hysteresis"],
        clf.full_edges,
        0 if cfg["unseen"] == "hardest" else clf.num_pass_bins,
    )
    everyone = np.arange(size)
    for step in steps:
        ids, correct, total = _arrays(step)
        before = clf.bins(ids)  # bins at step t: history up to t - 1 ...
        assert clf.all_bins().tolist() == ref.bins()
        clf.record(ids, correct, total)
        if len(ids):
            assert np.array_equal(before, np.array(ref.bins())[ids])  # ... and unchanged by the read itself
        ref.update([(i, c, t) for i, (c, t) in step])
        assert clf.all_bins().tolist() == ref.bins()
        assert clf.bins(everyone).tolist() == ref.bins()
        assert np.allclose(clf.passrate(everyone), list(ref.p.values()), equal_nan=True, rtol=0, atol=1e-12)


@settings(max_examples=100, deadline=None)
@given(_steps, _config, st.integers(0, 8), st.randoms(use_true_random=False))
def test_state_round_trip_gives_identical_future_bins(steps_and_size, cfg, cut, rnd):
    size, steps = steps_and_size
    uids = [f"idx:{i}" for i in range(size)]
    a = _make(cfg, uids)
    for step in steps[:cut]:
        a.record(*_arrays(step))
    state = json.loads(json.dumps(a.state_dict()))  # JSON-friendly
    perm = list(range(size))
    rnd.shuffle(perm)  # the fresh classifier's pool holds the same uids in another order
    b = _make(cfg, [uids[j] for j in perm])
    b.load_state_dict(state)
    to_b = np.argsort(perm)  # id in a -> id in b
    for step in steps[cut:] + steps[:1]:
        ids, correct, total = _arrays(step)
        assert np.array_equal(a.bins(ids), b.bins(to_b[ids]))
        a.record(ids, correct, total)
        b.record(to_b[ids], correct, total)
    assert np.array_equal(a.all_bins(), b.all_bins()[to_b])
    assert np.allclose(a.passrate(np.arange(size)), b.passrate(to_b), equal_nan=True, rtol=0, atol=0)


# ------------------------------------------------------------------ behaviour details
def test_bins_read_does_not_see_the_current_step_until_update():
    clf = OnlineDifficultyClassifier(unseen="hardest")  # never-seen prompts read as bin 0
    clf.bind(pool("a", "b"))
    ids = np.array([0, 1])
    assert clf.bins(ids).tolist() == [0, 0]
    assert clf.bins(ids).tolist() == [0, 0]  # repeated reads: no change
    clf.record(ids, np.array([4, 0]), np.array([4, 4]))
    assert clf.bins(ids).tolist() == [9, 0]


def test_repeated_id_in_one_call_is_processed_in_order():
    clf = OnlineDifficultyClassifier(window=1)
    clf.bind(pool("a"))
    clf.record(np.array([0, 0]), np.array([2, 0]), np.array([2, 3]))
    assert clf.passrate(np.array([0])).tolist() == [0.0]  # the window of 1 holds the later visit


def test_update_records_each_prompts_correct_rollouts_out_of_its_ragged_count():
    """``update(feedback)`` is ``record(ids, n_correct, n)``: one visit per prompt of the step, ragged groups."""
    kw = {"edges": [0.25, 0.5, 0.75], "window": 2, "estimator": "unbiased_passk", "k": 2}
    a, b = OnlineDifficultyClassifier(**kw), OnlineDifficultyClassifier(**kw)
    a.bind(pool("a", "b", "c", "d"))
    b.bind(pool("a", "b", "c", "d"))
    ids, n = np.array([2, 0, 3]), np.array([3, 1, 4])
    group_index = np.repeat(np.arange(3), n)
    correct = np.array([1, 0, 1, 1, 0, 0, 1, 1], bool)  # per prompt: 2 of 3, 1 of 1, 2 of 4
    feedback = StepFeedback(ids=ids, bins=a.bins(ids), n=n, group_index=group_index, correct=correct,
                            pg_loss=np.zeros(8), kl=np.zeros(8), beta_kl=0.0)
    assert feedback.n_correct.tolist() == [2, 1, 2]
    a.update(feedback)
    b.record(ids, np.array([2, 1, 2]), n)
    np.testing.assert_array_equal(a.all_bins(), b.all_bins())
    np.testing.assert_array_equal(a.passrate(np.arange(4)), b.passrate(np.arange(4)))
    assert a.passrate(np.array([2])).tolist() == [pytest.approx(pass_at_k(3, 2, 2))]
    assert a.state_dict() == b.state_dict()


def test_unseen_policies_and_labels():
    hard = OnlineDifficultyClassifier(unseen="hardest")
    hard.bind(pool("a", "b", "c"))
    assert hard.num_bins == 10 and hard.bin_labels()[-1] == "9"
    assert hard.bin_spec() == BinSpec(tuple(str(b) for b in range(10)), num_pass_bins=10)
    assert hard.all_bins().tolist() == [0, 0, 0]
    sep = OnlineDifficultyClassifier(edges=[0.5], unseen="separate", window=2)
    sep.bind(pool("a", "b", "c"))
    assert sep.num_bins == 3 and sep.bin_labels() == ["0", "1", "unseen"]
    assert sep.bin_spec() == BinSpec(("0", "1", "unseen"), num_pass_bins=2)  # the unseen bin is not pass-rate ordered
    sep.record(np.array([0, 1]), np.array([0, 3]), np.array([4, 4]))
    assert sep.all_bins().tolist() == [0, 1, 2]
    assert math.isnan(sep.passrate(np.array([2]))[0])
    m = sep.metrics()
    assert m["difficulty/seen_frac"] == pytest.approx(2 / 3)
    assert m["difficulty/passrate_mean"] == pytest.approx(0.5)
    assert [m[f"difficulty/pool/{lab}"] for lab in sep.bin_labels()] == [1.0, 1.0, 1.0]


@pytest.mark.parametrize(
    "kwargs, key",
    [
        ({"window": -1}, "window must be"),
        ({"k": 0}, "k must be"),
        ({"estimator": "pass@k"}, "estimator must be one of"),
        ({"unseen": "easiest"}, "unseen must be one of"),
        ({"hysteresis": 0.05}, r"hysteresis must be .* \(0.05\), got 0.05"),
        ({"hysteresis": -0.01}, "hysteresis must be"),
        ({"edges": [0.4, 0.75], "num_bins": 3}, "exactly one of edges / num_bins"),
        ({"edges": [0.75, 0.4]}, "edges must be strictly increasing"),
        ({"edges": None, "num_bins": 0}, "num_bins must be"),
    ],
)
def test_constructor_validation_names_the_key(kwargs, key):
    with pytest.raises(ValueError, match=key):
        OnlineDifficultyClassifier(**kwargs)


def test_bind_update_and_load_validation_names_the_key():
    clf = OnlineDifficultyClassifier(window=2)
    with pytest.raises(ValueError, match="uids must be unique, got duplicate 'a'"):
        clf.bind(pool("a", "b", "a"))
    clf.bind(pool("a", "b"))
    one = np.array([1])
    with pytest.raises(ValueError, match="ids must index"):
        clf.bins(np.array([2]))
    with pytest.raises(ValueError, match="total must be >= 1"):
        clf.record(one, np.array([0]), np.array([0]))
    with pytest.raises(ValueError, match="correct must satisfy"):
        clf.record(one, np.array([3]), np.array([2]))
    with pytest.raises(ValueError, match="correct must be integer-valued"):
        clf.record(one, np.array([0.5]), np.array([2]))
    with pytest.raises(ValueError, match="correct and total must match ids"):
        clf.record(one, np.array([1, 1]), np.array([2, 2]))
    clf.record(one, np.array([1]), np.array([2]))
    other = OnlineDifficultyClassifier(window=3)
    other.bind(pool("a", "b"))
    with pytest.raises(ValueError, match="window of the state"):
        other.load_state_dict(clf.state_dict())
    coarse = OnlineDifficultyClassifier(edges=[0.5], window=2)
    coarse.bind(pool("a", "b"))
    with pytest.raises(ValueError, match="edges of the state"):
        coarse.load_state_dict(clf.state_dict())
    small = OnlineDifficultyClassifier(window=2)
    small.bind(pool("a"))
    with pytest.raises(ValueError, match="uids of the state are missing.*'b'"):
        small.load_state_dict(clf.state_dict())


def test_batch_bins_are_logged_for_every_sampler():
    """After update(): the step's batch share per bin (as classified before the step) and its mean pass-rate bin
    over the prompts already seen; nothing about a batch before any update."""
    from gdro.common.interfaces import StepFeedback

    c = OnlineDifficultyClassifier(edges=[0.5], unseen="separate", window=2)
    c.bind(pool("a", "b", "c", "d"))
    assert not any(k.startswith("difficulty/batch") for k in c.metrics())
    fb = StepFeedback(ids=np.array([0, 1, 2, 3]), bins=np.array([2, 0, 1, 1]), n=np.array([1, 1, 1, 1]),
                      group_index=np.arange(4), correct=np.array([1, 0, 1, 1]), pg_loss=np.zeros(4), kl=np.zeros(4),
                      beta_kl=0.0)
    c.update(fb)
    m = c.metrics()
    assert [m[f"difficulty/batch/{lab}"] for lab in ("0", "1", "unseen")] == [0.25, 0.5, 0.25]
    assert m["difficulty/batch_mean_bin"] == pytest.approx(2 / 3)  # the unseen prompt is left out
    c.update(dataclasses.replace(fb, bins=np.array([2, 2, 2, 2])))
    assert math.isnan(c.metrics()["difficulty/batch_mean_bin"])


def test_batch_mechanism_counts_groups_with_gradient_and_the_realised_weighted_se():
    """Per bin and overall: the share of groups neither all correct nor all wrong; the weighted SE of the batch as
    allocated against the same batch at its mean group size (numbers worked by hand)."""
    from gdro.controllers.batch_metrics import batch_mechanism

    labels = ["0", "1", "unseen"]
    # bin 0: two prompts, 2 rollouts each, (1 of 2) and (0 of 2) -> one of two informative, p = 1/4
    # bin 1: one prompt, 8 rollouts, 4 correct -> informative, p = 1/2
    bins, correct, n = np.array([0, 0, 1]), np.array([1, 0, 4]), np.array([2, 2, 8])
    m = batch_mechanism(bins, correct, n, labels)
    assert m["difficulty/informative"] == pytest.approx(2 / 3)
    assert m["difficulty/informative/0"] == 0.5 and m["difficulty/informative/1"] == 1.0
    assert "difficulty/informative/unseen" not in m  # absent bins are not logged
    q, sigma = np.array([2 / 3, 1 / 3]), np.sqrt(np.array([0.25 * 0.75, 0.25]))
    wse = float(np.sum(q * sigma / np.sqrt([2, 8])))
    wse_uniform = float(np.sum(q * sigma / np.sqrt(4.0)))  # mean group size 12 / 3
    assert m["difficulty/wse"] == pytest.approx(wse) and m["difficulty/wse_uniform"] == pytest.approx(wse_uniform)
    assert m["difficulty/wse_ratio"] == pytest.approx(wse / wse_uniform)
    # a fixed allocation is its own uniform allocation; an all-solved batch carries no gradient and no variance
    fixed = batch_mechanism(np.array([0, 1]), np.array([3, 8]), np.array([8, 8]), labels)
    assert fixed["difficulty/wse_ratio"] == pytest.approx(1.0)
    solved = batch_mechanism(np.array([1, 1]), np.array([8, 8]), np.array([8, 8]), labels)
    assert solved["difficulty/informative"] == 0.0 and solved["difficulty/wse"] == 0.0
    assert "difficulty/wse_ratio" not in solved


def test_the_classifier_logs_the_batch_mechanism_after_each_step():
    from gdro.common.interfaces import StepFeedback

    c = OnlineDifficultyClassifier(edges=[0.5], unseen="separate", window=2)
    c.bind(pool("a", "b"))
    fb = StepFeedback(ids=np.array([0, 1]), bins=np.array([2, 2]), n=np.array([2, 2]),
                      group_index=np.array([0, 0, 1, 1]), correct=np.array([1, 0, 1, 1]), pg_loss=np.zeros(4),
                      kl=np.zeros(4), beta_kl=0.0)
    c.update(fb)
    m = c.metrics()
    assert m["difficulty/informative"] == 0.5 and m["difficulty/informative/unseen"] == 0.5
    assert m["difficulty/wse_ratio"] == pytest.approx(1.0)


# ------------------------------------------------------------------------------------------------ per-prompt history
def _clf(**kw) -> OnlineDifficultyClassifier:
    clf = OnlineDifficultyClassifier(edges=[0.5], **kw)
    clf.bind(PromptPool(("a", "b", "c")))
    return clf


def test_success_rate_pools_the_newest_whole_visits_by_hand():
    clf = _clf(window=3, success_rollouts=6)
    # prompt 0's visits, oldest first: 1/4, 3/4, 2/2, 0/4 (the window of 3 drops 1/4)
    for c, t in ((1, 4), (3, 4), (2, 2), (0, 4)):
        clf.record(np.array([0]), np.array([c]), np.array([t]))
    # newest first: 0/4 (4 rollouts < 6), + 2/2 (6 >= 6): stop -> 2/6
    assert clf.success_rate(np.array([0])).tolist() == [pytest.approx(2 / 6)]
    # success_rollouts = 0: the whole window, 5/10; a larger target than the window holds: the whole window too
    for kw in ({"success_rollouts": 0}, {"success_rollouts": 100}):
        other = _clf(window=3, **kw)
        for c, t in ((1, 4), (3, 4), (2, 2), (0, 4)):
            other.record(np.array([0]), np.array([c]), np.array([t]))
        assert other.success_rate(np.array([0])).tolist() == [pytest.approx(5 / 10)]
    # window 0: the whole history, 6/14
    cum = _clf(window=0)
    for c, t in ((1, 4), (3, 4), (2, 2), (0, 4)):
        cum.record(np.array([0]), np.array([c]), np.array([t]))
    assert cum.success_rate(np.array([0])).tolist() == [pytest.approx(6 / 14)]


def test_unseen_prompts_get_the_stated_prior_and_are_not_seen():
    clf = _clf(unseen_p=0.25)
    clf.record(np.array([1]), np.array([3]), np.array([4]))
    assert clf.success_rate(np.array([0, 1, 2])).tolist() == [0.25, 0.75, 0.25]
    assert clf.seen(np.array([0, 1, 2])).tolist() == [False, True, False]
    with pytest.raises(ValueError, match="unseen_p"):
        OnlineDifficultyClassifier(unseen_p=1.5)
    with pytest.raises(ValueError, match="success_rollouts"):
        OnlineDifficultyClassifier(success_rollouts=-1)


def test_zero_variance_streak_counts_all_equal_visits_in_a_row_through_a_window_rollover():
    clf = _clf(window=2)
    visits = [(2, 4), (0, 4), (4, 4), (0, 3), (1, 3), (3, 3)]  # mixed, equal, equal, equal, mixed, equal
    want = [0, 1, 2, 3, 0, 1]  # the streak outlives the window of 2
    for (c, t), w in zip(visits, want):
        clf.record(np.array([2]), np.array([c]), np.array([t]))
        assert clf.zero_variance_streak(np.array([2, 0])).tolist() == [w, 0]


def test_per_prompt_history_round_trips_through_a_checkpoint_and_an_old_one_loads():
    clf = _clf(window=3, success_rollouts=4)
    for c, t in ((0, 2), (0, 2), (1, 2)):
        clf.record(np.array([0, 1]), np.array([c, t]), np.array([t, t]))
    state = json.loads(json.dumps(clf.state_dict()))
    again = _clf(window=3, success_rollouts=4)
    again.load_state_dict(state)
    ids = np.array([0, 1, 2])
    for read in ("success_rate", "seen", "zero_variance_streak"):
        np.testing.assert_array_equal(getattr(again, read)(ids), getattr(clf, read)(ids))
    assert again.zero_variance_streak(ids).tolist() == [0, 3, 0]
    del state["streak"]  # a checkpoint written before the streak was kept: the migration table fills it in
    old = _clf(window=3, success_rollouts=4)
    old.load_state_dict(migrated_state({"trainer": {"classifier": state}}, 0)["trainer"]["classifier"])
    assert old.zero_variance_streak(ids).tolist() == [0, 0, 0]
    np.testing.assert_array_equal(old.success_rate(ids), clf.success_rate(ids))
