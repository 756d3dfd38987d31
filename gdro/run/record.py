"""The run's record and its resume checks, written for :class:`gdro.run.lifecycle.Lifecycle` and the composition root.

* :func:`resume_point`: the latest checkpoint, if the config may continue it (:func:`config_differences`, which
  reads what an old checkpoint may hold through gdro.run.migrations, by the checkpoint's schema);
* :func:`open_run_dir`: run.json (a fresh one, the resumed run's with a ``resumes`` entry, or an earlier run without
  a checkpoint set aside with how it ended) and config.yaml, by the main process;
* :func:`open_logger`: metrics.jsonl and W&B (a resume cuts metrics.jsonl back to its checkpoint).

No Hydra here: the composition root (gdro.compose.build) hands in plain values.
"""

from __future__ import annotations

import dataclasses
import json
import logging
import platform
import uuid
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import torch

from gdro.algorithm.samples import SAMPLES_DIR
from gdro.algorithm.settings import RunSettings
from gdro.algorithm.tracking import LoggerConfig, RunLogger, RunRecord, git_commit
from gdro.common import portable
from gdro.common.interfaces import MetricLogger
from gdro.common.ioerrors import named_io
from gdro.common.validate import ConfigError, component_class, field_default
from gdro.parallel.distributed import Dist, SilentLogger
from gdro.run.checkpoint import (
    check_whole,
    latest_checkpoint,
    read_meta,
)
from gdro.run.lock import check_held, held
from gdro.run.migrations import (
    added_group,
    check_schema,
    inert_switch,
    migrated,
    migrated_state,
    renamed_target,
    schema_of,
)

log = logging.getLogger(__name__)


# ------------------------------------------------------------------------------------------------------- resume
# keys a resumed run may change: its length, its machine, how long it waits for the run dir's lock, what it shows of
# its completions (gdro.algorithm.samples: nothing the training reads)
RESUMABLE_CHANGES = ("steps", "device", "lock.wait_s", "lock.requeue_wait_s", "samples.every", "samples.train",
                     "samples.eval", "threads")  # threads: the toy's numbers do not depend on it (gdro.common.threads)


def resume_point(run: RunSettings, run_dir: Path, resolved: dict[str, Any], dist: Dist
                 ) -> tuple[Path, dict[str, Any]] | None:
    """The checkpoint this run continues from and its ``meta.json`` (None: a fresh start), after checking it may be
    resumed: ``resume``, the config (:func:`config_differences`), its length and the number of processes."""
    ckpt = latest_checkpoint(run_dir)
    if ckpt is None:
        return None
    meta = read_meta(ckpt)
    if not run.resume:
        raise ConfigError(f"resume=false: {run_dir} holds a checkpoint (step {meta['step']}) and is left untouched; "
                          "pass resume=true to continue it, or choose another hydra.run.dir")
    try:
        check_schema(schema := schema_of(meta), str(ckpt))
    except ValueError as err:
        raise ConfigError(str(err)) from err
    diffs = config_differences(meta["config"], resolved, ignore=RESUMABLE_CHANGES, schema=schema)
    if diffs:
        raise ConfigError(f"cannot resume {ckpt}: the config differs from the checkpoint's in {len(diffs)} key(s) "
                          f"(only steps, device, threads, lock.* and samples.* may change): " + "; ".join(diffs))
    if meta["step"] > run.steps:
        raise ConfigError(f"steps={run.steps}: the checkpoint {ckpt} is already at step {meta['step']}")
    check_whole(ckpt)  # a file cut short: refused here, before the start is accepted and writes anything
    try:
        dist.check_resume(int(migrated_state({"meta": dict(meta)}, schema)["meta"]["world_size"]), ckpt)
    except ValueError as err:
        raise ConfigError(str(err)) from err
    return ckpt, meta


