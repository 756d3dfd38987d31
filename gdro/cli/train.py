"""Entry points. ``gdro-train`` is the Hydra application (the main job)."""

from __future__ import annotations

if __name__ == "__main__":  # `python -m gdro.cli.train` (torchrun, tests): a Ctrl-C from here on is one line (gdro.common.interrupt)
    from gdro.common.interrupt import interrupt_at_once

    interrupt_at_once("gdro-train")

import gc
import json
import logging
import os
import signal
import sys
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import TYPE_CHECKING, NoReturn

import hydra
from hydra.core.hydra_config import HydraConfig
from hydra.experimental.callback import Callback
from hydra.types import RunMode
from omegaconf import DictConfig, OmegaConf

from gdro.cli.app import (
    CONF_DIR,
    UserExit,
    errors_kept,
    job_log_files_closed,
    job_log_held_back,
    planned_run_dir,
    precheck,
    save_hydra_files,
    user_errors,
)
from gdro.common.interrupt import BEFORE_THE_RUN, say
from gdro.run import sweep_record

if TYPE_CHECKING:
    from gdro.run.lock import RunDirLock

log = logging.getLogger("gdro")


@hydra.main(config_path=CONF_DIR, config_name="train", version_base="1.3")
def _train(cfg: DictConfig) -> float | None:
    hc = HydraConfig.get()
    if hc.mode != RunMode.MULTIRUN or SWEEP_REPORT_ENV not in os.environ:
        return _job(cfg)
    with errors_kept():  # one job at a time in this process (Hydra's launchers run them in turn)
        try:
            return _job(cfg)
        except UserExit as err:  # a user error of this job (a held run dir, say): reported at the sweep's end
            _record_failed_job(hc, err)
            _detach_log_file(Path(hc.runtime.output_dir))  # what the launcher logs next stays out of that dir
            return None


def _job(cfg: DictConfig) -> float | None:
    from gdro.common.rollouts import close_engine
    from gdro.compose.build import build_training
    from gdro.run.lifecycle import Interrupted, StopRequest

    hc = HydraConfig.get()
    choices = {k: v for k, v in hc.runtime.choices.items() if not k.startswith("hydra")}
    run_dir = Path(hc.runtime.output_dir)
    say("gdro-train", BEFORE_THE_RUN)  # (a sweep's next job: its own run has not begun)
    if not cfg.progress:  # no bars at all, transformers' own either (loading and writing weights): stderr is errors
        from transformers.utils import logging as hf_logging

        hf_logging.disable_progress_bar()
    # one process owns the run dir (taken before Hydra started when the dir was known then; re-entered here).
    # SIGTERM / SIGINT (preemption, Ctrl-C): finish the step, save a checkpoint, exit cleanly; rerun to resume
    with user_errors(), _run_dir_lock(cfg, run_dir) as lock, StopRequest().installed() as stop, \
            job_log_held_back(run_dir, hold=lock is not None) as write_log:
        training = build_training(cfg, run_dir, choices=choices,  # the algorithm (.trainer) in its lifecycle
                                  accepted=_acceptance(lock, cfg, run_dir, write_log))
        training.lifecycle.stop = stop
        # what exists now (modules, model, data, controllers) lives for the whole run: out of the cyclic collector's
        # scans (measured on the toy: GC time 0.48 -> 0.14 s per 25 steps)
        gc.freeze()
        try:
            rows = training.lifecycle.fit(training.trainer)
        except Interrupted as err:
            say("gdro-train", None, 128 + err.signum)  # a Ctrl-C from here on: no second line
            print(f"gdro-train: {err}; run the same command again to resume", file=sys.stderr)
            sys.exit(128 + err.signum)
        except KeyboardInterrupt:  # a second Ctrl-C: fit() marked run.json interrupted; stop now (no W&B finish)
            _stop_now(lock, "at once by a second Ctrl-C (the run is marked interrupted)")
        except BaseException:  # the run failed: what a Ctrl-C says from here on (its handler is back after the lock)
            say("gdro-train", "while the run was ending on an error (see run.json); run the same command again")
            raise
        else:  # completed: a Ctrl-C from now on (the run's handler gone) says so
            say("gdro-train", "after the run had completed (nothing was lost)")
        finally:
            training.lifecycle.logger.close()
            close_engine(training.trainer.policy.engine)  # vLLM: shut down here, not whenever the collector gets to it
    if stop.requested:  # a signal after the last step's checkpoint: the run completed all the same
        say("gdro-train", None, 128 + stop.signum)
        print(f"gdro-train: {signal.Signals(stop.signum).name} received at the end of the run: it completed (final "
              f"step {cfg.steps}, run dir {run_dir}); there is nothing to resume", file=sys.stderr)
        sys.exit(128 + stop.signum)
    evals = [r for r in rows if any(k.startswith("eval/mean@") for k in r)]
    if evals:
        key = next(k for k in evals[-1] if k.startswith("eval/mean@") and "/level_" not in k)
        log.info("%s: first %.2f -> last %.2f  (run dir: %s)", key, evals[0][key], evals[-1][key], hc.runtime.output_dir)
        return float(evals[-1][key])
    return None


