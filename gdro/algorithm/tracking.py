"""Run tracking: ``metrics.jsonl`` always, W&B beside it (offline unless the user has configured it); the sampled
completions a row carries (gdro.algorithm.samples) go to ``samples/`` and to a W&B table.

W&B never blocks a run: ``mode=auto`` goes online only when an API key is configured and falls back
to offline when the online init fails.
"""

from __future__ import annotations

import json
import logging
import math
import os
import subprocess
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from gdro.algorithm import samples
from gdro.common.ioerrors import named_io

log = logging.getLogger(__name__)

WANDB_MODES = ("auto", "online", "offline", "disabled")


@dataclass(frozen=True)
class LoggerConfig:
    """Tracking options (conf/logger/*.yaml)."""

    wandb_mode: str = "auto"  # auto | online | offline | disabled
    project: str = "gdro"
    entity: str | None = None
    group: str | None = None  # null: in a multirun, the sweep's name (its dir), so a sweep is one W&B group
    tags: tuple[str, ...] = ()  # more tags; the run's config choices and seed are always tagged
    init_timeout_s: float = 30.0  # online init gives up after this and falls back to offline

    def __post_init__(self) -> None:
        if self.wandb_mode not in WANDB_MODES:
            raise ValueError(f"wandb_mode must be one of {WANDB_MODES}, got {self.wandb_mode!r}")
        if self.init_timeout_s <= 0:
            raise ValueError(f"init_timeout_s must be > 0, got {self.init_timeout_s}")


def git_commit(path: Path | None = None) -> dict[str, Any]:
    """The commit of the checkout holding the package (and whether it has uncommitted changes)."""
    cwd = path or Path(__file__).resolve().parent
    try:
        sha = subprocess.run(
            ["git", "rev-parse", "HEAD"], cwd=cwd, capture_output=True, text=True, check=True, timeout=10
        ).stdout.strip()
        dirty = subprocess.run(
            ["git", "status", "--porcelain", "--untracked-files=no"],
            cwd=cwd, capture_output=True, text=True, check=True, timeout=10,
        ).stdout.strip()
    except (OSError, subprocess.SubprocessError):
        return {"commit": "unknown", "dirty": None}
    return {"commit": sha, "dirty": bool(dirty)}


def wandb_credentials_present() -> bool:
    if os.environ.get("WANDB_API_KEY"):
        return True
    netrc = Path.home() / ".netrc"
    return netrc.is_file() and "api.wandb.ai" in netrc.read_text(errors="ignore")


def resolve_wandb_mode(mode: str) -> str:
    """``auto``: honour ``WANDB_MODE`` if set, else online with credentials, else offline."""
    if mode != "auto":
        return mode
    env = os.environ.get("WANDB_MODE")
    if env in WANDB_MODES[1:]:
        return env
    return "online" if wandb_credentials_present() else "offline"


def _clean(v: Any) -> Any:
    """JSON-safe scalar: NaN/inf become None so the file stays strict JSON."""
    if isinstance(v, float) and not math.isfinite(v):
        return None
    return v