def _flatten(node: Any, prefix: str = "") -> dict[str, Any]:
    if isinstance(node, Mapping):
        out: dict[str, Any] = {}
        for k, v in node.items():
            out |= _flatten(v, f"{prefix}{k}.")
        return out or {prefix.rstrip("."): {}}
    return {prefix.rstrip("."): node}


def config_differences(old: Mapping[str, Any], new: Mapping[str, Any], *,
                       ignore: tuple[str, ...] = RESUMABLE_CHANGES, schema: int = 0) -> list[str]:
    """``key: old -> new`` for every dotted key of two resolved configs whose value differs (``ignore`` excepted).

    A key the old config lacks (added to gdro since the checkpoint was written) is no difference when its new value
    is its component's default (:func:`_is_default`), i.e. the old behaviour, nor a group added since whose option is
    the old behaviour, nor a key nothing reads while its switch is at its default; nor is a ``_target_`` gdro renamed
    or moved since, nor a key moved to another group (read under its new name). The last four for a checkpoint of
    ``schema`` (gdro.run.migrations: one table of what old checkpoints may hold).
    """
    a, b = _flatten(old), _flatten(new)
    a = migrated({k: renamed_target(v, schema) if k.endswith("._target_") else v for k, v in a.items()}, schema)
    missing = object()

    def fmt(v: Any) -> str:
        return "<absent>" if v is missing else json.dumps(v, default=str)

    diffs = []
    for key in sorted(set(a) | set(b)):
        if key in ignore:
            continue
        va, vb = a.get(key, missing), b.get(key, missing)
        if va is missing and vb is not missing and (_is_default(new, key, vb) or added_group(key, schema) == vb
                                                    or _unread(new, inert_switch(key, schema), b)):
            continue
        if va != vb:
            diffs.append(f"{key}: {fmt(va)} -> {fmt(vb)}")
    return diffs


def _unread(config: Mapping[str, Any], switch: str | None, flat: Mapping[str, Any]) -> bool:
    """Whether a key whose migration names ``switch`` is unread in ``config``: its switch holds its default."""
    return switch is not None and switch in flat and _is_default(config, switch, flat[switch])


def _is_default(config: Mapping[str, Any], key: str, value: Any) -> bool:
    """Whether dotted ``key`` of the resolved ``config`` holds its component's Python default (= its YAML default,
    tests/test_defaults.py): a top-level key :class:`RunSettings`'s, a group's key the ``_target_``'s."""
    group, _, name = key.partition(".")
    if not name:
        target, name = RunSettings, group
    elif isinstance(config.get(group), Mapping) and "_target_" in config[group]:
        target = component_class(config[group], group)
        *outer, name = name.split(".")
        for part in outer:  # a key of a nested settings dataclass (model.lora.r): its own default
            inner = field_default(target, part)
            if not dataclasses.is_dataclass(inner) or isinstance(inner, type):
                return False
            target = type(inner)
    else:
        return False
    default = field_default(target, name)
    if default is dataclasses.MISSING:
        return False
    if isinstance(default, (list, tuple)) or isinstance(value, (list, tuple)):
        return isinstance(default, (list, tuple)) and isinstance(value, (list, tuple)) and list(default) == list(value)
    return type(default) is type(value) and default == value  # True is not 1


# ------------------------------------------------------------------------------------------------ the run record
def environment_versions() -> dict[str, str]:
    """The versions a run's numbers depend on: Python, torch and the libraries in its numerical path."""
    import importlib.metadata as md

    out = {"python": platform.python_version(), "torch": torch.__version__}
    for pkg in ("transformers", "numpy", "math-verify", "sympy", "peft", "vllm"):
        try:
            out[pkg] = md.version(pkg)
        except md.PackageNotFoundError:
            continue
    return out


