"""The paper's data option: train on DAPO-Math-17k, evaluate periodically on a held-out benchmark (spec §6.1).

``DapoMath`` is used by the trainer exactly like :class:`~gdro.data.synthetic.CopyTask` (``data=dapo``):
``train()`` and ``test()`` return ``list[Problem]`` (``level`` is 0 for every benchmark problem). Both read the
hub datasets by default; ``data_files``/``test_data_files`` point at local copies with the same schema.
Malformed rows and lines are skipped and summarised; a split that cannot be read at all (a missing, empty or
unreadable file, an unreachable hub dataset, no usable problem) raises
:class:`~gdro.data.benchmarks.DataFileError` with a one-line message naming the file or dataset.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass

from gdro.common.interfaces import Problem
from gdro.data.benchmark_specs import BENCHMARKS
from gdro.data.benchmarks import DataFileError, load_benchmark

log = logging.getLogger(__name__)


@dataclass
class DapoMath:
    """DAPO-Math-17k training prompts plus a held-out benchmark. Hydra-instantiable with plain kwargs.

    Args:
        name: the training set's benchmark name (``"dapo_math"``).
        data_files: local copy of the training set (``.parquet``/``.jsonl``/...); None = the hub dataset.
        test_benchmark: benchmark used as the periodic held-out split (``"math500"``).
        test_data_files: local copy of that benchmark; None = the hub dataset.
        test_limit: read only the first N held-out rows (None = all).
        seed: GPQA option-shuffle seed (only matters if a GPQA split is used).
    """

    name: str = "dapo_math"
    data_files: str | list[str] | None = None
    test_benchmark: str = "math500"
    test_data_files: str | list[str] | None = None
    test_limit: int | None = 500
    seed: int = 0

    def __post_init__(self) -> None:
        for key in ("name", "test_benchmark"):
            value = getattr(self, key)
            if value not in BENCHMARKS:
                raise ValueError(f"{key}: unknown benchmark {value!r}; known: {', '.join(sorted(BENCHMARKS))}")
        if self.test_limit is not None and self.test_limit < 1:
            raise ValueError(f"test_limit must be >= 1 or null, got {self.test_limit}")
        self._cache: dict[str, list[Problem]] = {}

    def _load(self, which: str, name: str, data_files, limit: int | None) -> list[Problem]:
        if which not in self._cache:
            problems, report = load_benchmark(name, data_files=data_files, seed=self.seed, limit=limit)
            log.info("%s split: %s", which, report.summary())
            print(f"[gdro.data] {which}: {report.summary()}")
            if not problems:
                raise DataFileError(f"{which} split {name!r} has no usable problems ({report.summary()})")
            self._cache[which] = problems
        return list(self._cache[which])

    def train(self) -> list[Problem]:
        return self._load("train", self.name, self.data_files, None)

    def test(self) -> list[Problem]:
        return self._load("test", self.test_benchmark, self.test_data_files, self.test_limit)


__all__ = ["DapoMath"]
