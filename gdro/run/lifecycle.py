"""A training run's lifecycle around the algorithm: :class:`Run` drives a :class:`gdro.trainer.Trainer`.

    for step in run.steps(first):                     # Run.fit: after set-up, resume and the run.json mark
        run.after(step, trainer.step(step), trainer)  # the row logged; a checkpoint when due; a signal's stop

Everything that writes the run dir lives here, so the algorithm never does:

* **the lock** (gdro.run.lock): taken by the entry point before Hydra starts (gdro.cli); every write of the run
  first checks that the dir is still ours (``check_held``), and how an attempt ended waits in the lock when the
  disk refuses run.json (``defer``), until a start records it (``settle``);
* **the run record**: run.json (:func:`open_run_dir`: a fresh one, the resumed run's with a ``resumes`` entry, or an
  earlier run without a checkpoint set aside) and its status marks (``running`` from the moment this attempt changes
  the run dir, then ``completed``, ``interrupted`` or ``failed``: :meth:`Run.fit`);
* **resume**: :func:`resume_point` -- the latest checkpoint, if the config may continue it (:func:`config_differences`);
* **checkpoints**: periodic, at the end and on a signal (:meth:`Run.checkpoint`, what
  :meth:`~gdro.trainer.Trainer.state_dict` returns, written atomically by gdro.run.checkpoint), and the final policy
  (:meth:`Run.save_final`);
* **stop signals**: :class:`StopRequest` (SIGTERM / SIGINT: finish the step, save, raise :class:`Interrupted`);
* **the metrics logger**: metrics.jsonl and W&B (:func:`open_logger`; a resume cuts it back to its checkpoint).

No Hydra here: the composition root (gdro.build) hands in plain values.
"""

from __future__ import annotations

import dataclasses
import json
import logging
import platform
import signal
import threading
import uuid
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from types import FrameType
from typing import TYPE_CHECKING, Any

import torch
from tqdm.auto import tqdm

# gdro.trainer.save_checkpoint: where tests inject a fault at a checkpoint's write (looked up at each write)
from gdro import trainer as trainer_module
from gdro.distributed import Dist, SilentLogger
from gdro.interfaces import MetricLogger
from gdro.run.checkpoint import (
    CKPT_ROOT,
    FINAL_DIR,
    FINAL_MARKER,
    CheckpointConfig,
    atomic_dir,
    clear_leftovers,
    final_step,
    latest_checkpoint,
    load_checkpoint,
    named_weights_io,
    read_meta,
    save_checkpoint,  # noqa: F401 (gdro.trainer.save_checkpoint resolves to it)
    step_dirname,
)
from gdro.run.ioerrors import named_io
from gdro.run.lock import check_held, held
from gdro.run.tracking import LoggerConfig, RunLogger, RunRecord, git_commit
from gdro.trainer import RunConfig
from gdro.validate import ConfigError, component_class, field_default

if TYPE_CHECKING:
    from gdro.trainer import Trainer

log = logging.getLogger(__name__)


# --------------------------------------------------------------------------------------------------- stop signals
class StopRequest:
    """Graceful stop on SIGTERM / SIGINT: the handler only records the signal; the run finishes the current step,
    saves a checkpoint and raises :class:`Interrupted`. A second SIGINT stops at once (KeyboardInterrupt)."""

    SIGNALS = (signal.SIGTERM, signal.SIGINT)

    def __init__(self) -> None:
        self.signum: int | None = None

    @property
    def requested(self) -> bool:
        return self.signum is not None

    def _handle(self, signum: int, frame: FrameType | None) -> None:
        if self.signum == signal.SIGINT and signum == signal.SIGINT:
            raise KeyboardInterrupt
        self.signum = signum
        log.warning("%s received: stopping after the current step (with a checkpoint)", signal.Signals(signum).name)

    @contextmanager
    def installed(self) -> Iterator[StopRequest]:
        """Route SIGTERM and SIGINT to this request while the body runs (main thread only; elsewhere a no-op)."""
        if threading.current_thread() is not threading.main_thread():
            yield self
            return
        old = {s: signal.signal(s, self._handle) for s in self.SIGNALS}
        try:
            yield self
        finally:
            for s, h in old.items():
                signal.signal(s, h)


