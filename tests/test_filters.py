"""filter=dynamic (DAPO dynamic sampling, gdro/algorithm/filters.py): it always terminates, keeps whole groups with signal up to
the target, and the compute ledger counts every generated rollout exactly; it composes with every sampler and
allocator on the tiny model."""

from __future__ import annotations

import numpy as np
import pytest

from gdro.algorithm.filters import Drawn, DynamicSampling, NoFilter, concat_drawn
from gdro.common.interfaces import RewardBatch
from gdro.common.rollouts import RolloutBatch
from gdro.common.validate import ConfigError
from gdro.compose.build import build_components, build_training
from gdro.controllers.ledger import ComputeLedger
from tests.conftest import FAST, compose_cfg


def _drawn(first_id: int, correct_per_group: list[list[int]], bins: list[int] | None = None) -> Drawn:
    """A scored round: group g's rollouts have the 0/1 verdicts ``correct_per_group[g]`` and 1 token each."""
    n = np.array([len(c) for c in correct_per_group])
    gi = np.repeat(np.arange(len(n)), n)
    flat = np.array([x for c in correct_per_group for x in c], dtype=bool)
    roll = RolloutBatch(prompt_token_ids=[[g] for g in range(len(n))], group_index=gi,
                        completion_ids=[[int(i)] for i in range(len(gi))], logprobs=None,
                        texts=[str(i) for i in range(len(gi))], finish_reasons=["stop"] * len(gi))
    scored = RewardBatch(rewards=flat.astype(np.float64), correct=flat, n_unparsable=1, n_truncated=0, n_timeout=0,
                         n_bad_gold=0)
    ids = np.arange(first_id, first_id + len(n))
    return Drawn(ids, np.zeros(len(n), np.int64) if bins is None else np.array(bins), n, roll, scored)


def _source(rounds: list[list[list[int]]], ledger: ComputeLedger):
    """``draw(count, round)`` serving ``rounds[round]`` cut to ``count`` groups (the last one repeated), recording
    each round in ``ledger`` as the trainer does; the calls are logged."""
    calls = []

    def draw(count: int, rnd: int) -> Drawn:
        calls.append((count, rnd))
        groups = (rounds[rnd] if rnd < len(rounds) else rounds[-1])[:count]
        d = _drawn(100 * rnd, groups)
        ledger.generated(d.bins, d.n, int(d.roll.lengths.sum()))
        return d
    return draw, calls


def test_no_filter_is_one_round_of_everything():
    led = ComputeLedger()
    draw, calls = _source([[[1, 1], [0, 1]]], led)
    c = NoFilter().collect(draw, 2)
    assert calls == [(2, 0)] and c.kept is c.generated and c.discarded() is None and c.rounds == 1


def test_rounds_stop_at_the_target_and_truncate_in_draw_order():
    led = ComputeLedger()
    # round 0: 4 groups, 1 mixed; round 1 (3 missing): 3 groups, 2 mixed; round 2 (1 missing): 1 group, mixed -> done
    draw, calls = _source([[[1, 1], [0, 1], [0, 0], [1, 1]], [[0, 1, 1], [1, 1, 1], [1, 0]], [[0, 1]]], led)
    f = DynamicSampling(max_rounds=5)
    c = f.collect(draw, 4)
    assert calls == [(4, 0), (3, 1), (1, 2)] and c.rounds == 3
    assert c.kept.ids.tolist() == [1, 100, 102, 200] and c.kept.mixed.all()
    assert c.kept.n.tolist() == [2, 3, 2, 2] and c.kept.roll.group_index.tolist() == [0, 0, 1, 1, 1, 2, 2, 3, 3]
    assert c.kept.scored.correct.tolist() == [0, 1, 0, 1, 1, 1, 0, 0, 1]
    assert c.discarded().ids.tolist() == [0, 2, 3, 101]
    assert f.metrics() == {"filter/rounds": 3.0, "filter/kept_groups": 4.0, "filter/target_met": 1.0}
    led.trained(c.kept.bins, c.kept.n, c.kept.mixed)
    m = led.metrics(("0",))
    # generated: 8 + 8 + 2 = 18 rollouts (1 token each); trained: 9; discarded: 9
    assert (m["compute/rollouts"], m["compute/tokens"], m["compute/discarded_rollouts"]) == (18.0, 18.0, 9.0)
    assert m["compute/groups_with_grad"] == 4.0


