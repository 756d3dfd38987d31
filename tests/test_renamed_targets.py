"""A checkpoint written before gdro renamed a component class (#29: ``gdro.loss.LossConfig`` became
``gdro.loss.GRPOLoss``) still resumes; any other ``_target_`` change is still a difference that refuses. What an old
checkpoint may hold is one table keyed by the checkpoint's schema (gdro.run.migrations)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from gdro.algorithm.tracking import read_metrics
from gdro.common.validate import ConfigError
from gdro.run import migrations
from gdro.run.checkpoint import list_checkpoints
from gdro.run.migrations import MIGRATIONS, OLDEST_RESUMABLE, SCHEMA, renamed_target
from gdro.run.record import config_differences
from tests.conftest import compose_cfg
from tests.test_resume import REPO, _env

RENAMED_TARGETS = {m.old: m.new for m in migrations.applying(0, "target")}
MOVED_MODULES = {m.old: m.new for m in migrations.applying(0, "module") if m.why.startswith("#29")}


def _cfg(target: str) -> dict:
    return {"steps": 3, "loss": {"_target_": target, "clip_low": 0.2}}


def test_a_renamed_target_is_no_difference_another_target_is():
    for old, new in RENAMED_TARGETS.items():
        assert config_differences(_cfg(old), _cfg(new)) == []
    assert config_differences(_cfg("gdro.loss.gspo.GSPOLoss"), _cfg("gdro.loss.grpo.GRPOLoss")) == [
        'loss._target_: "gdro.loss.gspo.GSPOLoss" -> "gdro.loss.grpo.GRPOLoss"']
    assert config_differences(_cfg("gdro.loss.LossConfig"), _cfg("gdro.loss.gspo.GSPOLoss")) != []


def _resume_after(tmp_path, rewrite, rewrite_state=None) -> None:
    """A 1-step smoke run with a checkpoint, its meta.json's config changed by ``rewrite`` (as an older gdro wrote
    it), then the same command with steps=2: it must resume and log steps 1 and 2 once each."""
    run_dir = tmp_path / "run"
    cmd = [sys.executable, "-m", "gdro.cli.train", "experiment=smoke", "progress=false", "checkpoint.every=1",
           f"hydra.run.dir={run_dir}"]
    out = subprocess.run([*cmd, "steps=1"], cwd=REPO, env=_env(), capture_output=True, text=True,
                         timeout=300, check=False)
    assert out.returncode == 0, out.stderr[-3000:]
    (_, ckpt), = list_checkpoints(run_dir)
    meta = json.loads((ckpt / "meta.json").read_text())
    rewrite(meta["config"])
    meta.pop("schema", None)  # an older gdro recorded no schema (schema 0: the migration table applies)
    (ckpt / "meta.json").write_text(json.dumps(meta))
    if rewrite_state is not None:  # trainer.pt as an older gdro wrote it
        state = torch.load(ckpt / "trainer.pt", map_location="cpu", weights_only=False)
        rewrite_state(state)
        torch.save(state, ckpt / "trainer.pt")
    out = subprocess.run([*cmd, "steps=2"], cwd=REPO, env=_env(), capture_output=True, text=True,
                         timeout=300, check=False)
    assert out.returncode == 0, out.stderr[-3000:]
    assert [r["step"] for r in read_metrics(run_dir) if r.get("step")] == [1, 2]


@pytest.mark.slow
def test_a_checkpoint_from_before_the_loss_seam_resumes(tmp_path):
    def rewrite(config):
        assert config["loss"]["_target_"] == "gdro.loss.grpo.GRPOLoss"
        config["loss"]["_target_"] = "gdro.loss.LossConfig"  # as a checkpoint of gdro before #29 says

    _resume_after(tmp_path, rewrite)


@pytest.mark.slow
def test_a_checkpoint_from_before_the_ledger_the_streak_and_the_world_size_resumes(tmp_path):
    def rewrite_state(state):
        for key in ("ledger", "world_size"):
            del state[key]
        del state["classifier"]["streak"]

    _resume_after(tmp_path, lambda config: None, rewrite_state)


def _old_name(target: str) -> str:
    """``target`` as gdro named it before the #29 layout (its module's old home), or as it is if it never moved."""
    module, _, name = target.rpartition(".")
    back = {new: old for old, new in MOVED_MODULES.items()}
    return f"{back[module]}.{name}" if module in back else target


def _targets(node, path=""):
    if isinstance(node, dict):
        for k, v in node.items():
            if k == "_target_" and isinstance(v, str):
                yield path, v
            else:
                yield from _targets(v, f"{path}.{k}" if path else k)


