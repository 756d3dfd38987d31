"""A training run's lifecycle around the algorithm: :class:`Lifecycle` drives an :class:`Algorithm` (gdro.algorithm.trainer.Trainer).

    for step in run.steps(first):                     # Lifecycle.fit: after set-up, resume and the run.json mark
        run.after(step, trainer.step(step), trainer)  # the row logged; a checkpoint when due; a signal's stop

Everything that writes the run dir lives here, so the algorithm never does:

* **the lock** (gdro.run.lock): taken by the entry point before Hydra starts (gdro.cli.train); every write of the run
  first checks that the dir is still ours (``check_held``), and how an attempt ended waits in the lock when the
  disk refuses run.json (``defer``), until a start records it (``settle``);
* **the run record**: run.json (:func:`gdro.run.record.open_run_dir`: a fresh one, the resumed run's with a ``resumes`` entry, or an
  earlier run without a checkpoint set aside) and its status marks (``running`` from the moment this attempt changes
  the run dir, then ``completed``, ``interrupted`` or ``failed``: :meth:`Lifecycle.fit`);
* **resume**: :func:`gdro.run.record.resume_point` -- the latest checkpoint, if the config may continue it;
* **checkpoints**: periodic, at the end and on a signal (:meth:`Lifecycle.checkpoint`, what
  :meth:`~gdro.algorithm.trainer.Trainer.state_dict` returns, written atomically by gdro.run.checkpoint), and the final policy
  (:meth:`Lifecycle.save_final`);
* **stop signals**: :class:`StopRequest` (SIGTERM / SIGINT: finish the step, save, raise :class:`Interrupted`);
* **the metrics logger**: metrics.jsonl and W&B (:func:`gdro.run.record.open_logger`; a resume cuts it back to its checkpoint).

No Hydra here: the composition root (gdro.compose.build) hands in plain values.
"""

from __future__ import annotations

import errno
import json
import logging
import signal
import threading
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from types import FrameType
from typing import Any, Protocol

from tqdm.auto import tqdm

from gdro.algorithm.settings import RunSettings
from gdro.algorithm.tracking import RunRecord
from gdro.common.interfaces import MetricLogger
from gdro.common.ioerrors import named_io
from gdro.common.threads import AUTO, SlowdownWatch
from gdro.models.dir_checks import missing_parts
from gdro.parallel.distributed import Dist
from gdro.run.checkpoint import (
    CKPT_ROOT,
    FINAL_DIR,
    FINAL_MARKER,
    CheckpointConfig,
    atomic_dir,
    clear_leftovers,
    final_step,
    load_checkpoint,
    named_weights_io,
    read_meta,
    save_checkpoint,
    step_dirname,
)
from gdro.run.lock import check_held, held
from gdro.run.migrations import SCHEMA, migrated_state, schema_of

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
class Algorithm(Protocol):
    """What the lifecycle drives (gdro.algorithm.trainer.Trainer): set up, an optional step-0 row, steps, its checkpointable
    state, and the final policy written as a model dir."""

    def setup(self) -> None: ...

    def first_row(self) -> dict[str, Any] | None: ...

    def step(self, step: int) -> dict[str, Any]: ...

    def state_dict(self) -> dict[str, Any]: ...

    def load_state_dict(self, state: Mapping[str, Any]) -> None: ...

    def save(self, path: Path) -> None: ...


