"""A sweep over experiment presets with a value override of a group the presets choose (issue 22's rehearsal found it):
``gdro-train -m experiment=paper,paper-prompt-gdro data.data_files=X`` stopped in Hydra's shared sweep config
("Key 'data_files' is not in struct"), where ``data`` is still the default ``copy``."""

from __future__ import annotations

from hydra import compose, initialize_config_dir

from gdro.cli.train import sweep_safe
from tests.conftest import CONF

SWEEP = ["-m", "experiment=paper,paper-prompt-gdro,paper-rollout-gdro", "model=tiny", "data.data_files=train.jsonl",
         "data.test_data_files=test.jsonl", "steps=2", "optim.lr=1e-5"]


def _compose(overrides: list[str]):
    with initialize_config_dir(config_dir=str(CONF), version_base="1.3"):
        return compose(config_name="train", overrides=overrides)


def test_keys_the_shared_config_lacks_are_forced_and_every_job_is_unchanged():
    out = sweep_safe(SWEEP, "train")
    assert out == ["-m", SWEEP[1], "model=tiny", "++data.data_files=train.jsonl", "++data.test_data_files=test.jsonl",
                   "steps=2", "optim.lr=1e-5"]  # keys every config has are left alone
    _compose([o for o in out[2:]])  # the shared config (no swept value) now composes
    for preset in ("paper", "paper-prompt-gdro", "paper-rollout-gdro"):
        plain = _compose([f"experiment={preset}", *SWEEP[2:]])
        forced = _compose([f"experiment={preset}", *out[2:]])
        assert plain == forced and forced.data.data_files == "train.jsonl"


def test_single_runs_and_sweeps_without_the_problem_are_left_alone():
    assert sweep_safe(SWEEP[1:], "train") == SWEEP[1:]  # not a multirun
    plain = ["-m", "seed=0,1", "optim.lr=1e-5", "data=dapo", "data.data_files=x.jsonl"]
    assert sweep_safe(plain, "train") == plain


def test_a_mistyped_key_is_still_reported_before_the_rewrite(capsys):
    """gdro-train checks every job with the overrides as written, and only then hands Hydra the rewritten ones."""
    import pytest

    from gdro.cli.train import _check_train, precheck

    typo = ["-m", "experiment=paper,paper-prompt-gdro", "data.data_filez=x"]
    with pytest.raises(SystemExit) as exit_:
        precheck(typo, "train", _check_train)
    assert exit_.value.code == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "unknown key 'data.data_filez' (did you mean 'data.data_files'?)" in err
