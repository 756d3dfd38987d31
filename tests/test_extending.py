"""docs/extending.md, followed literally: a toy allocator added as a class, a YAML option and a real training run.

The class below is the one the walk-through shows (``test_the_doc_shows_this_very_class`` keeps the two equal).
Nothing is added to the repository's ``conf/``: the documented option file is written into a temporary copy of it,
with ``_target_`` pointing at this module instead of ``gdro.controllers.allocators``.
"""

from __future__ import annotations

import inspect
import re
import shutil
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from hydra import compose, initialize_config_dir
from omegaconf import OmegaConf

from gdro.algorithm.tracking import read_metrics
from gdro.common.interfaces import BinSpec, DifficultyClassifier, RolloutAllocator, StepFeedback
from gdro.common.validate import ConfigError
from gdro.compose.build import build_components, build_training
from tests.conftest import CONF, FAST, REPO
from tests.test_defaults import disagreements
from tests.test_protocols import conforms

DOC = REPO / "docs" / "extending.md"


class HardFirstAllocator:
    """Toy allocator: every prompt gets n̄ rollouts, then hard prompts take ``shift`` rollouts from easy ones.

    The prompts that have a pass-rate bin are ranked hardest first (bin 0 = hardest); the i-th hardest takes
    ``shift`` rollouts from the i-th easiest when its bin is strictly harder. Every transfer is +shift/−shift
    between two prompts, so Σ n = budget exactly. Never-seen prompts (bin >= num_pass_bins) keep n̄.
    """

    def __init__(self, shift: int = 2):
        if shift < 0:
            raise ValueError(f"shift must be >= 0, got {shift}")
        self.shift = shift
        self.num_pass_bins = 0  # from bind(): the bins below it are ordered by pass rate
        self.moved = 0  # rollouts moved at the last step (a metric; recomputed every step)
        self.total_moved = 0  # over the run: state that outlives a step, so it is checkpointed

    def bind(self, bins: BinSpec) -> None:
        self.num_pass_bins = bins.num_pass_bins

    def check_budget(self, n_bar: int) -> None:
        if n_bar - self.shift < 1:
            raise ValueError(f"shift={self.shift} would leave an easy prompt {n_bar - self.shift} rollouts")

    def allocate(self, ids: np.ndarray, bins: np.ndarray, n_bar: int,
                 classifier: DifficultyClassifier) -> np.ndarray:
        bins = np.asarray(bins, dtype=np.int64)  # ids and the classifier's per-prompt history: unused here
        n = np.full(len(bins), n_bar, dtype=np.int64)  # the budget is n_bar × #prompts
        ranked = np.flatnonzero(bins < self.num_pass_bins)
        ranked = ranked[np.argsort(bins[ranked], kind="stable")]  # hardest first
        half = len(ranked) // 2
        for hard, easy in zip(ranked[:half], ranked[::-1][:half]):
            if bins[hard] < bins[easy]:
                n[hard] += self.shift
                n[easy] -= self.shift
        self.moved = int(np.maximum(n - n_bar, 0).sum())
        self.total_moved += self.moved
        return n

    def update(self, feedback: StepFeedback) -> None:
        """Not adaptive: this step's bins are all it reads."""

    def metrics(self) -> dict[str, float]:
        return {"gdro/moved": float(self.moved), "gdro/moved_total": float(self.total_moved)}

    def state_dict(self) -> dict[str, Any]:
        return {"total_moved": self.total_moved}

    def load_state_dict(self, state: Mapping[str, Any]) -> None:
        self.total_moved = int(state["total_moved"])


# ------------------------------------------------------------------------------------------------ the doc
def _doc_block(lang: str, must_contain: str) -> str:
    blocks = re.findall(rf"^```{lang}\n(.*?)^```", DOC.read_text(encoding="utf-8"), flags=re.MULTILINE | re.DOTALL)
    found = [b for b in blocks if must_contain in b]
    assert len(found) == 1, f"docs/extending.md: expected one ```{lang} block with {must_contain!r}"
    return found[0]


def test_the_doc_shows_this_very_class():
    block = _doc_block("python", "class HardFirstAllocator")
    assert block[block.index("class HardFirstAllocator"):] == inspect.getsource(HardFirstAllocator)


def _write_option(tmp_path: Path) -> Path:
    """Step 2 of the doc: conf/allocator/hard-first.yaml, in a temporary copy of conf/ (target: this module)."""
    conf = tmp_path / "conf"
    shutil.copytree(CONF, conf)
    yaml = _doc_block("yaml", "_target_: gdro.controllers.allocators.HardFirstAllocator")
    here = f"{HardFirstAllocator.__module__}.{HardFirstAllocator.__qualname__}"
    (conf / "allocator" / "hard-first.yaml").write_text(yaml.replace("gdro.controllers.allocators.HardFirstAllocator", here))
    return conf