class RunLogger:
    """One logger for a run: appends rows to ``metrics.jsonl`` and mirrors them to W&B.

    ``truncate_to`` (a byte length from :meth:`position`) cuts the file back to where a checkpoint left it, so a
    resumed run continues it without duplicated steps; ``samples_after`` (the checkpoint's step) removes the sample
    files of later steps likewise. ``wandb_id`` names the W&B run; the same id resumes it.

    A failed append (a full disk, an immutable or unwritable file) raises once, naming ``metrics.jsonl``; closing
    afterwards drops the row that failed instead of failing again on it, so that first error is the one reported.
    """

    def __init__(self, run_dir: Path, cfg: LoggerConfig, *, run_name: str, config: dict[str, Any],
                 truncate_to: int | None = None, wandb_id: str | None = None, group: str | None = None,
                 tags: tuple[str, ...] = (), samples_after: int | None = None):
        self.run_dir = Path(run_dir)
        self.run_dir.mkdir(parents=True, exist_ok=True)
        self.path = self.run_dir / "metrics.jsonl"
        if truncate_to is not None:
            size = self.path.stat().st_size if self.path.is_file() else 0
            if size < truncate_to:
                raise ValueError(f"{self.path} holds {size} bytes, fewer than the {truncate_to} its checkpoint "
                                 "recorded: the metrics file was changed since; cannot resume it")
            with self.path.open("r+b") as fh:
                fh.truncate(truncate_to)
        if samples_after is not None:
            samples.prune_after(self.run_dir, samples_after)
        self._fh = self.path.open("a", encoding="utf-8")
        self._append_failed = False  # a row could not be written: it is still buffered, and closing would retry it
        self.wandb_run = None
        self.wandb_id = wandb_id
        self.group, self.tags = cfg.group or group, tuple(dict.fromkeys((*tags, *cfg.tags)))
        self.mode = resolve_wandb_mode(cfg.wandb_mode)
        if self.mode != "disabled":
            self.wandb_run = self._init_wandb(cfg, run_name, config)

    def position(self) -> int:
        """Byte length of ``metrics.jsonl`` with every row logged so far."""
        self._fh.flush()
        return self._fh.tell()

    def _init_wandb(self, cfg: LoggerConfig, name: str, config: dict[str, Any]):
        import wandb

        kwargs = {
            "project": cfg.project, "entity": cfg.entity, "group": self.group, "tags": list(self.tags), "name": name,
            "config": config, "dir": str(self.run_dir), "reinit": "finish_previous",
            "settings": wandb.Settings(init_timeout=cfg.init_timeout_s, console="off", silent=True),
        }
        if self.wandb_id:
            kwargs |= {"id": self.wandb_id, "resume": "allow"}
        try:
            return wandb.init(mode=self.mode, **kwargs)
        except (wandb.errors.CommError, wandb.errors.UsageError, wandb.errors.AuthenticationError) as err:
            if self.mode != "online":
                raise
            log.warning("W&B online init failed (%s); logging offline instead", err)
            self.mode = "offline"
            return wandb.init(mode="offline", **kwargs)

    def log(self, row: dict[str, Any]) -> dict[str, Any]:
        """Append ``row`` (NaN/inf written as null) and return it as written. Sampled completions in the row
        (:data:`gdro.algorithm.samples.ROW_KEYS`) are not metrics: each goes to its file in ``samples/`` and to a W&B table."""
        shown = {kind: row[key] for kind, key in samples.ROW_KEYS.items() if key in row}
        row = {k: _clean(v) for k, v in row.items() if k not in samples.ROW_KEYS.values()}
        step = int(row["step"])
        for kind, recs in shown.items():
            samples.write(self.run_dir, kind, step, recs)
        try:
            with named_io(self.path):
                self._fh.write(json.dumps(row) + "\n")
                self._fh.flush()
        except OSError:
            self._append_failed = True
            raise
        if self.wandb_run is not None:
            tables = {samples.ROW_KEYS[kind]: samples.wandb_table(step, recs) for kind, recs in shown.items()}
            self.wandb_run.log({k: v for k, v in row.items() if k != "step" and v is not None} | tables, step=step)
        return row

    def close(self) -> None:
        """Close ``metrics.jsonl`` and finish the W&B run. After a failed append (already raised, naming the file)
        the file's close retries the same buffered row and fails the same way: that second error is dropped (the
        file is closed all the same), so it cannot replace the first one on its way out of the run."""
        try:
            with named_io(self.path):
                self._fh.close()
        except OSError:
            if not self._append_failed:
                raise
        if self.wandb_run is not None:
            self.wandb_run.finish()
            self.wandb_run = None


class RunRecord:
    """``run.json``: the resolved config, the config choices, the git commit, versions — and the run's ``status``
    (``running`` | ``completed`` | ``interrupted`` | ``failed``), its ``last_step`` and, on failure, ``error``.

    Every update rewrites the file atomically (temporary file, then rename), so it is never seen half-written.
    """

    STATUSES = ("running", "completed", "interrupted", "failed")

    def __init__(self, path: Path, data: dict[str, Any]):
        self.path = Path(path)
        self.data = data

    def begin(self, **fields: Any) -> None:
        """A new attempt starts changing the run: ``running``; the fields that told how the previous attempt ended
        (``error``, ``interrupted_by``) go, as they are kept in its ``resumes`` entry."""
        for stale in ("error", "interrupted_by"):
            self.data.pop(stale, None)
        self.update(status="running", **fields)

    def update(self, **fields: Any) -> None:
        if "status" in fields and fields["status"] not in self.STATUSES:
            raise ValueError(f"status must be one of {self.STATUSES}, got {fields['status']!r}")
        self.data.update(fields)
        tmp = self.path.with_name(f".{self.path.name}.tmp")
        try:
            with named_io(tmp):
                tmp.write_text(json.dumps(self.data, indent=2, default=str), encoding="utf-8")
            os.replace(tmp, self.path)
        except OSError:
            tmp.unlink(missing_ok=True)  # a full disk: leave run.json as it was, whole
            raise


class StepClock:
    """Wall time of a step's phases, as ``time/<phase>`` metrics: ``with clock("update_s"): ...`` adds the block's
    time to its phase (a phase may be timed in several blocks); ``time/step_s`` runs from the clock's creation."""

    def __init__(self) -> None:
        self.start = time.perf_counter()
        self.phases: dict[str, float] = {}

    @contextmanager
    def __call__(self, phase: str) -> Iterator[None]:
        t0 = time.perf_counter()
        try:
            yield
        finally:
            self.phases[phase] = self.phases.get(phase, 0.0) + time.perf_counter() - t0

    def elapsed(self) -> float:
        return time.perf_counter() - self.start

    def metrics(self) -> dict[str, float]:
        return {**{f"time/{k}": v for k, v in self.phases.items()}, "time/step_s": self.elapsed()}


def read_metrics(path: Path) -> list[dict[str, Any]]:
    """Rows of a ``metrics.jsonl`` file (or of the one inside a run dir)."""
    path = Path(path)
    if path.is_dir():
        path = path / "metrics.jsonl"
    with path.open(encoding="utf-8") as fh:
        return [json.loads(line) for line in fh if line.strip()]
