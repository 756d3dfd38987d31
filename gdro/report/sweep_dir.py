"""The sweep dir a notebook reads (notebooks/curriculum.ipynb), found where its caller meant it, or refused.

A notebook's kernel runs in the notebook's own directory (``notebooks/``), not in the directory ``jupyter execute``
(or the Jupyter server) was started from, so a relative ``GDRO_SWEEP_DIR=outputs/x`` would silently name
``notebooks/outputs/x``: no runs, every figure skipped. Here a relative ``GDRO_SWEEP_DIR`` is resolved against the
caller's directory: ``GDRO_CWD`` when set, else ``PWD`` (the directory of the shell that started Jupyter, which the
kernel inherits), else the kernel's own. The value set in the notebook itself (``SWEEP_DIR``, when
``GDRO_SWEEP_DIR`` is unset) is relative to the notebook, as any path in a notebook is. A dir that does not exist, is
not a directory, or holds no completed run raises :class:`SweepDirError`, naming the dir and how it was resolved:
the cell fails, and ``jupyter execute`` exits non-zero.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from pathlib import Path

from gdro.report.exclusions import exclusion_notes
from gdro.report.runs import SweepRun, scan_runs


class SweepDirError(RuntimeError):
    """No sweep to read: the dir is missing, not a directory, or holds no completed run."""


def caller_dir(env: Mapping[str, str] | None = None) -> tuple[Path, str]:
    """The directory a relative ``GDRO_SWEEP_DIR`` is relative to, and where that comes from."""
    env = os.environ if env is None else env
    cwd = env.get("GDRO_CWD")
    if cwd:
        if not Path(cwd).is_dir():
            raise SweepDirError(f"GDRO_CWD={cwd}: no such directory")
        return Path(cwd).absolute(), f"GDRO_CWD={cwd}"
    pwd = env.get("PWD")
    if pwd and os.path.isabs(pwd) and Path(pwd).is_dir():
        return Path(pwd), f"PWD={pwd}, the directory Jupyter was started from"
    return Path.cwd(), f"the kernel's directory {Path.cwd()}: neither GDRO_CWD nor PWD is set"


def resolve_sweep_dir(default: str | Path, env: Mapping[str, str] | None = None) -> tuple[Path, str]:
    """The sweep dir (absolute, not checked) and a phrase naming how it was given: ``GDRO_SWEEP_DIR`` when set
    (relative: against :func:`caller_dir`), else ``default`` (relative: against the current directory, the
    notebook's)."""
    env = os.environ if env is None else env
    value = env.get("GDRO_SWEEP_DIR")
    if not value:
        return Path(default).absolute(), f"SWEEP_DIR={default} (set in the notebook; GDRO_SWEEP_DIR is unset)"
    if os.path.isabs(value):
        return Path(value), f"GDRO_SWEEP_DIR={value}"
    base, how = caller_dir(env)
    return base / value, f"GDRO_SWEEP_DIR={value} (relative: from {how})"


def load_sweep(default: str | Path, env: Mapping[str, str] | None = None) -> tuple[Path, list[SweepRun], list[str]]:
    """The sweep dir, its completed runs (``gdro-report``'s: scan_runs' order) and one line per run dir left out
    with the reason (what ``gdro-report`` prints on stderr). :class:`SweepDirError` when there is no run to read."""
    path, how = resolve_sweep_dir(default, env)
    if not path.exists():
        raise SweepDirError(f"{how}: no such directory: {path}")
    if not path.is_dir():
        raise SweepDirError(f"{how}: {path} is not a directory (a sweep dir of run dirs; a summaries file is read "
                            "by gdro-report FILE)")
    found, skipped = scan_runs(path)
    runs = [r for r in found if r.complete]
    _, lines = exclusion_notes(found, skipped, path, include_incomplete=False)
    if not runs:
        raise SweepDirError(f"{how}: no completed runs (dirs with run.json + metrics.jsonl) under {path}"
                            + "".join(f"; {line}" for line in lines))
    return path, runs, lines


__all__ = ["SweepDirError", "caller_dir", "load_sweep", "resolve_sweep_dir"]