@dataclass
class Lifecycle:
    """The lifecycle of one training run: its dir, run.json, checkpoints, resume, signals and the final save, around
    an algorithm that takes steps (:class:`Algorithm`: gdro.algorithm.trainer.Trainer). Built by the composition root (gdro.compose.build)."""

    settings: RunSettings  # steps, save_final, progress (the rest is the algorithm's or checked before: resume_point)
    dir: Path
    dist: Dist  # one process writes the run dir; every process takes part in gathering what it writes
    logger: MetricLogger  # metrics.jsonl and W&B on the main process, a silent one elsewhere (open_logger)
    record: RunRecord | None = None  # run.json: last_step is kept current at each checkpoint (None: not the main one)
    ckpt: CheckpointConfig = field(default_factory=CheckpointConfig)
    resume_from: Path | None = None  # the checkpoint this run continues from (resume_point)
    config: dict[str, Any] | None = None  # the resolved config, stored with each checkpoint
    stop: StopRequest | None = None
    first: int | None = None  # the step the trainer is at once set up and restored (restore), if done before
    _began: bool = field(default=False, init=False, repr=False)  # this attempt has changed the run dir (fit)
    _last_step: int | None = field(default=None, init=False, repr=False)  # the last step logged (or begun at)
    _bar: Any = field(default=None, init=False, repr=False)  # the progress bar over the steps (steps)
    _shown: dict[str, str] = field(default_factory=dict, init=False, repr=False)  # the last evaluation, on the bar
    _watch: SlowdownWatch | None = field(default=None, init=False, repr=False)  # steps slowing: a shared CPU

    def fit(self, trainer: Algorithm) -> list[dict[str, Any]]:
        """Train for ``steps`` steps (from the checkpoint in ``resume_from``, if any); returns the logged rows.

        ``run.json`` follows the run: ``running`` from the moment this attempt changes the run dir (so a rerun that
        stops before -- nothing to do, or an error while restoring -- leaves the record as it was, e.g.
        ``completed``), then ``completed``, ``interrupted`` (a signal: the checkpoint was saved; or a second Ctrl-C:
        stopped at once) or ``failed`` (with the error). A record the disk cannot take is left to the next start.
        """
        self._began, self._last_step = False, None
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
            self._begin(self.settings.steps)  # nothing left to do, but the record never said it completed
        self._mark(status="completed", last_step=self.settings.steps)
        return rows

    def _fit(self, trainer: Algorithm) -> list[dict[str, Any]]:
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
        if self.settings.save_final:
            self.save_final(trainer)
        return rows

    def start(self, trainer: Algorithm) -> int:
        """The trainer set up and, when this run continues a checkpoint, its state loaded; returns the step it is at
        (the composition root does this before the start is accepted: ``first``, so this only reports it)."""
        if self.first is None:
            self.first = restore(trainer, self.resume_from, self.dist)
        if self.resume_from is not None:
            log.info("resumed from %s (step %d of %d)", self.resume_from, self.first, self.settings.steps)
        return self.first

    def steps(self, first: int) -> Iterator[int]:
        """The steps after ``first``, under a progress bar (:meth:`after` shows the last rewards on it)."""
        self._bar = tqdm(range(first + 1, self.settings.steps + 1), desc="gdro-train", disable=not self.settings.progress,
                         dynamic_ncols=True, initial=first, total=self.settings.steps)
        yield from self._bar
        self._bar.close()

    def after(self, step: int, row: dict[str, Any], trainer: Algorithm) -> dict[str, Any]:
        """After a step: its row logged, then a checkpoint on schedule, at the end, or when a signal asked us to stop
        (after this step's row); then the stop, if asked -- unless this was the last step: its row is logged, so the
        run goes on to its end (the final save) and completes, and gdro-train says that the signal came at the end.
        Returns the row as logged."""
        row = self.log(row)
        self._bar.set_postfix({"reward": f"{row['reward/mean']:.3f}", **self._shown})
        self._watch = self._watch or SlowdownWatch(auto=self.settings.threads == AUTO)
        if (line := self._watch.observe(row)) is not None:  # threads=auto: chosen again; else one warning
            log.warning(line)
        ckpt = None
        if self.ckpt.due(step, self.settings.steps) or self._stop_requested():
            ckpt = self.checkpoint(step, trainer)
        if step < self.settings.steps:
            self._check_stop(step, ckpt)
        return row

    def log(self, row: dict[str, Any]) -> dict[str, Any]:
        check_held(self.dir)
        row = self.logger.log(row)
        self._last_step = int(row["step"])  # in metrics.jsonl now: how this attempt ended records it (_mark)
        self._shown = _eval_postfix(row) or self._shown
        return row

    def _begin(self, step: int) -> None:
        """This attempt is about to change the run dir: run.json says ``running`` from here on (and holds what an
        earlier attempt left in the lock because its disk was full)."""
        if self._began:
            return
        self._last_step = step
        if self.record is not None:
            check_held(self.dir)  # (each write to the run dir first checks that it is still ours: gdro.run.lock)
            self.record.begin(last_step=step)
            lock = held(self.dir)
            if lock is not None:
                lock.settle()
        self._began = True

    def _mark(self, **fields: Any) -> None:
        """Record how this attempt ended, if it began, with its ``last_step``: the last step logged (run.json's is
        otherwise current only at each checkpoint). A full disk: the fields wait in the run dir's lock (written in
        place), and the next start records them. Nothing if another process took the run dir over."""
        lock = held(self.dir)
        if self.record is None or not self._began or (lock is not None and lock.lost):
            return
        if self._last_step is not None:
            fields = {"last_step": self._last_step, **fields}
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

    def checkpoint(self, step: int, trainer: Algorithm) -> Path:
        """Everything the next step depends on, written atomically after the step's metrics row."""
        position = self.logger.position()
        files = trainer.state_dict()  # every process takes part
        path = self.dir / CKPT_ROOT / step_dirname(step)
        if self.dist.main:  # one process writes
            meta = {"config": self.config, "metrics_bytes": position, "world_size": self.dist.world,
                    "schema": SCHEMA}  # what it may hold that a later gdro renames (gdro.run.migrations)
            check_held(self.dir)
            path = save_checkpoint(self.dir, step, files, meta, keep=self.ckpt.keep)
            if self.record is not None:
                self.record.update(last_step=step, last_checkpoint=str(path.relative_to(self.dir)))
        self.dist.barrier()  # the checkpoint exists before any process goes on (or stops)
        return path

    def save_final(self, trainer: Algorithm) -> None:
        """The final policy in ``<run_dir>/checkpoint``, a HF model dir (:meth:`~gdro.algorithm.trainer.Trainer.save`), written
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
            missing = missing_parts(tmp)  # a save that ended without a part is an error, never a silent loss
            if missing:
                raise OSError(errno.EIO, f"the final save ended without its {' and '.join(missing)}; nothing was "
                                         "put in place", str(final))
            check_held(self.dir)  # again before it is put in place: the weights may take minutes
            with named_io(tmp / FINAL_MARKER):
                (tmp / FINAL_MARKER).write_text(json.dumps({"step": self.settings.steps}), encoding="utf-8")

    def _finished(self, step: int, trainer: Algorithm) -> bool:
        """Whether a resumed run has nothing left to do; a final save that was cut is finished here first."""
        run = self.settings
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


def restore(trainer: Algorithm, ckpt: Path | None, dist: Dist) -> int:
    """The trainer set up and, when the run continues the checkpoint ``ckpt``, its state loaded into it; returns the
    step it is at. The composition root calls this before the start is accepted, so that a checkpoint which cannot be
    loaded (a file missing or damaged inside, LoRA adapters whose base weights changed) is refused before any file
    of the run dir changes."""
    trainer.setup()
    if ckpt is None:
        return 0
    state = load_checkpoint(ckpt, ("policy", "optimizer", "trainer"))
    state = migrated_state(state, schema_of(read_meta(ckpt)))  # what an older gdro's checkpoint lacks (migrations)
    dist.check_resume(int(state["trainer"]["world_size"]), ckpt)
    trainer.load_state_dict(state)
    step = int(state["trainer"]["step"])
    meta_step = int(read_meta(ckpt)["step"])
    if step != meta_step:
        raise ValueError(f"{ckpt}: trainer state is at step {step}, meta.json says {meta_step}")
    return step