def test_extra_mixed_groups_beyond_the_target_are_discarded():
    led = ComputeLedger()
    draw, _ = _source([[[1, 1], [1, 1], [1, 1]], [[0, 1], [1, 0], [0, 1]]], led)
    c = DynamicSampling(max_rounds=3, oversample=2.0).collect(draw, 3)
    # round 1 asks ceil(2 x 3) = 6 groups but the source holds 3: all mixed, target met
    assert c.kept.ids.tolist() == [100, 101, 102] and c.rounds == 2
    led.trained(c.kept.bins, c.kept.n, c.kept.mixed)
    assert led.metrics(("0",))["compute/discarded_rollouts"] == 6.0


def test_it_terminates_when_no_group_ever_has_signal_and_counts_every_round():
    led = ComputeLedger()
    draw, calls = _source([[[0, 0], [1, 1, 1]]], led)  # every round: one unsolved, one solved group
    f = DynamicSampling(max_rounds=3)
    c = f.collect(draw, 2)
    assert calls == [(2, 0), (2, 1), (2, 2)]
    # fallback: round 0's groups, trained as GRPO would (zero advantage), never an empty batch
    assert c.kept.ids.tolist() == [0, 1] and f.metrics()["filter/kept_groups"] == 0.0
    assert f.metrics()["filter/target_met"] == 0.0
    led.trained(c.kept.bins, c.kept.n, c.kept.mixed)
    m = led.metrics(("0",))
    assert (m["compute/rollouts"], m["compute/discarded_rollouts"], m["compute/groups_with_grad"]) == (15.0, 10.0, 0.0)


def test_concat_sums_the_failure_counts_and_bad_settings_name_the_key():
    both = concat_drawn([_drawn(0, [[1, 0]]), _drawn(5, [[1], [0, 0]])])
    assert both.ids.tolist() == [0, 5, 6] and both.scored.n_unparsable == 2
    assert both.roll.group_index.tolist() == [0, 0, 1, 2, 2] and both.n_correct.tolist() == [1, 1, 0]
    for kwargs, key in (({"max_rounds": 0}, "max_rounds"), ({"oversample": 0.5}, "oversample")):
        with pytest.raises(ValueError, match=key):
            DynamicSampling(**kwargs)
    with pytest.raises(ConfigError, match="filter.max_rounds=0"):
        build_components(compose_cfg(["filter=dynamic", "filter.max_rounds=0"]))


@pytest.mark.parametrize("overrides", [[], ["allocator=knapsack", "allocator.n_min=1"],
                                       ["allocator=rollout-gdro", "allocator.n_min=1", "allocator.n_max=1"]])
def test_groups_of_one_rollout_are_refused_up_front(overrides):
    """Issue #39 (6): with one rollout per prompt every group is a single rollout, whose rewards never differ: every
    round of every step would keep nothing. Refused by the config check (before anything loads), naming the key and
    what to do; one rollout a prompt without the filter, and a smallest arm of 1 with n̄ = 2, still pass."""
    capped = "allocator.n_max=1" in overrides
    with pytest.raises(ConfigError) as err:
        build_components(compose_cfg(["filter=dynamic", "rollouts_per_prompt=1", *overrides]))
    assert str(err.value) == (
        f"rollouts_per_prompt=1{' (allocator.n_max=1)' if capped else ''}: filter=dynamic keeps only groups whose "
        "rewards differ, and every group is then a single rollout, so no round of any step could keep one; set "
        f"rollouts_per_prompt >= 2{' and allocator.n_max >= 2' if capped else ''}, or filter=none")
    build_components(compose_cfg(["rollouts_per_prompt=1", *overrides]))  # no filter: GRPO's groups of one, allowed
    if not capped:
        build_components(compose_cfg(["filter=dynamic", "rollouts_per_prompt=2", *overrides]))