def _acceptance(lock: RunDirLock | None, cfg: DictConfig, run_dir: Path,
                write_log: Callable[[], None]) -> Callable[[], None] | None:
    """What gdro-train does once its start is accepted (gdro.compose.build.build_training's ``accepted``): Hydra's
    own files written (conf/train.yaml: output_subdir null), the lines logged so far written to the job's log file
    (``write_log``: gdro.cli.app.job_log_held_back), gdro.lock kept as this run's and a takeover from a holder that
    died logged. Until then a refused start (a changed key, resume=false, a model dir that does not fit, a checkpoint
    that cannot be loaded) changes no file of the run dir: gdro.lock is put back as it was found when the lock is
    released. None where this process does not write the run dir."""
    if lock is None:
        return None
    lock.keep_found = True

    def accepted() -> None:
        lock.keep_found = False
        save_hydra_files(cfg, run_dir)
        write_log()
        if lock.takeover():
            log.warning("%s", lock.takeover())

    return accepted


# ------------------------------------------------------------------------------ a sweep runs every job it can
SWEEP_REPORT_ENV = "GDRO_SWEEP_REPORT"  # set for a sweep's jobs: the file where a job that failed says so
_sweep_failures: list[dict] = []  # what the sweep's jobs reported (read by train() once the sweep has ended)


class SweepReport(Callback):
    """A sweep (``-m``) runs every job it can: a job refused because another process holds its run dir (or failing
    with any other one-line user error) is recorded instead of ending the sweep, and once every job has run the
    sweep prints one line per such job and exits with the first one's status (75 for a held dir).

    The jobs write to ``<sweep dir>/.gdro-sweep-<id>.jsonl`` (named in ``GDRO_SWEEP_REPORT``, which the launchers
    pass on to their job processes: Hydra's basic launcher runs them here, submitit's start them with this
    environment), so the report works for jobs in other processes too. Registered in conf/train.yaml."""

    def on_multirun_start(self, config: DictConfig, **kwargs: object) -> None:
        _check_job_dirs()  # a job whose run dir cannot be created is reported too, not fatal
        sweep_dir = Path(str(config.hydra.sweep.dir)).absolute()
        sweep_record.keep_first(sweep_dir)  # a second -m into this dir keeps the first's multirun.yaml
        os.environ[SWEEP_REPORT_ENV] = str(sweep_dir / f".gdro-sweep-{os.getpid()}-{os.urandom(4).hex()}.jsonl")
        _sweep_failures.clear()

    def on_job_start(self, config: DictConfig, **kwargs: object) -> None:
        if config.hydra.mode == RunMode.MULTIRUN:  # the sweeper has written its multirun.yaml by now
            sweep_record.restore_first(Path(str(config.hydra.sweep.dir)).absolute())

    def on_multirun_end(self, config: DictConfig, **kwargs: object) -> None:
        sweep_record.restore_first(Path(str(config.hydra.sweep.dir)).absolute())
        path = Path(os.environ.pop(SWEEP_REPORT_ENV, ""))
        if not path.name or not path.is_file():
            return
        _sweep_failures.extend(json.loads(line) for line in path.read_text().splitlines() if line.strip())
        path.unlink(missing_ok=True)


def _record_failed_job(hc: DictConfig, err: UserExit) -> None:
    """Append this job's failure to the sweep's report (re-raise when even that cannot be written)."""
    record = {"num": hc.job.num, "overrides": " ".join(hc.overrides.task), "status": err.code, "line": err.line}
    path = Path(os.environ[SWEEP_REPORT_ENV])
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        with open(path, "a", encoding="utf-8") as fh:
            fh.write(json.dumps(record) + "\n")
    except OSError:
        print(err.line, file=sys.stderr)
        raise err from None


