"""Run tracking: ``metrics.jsonl`` always, W&B beside it (offline unless the user has configured it).

W&B never blocks a run: ``mode=auto`` goes online only when an API key is configured and falls back
to offline when the online init fails.
"""

from __future__ import annotations

import json
import logging
import math
import os
import subprocess
from dataclasses import dataclass
from pathlib import Path
from typing import Any

log = logging.getLogger(__name__)

WANDB_MODES = ("auto", "online", "offline", "disabled")


@dataclass(frozen=True)
class LoggerConfig:
    """Tracking options (conf/logger/*.yaml)."""

    wandb_mode: str = "auto"  # auto | online | offline | disabled
    project: str = "gdro"
    entity: str | None = None
    group: str | None = None
    tags: tuple[str, ...] = ()
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
    """One logger for a run: appends rows to ``metrics.jsonl`` and mirrors them to W&B."""

    def __init__(self, run_dir: Path, cfg: LoggerConfig, *, run_name: str, config: dict[str, Any]):
        self.run_dir = Path(run_dir)
        self.run_dir.mkdir(parents=True, exist_ok=True)
        self.path = self.run_dir / "metrics.jsonl"
        self._fh = self.path.open("a", encoding="utf-8")
        self.wandb_run = None
        self.mode = resolve_wandb_mode(cfg.wandb_mode)
        if self.mode != "disabled":
            self.wandb_run = self._init_wandb(cfg, run_name, config)

    def _init_wandb(self, cfg: LoggerConfig, name: str, config: dict[str, Any]):
        import wandb

        kwargs = {
            "project": cfg.project, "entity": cfg.entity, "group": cfg.group, "tags": list(cfg.tags), "name": name,
            "config": config, "dir": str(self.run_dir), "reinit": "finish_previous",
            "settings": wandb.Settings(init_timeout=cfg.init_timeout_s, console="off", silent=True),
        }
        try:
            return wandb.init(mode=self.mode, **kwargs)
        except (wandb.errors.CommError, wandb.errors.UsageError, wandb.errors.AuthenticationError) as err:
            if self.mode != "online":
                raise
            log.warning("W&B online init failed (%s); logging offline instead", err)
            self.mode = "offline"
            return wandb.init(mode="offline", **kwargs)

    def log(self, row: dict[str, Any]) -> dict[str, Any]:
        """Append ``row`` (NaN/inf written as null) and return it as written."""
        row = {k: _clean(v) for k, v in row.items()}
        self._fh.write(json.dumps(row) + "\n")
        self._fh.flush()
        if self.wandb_run is not None:
            self.wandb_run.log({k: v for k, v in row.items() if k != "step" and v is not None}, step=int(row["step"]))
        return row

    def close(self) -> None:
        self._fh.close()
        if self.wandb_run is not None:
            self.wandb_run.finish()
            self.wandb_run = None


def read_metrics(path: Path) -> list[dict[str, Any]]:
    """Rows of a ``metrics.jsonl`` file (or of the one inside a run dir)."""
    path = Path(path)
    if path.is_dir():
        path = path / "metrics.jsonl"
    with path.open(encoding="utf-8") as fh:
        return [json.loads(line) for line in fh if line.strip()]