class Interrupted(Exception):
    """Training stopped on a signal after ``step`` (``checkpoint``: where it was saved, None if no step ran)."""

    def __init__(self, signum: int, step: int, checkpoint: Path | None):
        self.signum, self.step, self.checkpoint = signum, step, checkpoint
        where = f"checkpoint {checkpoint}" if checkpoint else "no new checkpoint"
        super().__init__(f"interrupted by {signal.Signals(signum).name} after step {step} ({where})")


# ------------------------------------------------------------------------------------------------------- the run
@dataclass
class Run:
    """The lifecycle of one training run: its dir, run.json, checkpoints, resume, signals and the final save, around
    an algorithm that takes steps (:class:`gdro.trainer.Trainer`). Built by the composition root (gdro.build)."""

    cfg: RunConfig  # steps, save_final, progress (the rest is the algorithm's or checked before: resume_point)
    dir: Path
    dist: Dist  # one process writes the run dir; every process takes part in gathering what it writes
    logger: MetricLogger  # metrics.jsonl and W&B on the main process, a silent one elsewhere (open_logger)
    record: RunRecord | None = None  # run.json: last_step is kept current at each checkpoint (None: not the main one)
    ckpt: CheckpointConfig = field(default_factory=CheckpointConfig)
    resume_from: Path | None = None  # the checkpoint this run continues from (resume_point)
    config: dict[str, Any] | None = None  # the resolved config, stored with each checkpoint
    stop: StopRequest | None = None
    _began: bool = field(default=False, init=False, repr=False)  # this attempt has changed the run dir (fit)
    _bar: Any = field(default=None, init=False, repr=False)  # the progress bar over the steps (steps)
    _shown: dict[str, str] = field(default_factory=dict, init=False, repr=False)  # the last evaluation, on the bar

    def fit(self, trainer: Trainer) -> list[dict[str, Any]]:
        """Train for ``steps`` steps (from the checkpoint in ``resume_from``, if any); returns the logged rows.

        ``run.json`` follows the run: ``running`` from the moment this attempt changes the run dir (so a rerun that
        stops before -- nothing to do, or an error while restoring -- leaves the record as it was, e.g.
        ``completed``), then ``completed``, ``interrupted`` (a signal: the checkpoint was saved; or a second Ctrl-C:
        stopped at once) or ``failed`` (with the error). A record the disk cannot take is left to the next start.
        """
        self._began = False
        try:
            rows = self._fit(trainer)
        except Interrupted as stop:
            self._mark(status="interrupted", interrupted_by=signal.Signals(stop.signum).name)
            raise
        except KeyboardInterrupt:
            self._mark(status="interrupted", interrupted_by="SIGINT (a second Ctrl-C: stopped at once)")
            raise
        except BaseException as err:
            self._mark(status="failed", error=f"{type(err).__name__}: {err}"[:2000])
            raise
        if not self._began and self.record is not None and self.record.data.get("status") != "completed":
            self._begin(self.cfg.steps)  # nothing left to do, but the record never said it completed
        self._mark(status="completed", last_step=self.cfg.steps)
        return rows

    def _fit(self, trainer: Trainer) -> list[dict[str, Any]]:
        first = self.start(trainer)
        if self._finished(first, trainer):
            return []
        self._begin(first)
        self._check_stop(first, None)  # a signal during set-up: stop before any step
        rows = []
        if first == 0 and (row := trainer.first_row()) is not None:
            rows.append(self.log(row))
        for step in self.steps(first):
            rows.append(self.after(step, trainer.step(step), trainer))
        if self.cfg.save_final:
            self.save_final(trainer)
        return rows

    def start(self, trainer: Trainer) -> int:
        """The trainer set up and, when this run continues a checkpoint, its state loaded; returns the step it is at."""
        trainer.setup()
        if self.resume_from is None:
            return 0
        step = self._restore(self.resume_from, trainer)
        log.info("resumed from %s (step %d of %d)", self.resume_from, step, self.cfg.steps)
        return step

    def steps(self, first: int) -> Iterator[int]:
        """The steps after ``first``, under a progress bar (:meth:`after` shows the last rewards on it)."""
        self._bar = tqdm(range(first + 1, self.cfg.steps + 1), desc="gdro-train", disable=not self.cfg.progress,
                         dynamic_ncols=True, initial=first, total=self.cfg.steps)
        yield from self._bar
        self._bar.close()

    def after(self, step: int, row: dict[str, Any], trainer: Trainer) -> dict[str, Any]:
        """After a step: its row logged, then a checkpoint on schedule, at the end, or when a signal asked us to stop
        (after this step's row); then the stop, if asked. Returns the row as logged."""
        row = self.log(row)
        self._bar.set_postfix({"reward": f"{row['reward/mean']:.3f}", **self._shown})
        ckpt = None
        if self.ckpt.due(step, self.cfg.steps) or self._stop_requested():
            ckpt = self.checkpoint(step, trainer)
        self._check_stop(step, ckpt)
        return row

    def log(self, row: dict[str, Any]) -> dict[str, Any]:
        check_held(self.dir)
        row = self.logger.log(row)
        self._shown = _eval_postfix(row) or self._shown
        return row

    def _begin(self, step: int) -> None:
        """This attempt is about to change the run dir: run.json says ``running`` from here on (and holds what an
        earlier attempt left in the lock because its disk was full)."""
        if self.record is not None and not self._began:
            check_held(self.dir)  # (each write to the run dir first checks that it is still ours: gdro.run.lock)
            self.record.begin(last_step=step)
            lock = held(self.dir)
            if lock is not None:
                lock.settle()
        self._began = True

    def _mark(self, **fields: Any) -> None:
        """Record how this attempt ended, if it began. A full disk: the fields wait in the run dir's lock (written
        in place), and the next start records them. Nothing if another process took the run dir over."""
        lock = held(self.dir)
        if self.record is None or not self._began or (lock is not None and lock.lost):
            return
        try:
            self.record.update(**fields)
        except OSError as err:
            log.warning("run.json not updated (%s): the next start will record how this attempt ended", err)
            if lock is not None:
                lock.defer(fields)

    def _stop_requested(self) -> bool:
        """A signal on any process stops every process after the same step (so that all save the checkpoint)."""
        return self.dist.stop_requested(self.stop is not None and self.stop.requested)

    def _check_stop(self, step: int, ckpt: Path | None) -> None:
        if self._stop_requested():
            raise Interrupted(self.stop.signum if self.stop is not None and self.stop.requested else signal.SIGTERM,
                              step, ckpt)

    def checkpoint(self, step: int, trainer: Trainer) -> Path:
        """Everything the next step depends on, written atomically after the step's metrics row."""
        position = self.logger.position()
        files = trainer.state_dict()  # every process takes part
        path = self.dir / CKPT_ROOT / step_dirname(step)
        if self.dist.main:  # one process writes
            meta = {"config": self.config, "metrics_bytes": position, "world_size": self.dist.world}
            check_held(self.dir)
            path = trainer_module.save_checkpoint(self.dir, step, files, meta, keep=self.ckpt.keep)
            if self.record is not None:
                self.record.update(last_step=step, last_checkpoint=str(path.relative_to(self.dir)))
        self.dist.barrier()  # the checkpoint exists before any process goes on (or stops)
        return path

    def _restore(self, ckpt: Path, trainer: Trainer) -> int:
        """Load a checkpoint into the set-up trainer; returns its step."""
        state = load_checkpoint(ckpt, ("policy", "optimizer", "trainer"))
        self.dist.check_resume(int(state["trainer"].get("world_size", 1)), ckpt)
        trainer.load_state_dict(state)
        step = int(state["trainer"]["step"])
        meta_step = int(read_meta(ckpt)["step"])
        if step != meta_step:
            raise ValueError(f"{ckpt}: trainer state is at step {step}, meta.json says {meta_step}")
        return step

    def save_final(self, trainer: Trainer) -> None:
        """The final policy in ``<run_dir>/checkpoint``, a HF model dir (:meth:`~gdro.trainer.Trainer.save`), written
        like the training checkpoints (gdro.run.checkpoint.atomic_dir), with a marker naming the step it holds, so a kill
        at any moment leaves the previous one or the new one, and a rerun finishes a save that was cut."""
        final = self.dir / FINAL_DIR
        if not self.dist.main:
            trainer.save(final)  # takes part in gathering the weights (FSDP); writes nothing
            return
        check_held(self.dir)
        with atomic_dir(final) as tmp:
            with named_io(tmp), named_weights_io(tmp):  # a full disk in the weights: a SafetensorError
                trainer.save(tmp)
            check_held(self.dir)  # again before it is put in place: the weights may take minutes
            with named_io(tmp / FINAL_MARKER):
                (tmp / FINAL_MARKER).write_text(json.dumps({"step": self.cfg.steps}), encoding="utf-8")

    def _finished(self, step: int, trainer: Trainer) -> bool:
        """Whether a resumed run has nothing left to do; a final save that was cut is finished here first."""
        run = self.cfg
        if step < run.steps:
            return False
        if not run.save_final or final_step(self.dir) == run.steps:
            if self.dist.main:
                clear_leftovers(self.dir / FINAL_DIR)  # a kill right after the final save's swap
            log.info("nothing to do: the run is at step %d of %d", step, run.steps)
            return True
        log.info("the run is at step %d of %d; finishing its final save", step, run.steps)  # a cut one
        self._begin(step)
        self.save_final(trainer)
        return True


