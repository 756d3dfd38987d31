"""The compute ledger (gdro/controllers/ledger.py) and the report at equal generated tokens (gdro/report/compute.py):
counts and curves checked against numbers worked by hand."""

from __future__ import annotations

import json
import math
from pathlib import Path

import numpy as np
import pytest

from gdro.cli.report import main
from gdro.controllers.ledger import ComputeLedger, mixed_groups
from gdro.report import find_runs
from gdro.report.compute import (
    area,
    compute_comparison,
    curve,
    first_reach,
    generated,
    interpolate,
    mean_curve,
    tokens_by_step,
)

LABELS = ("0", "1", "unseen")


def test_mixed_groups_on_ragged_groups():
    # groups: 0 -> [1, 1], 1 -> [0, 1, 0], 2 -> [0], 3 -> [0.5, 0.5, 0.5], 4 -> (none)
    rewards = np.array([1, 1, 0, 1, 0, 0, 0.5, 0.5, 0.5])
    group_index = np.array([0, 0, 1, 1, 1, 2, 3, 3, 3])
    assert mixed_groups(rewards, group_index, 5).tolist() == [False, True, False, False, False]


def test_two_rounds_then_a_step_counted_by_hand():
    led = ComputeLedger()
    # round 0: three groups of 4 in bins 0, 1, 1 (40 tokens); round 1: two groups of 2 in bins 0, 2 (10 tokens)
    led.generated(np.array([0, 1, 1]), np.array([4, 4, 4]), 40)
    led.generated(np.array([0, 2]), np.array([2, 2]), 10)
    # trained: two of round 0 (bins 1, 1, both mixed) and one of round 1 (bin 2, all equal) = 10 rollouts
    led.trained(np.array([1, 1, 2]), np.array([4, 4, 2]), np.array([True, True, False]))
    m = led.metrics(LABELS)
    assert m == {
        "compute/rollouts": 16.0, "compute/tokens": 50.0, "compute/rollouts_cum": 16.0, "compute/tokens_cum": 50.0,
        "compute/discarded_rollouts": 6.0, "compute/groups_with_grad": 2.0, "compute/groups_with_grad_cum": 2.0,
        "compute/groups_with_grad/1": 2.0, "compute/groups_with_grad/unseen": 0.0,
        "compute/rollouts_per_prompt/0": 3.0, "compute/rollouts_per_prompt/1": 4.0,
        "compute/rollouts_per_prompt/unseen": 2.0,
    }
    # the next step starts at its first round; the cumulative sums carry over
    led.generated(np.array([0]), np.array([8]), 7)
    led.trained(np.array([0]), np.array([8]), np.array([True]))
    m = led.metrics(LABELS)
    assert (m["compute/rollouts"], m["compute/rollouts_cum"], m["compute/tokens_cum"]) == (8.0, 24.0, 57.0)
    assert (m["compute/discarded_rollouts"], m["compute/groups_with_grad_cum"]) == (0.0, 3.0)


def test_cumulative_counts_survive_a_checkpoint():
    led = ComputeLedger()
    led.generated(np.array([0, 1]), np.array([3, 5]), 21)
    led.trained(np.array([0, 1]), np.array([3, 5]), np.array([True, False]))
    state = json.loads(json.dumps(led.state_dict()))  # checkpoints hold it as plain values
    again = ComputeLedger()
    again.load_state_dict(state)
    assert again.state_dict() == {"rollouts_cum": 8, "tokens_cum": 21, "grad_groups_cum": 1}
    again.generated(np.array([0]), np.array([2]), 4)
    again.trained(np.array([0]), np.array([2]), np.array([False]))
    assert again.metrics(LABELS)["compute/tokens_cum"] == 25.0


def test_training_more_than_was_generated_is_refused():
    led = ComputeLedger()
    led.generated(np.array([0]), np.array([2]), 3)
    with pytest.raises(ValueError, match="more than the 2 generated"):
        led.trained(np.array([0, 1]), np.array([2, 2]), np.array([True, True]))


# ------------------------------------------------------------------------------------------------ the report
def test_interpolation_reach_and_area_by_hand():
    xs, ys = np.array([0.0, 100.0, 300.0]), np.array([10.0, 30.0, 50.0])
    assert interpolate(xs, ys, 50.0) == 20.0
    assert interpolate(xs, ys, 200.0) == 40.0
    assert interpolate(xs, ys, 301.0) is None
    assert first_reach(xs, ys, 35.0) == 150.0  # between 100 (30) and 300 (50)
    assert first_reach(xs, ys, 10.0) == 0.0
    assert first_reach(xs, ys, 51.0) is None
    # mean over [0, 200]: trapezoids (10+30)/2*100 + (30+40)/2*100 = 2000 + 3500 = 5500 -> 27.5
    assert area(xs, ys, 200.0) == 27.5
    assert area(xs, ys, 400.0) is None