def _compose(conf: Path, overrides: list[str]):
    with initialize_config_dir(config_dir=str(conf), version_base="1.3"):
        return compose(config_name="train", overrides=overrides)


# ------------------------------------------------------------------------------------------------ the class
def test_transfers_keep_the_budget_and_favour_hard_prompts():
    alloc = HardFirstAllocator(shift=2)
    alloc.bind(BinSpec(tuple("0123456789") + ("unseen",), num_pass_bins=10))
    n = alloc.allocate(np.arange(6), np.array([9, 9, 0, 10, 9, 0]), 4, None)
    assert n.tolist() == [4, 2, 6, 4, 2, 6]  # both bin-0 prompts take 2 from a bin-9 one; the unseen keeps n̄
    assert alloc.metrics() == {"gdro/moved": 4.0, "gdro/moved_total": 4.0}
    rng = np.random.default_rng(0)
    for _ in range(200):
        bins = rng.integers(0, 11, size=int(rng.integers(1, 40)))
        n = alloc.allocate(np.arange(len(bins)), bins, 4, None)
        assert n.sum() == 4 * len(bins) and set(n.tolist()) <= {2, 4, 6}
        assert (n[bins == 10] == 4).all()
        seen = bins < 10
        if seen.any():  # the hardest seen bin never gets fewer than n̄, the easiest never more
            assert n[bins == bins[seen].min()].min() >= 4 and n[bins == bins[seen].max()].max() <= 4


def test_state_round_trips_and_bad_values_name_the_key():
    a = HardFirstAllocator()
    a.bind(BinSpec(("0", "1"), num_pass_bins=2))
    a.allocate(np.arange(2), np.array([0, 1]), 4, None)
    b = HardFirstAllocator()
    b.load_state_dict(a.state_dict())
    assert b.state_dict() == a.state_dict() == {"total_moved": 2}
    with pytest.raises(ValueError, match="shift"):
        HardFirstAllocator(shift=-1)
    with pytest.raises(ValueError, match="shift=2"):
        a.check_budget(2)


# ------------------------------------------------------------------------------------------------ end to end
def test_documented_steps_add_a_working_allocator(tmp_path: Path):
    conf = _write_option(tmp_path)
    overrides = [*FAST, "allocator=hard-first", "data.train_size=8", "data.level_dist=uniform"]

    # validated and instantiated like any shipped option; its Python default mirrors the YAML
    comp = build_components(_compose(conf, overrides))
    alloc = comp.allocator
    assert isinstance(alloc, RolloutAllocator) and conforms(alloc, RolloutAllocator) == []
    assert type(alloc).__name__ == "HardFirstAllocator"
    node = OmegaConf.to_container(_compose(conf, overrides).allocator, resolve=True)
    assert not disagreements(HardFirstAllocator, node, "conf/allocator/hard-first.yaml")
    bad = {"allocator.shift=2.5": "allocator.shift=2.5: must be an integer",
           "allocator.shift=-1": "allocator.shift=-1: must be >= 0",
           "rollouts_per_prompt=2": "rollouts_per_prompt=2: shift=2 would leave",
           "+allocator.shfit=1": "did you mean 'allocator.shift'"}
    for override, message in bad.items():
        with pytest.raises(ConfigError, match=re.escape(message)):
            build_components(_compose(conf, [*overrides, override]))

    # a real 2-step run; step 2 revisits the 8 prompts of step 1, now binned by their pass rates
    training = build_training(_compose(conf, overrides), tmp_path / "run")
    trainer = training.trainer
    alloc = trainer.controllers.allocator
    planned, generated = [], []
    allocate, update = alloc.allocate, alloc.update
    alloc.allocate = lambda ids, bins, n_bar, clf: planned.append(allocate(ids, bins, n_bar, clf)) or planned[-1]
    alloc.update = lambda feedback: generated.append(feedback.n.copy()) or update(feedback)
    try:
        training.fit()
    finally:
        training.logger.close()
    rows = [r for r in read_metrics(tmp_path / "run") if "train/loss" in r]
    assert [r["step"] for r in rows] == [1, 2]
    for row, n, gen in zip(rows, planned, generated):
        assert np.array_equal(n, gen), "the trainer generated another allocation than the allocator's"
        assert row["rollout/n_total"] == 8 * 4 and row["rollout/n_per_prompt_mean"] == 4
        assert row["gdro/moved"] == np.maximum(n - 4, 0).sum()
    assert rows[0]["gdro/moved"] == 0  # step 1: every prompt is unseen, so n̄ each
    assert rows[1]["gdro/moved"] > 0 and sorted(set(planned[1].tolist())) == [2, 4, 6]  # ragged at step 2
    assert rows[1]["gdro/moved_total"] == alloc.state_dict()["total_moved"] == rows[1]["gdro/moved"]