def machine() -> dict[str, str]:
    """The CPU a run computed on: its model name and the instruction set torch dispatches to (``AVX512``, ``AVX2``,
    ...), both of which can change float results (and so a whole training curve) at a fixed seed; and whether the
    portable CPU mode pinned the code paths (``GDRO_PORTABLE=1``, gdro/common/portable.py)."""
    name = platform.processor() or platform.machine()
    try:
        with open("/proc/cpuinfo", encoding="utf-8") as f:
            name = next((line.split(":", 1)[1].strip() for line in f if line.startswith("model name")), name)
    except OSError:
        pass
    return {"cpu": name, "cpu_capability": torch.backends.cpu.get_cpu_capability(), "platform": platform.platform(),
            **portable.describe()}


def run_meta(resolved: dict[str, Any], choices: dict[str, str] | None, run: RunSettings, world: int,
             data: dict[str, Any]) -> dict[str, Any]:
    """What run.json records about this run (and W&B's config); ``data``: how many problems each split kept."""
    return {
        "config": resolved,
        "choices": choices or {},
        "git": git_commit(),
        "versions": environment_versions(),
        # CPU results are bit-for-bit reproducible for a given seed *and* thread count, on one kind of machine and
        # with the same libraries (the same seed gave other numbers on another CPU: docs/results.md, issue #36)
        "torch_threads": torch.get_num_threads(),
        "machine": machine(),
        "steps": run.steps,
        "world_size": world,  # processes (torchrun); each step's groups are split among them
        "data": data,
    }


def open_run_dir(run_dir: Path, config_yaml: str, meta: dict[str, Any], ckpt_meta: dict[str, Any] | None,
                 dist: Dist) -> RunRecord | None:
    """Opening the run dir (by the main process; every process waits for it): created, an earlier run without a
    checkpoint set aside, run.json (a fresh one, or the resumed run's with a ``resumes`` entry) and config.yaml
    (``config_yaml``: the resolved config)."""

    def open_() -> RunRecord:
        check_held(run_dir)  # still ours (gdro.lock removed and taken while the data loaded: stop here)
        run_dir.mkdir(parents=True, exist_ok=True)
        if ckpt_meta is None:
            _previous_run_aside(run_dir)
        record = _run_record(run_dir, meta, ckpt_meta["step"] if ckpt_meta else None)
        with named_io(run_dir / "config.yaml"):
            (run_dir / "config.yaml").write_text(config_yaml)
        return record

    record = dist.main_only(open_)
    dist.barrier()
    return record


def _previous_run_aside(run_dir: Path) -> None:
    """A run dir holding an earlier run but no checkpoint: keep its files under ``*.prev-N`` names, start afresh.

    A run.json set aside that still says ``running`` is completed with how that run ended (:func:`_previous_end`,
    as a resume's ``resumes`` entry is): what it left in the lock because its disk was full, or that it ended
    without a word. Else ``run.json.prev-N`` would say ``running`` for ever and the end kept in the lock be lost."""
    files = [run_dir / n for n in ("metrics.jsonl", "run.json", "config.yaml") if (run_dir / n).is_file()]
    files += [run_dir / n for n in (SAMPLES_DIR,) if (run_dir / n).is_dir()]  # its sampled completions
    if not files:
        return
    _record_end(run_dir / "run.json", run_dir)  # first: if the disk refuses it, nothing is set aside yet
    k = 1
    while any((run_dir / f"{f.name}.prev-{k}").exists() for f in files):
        k += 1
    for f in files:
        f.rename(run_dir / f"{f.name}.prev-{k}")
    log.warning("%s held an earlier run without a checkpoint: its files were kept as *.prev-%d", run_dir, k)


def _record_end(path: Path, run_dir: Path) -> None:
    """Write into the run.json about to be set aside (``path``) how its run ended, if it still says ``running``; the
    lock's deferred fields, once written there, are settled (recorded once)."""
    try:
        old = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return  # absent or unreadable: kept as it is
    if not isinstance(old, dict) or old.get("status") != "running":
        return
    RunRecord(path, {**old, **_previous_end(old, run_dir)}).update()  # atomic; a full disk: a one-line error
    lock = held(run_dir)
    if lock is not None:
        lock.settle()