def _eval_postfix(row: Mapping[str, Any]) -> dict[str, str]:
    """The row's overall held-out mean@k for the progress bar (empty: the row holds no evaluation)."""
    for k, v in row.items():
        if k.startswith("eval/mean@") and "/level_" not in k:
            return {k.removeprefix("eval/"): f"{v:.1f}"}
    return {}


# ------------------------------------------------------------------------------------------------------- resume
# keys a resumed run may change: its length, its machine, how long it waits for the run dir's lock
RESUMABLE_CHANGES = ("steps", "device", "lock.wait_s", "lock.requeue_wait_s")


def resume_point(run: RunConfig, run_dir: Path, resolved: dict[str, Any], dist: Dist
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
    diffs = config_differences(meta["config"], resolved, ignore=RESUMABLE_CHANGES)
    if diffs:
        raise ConfigError(f"cannot resume {ckpt}: the config differs from the checkpoint's in {len(diffs)} key(s) "
                          f"(only steps, device and lock.* may change): " + "; ".join(diffs))
    if meta["step"] > run.steps:
        raise ConfigError(f"steps={run.steps}: the checkpoint {ckpt} is already at step {meta['step']}")
    try:
        dist.check_resume(int(meta.get("world_size", 1)), ckpt)
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


# component classes gdro renamed, old ``_target_`` -> new: a checkpoint written before the rename still resumes
RENAMED_TARGETS = {"gdro.loss.LossConfig": "gdro.loss.grpo.GRPOLoss"}  # #29: the loss seam
# #29: the package layout moved these modules; a ``_target_`` in one of them is read at its new home
MOVED_MODULES = {
    "gdro.allocators": "gdro.controllers.allocators", "gdro.bandit": "gdro.controllers.bandit",
    "gdro.bins": "gdro.controllers.bins", "gdro.budget": "gdro.controllers.budget",
    "gdro.difficulty": "gdro.controllers.difficulty", "gdro.oracle": "gdro.controllers.oracle",
    "gdro.samplers": "gdro.controllers.samplers", "gdro.rewards": "gdro.grading.rewards",
    "gdro.golds": "gdro.grading.golds", "gdro.passk": "gdro.grading.passk", "gdro.rundir": "gdro.run.lock",
    "gdro.tracking": "gdro.run.tracking", "gdro.checkpoint": "gdro.run.checkpoint",
    "gdro.ioerrors": "gdro.run.ioerrors", "gdro.seeding": "gdro.run.seeding", "gdro.models": "gdro.models.loading",
    "gdro.tiny": "gdro.models.tiny", "gdro.qwen3": "gdro.models.qwen3", "gdro.prompts": "gdro.models.prompts",
    "gdro.evaluation": "gdro.evaluation.heldout", "gdro.advantages": "gdro.loss.advantages",
}


def renamed_target(target: Any) -> Any:
    """``target`` as today's gdro names it: a renamed class (:data:`RENAMED_TARGETS`), or a class of a module the
    layout moved (:data:`MOVED_MODULES`) read at its new home. Anything else is returned as it is."""
    if not isinstance(target, str):
        return target
    if target in RENAMED_TARGETS:
        return RENAMED_TARGETS[target]
    module, _, name = target.rpartition(".")
    return f"{MOVED_MODULES[module]}.{name}" if module in MOVED_MODULES else target


def config_differences(old: Mapping[str, Any], new: Mapping[str, Any], *,
                       ignore: tuple[str, ...] = RESUMABLE_CHANGES) -> list[str]:
    """``key: old -> new`` for every dotted key of two resolved configs whose value differs (``ignore`` excepted).

    A key the old config lacks (added to gdro since the checkpoint was written) is no difference when its new value
    is its component's default (:func:`_is_default`), i.e. the old behaviour; nor is a ``_target_`` gdro renamed
    (:data:`RENAMED_TARGETS`).
    """
    a, b = _flatten(old), _flatten(new)
    a = {k: renamed_target(v) if k.endswith("._target_") else v for k, v in a.items()}
    missing = object()

    def fmt(v: Any) -> str:
        return "<absent>" if v is missing else json.dumps(v, default=str)

    diffs = []
    for key in sorted(set(a) | set(b)):
        if key in ignore:
            continue
        va, vb = a.get(key, missing), b.get(key, missing)
        if va is missing and vb is not missing and _is_default(new, key, vb):
            continue
        if va != vb:
            diffs.append(f"{key}: {fmt(va)} -> {fmt(vb)}")
    return diffs


def _is_default(config: Mapping[str, Any], key: str, value: Any) -> bool:
    """Whether dotted ``key`` of the resolved ``config`` holds its component's Python default (= its YAML default,
    tests/test_defaults.py): a top-level key :class:`RunConfig`'s, a group's key the ``_target_``'s."""
    group, _, name = key.partition(".")
    if not name:
        target, name = RunConfig, group
    elif isinstance(config.get(group), Mapping) and "_target_" in config[group] and "." not in name:
        target = component_class(config[group], group)
    else:
        return False
    default = field_default(target, name)
    if default is dataclasses.MISSING:
        return False
    if isinstance(default, (list, tuple)) or isinstance(value, (list, tuple)):
        return isinstance(default, (list, tuple)) and isinstance(value, (list, tuple)) and list(default) == list(value)
    return type(default) is type(value) and default == value  # True is not 1


# ------------------------------------------------------------------------------------------------ the run record
def run_meta(resolved: dict[str, Any], choices: dict[str, str] | None, run: RunConfig, world: int,
             data: dict[str, Any]) -> dict[str, Any]:
    """What run.json records about this run (and W&B's config); ``data``: how many problems each split kept."""
    return {
        "config": resolved,
        "choices": choices or {},
        "git": git_commit(),
        "versions": {"python": platform.python_version(), "torch": torch.__version__},
        # CPU results are bit-for-bit reproducible for a given seed *and* thread count
        "torch_threads": torch.get_num_threads(),
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
    return {"status": "unrecorded", "last_step": old.get("last_step"),
            "error": "the process ended without recording it (killed: SIGKILL, out of memory, a node failure)"}


def _run_record(run_dir: Path, meta: dict[str, Any], from_step: int | None) -> RunRecord:
    """run.json for a fresh start, or the existing one with a ``resumes`` entry (from ``from_step``; how the previous
    attempt ended). Nothing is written here: :meth:`Run.fit` writes it when this attempt begins to change the run,
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
        ), default=SilentLogger(run_dir))
    except ValueError as err:  # metrics.jsonl shorter than its checkpoint recorded
        raise ConfigError(f"cannot resume {resume[0] if resume else None}: {err}") from err