def test_a_reward_that_is_always_0_is_warned_once_not_every_step(tmp_path, caplog):
    """Issue #39 (6): a real run whose reward is always 0 (one new token: every completion is cut before an answer, so
    scored wrong) spends every round of every step and keeps nothing. The first such step says so, naming what to
    do; the later ones do not repeat it (their rows still say filter/kept_groups=0)."""
    cfg = compose_cfg([*FAST, "filter=dynamic", "filter.max_rounds=2", "model.max_new_tokens=1", "steps=3",
                       "data.train_size=16"])
    with caplog.at_level("WARNING", logger="gdro.algorithm.filters"):
        rows = [r for r in build_training(cfg, tmp_path / "run").fit() if r.get("step")]
    assert [(r["reward/mean"], r["reward/std"], r["filter/rounds"], r["filter/kept_groups"]) for r in rows] == \
        [(0.0, 0.0, 2.0, 0.0)] * 3
    said = [rec for rec in caplog.records if rec.name == "gdro.algorithm.filters"]
    assert len(said) == 1 and said[0].levelname == "WARNING", [rec.getMessage() for rec in said]
    text = said[0].getMessage()
    assert text.startswith("filter=dynamic: none of a step's 2 rounds (filter.max_rounds) held a group with signal "
                           "(every reward was 0)"), text
    assert "check the reward and the data, or set filter=none" in text and "not repeated" in text


# ------------------------------------------------------------------------------------------------ end to end
@pytest.mark.parametrize("sampler,allocator", [("uniform", "knapsack"), ("prompt-gdro", "rollout-gdro"),
                                               ("oracle-levels", "sqrt"), ("uniform", "rollout-gdro-variance"),
                                               ("prompt-gdro", "fixed")])
def test_dynamic_sampling_composes_and_its_ledger_is_exact(tmp_path, sampler, allocator):
    cfg = compose_cfg([*FAST, "filter=dynamic", f"sampler={sampler}", f"allocator={allocator}",
                       "data.train_size=16"])
    training = build_training(cfg, tmp_path / "run")
    draw, drawn = training.trainer._draw, {}

    def logged(step, *rest):  # every generation round's rollouts, by step, as the trainer drew them
        d = draw(step, *rest)
        drawn[step] = drawn.get(step, 0) + int(d.n.sum())
        return d
    training.trainer._draw = logged
    rows = [r for r in training.fit() if r.get("step")]
    assert len(rows) == 2
    for r in rows:
        assert r["compute/rollouts"] == drawn[r["step"]]
        assert r["compute/rollouts"] - r["compute/discarded_rollouts"] == r["rollout/n_total"]
        assert 1 <= r["filter/rounds"] <= 4 and r["filter/kept_groups"] <= 8
        assert r["compute/groups_with_grad"] == r["filter/kept_groups"]
    assert rows[-1]["compute/rollouts_cum"] == sum(drawn.values())


@pytest.mark.slow
def test_dynamic_sampling_under_two_processes_is_refused_in_one_line(tmp_path):
    """The kept groups would differ between processes: refused in one line, before any step (and before the model
    loads: no checkpoint, no metrics row)."""
    import os
    import subprocess
    import sys

    from tests.conftest import REPO

    out = subprocess.run([sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node", "2",
                          "-m", "gdro.cli.train", "experiment=smoke", "filter=dynamic", "steps=1", "prompts_per_step=8",
                          "progress=false", "threads=1", "logger=jsonl", f"hydra.run.dir={tmp_path / 'r'}"],
                         cwd=REPO, env={**os.environ, "PYTHONPATH": str(REPO), "WANDB_MODE": "disabled"},
                         capture_output=True, text=True, timeout=600, check=False)
    assert out.returncode != 0
    lines = [x for x in out.stderr.splitlines() if "filter=DynamicSampling runs in one process only (got 2)" in x]
    assert lines, out.stderr[-3000:]
    assert not (tmp_path / "r" / "checkpoint").exists() and not list((tmp_path / "r").glob("checkpoints/step_*"))
    assert not (tmp_path / "r" / "metrics.jsonl").exists() or not (tmp_path / "r" / "metrics.jsonl").read_text()