def _previous_end(old: dict[str, Any], run_dir: Path) -> dict[str, Any]:
    """How the attempt before this one ended, for its ``resumes`` entry: as run.json recorded it, or -- when it
    still says ``running`` (we hold the lock, so that attempt is gone) -- as it left it in the lock (a full disk),
    or that it ended without a word (SIGKILL, out of memory, a node failure)."""
    if old.get("status") != "running":
        return {k: old[k] for k in ("status", "last_step", "error", "interrupted_by") if k in old}
    lock = held(run_dir)
    if lock is not None and lock.deferred:
        return {**lock.deferred, "recorded": "at the next start: run.json could not be written"}
    return {"status": "unrecorded", "last_step": _last_logged_step(run_dir, old.get("last_step")),
            "error": "the process ended without recording it (killed: SIGKILL, out of memory, a node failure)"}


def _last_logged_step(run_dir: Path, default: Any, tail_bytes: int = 1 << 20) -> Any:
    """The step of the last whole row of ``run_dir``'s metrics.jsonl (read from its last ``tail_bytes``), as a run
    that ended records it; ``default`` (run.json's, current at each checkpoint) when there is none."""
    try:
        with open(run_dir / "metrics.jsonl", "rb") as fh:
            fh.seek(max(0, fh.seek(0, 2) - tail_bytes))
            lines = fh.read().splitlines()
    except OSError:
        return default
    for line in reversed(lines):
        try:
            step = json.loads(line)["step"]
        except (ValueError, KeyError, TypeError):
            continue  # a row cut by the kill, or the part of one before the window
        if isinstance(step, int) and not isinstance(step, bool):
            return step
    return default


def _run_record(run_dir: Path, meta: dict[str, Any], from_step: int | None) -> RunRecord:
    """run.json for a fresh start, or the existing one with a ``resumes`` entry (from ``from_step``; how the previous
    attempt ended). Nothing is written here: :meth:`gdro.run.lifecycle.Lifecycle.fit` writes it when this attempt begins to change the run,
    so a rerun refused before that (a bad config, an unreadable checkpoint) leaves a completed run ``completed``."""
    path = run_dir / "run.json"
    data = dict(meta)
    if from_step is not None:
        try:
            old = json.loads(path.read_text(encoding="utf-8"))
        except (OSError, ValueError):
            old = {}
        entry = {"from_step": from_step, "git": meta["git"], "previous": _previous_end(old, run_dir)}
        data = {**old, **meta, "resumes": [*old.get("resumes", []), entry]}
        data.setdefault("wandb_id", old.get("wandb_id"))
    if not data.get("wandb_id"):
        data["wandb_id"] = uuid.uuid4().hex[:12]
    return RunRecord(path, data)


def open_logger(run_dir: Path, cfg: LoggerConfig, *, run_name: str, meta: dict[str, Any], record: RunRecord | None,
                resume: tuple[Path, dict[str, Any]] | None, dist: Dist, group: str | None,
                tags: tuple[str, ...]) -> MetricLogger:
    """metrics.jsonl and W&B on the main process (on a resume, metrics.jsonl cut back to where the checkpoint left
    it, and the same W&B run), a silent logger on the others; after checking that the run dir is still ours."""
    check_held(run_dir)  # still ours before metrics.jsonl is cut back to the checkpoint (the model loaded)
    try:
        return dist.main_only(lambda: RunLogger(
            run_dir, cfg, run_name=run_name, config=meta, truncate_to=resume[1]["metrics_bytes"] if resume else None,
            wandb_id=record.data["wandb_id"], group=group, tags=tags,
            samples_after=int(resume[1]["step"]) if resume else None,
        ), default=SilentLogger(run_dir))
    except ValueError as err:  # metrics.jsonl shorter than its checkpoint recorded
        raise ConfigError(f"cannot resume {resume[0] if resume else None}: {err}") from err