def test_every_moved_module_maps_to_an_importable_home_and_back():
    import importlib

    assert len(set(MOVED_MODULES.values())) == len(MOVED_MODULES)
    for old, new in MOVED_MODULES.items():
        importlib.import_module(new)
        spec = importlib.util.find_spec(old)  # the old module is gone (or its name is now a package's)
        assert spec is None or spec.submodule_search_locations is not None, old
        assert renamed_target(f"{old}.Anything") == f"{new}.Anything"
    assert renamed_target("gdro.loss.grpo.GRPOLoss") == "gdro.loss.grpo.GRPOLoss"  # never moved: as it is
    assert renamed_target("mypkg.allocators.Mine") == "mypkg.allocators.Mine"  # a user's own: as it is


def test_a_config_of_the_old_layout_is_no_difference():
    from hydra import compose, initialize_config_dir
    from omegaconf import OmegaConf

    from gdro.cli.app import CONF_DIR

    with initialize_config_dir(config_dir=CONF_DIR, version_base="1.3"):
        new = OmegaConf.to_container(compose("train", overrides=["experiment=smoke"]), resolve=True)
    found = dict(_targets(new))
    moved = {path: t for path, t in found.items() if _old_name(t) != t}
    assert {"model", "sampler", "allocator", "classifier", "reward", "eval", "logger"} <= set(moved)
    old = json.loads(json.dumps(new))
    for path in moved:
        node = old
        for key in path.split("."):
            node = node[key]
        node["_target_"] = _old_name(node["_target_"])
    assert config_differences(old, new) == []
    old["sampler"]["_target_"] = "gdro.samplers.NoSuchSampler"
    assert config_differences(old, new) != []


@pytest.mark.slow
def test_a_checkpoint_from_before_the_layout_resumes(tmp_path):
    def rewrite(config):
        rewritten = 0
        for section in config.values():
            if isinstance(section, dict) and _old_name(section.get("_target_", "")) != section.get("_target_", ""):
                section["_target_"] = _old_name(section["_target_"])  # as a checkpoint of gdro before the layout says
                rewritten += 1
        assert rewritten >= 7

    _resume_after(tmp_path, rewrite)


def test_the_table_holds_only_what_a_resumable_schema_needs():
    """Entries under schema s serve checkpoints of schema <= s: s is one this gdro resumes and no longer writes."""
    assert MIGRATIONS and all(OLDEST_RESUMABLE <= s < SCHEMA for s in MIGRATIONS)
    assert {m.kind for entries in MIGRATIONS.values() for m in entries} <= {"target", "module", "group", "inert", "key",
                                                                           "implied", "state"}
    # a checkpoint of the current schema holds today's names: nothing is read otherwise
    assert renamed_target("gdro.loss.LossConfig", SCHEMA) == "gdro.loss.LossConfig"
    assert migrations.added_group("filter._target_", SCHEMA) is None
    assert renamed_target("gdro.loss.LossConfig", 0) == "gdro.loss.grpo.GRPOLoss"
    assert migrations.added_group("filter._target_", 0) == "gdro.algorithm.filters.NoFilter"
    assert migrations.inert_switch("reward.overlong_max_tokens", SCHEMA) is None
    assert migrations.inert_switch("reward.overlong_max_tokens", 0) == "reward.overlong_buffer"


def test_each_checkpoint_records_its_schema_and_a_newer_one_is_refused_in_one_line(tmp_path):
    from gdro.compose.build import build_training
    from tests.conftest import FAST, compose_cfg

    training = build_training(compose_cfg([*FAST, "steps=1", "checkpoint.every=1", "eval.at_start=false"]), tmp_path)
    try:
        training.fit()
    finally:
        training.logger.close()
    (_, ckpt), = list_checkpoints(tmp_path)
    meta = json.loads((ckpt / "meta.json").read_text())
    assert meta["schema"] == SCHEMA
    meta["schema"] = SCHEMA + 1  # as a later gdro would write it
    (ckpt / "meta.json").write_text(json.dumps(meta))
    with pytest.raises(ConfigError, match=rf"written by a newer gdro \(checkpoint schema {SCHEMA + 1}; this gdro "
                                          rf"reads up to {SCHEMA}\): upgrade gdro to resume it") as err:
        build_training(compose_cfg([*FAST, "steps=2", "checkpoint.every=1", "eval.at_start=false"]), tmp_path)
    assert "\n" not in str(err.value)