def _job_dir_checked(run_job):
    """Hydra's ``run_job`` with the job's run dir checked first in a sweep: Hydra creates it before the job starts,
    so a dir it cannot create (a file in the way, an unwritable parent) ended the whole sweep in a traceback. Such a
    job is now reported at the sweep's end, one line (status 74), and the sweep goes on."""
    from hydra.core.utils import JobReturn, JobStatus

    from gdro.common.ioerrors import check_creatable

    def run(task_function, config, job_dir_key, job_subdir_key, *args, **kwargs):
        if job_subdir_key is None or SWEEP_REPORT_ENV not in os.environ:
            return run_job(task_function, config, job_dir_key, job_subdir_key, *args, **kwargs)
        HydraConfig.instance().set_config(config)  # the ${hydra:...} of the job's dir, as run_job resolves it
        out = Path(str(OmegaConf.select(config, job_dir_key)), str(OmegaConf.select(config, job_subdir_key)))
        try:
            with errors_kept(), user_errors():
                check_creatable(out)
        except UserExit as err:
            _record_failed_job(config.hydra, err)
            return JobReturn(overrides=list(config.hydra.overrides.task), status=JobStatus.COMPLETED,
                             _return_value=None)
        return run_job(task_function, config, job_dir_key, job_subdir_key, *args, **kwargs)

    run.checks_job_dir = True
    return run


def _check_job_dirs() -> None:
    """Give the launchers (Hydra's basic one; submitit's, where installed: its job processes import this module with
    the job) :func:`_job_dir_checked`'s ``run_job``.

    ``hydra.core.utils.run_job`` itself first: in a submitit job process Hydra's plugin discovery executes the
    launcher's module again in place (hydra.core.plugins), and its ``from hydra.core.utils import run_job`` then
    takes the checked one; the launcher modules already imported get it as well."""
    import hydra.core.utils

    for module in (hydra.core.utils, *_imported("hydra._internal.core_plugins.basic_launcher",
                                                "hydra_plugins.hydra_submitit_launcher.submitit_launcher")):
        if not getattr(module.run_job, "checks_job_dir", False):
            module.run_job = _job_dir_checked(module.run_job)


def _imported(*names: str) -> Iterator[object]:
    """The modules of ``names`` that can be imported (submitit's launcher is an optional plugin)."""
    import importlib

    for name in names:
        try:
            yield importlib.import_module(name)
        except ImportError:
            continue


def _detach_log_file(run_dir: Path) -> None:
    """Close and remove the root logger's file handlers that write into ``run_dir`` (Hydra's job log: a refused job
    never opened it, and the launcher's lines after the job -- submitit's "Job completed" -- must not create it)."""
    root = logging.getLogger()
    for handler in list(root.handlers):
        if isinstance(handler, logging.FileHandler) and Path(handler.baseFilename).parent == run_dir.absolute():
            root.removeHandler(handler)
            handler.close()


def _report_sweep() -> None:
    """After a sweep: one line per job that failed with a user error, and exit with the first one's status."""
    if not _sweep_failures:
        return
    failed = sorted(_sweep_failures, key=lambda r: r["num"])
    _sweep_failures.clear()
    for r in failed:
        print(f"gdro-train: sweep job #{r['num']} ({r['overrides'] or 'no overrides'}) did not run: {r['line']}",
              file=sys.stderr)
    sys.exit(failed[0]["status"])


def train() -> None:
    """Console script ``gdro-train``: the config is composed and checked first; a user error is one line, exit 2.

    A run dir named on the command line (no ``${now:...}`` in ``hydra.run.dir``) is locked here, before Hydra
    starts the job; any other is checked for being creatable, then locked in the job. Hydra itself writes nothing
    into a run dir before the job holds its lock (its ``.hydra/`` files are written by the job, its log file is
    opened at the first line logged). Run as ``gdro-train`` or ``python -m gdro.cli.train``, a Ctrl-C before the run's own
    handler is in place is one line, status 130 (gdro.common.interrupt).
    """
    logging.raiseExceptions = False  # a full disk must not print a traceback for every log line the file can't take
    cfg = precheck(sys.argv[1:], "train", _check_train)  # every job checked with the overrides as written
    sys.argv[1:] = sweep_safe(sys.argv[1:], "train")
    from gdro.parallel.process_group import join_before_hydra

    sys.argv += join_before_hydra(sys.argv[1:])  # several processes (torchrun): one run dir, rank 0 writes it
    with job_log_files_closed():  # a later command in this process does not log into this run's file
        try:
            with user_errors(), _planned_run_dir_lock(cfg):
                _train()
        except KeyboardInterrupt:  # a second Ctrl-C while the run's handler was in place, outside fit()
            _stop_now(None, "by Ctrl-C")
        _report_sweep()


def _main_process() -> bool:
    """Whether this process writes the run dir: rank 0 under torchrun or a submitit job of several tasks."""
    from gdro.parallel.process_group import export_job_environment

    export_job_environment()  # a submitit task learns its rank here (idempotent; build_training calls it too)
    return os.environ.get("RANK", "0") in ("", "0")


