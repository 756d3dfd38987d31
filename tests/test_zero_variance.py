"""allocator=zero-variance (gdro/controllers/zero_variance.py), the zero-variance control of issue #48: its arms by
hand on hand-built histories (ragged groups, unseen prompts, m), the exact budget and n_max, a step of zero-variance
prompts only, its metrics over rounds, bad settings; on the tiny model an exact resume, and a real
``gdro-train experiment=smoke allocator=zero-variance`` run that logs the rollouts per prompt per bin."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import torch
from hypothesis import given
from hypothesis import strategies as st

from gdro.algorithm.tracking import read_metrics
from gdro.common.interfaces import PromptPool, StepFeedback
from gdro.common.validate import ConfigError
from gdro.compose.build import build_components
from gdro.controllers.difficulty import OnlineDifficultyClassifier
from gdro.controllers.zero_variance import ZeroVarianceAllocator, zero_variance_allocate
from tests.conftest import REPO, compose_cfg
from tests.test_resume import _comparable, _env, _fit


def _history(visits: dict[int, list[tuple[int, int]]], size: int = 6) -> OnlineDifficultyClassifier:
    """A classifier over ``size`` prompts; prompt i's visits, oldest first, as (correct, rollouts) of ragged groups."""
    clf = OnlineDifficultyClassifier(edges=[0.5])
    clf.bind(PromptPool(tuple(f"p{i}" for i in range(size))))
    for i, groups in visits.items():
        for c, t in groups:
            clf.record(np.array([i]), np.array([c]), np.array([t]))
    return clf


def _feedback(ids: np.ndarray, bins: np.ndarray, n: np.ndarray, correct: np.ndarray) -> StepFeedback:
    """A step's feedback as the trainer builds it: ragged groups of ``n`` rollouts, ``correct`` per rollout."""
    group_index = np.repeat(np.arange(len(ids)), n)
    return StepFeedback(ids=ids, bins=bins, n=n, group_index=group_index, correct=correct,
                        pg_loss=np.zeros(len(group_index)), kl=np.zeros(len(group_index)), beta_kl=0.0)


# prompt 0: all wrong (0 of 4); 1: all right (3 of 3); 2: mixed (1 of 5); 3: never seen; 4: mixed, then all wrong
# (0 of 2); 5: all wrong twice (0 of 4, 0 of 6). Last visits all-equal: 0, 1, 4, 5 (m = 1); two in a row: 5 (m = 2).
VISITS = {0: [(0, 4)], 1: [(3, 3)], 2: [(1, 5)], 4: [(2, 4), (0, 2)], 5: [(0, 4), (0, 6)]}


def _allocate(n_bar: int, **kwargs) -> tuple[ZeroVarianceAllocator, np.ndarray]:
    clf = _history(VISITS)
    alloc = ZeroVarianceAllocator(**kwargs)
    alloc.bind(clf.bin_spec())
    alloc.check_budget(n_bar)
    ids = np.arange(6)
    return alloc, alloc.allocate(ids, clf.bins(ids), n_bar, clf)


def test_the_arms_by_hand_on_a_ragged_history():
    # m = 1: 0, 1, 4, 5 at n_min = 2 (8 rollouts); 24 − 8 = 16 evenly to 2 (mixed) and 3 (unseen)
    alloc, n = _allocate(4, n_min=2, n_max=12)
    assert n.tolist() == [2, 2, 8, 8, 2, 2] and n.dtype == np.int64
    # n_max = 6: the others take 12 at most; the 4 left go back evenly to the zero-variance prompts
    assert _allocate(4, n_min=2, n_max=6)[1].tolist() == [3, 3, 6, 6, 3, 3]
    # m = 2: only 5 (two all-equal groups in a row); 22 over five prompts: 4, 4, 4, 5, 5 (the larger ones last)
    assert _allocate(4, n_min=2, n_max=12, m=2)[1].tolist() == [4, 4, 4, 5, 5, 2]
    # n_min = 3, n̄ = 5: 4 × 3 = 12 held, 30 − 12 = 18 over two prompts: 9 each
    assert _allocate(5, n_min=3, n_max=15)[1].tolist() == [3, 3, 9, 9, 3, 3]
    m = alloc.metrics()
    assert m["gdro/zero_variance/frac"] == pytest.approx(4 / 6)
    assert m["gdro/zero_variance/moved"] == 4 * (4 - 2)
    bins = _history(VISITS).bins(np.arange(6))  # edges [0.5]: "0", "1", and "unseen" for prompt 3
    for b in np.unique(bins):
        assert m[f"gdro/rollouts/{alloc.labels[b]}"] == pytest.approx(n[bins == b].mean())