def _run_dir(root: Path, name: str, seed: int, label: str | None, tokens_per_step: float, means: dict[int, float],
             steps: int = 4, ledger: bool = True) -> None:
    d = root / name
    d.mkdir(parents=True)
    config = {"seed": seed, "steps": steps, "label": label, "sampler": {"_target_": "x.UniformSampler"},
              "allocator": {"_target_": "x.FixedAllocator"}}
    meta = {"config": config, "choices": {"sampler": "uniform", "allocator": "fixed"}, "status": "completed",
            "last_step": steps}
    (d / "run.json").write_text(json.dumps(meta))
    rows = []
    for s in range(steps + 1):
        row: dict = {"step": s}
        if s:
            row |= {"rollout/n_total": 10.0, "rollout/len_mean": tokens_per_step / 10}
            if ledger:
                row["compute/tokens_cum"] = tokens_per_step * s
        if s in means:
            row["eval/mean@4"] = means[s]
        rows.append(row)
    (d / "metrics.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))


def test_a_method_that_spends_twice_the_tokens_is_compared_at_equal_tokens(tmp_path):
    root = tmp_path / "sweep"
    # GRPO: 100 tokens a step, 40 -> 60 by step 4; "dyn": 200 tokens a step, 40 -> 70 (ahead per step, behind per token)
    _run_dir(root, "grpo", 0, None, 100.0, {0: 40.0, 2: 50.0, 4: 60.0}, ledger=False)
    _run_dir(root, "dyn", 0, "dyn", 200.0, {0: 40.0, 2: 60.0, 4: 70.0})
    runs = find_runs(root)
    assert tokens_by_step(runs[0] if runs[0].method != "dyn" else runs[1])[4.0] == 400.0  # len_mean x n_total
    dyn = next(r for r in runs if r.method == "dyn")
    assert curve(dyn, "eval/mean@4", "tokens")[0].tolist() == [0.0, 400.0, 800.0]
    rows, info = compute_comparison(runs, "eval/mean@4", "tokens")
    assert info["threshold"] == 60.0
    row = next(r for r in rows if r["method"] == "dyn")
    # equal tokens = 400: dyn 60 (its step 2) vs GRPO 60 (its step 4); equal steps: 70 - 60
    assert row["d_equal_tokens"][0] == 0.0 and row["d_equal_steps"][0] == 10.0
    # 60 reached at 400 tokens by both
    assert row["reach"] == [400.0] and row["d_reach"][0] == 0.0
    # area over [0, 400]: dyn (40+60)/2 = 50; GRPO (40+50)/2*200 + (50+60)/2*200 = 20000 -> 50
    assert row["d_area"][0] == 0.0
    rows, _ = compute_comparison(runs, "eval/mean@4", "steps")
    row = next(r for r in rows if r["method"] == "dyn")
    assert row["reach"] == [2.0] and row["d_reach"][0] == -2.0  # by steps, dyn reaches 60 two steps earlier
    # area over steps [0, 4]: dyn (40+60)/2*2 + (60+70)/2*2 = 230 -> 57.5; GRPO (40+50) + (50+60) = 200 -> 50
    assert math.isclose(row["d_area"][0], 7.5)


def test_gdro_report_writes_the_compute_table_and_names_its_axis(tmp_path, capsys):
    root = tmp_path / "sweep"
    for seed in (0, 1):
        _run_dir(root, f"grpo/{seed}", seed, None, 100.0, {0: 40.0, 4: 60.0 + seed})
        _run_dir(root, f"dyn/{seed}", seed, "dyn", 200.0, {0: 40.0, 4: 70.0 + seed})
    assert main([str(root), "--axis", "steps"]) == 0
    text = (root / "report" / "compute.md").read_text()
    assert "Axis: **training steps**" in text
    assert "| dyn | 2 | 0.8 |" in text and "| GRPO | – | 0.4 |" in text  # k tokens generated per run: 4 x 200, 4 x 100
    assert (root / "report" / "compute_curves.png").stat().st_size > 0
    assert main([str(root), "--no-figures"]) == 0  # the table's other axis: the curves' figure is drawn above
    assert "Axis: **generated tokens (compute/tokens_cum)**" in (root / "report" / "compute.md").read_text()
    assert "at equal compute" in capsys.readouterr().out


def test_mean_curve_over_seeds_by_hand_and_only_where_every_run_is_measured(tmp_path):
    root = tmp_path / "sweep"
    # two seeds of one method; seed 1 generates twice the tokens per step, so by tokens it is measured further
    _run_dir(root, "a/0", 0, "a", 100.0, {0: 40.0, 2: 50.0, 4: 60.0})
    _run_dir(root, "a/1", 1, "a", 200.0, {0: 20.0, 2: 60.0, 4: 80.0})
    runs = sorted(find_runs(root), key=lambda r: r.seed)
    assert [generated(r) for r in runs] == [400.0, 800.0]
    # by steps: at 0, 1, 2, 3, 4 -> (40+20)/2, (45+40)/2, (50+60)/2, (55+70)/2, (60+80)/2
    mean, sd = mean_curve(runs, "eval/mean@4", "steps", np.array([0.0, 1.0, 2.0, 3.0, 4.0]))
    assert mean.tolist() == [30.0, 42.5, 55.0, 62.5, 70.0]
    assert math.isclose(sd[0], math.sqrt(((40 - 30) ** 2 + (20 - 30) ** 2) / 1))
    # by tokens: seed 0 at 400 = 60 (its step 4), seed 1 at 400 = 60 (its step 2); past 400 seed 0 is unmeasured
    mean, _ = mean_curve(runs, "eval/mean@4", "tokens", np.array([0.0, 200.0, 400.0, 600.0]))
    assert mean[:3].tolist() == [30.0, 45.0, 60.0] and math.isnan(mean[3])
