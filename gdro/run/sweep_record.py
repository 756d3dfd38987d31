"""A sweep dir's ``multirun.yaml`` stays the first sweep's record.

Hydra's basic sweeper writes ``<sweep dir>/multirun.yaml`` at the start of every ``-m`` call, so a second sweep into
the same dir (adding rows or seeds to a comparison) replaces the record of the first. gdro keeps it: before the
sweeper writes, :func:`keep_first` copies the existing file to ``.multirun.first.yaml``; once the
sweeper has written (:func:`restore_first`, at the first job and at the sweep's end), the new record is renamed to
``multirun.<n>.yaml`` (n = 2, 3, ...: the order of the sweeps) and the first one is put back. A sweep killed in
between leaves the backup, which the next sweep's :func:`keep_first` restores first.
"""

from __future__ import annotations

import os
import shutil
from pathlib import Path

from gdro.common.ioerrors import named_io

RECORD = "multirun.yaml"
BACKUP = ".multirun.first.yaml"


def _next_name(sweep_dir: Path) -> Path:
    n = 2
    while (sweep_dir / f"multirun.{n}.yaml").exists():
        n += 1
    return sweep_dir / f"multirun.{n}.yaml"


def restore_first(sweep_dir: Path) -> None:
    """Put the first sweep's record back, the newer one (when the sweeper wrote one) as ``multirun.<n>.yaml``."""
    backup, record = sweep_dir / BACKUP, sweep_dir / RECORD
    if not backup.is_file():
        return
    with named_io(record):
        if record.is_file() and record.read_bytes() != backup.read_bytes():
            os.replace(record, _next_name(sweep_dir))
        os.replace(backup, record)


def keep_first(sweep_dir: Path) -> None:
    """Before a sweep's sweeper writes its record: keep the one already in ``sweep_dir`` (if any)."""
    restore_first(sweep_dir)  # a backup left by a sweep that was killed before it put the first record back
    record = sweep_dir / RECORD
    if not record.is_file():
        return
    with named_io(sweep_dir / BACKUP):  # a copy, not a hard link: the sweeper rewrites the file in place
        shutil.copy2(record, sweep_dir / f"{BACKUP}.tmp")
        os.replace(sweep_dir / f"{BACKUP}.tmp", sweep_dir / BACKUP)