def test_a_step_of_zero_variance_prompts_only_or_of_none_gives_every_prompt_the_mean():
    clf = _history(VISITS)
    alloc = ZeroVarianceAllocator()
    alloc.bind(clf.bin_spec())
    for ids in ([0, 1, 4, 5], [2, 3], [3]):  # every one zero-variance | mixed or unseen | a step of one unseen prompt
        ids = np.array(ids)
        assert alloc.allocate(ids, clf.bins(ids), 8, clf).tolist() == [8] * len(ids)
    assert alloc.metrics()["gdro/zero_variance/moved"] == 0


def test_unseen_prompts_share_what_the_zero_variance_ones_leave():
    clf = _history(VISITS)
    alloc = ZeroVarianceAllocator(n_min=2, n_max=24)
    alloc.bind(clf.bin_spec())
    ids = np.array([3, 0, 5])  # unseen, all wrong, all wrong: 24 − 2 × 2 = 20 to the unseen prompt (≤ n_max)
    assert alloc.allocate(ids, clf.bins(ids), 8, clf).tolist() == [20, 2, 2]


@given(st.lists(st.booleans(), min_size=1, max_size=40), st.integers(2, 4), st.integers(0, 6), st.integers(0, 12))
def test_the_budget_is_exact_the_bounds_hold_and_each_side_is_even(zero, n_min, above, extra):
    n_bar, zero = n_min + above, np.array(zero)
    n_max = n_bar + extra
    n = zero_variance_allocate(zero, n_bar, n_min, n_max)
    assert n.sum() == n_bar * len(zero) and n.min() >= n_min and n.max() <= n_max
    for side in (zero, ~zero):
        if side.any():
            assert n[side].max() - n[side].min() <= 1  # ⌊T/k⌋ or ⌈T/k⌉
    if zero.any() and (~zero).any():
        assert n[zero].max() <= n[~zero].min()
        assert n[zero].max() == n_min or n[~zero].min() == n_max  # above n_min only when the others are full


def test_the_budget_is_exact_at_every_step_of_a_ragged_toy_history():
    rng = np.random.default_rng(0)
    true_p = np.where(np.arange(20) < 8, rng.choice([0.0, 1.0], size=20), rng.random(20))  # 8 walls or solved
    clf = _history({}, size=20)
    alloc = ZeroVarianceAllocator(n_min=2, n_max=12)
    alloc.bind(clf.bin_spec())
    ragged = False
    for _ in range(12):
        ids = rng.choice(20, size=8, replace=False)
        n = alloc.allocate(ids, clf.bins(ids), 4, clf)
        assert n.sum() == 32 and n.min() >= 2 and n.max() <= 12
        zero = clf.zero_variance_streak(ids) >= 1
        assert np.all(n[zero] == 2) or np.all(n[~zero] == 12)
        ragged |= len(set(n.tolist())) > 1
        fb = _feedback(ids, clf.bins(ids), n, rng.random(n.sum()) < np.repeat(true_p[ids], n))
        clf.update(fb)  # the groups as drawn (ragged) become the history, as in the trainer
        alloc.update(fb)
    assert ragged and alloc.state_dict() == {}


def test_metrics_cover_every_round_of_a_step_and_a_new_step_starts_afresh():
    clf = _history(VISITS)
    alloc = ZeroVarianceAllocator(n_min=2, n_max=12)
    alloc.bind(clf.bin_spec())
    alloc.allocate(np.array([0, 2]), clf.bins(np.array([0, 2])), 4, clf)  # [2, 6]
    alloc.allocate(np.array([3]), clf.bins(np.array([3])), 4, clf)  # a second round (filter=dynamic): [4]
    m = alloc.metrics()
    assert m["gdro/zero_variance/frac"] == pytest.approx(1 / 3) and m["gdro/zero_variance/moved"] == 2
    alloc.update(_feedback(np.array([3]), clf.bins(np.array([3])), np.array([4]), np.ones(4, dtype=bool)))
    alloc.allocate(np.array([2]), clf.bins(np.array([2])), 4, clf)
    assert alloc.metrics()["gdro/zero_variance/frac"] == 0.0


