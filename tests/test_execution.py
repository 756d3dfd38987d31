"""gdro.algorithm.execution.Execution: what the trainer asks of the execution layer. The rows a process scores and trains on
are those of the last generation round it drew; another batch (a filter's kept or joined groups) has them only in one
process."""

from __future__ import annotations

import numpy as np
import pytest

from gdro.algorithm.execution import Execution
from gdro.parallel.distributed import Dist
from gdro.policy import Forward


class _TwoProcesses(Dist):
    """Process 0 of two, its collectives stubbed: generate hands the engine back as the batch, rows 0 and 1 its own."""

    world = 2

    def generate(self, engine, prompts, n, bounds, seed, sampling):
        return engine, np.array([0, 1])

    def score(self, reward, roll, golds, local):
        return local


class _Problem:
    prompt = "1+1?"


def test_the_rows_are_the_last_rounds_and_another_batch_needs_one_process():
    ex = Execution(Forward(pad_id=0, temperature=1.0, dist=_TwoProcesses()))
    drawn = object()
    ids, _, _, roll = ex.generate(drawn, [_Problem()], [0], np.array([0]), np.array([2]), lambda *s: 0, None)
    assert roll is drawn and list(ids) == [0]
    assert ex.score(None, roll, ["2"]).tolist() == [0, 1]
    with pytest.raises(ValueError, match="one process"):
        ex.score(None, object(), ["2"])


def test_one_process_writes_and_every_other_gets_the_default():
    assert Execution(Forward(pad_id=0, temperature=1.0)).on_writer(lambda: 1, 0) == 1
    other = Dist()
    other.rank = 1
    assert Execution(Forward(pad_id=0, temperature=1.0, dist=other)).on_writer(lambda: 1, 0) == 0