@contextmanager
def _run_dir_lock(cfg: DictConfig, run_dir: Path) -> Iterator[RunDirLock | None]:
    """Hold ``run_dir``'s lock (gdro.run.lock) for the body; the other processes of a multi-process run hold none."""
    from gdro.common.validate import build_node
    from gdro.run.lock import LockConfig, hold

    if not _main_process():
        yield None
        return
    lock_cfg = build_node(cfg.lock, "lock") if "lock" in cfg else LockConfig()
    with hold(run_dir, lock_cfg) as lock:
        yield lock


@contextmanager
def _planned_run_dir_lock(cfg: DictConfig | None) -> Iterator[None]:
    """Before Hydra starts the job: lock the run dir when the command names it (no ``${now:...}``: a dir only
    this command can resolve to), else check that it can be created. Nothing for a sweep (each job locks its own)."""
    from gdro.common.ioerrors import check_creatable

    if cfg is None:
        yield
        return
    run_dir, dated = planned_run_dir(cfg)
    if dated:
        check_creatable(run_dir)
        yield
        return
    with _run_dir_lock(cfg, run_dir):
        yield


def _stop_now(lock: RunDirLock | None, how: str) -> NoReturn:
    """A Ctrl-C that must stop now: one line, then exit at once (130) -- no W&B finish, no teardown that another
    Ctrl-C could turn into a traceback."""
    print(f"gdro-train: stopped {how}; run the same command again to resume from the last checkpoint",
          file=sys.stderr)
    if lock is not None:
        lock.release()
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(128 + signal.SIGINT)


def _check_train(cfg: DictConfig) -> None:
    from gdro.compose.build import build_components

    build_components(cfg)  # every key, type, range and cross-field rule; loads nothing


def sweep_safe(argv: list[str], config_name: str) -> list[str]:
    """``argv`` with the value overrides a sweep's shared config cannot take written ``++key=value``.

    For ``-m`` Hydra first composes one config for the whole sweep *without* the swept values: with
    ``-m experiment=paper,paper-prompt-gdro data.data_files=X`` that config still has ``data=copy``, which has no
    ``data_files``, and Hydra stops with "Key 'data_files' is not in struct" before any job, although every job
    (``experiment=paper`` selects ``data=dapo``) has the key. ``++`` adds the key there and overrides it in each
    job exactly as the plain override would; each job is still checked with the plain override by :func:`precheck`,
    so a mistyped key is reported as before. Only dotted keys missing from that shared config are rewritten.
    """
    from hydra import compose, initialize_config_dir
    from hydra._internal.utils import get_args_parser
    from hydra.core.override_parser.overrides_parser import OverridesParser
    from hydra.errors import HydraException
    from omegaconf.errors import OmegaConfBaseException

    args, unknown = get_args_parser().parse_known_args(argv)
    if unknown or not args.multirun or args.config_path or args.config_dir or args.config_name:
        return argv
    try:
        parsed = OverridesParser.create().parse_overrides(list(args.overrides))
    except HydraException:
        return argv
    shared = [str(o.input_line) for o in parsed if not o.is_sweep_override()]
    plain = {str(o.input_line): o.get_key_element() for o in parsed
             if not o.is_sweep_override() and "." in o.get_key_element() and not o.get_key_element().startswith(
                 ("hydra.", "+", "~")) and str(o.input_line)[:1] not in "+~"}

    def compose_shared(overrides: list[str]) -> DictConfig | None:
        try:
            with initialize_config_dir(config_dir=CONF_DIR, version_base="1.3", job_name="cli"):
                return compose(config_name=config_name, overrides=overrides)
        except (HydraException, OmegaConfBaseException):
            return None

    if not plain or compose_shared(shared) is not None:
        return argv
    base = compose_shared([o for o in shared if o not in plain])
    if base is None:
        return argv  # something else is wrong: precheck names it
    missing = {line for line, key in plain.items() if OmegaConf.select(base, key, default=_MISSING) is _MISSING}
    return [f"++{a}" if a in missing else a for a in argv]


_MISSING = object()




if SWEEP_REPORT_ENV in os.environ:  # a sweep's job process (submitit): its launcher checks the job's dir too
    _check_job_dirs()

if __name__ == "__main__":
    import importlib

    from gdro.common.interrupt import exit_now

    try:  # the module as gdro imports it: Hydra's callback (gdro.cli.train.SweepReport) and train() share its state
        importlib.import_module("gdro.cli.train").train()
    except SystemExit as stop:
        exit_now("gdro-train", stop.code, "after the run had ended (nothing was lost)")
    exit_now("gdro-train", 0, "after the run had ended (nothing was lost)")
