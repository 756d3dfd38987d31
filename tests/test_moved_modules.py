"""#50's floor folders: every module path the move retired still imports (the one module, with a warning naming its
new home), an old checkpoint's ``_target_`` reads at its new home, and a config written before the move is no
difference to a resume (gdro/common/moved.py, gdro.run.migrations)."""

from __future__ import annotations

import importlib
import json
import subprocess
import sys
import warnings

import pytest

from gdro.cli.app import CONF_DIR
from gdro.common.moved import MOVED
from gdro.run.migrations import SCHEMA, renamed_target
from gdro.run.record import config_differences
from tests.conftest import REPO
from tests.test_renamed_targets import _targets


def test_every_old_path_is_the_module_at_its_new_home_with_a_warning_naming_it():
    assert len(set(MOVED.values())) == len(MOVED)
    for old, new in MOVED.items():
        home = importlib.import_module(new)
        assert home.__spec__.name == new
        sys.modules.pop(old, None)
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            alias = importlib.import_module(old)
        assert alias is home, old
        assert home.__spec__.name == new, old  # the alias did not take the module's own spec
        assert any(f"{old} moved to {new}" in str(w.message) and w.category is DeprecationWarning
                   for w in caught), old


def test_old_from_imports_of_user_code_still_work_in_a_fresh_interpreter():
    code = ("import warnings; warnings.simplefilter('error', DeprecationWarning)\n"
            "from gdro.algorithm.trainer import Trainer\n"
            "warnings.simplefilter('ignore', DeprecationWarning)\n"
            "from gdro.trainer import Trainer as Old\n"
            "from gdro.evaluation.heldout import EvalConfig\n"
            "from gdro.run.tracking import read_metrics\n"
            "import gdro.build, gdro.algorithm.heldout\n"
            "assert Old is Trainer and EvalConfig is gdro.algorithm.heldout.EvalConfig\n"
            "assert gdro.build.build_components is __import__('gdro.compose.build').compose.build.build_components\n"
            "print('ok')")
    out = subprocess.run([sys.executable, "-c", code], cwd=REPO, capture_output=True, text=True, timeout=120,
                         check=False)
    assert out.returncode == 0 and out.stdout.strip() == "ok", out.stderr[-2000:]


def test_a_name_that_never_existed_is_still_an_import_error():
    with pytest.raises(ModuleNotFoundError):
        importlib.import_module("gdro.no_such_module")
    with pytest.raises(ModuleNotFoundError):
        importlib.import_module("gdro.evaluation.no_such_module")


def test_old_targets_read_at_their_new_homes_for_checkpoints_written_before_the_move():
    assert renamed_target("gdro.filters.NoFilter", SCHEMA - 1) == "gdro.algorithm.filters.NoFilter"
    assert renamed_target("gdro.run.tracking.LoggerConfig", 0) == "gdro.algorithm.tracking.LoggerConfig"
    assert renamed_target("gdro.distributed.DistConfig", SCHEMA - 1) == "gdro.parallel.distributed.DistConfig"
    assert renamed_target("gdro.filters.NoFilter", SCHEMA) == "gdro.filters.NoFilter"  # today's schema: as it is


@pytest.mark.parametrize("overrides", [["experiment=smoke"], ["experiment=smoke", "filter=dynamic"]])
def test_a_config_of_the_layout_before_the_move_is_no_difference(overrides):
    from hydra import compose, initialize_config_dir
    from omegaconf import OmegaConf

    with initialize_config_dir(config_dir=CONF_DIR, version_base="1.3"):
        new = OmegaConf.to_container(compose("train", overrides=overrides), resolve=True)
    back = {v: k for k, v in MOVED.items()}
    old = json.loads(json.dumps(new))
    renamed = []
    for path, target in _targets(new):
        module, _, name = target.rpartition(".")
        if module in back:
            node = old
            for key in path.split("."):
                node = node[key]
            node["_target_"] = f"{back[module]}.{name}"
            renamed.append(path)
    assert {"filter", "logger", "eval", "dist"} <= set(renamed), renamed
    assert config_differences(old, new, schema=SCHEMA - 1) == []
    assert config_differences(old, new, schema=SCHEMA) != []  # written by today's gdro, an old name is a difference
