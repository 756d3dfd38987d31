"""Seeing what the model writes (issue #37): a bounded sample of training and held-out completions in
``samples/{train,eval}_NNNNNN.jsonl`` and W&B tables. The sample draws no RNG (metrics bit-identical with it on or
off), its records match the step's metrics, and a resumed run neither duplicates nor loses a file."""

from __future__ import annotations

import json
import time
from pathlib import Path

import pytest

from gdro.algorithm import samples
from gdro.algorithm.tracking import read_metrics
from gdro.common.validate import ConfigError
from gdro.compose.build import build_components, build_training
from tests.conftest import FAST, compose_cfg

EVAL = ["eval.k=2", "eval.max_problems=6", "eval.at_start=true", "eval.every=0", "eval.at_end=true"]
OFF = ["samples.train=0", "samples.eval=0"]


def _fit(run_dir: Path, overrides: list[str]) -> list[dict]:
    training = build_training(compose_cfg(FAST + overrides), run_dir, choices={"sampler": "uniform"})
    try:
        return training.fit()
    finally:
        training.logger.close()


def _no_time(rows):
    return [{k: v for k, v in r.items() if not k.startswith("time/")} for r in rows]


def test_pick_is_deterministic_bounded_and_moves_with_the_step():
    assert samples.pick(32, 4, 0) == [0, 8, 16, 24]
    assert samples.pick(32, 4, 10) == [2, 10, 18, 26]  # (10 + 8 i) mod 32, sorted
    assert samples.pick(3, 4, 7) == [0, 1, 2] and samples.pick(5, 0, 1) == [] and samples.pick(0, 4, 1) == []
    for total, count, step in [(7, 3, 5), (100, 9, 123), (9, 8, 2)]:
        rows = samples.pick(total, count, step)
        assert len(set(rows)) == count and all(0 <= r < total for r in rows)


def test_sample_files_match_the_metrics_and_change_none(tmp_path: Path):
    """Every rollout shown (``samples.train`` above the batch): the records' rewards are the step's; the held-out
    sample at each evaluation; and the metrics are the same to the bit as a run with samples off."""
    on = _fit(tmp_path / "on", EVAL + ["samples.every=1", "samples.train=1000", "samples.eval=3"])
    off = _fit(tmp_path / "off", EVAL + OFF)
    assert _no_time(on) == _no_time(off) and _no_time(read_metrics(tmp_path / "on")) == _no_time(on)
    assert not (tmp_path / "off" / samples.SAMPLES_DIR).exists()
    names = sorted(p.name for p in (tmp_path / "on" / samples.SAMPLES_DIR).iterdir())
    assert names == ["eval_000000.jsonl", "eval_000002.jsonl", "train_000001.jsonl", "train_000002.jsonl"]
    for row in (r for r in on if "reward/mean" in r):
        recs = samples.read(samples.path_of(tmp_path / "on", "train", row["step"]))
        assert len(recs) == row["rollout/n_total"] == 8 * 4
        assert sum(r["reward"] for r in recs) / len(recs) == pytest.approx(row["reward/mean"], abs=1e-12)
        assert {r["step"] for r in recs} == {row["step"]} and all(r["n"] == 4 for r in recs)
        assert all(set(r) == set(samples.COLUMNS) for r in recs)
        assert all(r["finish_reason"] in ("stop", "length") and isinstance(r["bin"], int) for r in recs)
        assert all(r["verdict"] == ("correct" if r["correct"] else "incorrect") for r in recs)
        assert all(r["completion"] is not None and r["prompt"] for r in recs)
    ev = samples.read(samples.path_of(tmp_path / "on", "eval", 0))
    assert len(ev) == 3 and all(r["bin"] is None and r["n"] == 2 for r in ev)
    # the same held-out completions each evaluation: the same problems (the policy changed in between)
    assert [r["uid"] for r in ev] == [r["uid"] for r in samples.read(samples.path_of(tmp_path / "on", "eval", 2))]


def test_default_is_a_small_sample_every_ten_steps(tmp_path: Path):
    cfg = build_components(compose_cfg(FAST)).settings.samples
    assert (cfg.every, cfg.train, cfg.eval) == (10, 4, 4)
    rows = _fit(tmp_path, ["steps=10"])
    assert samples.read(samples.path_of(tmp_path, "train", 10)) and len(rows) == 10
    assert sorted(p.name for p in (tmp_path / samples.SAMPLES_DIR).iterdir()) == ["train_000010.jsonl"]


def test_resume_rewrites_its_steps_and_keeps_no_later_file(tmp_path: Path):
    """A run to step 3 (checkpoint at 2); resumed with steps=2 (nothing to train: metrics and samples are cut back
    to the checkpoint), then with steps=3: step 3's file again, the same, and the metrics of the whole run."""
    keep = ["samples.every=1", "samples.train=5", "checkpoint.every=2", "checkpoint.at_end=false"]
    whole = _fit(tmp_path / "whole", keep + ["steps=3"])
    run = tmp_path / "run"
    _fit(run, keep + ["steps=3"])
    third = samples.read(samples.path_of(run, "train", 3))
    _fit(run, keep + ["steps=2"])
    assert sorted(p.name for p in (run / samples.SAMPLES_DIR).iterdir()) == ["train_000001.jsonl", "train_000002.jsonl"]
    _fit(run, keep + ["steps=3"])
    assert samples.read(samples.path_of(run, "train", 3)) == third
    assert sorted(p.name for p in (run / samples.SAMPLES_DIR).iterdir()) == [f"train_00000{s}.jsonl" for s in (1, 2, 3)]
    assert _no_time(read_metrics(run)) == _no_time(whole)
    assert not list((run / samples.SAMPLES_DIR).glob(".*"))  # no temporary file left


def test_wandb_offline_run_holds_the_tables(tmp_path: Path):
    from tests.test_wandb_sweep import wandb_records

    _fit(tmp_path, EVAL + ["logger=wandb", "logger.wandb_mode=offline", "samples.every=2", "samples.train=3",
                           "samples.eval=2"])
    want = {(0, "samples/eval"), (2, "samples/train"), (2, "samples/eval")}
    for _ in range(60):  # W&B's service may still be writing the offline file when finish() returns
        logged = {(r.history.step.num, item.key or item.nested_key[0]) for r in wandb_records(tmp_path / "wandb")
                  if r.WhichOneof("record_type") == "history" for item in r.history.item}
        if want <= logged:
            break
        time.sleep(0.5)
    assert want <= logged
    tables = list((tmp_path / "wandb").glob("offline-run-*/files/media/table/samples/*.table.json"))
    assert len(tables) == 3
    data = [json.loads(p.read_text()) for p in tables]
    assert all(d["columns"] == list(samples.COLUMNS) for d in data)
    assert sorted(len(d["data"]) for d in data) == [2, 2, 3]


@pytest.mark.parametrize("override", ["samples.every=-1", "samples.train=1.5", "+samples.extra=1"])
def test_bad_sample_settings_are_config_errors(override):
    with pytest.raises(ConfigError, match="samples"):
        build_components(compose_cfg(FAST + [override]))