@pytest.mark.parametrize(("kwargs", "match"), [
    ({"n_min": 1}, "n_min must be >= 2"), ({"m": 0}, "m must be an integer >= 1"), ({"m": 1.5}, "m must be"),
    ({"m": True}, "m must be"), ({"n_min": 4, "n_max": 3}, "n_max must be >= n_min"),
])
def test_bad_settings_name_the_key(kwargs, match):
    with pytest.raises(ValueError, match=match):
        ZeroVarianceAllocator(**kwargs)


def test_the_option_composes_at_its_defaults_and_refuses_an_infeasible_mean_before_loading():
    alloc = build_components(compose_cfg(["allocator=zero-variance"])).allocator
    assert type(alloc) is ZeroVarianceAllocator and (alloc.n_min, alloc.n_max, alloc.m) == (2, 24, 1)
    with pytest.raises(ConfigError, match="n_bar must be >= n_min"):
        build_components(compose_cfg(["allocator=zero-variance", "rollouts_per_prompt=1"]))


# ---------------------------------------------------------------------------------------------- the tiny model
def test_extending_a_finished_run_equals_one_longer_run(tmp_path: Path):
    """As tests/test_resume.py does for the other allocators: 2 + 2 steps from a checkpoint equal 4 straight. A pool
    of 8 prompts, all in every step, so the streaks (the classifier's state) decide steps 2-4."""
    common = ["allocator=zero-variance", "data.train_size=8", "checkpoint.every=2"]
    long, rows_long = _fit(tmp_path / "long", [*common, "steps=4"])
    _fit(tmp_path / "ext", [*common, "steps=2"])
    ext, rows_ext = _fit(tmp_path / "ext", [*common, "steps=4"])
    assert [r["step"] for r in rows_ext] == [3, 4]
    assert _comparable(rows_ext) == _comparable(rows_long[2:])
    assert _comparable(read_metrics(tmp_path / "ext")) == _comparable(read_metrics(tmp_path / "long"))
    for (name, a), b in zip(long.policy.model.named_parameters(), ext.policy.model.parameters()):
        assert torch.equal(a, b), name
    assert json.dumps(ext.controllers.classifier.state_dict()) == json.dumps(long.controllers.classifier.state_dict())
    moved = [r["gdro/zero_variance/moved"] for r in rows_long]
    assert moved[0] == 0 and any(x > 0 for x in moved[1:]), moved  # the rule acted after the first visit
    assert all(r["rollout/n_total"] == 8 * 4 for r in rows_long)


@pytest.mark.slow
def test_a_smoke_run_logs_the_rollouts_per_prompt_per_bin(tmp_path: Path):
    """``gdro-train experiment=smoke allocator=zero-variance`` on a pool of 8 prompts (every step visits each): the
    allocator's ``gdro/rollouts/<bin>`` equal the ledger's ``compute/rollouts_per_prompt/<bin>``, n̄·G rollouts a
    step, and the groups are ragged once the rule acts."""
    run_dir = tmp_path / "run"
    cmd = [sys.executable, "-m", "gdro.cli.train", "experiment=smoke", "allocator=zero-variance", "data.train_size=8",
           "progress=false", "eval.at_start=false", "eval.at_end=false", f"hydra.run.dir={run_dir}"]
    proc = subprocess.run(cmd, cwd=REPO, env=_env(), capture_output=True, text=True, timeout=900, check=False)
    assert proc.returncode == 0, proc.stderr[-3000:]
    rows = read_metrics(run_dir)  # the train rows of gdro-train experiment=smoke: steps 1-3
    assert [r["step"] for r in rows] == [1, 2, 3]
    for r in rows:
        assert r["rollout/n_total"] == 8 * 4
        per_bin = {k.removeprefix("gdro/rollouts/"): v for k, v in r.items() if k.startswith("gdro/rollouts/")}
        assert per_bin and per_bin == {k.removeprefix("compute/rollouts_per_prompt/"): v for k, v in r.items()
                                       if k.startswith("compute/rollouts_per_prompt/")}
    assert any(r["gdro/zero_variance/moved"] > 0 for r in rows), rows  # some groups at n_min, others above n̄
    assert "_target_: gdro.controllers.zero_variance.ZeroVarianceAllocator" in (run_dir / "config.yaml").read_text()
