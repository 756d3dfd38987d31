"""gdro-eval on the shipped tiny model: toy suite, paper suite on local fixtures, early errors, DapoMath."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from hydra import compose, initialize_config_dir

from gdro.cli.evaluate import build_plan, run_eval
from gdro.common.validate import ConfigError
from gdro.data.paper import DapoMath
from tests.conftest import CONF, REPO

FIX = Path(__file__).resolve().parent / "fixtures" / "benchmarks"
PAPER_FILES = {
    "math500": "math500.jsonl",
    "aime2024": "aime2024.jsonl",
    "aime2025": "aime2025.parquet",
    "amc23": "amc23.jsonl",
    "minerva": "minerva.jsonl",
    "olympiadbench": "olympiadbench.jsonl",
    "gpqa_diamond": "gpqa_diamond.jsonl",
}


def compose_eval(overrides: list[str]):
    with initialize_config_dir(config_dir=str(CONF), version_base="1.3"):
        return compose(config_name="eval_app", overrides=overrides)


def paper_overrides(tmp_path: Path) -> list[str]:
    out = ["suite=paper", "model.max_prompt_len=1024", "model.max_new_tokens=4", "eval.k=1", "eval.max_problems=3"]
    names = list(PAPER_FILES)
    for i, name in enumerate(names):
        out.append(f"benchmarks.{i}.data_files={FIX / PAPER_FILES[name]}")
        out.append(f"+benchmarks.{i}.cache_dir={tmp_path / 'cache'}")
    return out


def test_toy_suite_writes_json_and_markdown(tmp_path):
    cfg = compose_eval(["eval.k=2", "eval.max_problems=16"])
    metrics = run_eval(cfg, tmp_path)
    for key in ("eval/toy_copy/mean@2", "eval/toy_copy/pass@2", "eval/toy_copy/n_problems", "eval/pass@2",
                "eval/mean@2", "eval/toy_copy/mean@2/level_1", "eval/toy_copy/pass@2/level_8"):
        assert key in metrics, key
    assert metrics["eval/toy_copy/n_problems"] == 16
    assert metrics["eval/pass@2"] == pytest.approx(metrics["eval/toy_copy/pass@2"])
    assert metrics["eval/toy_copy/mean@2"] > 0  # the warm-started tiny model copies short strings
    record = json.loads((tmp_path / "eval.json").read_text())
    assert record["metrics"] == pytest.approx(metrics)
    assert record["model"] == "tiny" and record["k"] == 2
    md = (tmp_path / "eval.md").read_text()
    assert "| toy_copy |" in md and "mean@2" in md and "pooled" in md


def test_prompts_longer_than_max_prompt_len_are_dropped_and_counted(tmp_path):
    # copy prompts take 10 + 2·level tokens: 22 keeps levels 1–6, drops the 48 + 48 held-out prompts of levels 7, 8
    metrics = run_eval(compose_eval(["eval.k=1", "model.max_prompt_len=22"]), tmp_path)
    record = json.loads((tmp_path / "eval.json").read_text())
    assert record["dropped_long_prompts"] == {"toy_copy": 96}
    assert metrics["eval/toy_copy/n_problems"] == 337 - 96
    assert "eval/toy_copy/mean@1/level_6" in metrics and "eval/toy_copy/mean@1/level_7" not in metrics


def test_paper_suite_on_fixtures(tmp_path):
    cfg = compose_eval(paper_overrides(tmp_path))
    metrics = run_eval(cfg, tmp_path / "out")
    n = {name: metrics[f"eval/{name}/n_problems"] for name in PAPER_FILES}
    assert all(1 <= v <= 3 for v in n.values())
    for name in PAPER_FILES:
        assert f"eval/{name}/mean@1" in metrics and f"eval/{name}/pass@1" in metrics
        assert not any(k.startswith(f"eval/{name}/") and "/level_" in k for k in metrics)
    assert metrics["eval/n_problems"] == sum(n.values())
    pooled = sum(metrics[f"eval/{b}/pass@1"] * n[b] for b in PAPER_FILES) / sum(n.values())
    assert metrics["eval/pass@1"] == pytest.approx(pooled)
    assert metrics["eval/aime/mean@1"] == pytest.approx((metrics["eval/aime2024/mean@1"] + metrics["eval/aime2025/mean@1"]) / 2)
    assert "eval/mean@1/macro" in metrics
    md = (tmp_path / "out" / "eval.md").read_text()
    assert md.count("\n") == 2 + len(PAPER_FILES) + 2  # header, rule, 7 benchmarks, aime average, pooled
    assert "aime (avg 2024, 2025)" in md
    # every completion and its verdict is kept, and gdro-rescore reads it back to the same figures without a model
    from gdro.cli.rescore import rescore

    samples = [json.loads(line) for line in (tmp_path / "out" / "samples.jsonl").read_text().splitlines()]
    assert len(samples) == metrics["eval/n_problems"] and {"uid", "completion", "correct"} <= set(samples[0])
    again = rescore(str(tmp_path / "out" / "samples.jsonl"), [f"{b}={FIX / f}" for b, f in PAPER_FILES.items()])
    assert sorted(again) == sorted(PAPER_FILES)
    for name in again:
        assert again[name]["mean"] == pytest.approx(metrics[f"eval/{name}/mean@1"])
        assert again[name]["differ"] == 0 and again[name]["agree"] == metrics[f"eval/{name}/n_problems"]


def test_errors_before_model_load(tmp_path, monkeypatch):
    import gdro.models.loading

    def boom(*a, **k):
        raise AssertionError("model loaded before validation")

    monkeypatch.setattr(gdro.models.loading, "load_model", boom)
    with pytest.raises(ConfigError, match=r"unknown benchmark 'aime2026'.*math500.*toy_copy"):
        run_eval(compose_eval(["benchmarks.0.name=aime2026"]), tmp_path)
    with pytest.raises(ConfigError, match="no such file"):
        run_eval(compose_eval(["suite=paper", "benchmarks.0.data_files=/nope/x.jsonl"]), tmp_path)
    with pytest.raises(ConfigError, match="checkpoint"):
        run_eval(compose_eval([f"checkpoint={tmp_path}"]), tmp_path)
    with pytest.raises(ConfigError, match="eval"):
        run_eval(compose_eval(["eval.k=0"]), tmp_path)
    assert not (tmp_path / "eval.json").exists()


def test_checkpoint_overrides_model_path():
    from gdro.models.source import TINY_DIR

    plan = build_plan(compose_eval([f"checkpoint={TINY_DIR}"]))
    assert plan.parts.model.name_or_path == str(TINY_DIR)
    assert len(plan.benchmarks["toy_copy"]) > 0


def test_dapo_math_on_fixtures(tmp_path):
    task = DapoMath(data_files=str(FIX / "dapo_math.parquet"), test_data_files=str(FIX / "math500.jsonl"), test_limit=3)
    train, test = task.train(), task.test()
    assert len(train) == 3 and all(p.uid.startswith("dapo_math/train/") and p.level == 0 for p in train)
    assert 1 <= len(test) <= 3 and all(p.uid.startswith("math500/test/") for p in test)
    with pytest.raises(ValueError, match="unknown benchmark"):
        DapoMath(test_benchmark="nope")
    with initialize_config_dir(config_dir=str(CONF), version_base="1.3"):
        cfg = compose(config_name="train", overrides=["data=dapo"])
    from hydra.utils import instantiate

    assert isinstance(instantiate(cfg.data), DapoMath)


@pytest.mark.slow
def test_cli_cfg_job():
    env = {**os.environ, "HF_HUB_OFFLINE": "1"}
    res = subprocess.run([sys.executable, "-m", "gdro.cli.evaluate", "--cfg", "job", "benchmarks=paper"],
                         check=False, cwd=REPO, env=env, capture_output=True, text=True, timeout=120)
    assert res.returncode == 0, res.stderr
    assert "gpqa_diamond" in res.stdout and "checkpoint: null" in res.stdout
