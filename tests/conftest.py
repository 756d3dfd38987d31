"""Shared test setup: everything offline, a small thread count, helpers to compose configs, the ``slow`` marker.

Tests marked ``@pytest.mark.slow`` (real ``gdro-train``/``gdro-eval`` subprocesses, the notebook) are skipped by a
bare ``pytest``; ``--runslow`` runs them with the rest, ``-m slow`` runs only them (any ``-m`` expression decides
for itself), and naming one by its test id (``file.py::test``) runs it. ``.ci/run`` runs both sets.
"""

from __future__ import annotations

import io
import os
import pickle
import sys

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("HF_DATASETS_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
os.environ.setdefault("WANDB_SILENT", "true")
os.environ.pop("WANDB_MODE", None)

from pathlib import Path
from typing import TYPE_CHECKING

import pytest

if TYPE_CHECKING:
    from omegaconf import DictConfig

REPO = Path(__file__).resolve().parent.parent
CONF = REPO / "conf"

# one process: up to 2 threads; under pytest-xdist (the README's command: a worker per core) each worker one thread, so
# the workers do not fight over the cores
_THREADS = max(1, min(2, os.cpu_count() or 1) // int(os.environ.get("PYTEST_XDIST_WORKER_COUNT", "1")))
# and the runs the tests start, in this process or as subprocesses: threads=auto honours OMP_NUM_THREADS
# (gdro.common.threads), so a test's run does not depend on what else the machine runs at that moment. A value the
# user set is kept. pytest-xdist's workers inherit the environment of the controller, which imports this file first
# and, as one process, would give them its 2 threads each: 4 threads on 2 cores doubled the suite's CPU time. The
# user's own value (or none) is kept aside for them, so each worker sets its own count.
_USER_OMP = os.environ.setdefault("GDRO_TESTS_USER_OMP_NUM_THREADS", os.environ.get("OMP_NUM_THREADS", ""))
os.environ["OMP_NUM_THREADS"] = _USER_OMP or str(_THREADS)



def pytest_addoption(parser: pytest.Parser) -> None:
    parser.addoption("--runslow", action="store_true", default=False,
                     help="also run the tests marked slow (subprocess runs, the notebook)")


def _named_ids(config: pytest.Config) -> list[str]:
    """Test ids given on the command line (``path::name``), relative to the rootdir like ``item.nodeid``."""
    ids = []
    for arg in config.args:
        if "::" not in arg:
            continue
        path, rest = arg.split("::", 1)
        try:
            path = Path(path).resolve().relative_to(config.rootpath).as_posix()
        except ValueError:
            pass
        ids.append(f"{path}::{rest}")
    return ids


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    if config.getoption("--runslow") or config.getoption("markexpr"):
        return
    named = _named_ids(config)
    skip = pytest.mark.skip(reason="slow: run with --runslow, or -m slow for only these")
    for item in items:
        if "slow" in item.keywords and not any(item.nodeid.startswith(n) for n in named):
            item.add_marker(skip)


# Each YAML text parsed once per test process. Hydra parses ~21 YAML files for every composition (PyYAML's pure-Python
# scanner: 14% of the default suite's time under cProfile), and the suite composes ~900 times, in its own
# compose_cfg and through gdro-train's and gdro-eval's command lines, in process. ``yaml.load`` (which OmegaConf and
# ``yaml.safe_load`` call) keeps what it parsed by loader and text, and hands each caller its own copy (unpickled: 20x
# faster than copy.deepcopy); a text that fails to parse is not kept (it raises again, naming its file: the stream's
# name goes with the text). OmegaConf.load keeps the config it makes of each file's text (Hydra's FileConfigSource
# loads every file through it) the same way, one level up. Subprocesses parse as a user's run does.
_PARSED: dict[tuple[str, str, str | bytes], bytes] = {}
_LOADED: dict[str | bytes, bytes] = {}


def _read(stream) -> tuple[str | bytes, io.IOBase]:
    """A stream's text, and a fresh stream of it under the same name (yaml's error marks name the file, as they would
    reading it)."""
    name, text = getattr(stream, "name", None), stream.read()
    source = io.StringIO(text) if isinstance(text, str) else io.BytesIO(text)
    if name is not None:
        source.name = name
    return text, source


def _keep_parses() -> None:
    import yaml
    from omegaconf import OmegaConf

    yaml_load, omegaconf_load = yaml.load, OmegaConf.load

    def parsed_once(stream, Loader):
        text, source = _read(stream) if hasattr(stream, "read") else (stream, stream)
        # omegaconf builds its loader class anew on every load (get_yaml_loader): the same class by its name
        key = (Loader.__module__, Loader.__qualname__, text)
        if key not in _PARSED:
            _PARSED[key] = pickle.dumps(yaml_load(source, Loader=Loader))
        return pickle.loads(_PARSED[key])

    def loaded_once(file_):
        if not hasattr(file_, "read"):  # a path: OmegaConf reads the file itself
            return omegaconf_load(file_)
        text, source = _read(file_)
        if text not in _LOADED:
            _LOADED[text] = pickle.dumps(omegaconf_load(source))
        return pickle.loads(_LOADED[text])

    yaml.load = parsed_once
    OmegaConf.load = staticmethod(loaded_once)


def _prepare_test_process() -> None:
    """What a process that runs tests needs: its torch threads, hypothesis' profile, absl's stream, the parse caches
    above."""
    import torch
    from absl import logging as absl_logging
    from hypothesis import settings as hypothesis_settings

    torch.set_num_threads(_THREADS)
    # Tests never assert on wall-clock time: hypothesis' per-example deadline (200 ms by default) is off for every
    # test, so a busy machine cannot fail one (seen in CI: an allocator property took 385 ms once, 2.7 ms on the replay)
    hypothesis_settings.register_profile("gdro", deadline=None)
    hypothesis_settings.load_profile("gdro")
    # rliable (gdro/report/stats.py) imports absl, whose logging handler keeps the sys.stderr of the moment absl loads
    # and closes it when logging shuts its handlers down, unless it is the sys.stderr of that later moment. Hydra's job
    # logging does that shut-down (logging.config.dictConfig) in every in-process gdro-train; under capsys,
    # sys.stderr is then capsys's, so absl would close pytest's own capture stream and every later test of the process
    # would fail with "I/O operation on closed file". sys.__stderr__ is never closed by it.
    absl_logging.get_absl_handler().python_handler.stream = sys.__stderr__
    _keep_parses()


def pytest_configure(config: pytest.Config) -> None:
    # pytest-xdist's controller (``-n N``) runs no test, it hands them to its workers: it skips the ~2 s of imports
    # above, which come before the workers start
    if getattr(config.option, "numprocesses", None) and not hasattr(config, "workerinput"):
        return
    _prepare_test_process()


# Each composition once per test process: Hydra reads and merges ~21 YAML files per compose (~0.1 s of CPU with
# the parse caches above), and many tests compose the same overrides (FAST alone, a preset's method rows).
# Composing is a pure function of conf/ (which no test writes), the overrides and, for Hydra's own node
# (hydra.runtime.cwd), the working directory: the key. Every caller gets its own copy, unpickled (~1 ms; OmegaConf's
# own deep copy takes ~15), so a test that changes its config changes no other test's; a failed compose is not kept
# (it raises again). The config without Hydra's node is the one with it, the node deleted: what
# hydra.compose(return_hydra_config=False) itself does.
_COMPOSED: dict[tuple[tuple[str, ...], str], bytes] = {}


def compose_cfg(overrides: list[str] | None = None, *, return_hydra_config: bool = False) -> DictConfig:
    """The composed training config, as ``gdro-train`` would see it."""
    from hydra import compose, initialize_config_dir
    from omegaconf import open_dict

    key = (tuple(overrides or ()), os.getcwd())
    if key not in _COMPOSED:
        with initialize_config_dir(config_dir=str(CONF), version_base="1.3"):
            _COMPOSED[key] = pickle.dumps(compose(config_name="train", overrides=list(key[0]),
                                                  return_hydra_config=True))
    cfg = pickle.loads(_COMPOSED[key])
    if not return_hydra_config:
        with open_dict(cfg):
            del cfg["hydra"]
    return cfg


# Small, fast settings for integration tests on the shipped tiny model. No evaluation (each costs ~3 training
# steps): a test that checks evaluation rows turns it on itself (eval.at_start / eval.every / eval.at_end), and
# then gets a small one (k=4 on 24 problems).
FAST = [
    "logger=jsonl",
    "steps=2",
    "prompts_per_step=8",
    "rollouts_per_prompt=4",
    "save_final=false",
    "progress=false",
    "eval.at_start=false",
    "eval.every=0",
    "eval.at_end=false",
    "eval.k=4",
    "eval.max_problems=24",
    "data.train_size=400",
    "data.test_per_level=3",
]


@pytest.fixture
def fast_overrides() -> list[str]:
    return list(FAST)