# What gdro wrote before checkpoint schemas (schema 0), as it wrote it: the meta.json of a real experiment=smoke
# checkpoint and the resolved configs of six more commands, from gdro 1ce88b4 (tests/fixtures/checkpoints/schema0.json)
SCHEMA0 = json.loads((Path(__file__).parent / "fixtures" / "checkpoints" / "schema0.json").read_text())


def _resolved(overrides: str) -> dict:
    from omegaconf import OmegaConf

    return OmegaConf.to_container(compose_cfg(overrides.split()), resolve=True)


@pytest.mark.parametrize("overrides", sorted(SCHEMA0["configs"]))
def test_a_config_gdro_wrote_before_schemas_is_no_difference_today(overrides):
    """Every key added since (the TRL options, the reward's shaping) is at its old behaviour: nothing refuses."""
    old = SCHEMA0["configs"][overrides]
    assert "schema" not in SCHEMA0["smoke_meta"] and "reward" in old
    assert config_differences(old, _resolved(overrides), schema=0) == []


def test_the_overlong_limit_an_old_config_lacks_is_forgiven_only_while_the_punishment_is_off():
    """reward.overlong_max_tokens defaults to ${model.max_new_tokens} (no component default): the migration table
    forgives it while reward.overlong_buffer is 0 (nothing reads it), for schema-0 checkpoints only."""
    old = SCHEMA0["smoke_meta"]["config"]
    assert "overlong_max_tokens" not in old["reward"]
    on = _resolved("experiment=smoke progress=false reward.overlong_buffer=4")
    assert config_differences(old, on, schema=0) == ["reward.overlong_buffer: <absent> -> 4",
                                                     "reward.overlong_max_tokens: <absent> -> 16"]
    off = _resolved("experiment=smoke progress=false")
    # schema 1: after the schema-0 entries, before #50's (the advantage keys the old loss held still map)
    assert config_differences(old, off, schema=1) == ["reward.overlong_max_tokens: <absent> -> 16"]
    old_limit = json.loads(json.dumps(old))
    old_limit["reward"]["overlong_max_tokens"] = 8  # a key the old config holds is always compared
    assert config_differences(old_limit, off, schema=0) == ["reward.overlong_max_tokens: 8 -> 16"]


@pytest.mark.slow
def test_a_checkpoint_gdro_wrote_before_schemas_resumes(tmp_path):
    """A checkpoint whose meta.json holds just the keys gdro 1ce88b4 wrote (each added since removed) resumes."""
    old = SCHEMA0["smoke_meta"]["config"]

    def rewrite(config, old=old):
        removed = 0
        for key in list(config):
            if key not in old:
                del config[key]
                removed += 1
            elif isinstance(config[key], dict):
                removed += rewrite(config[key], old[key])
        return removed

    _resume_after(tmp_path, lambda config: rewrite(config) or pytest.fail("no key added since 1ce88b4?"))


def test_the_state_an_old_checkpoint_lacks_is_filled_in_by_the_table_alone():
    """A schema-0 checkpoint may lack the world size, the compute ledger and the difficulty classifier's streak: the
    table fills each in as it behaves as before (one process, counts from 0, streaks from 0); a part it holds, another
    classifier's state and a checkpoint of the current schema are left as they are."""
    old = {"policy": {}, "trainer": {"step": 3, "classifier": {"uids": ["a", "b", "c"], "visits": [1, 0, 2]},
                                     "sampler": {}}}
    migrated = migrations.migrated_state(old, 0)
    assert migrated["trainer"]["world_size"] == 1
    assert migrated["trainer"]["ledger"] == {"rollouts_cum": 0, "tokens_cum": 0, "grad_groups_cum": 0}
    assert migrated["trainer"]["classifier"]["streak"] == [0, 0, 0]
    oracle = migrations.migrated_state({"trainer": {"classifier": {"drawn": [1]}, "world_size": 2}}, 0)
    assert oracle["trainer"] == {"classifier": {"drawn": [1]}, "world_size": 2,
                                 "ledger": {"rollouts_cum": 0, "tokens_cum": 0, "grad_groups_cum": 0}}
    assert migrations.migrated_state({"meta": {"step": 3}}, 0)["meta"]["world_size"] == 1  # meta.json's record too
    assert migrations.migrated_state({"meta": {"step": 3, "world_size": 2}}, 0)["meta"]["world_size"] == 2
    today = {"trainer": {"classifier": {"uids": ["a"]}}}
    assert migrations.migrated_state(today, SCHEMA) == {"trainer": {"classifier": {"uids": ["a"]}}}
