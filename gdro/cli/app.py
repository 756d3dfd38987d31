"""What the entry points share (``gdro-train``: gdro.cli.train, ``gdro-eval``: gdro.cli.evaluate): a config composed and
checked before Hydra starts (:func:`precheck`), the run dir Hydra will make (:func:`planned_run_dir`), and a user
error as one line on stderr with its exit status (:func:`user_errors`, :func:`fail`)."""

from __future__ import annotations

import difflib
import logging
import logging.handlers
import os
import sys
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import NoReturn

from hydra.core.hydra_config import HydraConfig
from omegaconf import DictConfig, OmegaConf

from gdro.common.ioerrors import EXIT_IO_ERROR, atomic_write_text, named_io

CONF_DIR = str(Path(__file__).resolve().parents[2] / "conf")

EXIT_USER_ERROR = 2  # a bad value, key, option or override (argparse's status for a usage error)
EXIT_IN_USE = 75  # another process holds the run dir: try again later (sysexits EX_TEMPFAIL)
HYDRA_SUBDIR = ".hydra"  # where the job's composed config, Hydra's config and the overrides are saved
MAX_PRECHECKED_JOBS = 32  # a sweep's jobs composed up front (each job still checks its own config)
_kept = False  # while a sweep's job runs in this process: its user error is kept for the sweep's report, not printed


@contextmanager
def errors_kept() -> Iterator[None]:
    """While the body runs (a sweep's job), :func:`fail` prints nothing: the :class:`UserExit` it raises carries the
    line, for the sweep to report once every job has run (gdro.cli.train.SweepReport)."""
    global _kept
    _kept = True
    try:
        yield
    finally:
        _kept = False


def _user_error_types() -> tuple[type[BaseException], ...]:
    from gdro.common.validate import ConfigError
    from gdro.models.loading import ModelUnavailableError
    from gdro.models.lora import AdapterBaseChanged
    from gdro.run.checkpoint import CheckpointError

    return (ConfigError, CheckpointError, AdapterBaseChanged, ModelUnavailableError)


class UserExit(SystemExit):
    """The exit of a user error (``code``: its status), after its one ``line`` was printed (or, in a sweep's job,
    kept for the sweep's report: :func:`errors_kept`, gdro.cli.train.SweepReport)."""

    def __init__(self, line: str, status: int):
        super().__init__(status)
        self.line = line


def fail(err: BaseException | str, label: str = "config error", status: int = EXIT_USER_ERROR) -> NoReturn:
    """Print ``<label>: <message>`` as one line on stderr and exit with ``status`` (HYDRA_FULL_ERROR=1: re-raise)."""
    if isinstance(err, BaseException) and os.environ.get("HYDRA_FULL_ERROR") == "1":
        raise err
    from gdro.common.ioerrors import one_line

    if isinstance(err, BaseException):  # ConfigError and its kin carry their own label; any other user error:
        label = getattr(err, "label", "error")
    line = f"{label}: {one_line(err) if isinstance(err, BaseException) else ' '.join(err.split())}"
    if not _kept:
        print(line, file=sys.stderr)
    raise UserExit(line, status)


@contextmanager
def user_errors() -> Iterator[None]:
    """A user error raised inside becomes one line on stderr and a non-zero exit: a ConfigError or an unloadable
    model (2), another process holding the run dir (75), a full disk or an unwritable or unreadable path (74).

    Inside a Hydra task function, ``SystemExit`` passes through Hydra untouched, whereas any other exception is
    printed by Hydra as a chained traceback. Usable as ``with user_errors():`` or as a decorator ``@user_errors()``.
    """
    from gdro.common.ioerrors import is_environment_error
    from gdro.run.lock import RunDirLocked

    try:
        yield
    except (KeyboardInterrupt, SystemExit):  # first: the clauses below import gdro.compose.build (torch), which a Ctrl-C
        raise  #                                 may have cut in half
    except _user_error_types() as err:
        fail(err)
    except RunDirLocked as err:
        fail(err, status=EXIT_IN_USE)
    except OSError as err:
        if not is_environment_error(err):
            raise
        fail(err, status=EXIT_IO_ERROR)


@contextmanager
def job_log_files_closed() -> Iterator[None]:
    """Close and detach, when the command ends, the log files Hydra's job logging attached to the root logger
    (conf/hydra/job_logging/gdro.yaml: ``<run dir>/<job name>.log``, opened at the first line logged).

    Hydra leaves them in place after its job. A second command in the same process (a notebook, a test, a script
    that calls ``gdro.cli.train.train`` twice) would log its first lines, before its own job's logging replaces them, into
    the previous run's file, and fail on them with that file's "No such file or directory" where the previous run dir
    has been removed since."""
    try:
        yield
    finally:
        root = logging.getLogger()
        for handler in list(root.handlers):
            if isinstance(handler, logging.FileHandler):
                root.removeHandler(handler)
                handler.close()


@contextmanager
def job_log_held_back(run_dir: Path, hold: bool = True) -> Iterator[Callable[[], None]]:
    """The job's log file in ``run_dir`` (opened at its first line) keeps the lines logged before the start is
    accepted in memory; the function yielded (called once it is accepted) writes them to it, in order, and lets the
    file take the next ones. A start refused before that (a checkpoint that cannot be loaded, found once the model has
    loaded and logged) leaves the file as it was: its lines were shown on the console. ``hold`` false: nothing held.
    """
    root, buffers = logging.getLogger(), []
    for handler in list(root.handlers) if hold else []:
        if isinstance(handler, logging.FileHandler) and Path(handler.baseFilename).parent == run_dir.absolute():
            memory = logging.handlers.MemoryHandler(capacity=sys.maxsize, flushLevel=logging.CRITICAL + 1,
                                                    target=handler, flushOnClose=False)
            memory.setLevel(handler.level)
            root.removeHandler(handler)
            root.addHandler(memory)
            buffers.append((memory, handler))

    def put_back(write: bool) -> None:
        for memory, handler in buffers:
            root.removeHandler(memory)
            root.addHandler(handler)
            if write:
                memory.flush()
            memory.buffer.clear()
            memory.close()
        buffers.clear()

    try:
        yield lambda: put_back(True)
    finally:
        put_back(False)


def _options_having(key: str, job: list[str], choices: dict | None = None) -> str:
    """`` (a key of allocator=rollout-gdro, allocator=knapsack; this run has allocator=fixed)`` when ``key``
    (``group.name``) is a key of other options of its config group; "" when no option has it."""
    group, _, name = key.partition(".")
    folder = Path(CONF_DIR) / group
    if not name or not folder.is_dir():
        return ""
    having = []
    for path in sorted(folder.glob("*.yaml")):
        try:
            node = OmegaConf.load(path)
        except Exception:  # noqa: BLE001 - a damaged option file is reported when it is chosen, not here
            node = None
        if isinstance(node, DictConfig) and name.split(".")[0] in node:
            having.append(f"{group}={path.stem}")
    if not having:
        return ""
    chosen = (choices or {}).get(group) or next((o.split("=", 1)[1] for o in job if o.split("=", 1)[0] == group), None)
    method = (choices or {}).get("method") or next((o.split("=", 1)[1] for o in job if o.startswith("method=")), None)
    here = f"; this run has {group}={chosen}" if chosen else ""
    if method and chosen:
        picks = _method_choices(method)
        if picks.get(group) == chosen:
            here += f", from method={method}"
        elif group in picks:
            here += f", given after method={method}, which picks {group}={picks[group]}"
    return f" (a key of {', '.join(having)} only{here})"


def _method_choices(method: str) -> dict[str, str]:
    """The group options ``conf/method/<method>.yaml`` picks (its ``override /group: option`` lines)."""
    try:
        defaults = OmegaConf.load(Path(CONF_DIR) / "method" / f"{method}.yaml").get("defaults") or []
    except Exception:  # noqa: BLE001 - no such method: Hydra says so first
        return {}
    picks = {}
    for entry in defaults:
        for key, value in (entry.items() if isinstance(entry, DictConfig) else []):
            picks[str(key).removeprefix("override ").lstrip("/")] = str(value)
    return picks


def _in_sweep_job(line: str, job: list[str] | None, overrides: list[str]) -> str:
    """``line`` led by ``sweep job allocator=fixed seed=0: `` (the values this job of a sweep takes for the swept
    keys) unless it already names one of them; ``line`` itself outside a sweep (``job`` None)."""
    if job is None:
        return line
    swept = {o.split("=", 1)[0].lstrip("+~") for o in overrides if "," in o.split("=", 1)[-1]}
    taken = [o for o in job if o.split("=", 1)[0].lstrip("+~") in swept]
    return line if any(t in line for t in taken) else f"sweep job {' '.join(taken) or ' '.join(job)}: {line}"


def _hydra_error_line(err: Exception, compose_without: Callable[[str], DictConfig | None],
                      job: list[str]) -> tuple[str, str]:
    """One line for an error Hydra raises while composing (its own messages span several lines): the message and a
    hint to follow it (the options that have an unknown key, or the closest valid key)."""
    from hydra.errors import MissingConfigException, OverrideParseException
    from omegaconf.errors import ConfigAttributeError, ConfigKeyError

    cause = err.__cause__
    if isinstance(err, MissingConfigException) and err.missing_cfg_file and err.options is not None:
        group, _, option = err.missing_cfg_file.rpartition("/")
        return f"{group}={option}: no such option (available: {', '.join(err.options)})", ""
    if isinstance(err, OverrideParseException):
        return f"cannot parse override '{err.override}': {str(err).splitlines()[0]}", ""
    if isinstance(cause, (ConfigKeyError, ConfigAttributeError)) and getattr(cause, "full_key", None):
        # `key=value` for a key that is not there (Hydra: "Could not override"; `+key=value` reaches the validator)
        key = str(cause.full_key)
        parent, _, name = key.rpartition(".")
        cfg = compose_without(key)
        node = OmegaConf.select(cfg, parent) if cfg is not None and parent else cfg
        valid = [str(k) for k in node if not str(k).startswith("_")] if isinstance(node, DictConfig) else []
        close = difflib.get_close_matches(name, valid, n=1, cutoff=0.6)
        hint = f" (did you mean '{parent + '.' if parent else ''}{close[0]}'?)" if close else ""
        from gdro.run.migrations import moved_key

        moved = moved_key(key)
        if moved is not None:
            hint = f" (moved to '{moved.new}')"
        choices = OmegaConf.select(cfg, "hydra.runtime.choices") if cfg is not None else None
        choices = OmegaConf.to_container(choices) if isinstance(choices, DictConfig) else None
        return f"unknown key '{key}'", hint or _options_having(key, job, choices)
    key = getattr(err, "full_key", None)
    return (f"{key}: {err}" if key else str(err)), ""


def _sweep_jobs(overrides: list[str]) -> list[list[str]] | None:
    """The override lists to check for ``-m``: the first job, and each other swept value once (None: can't tell)."""
    from hydra.core.override_parser.overrides_parser import OverridesParser
    from hydra.errors import HydraException

    try:
        parsed = OverridesParser.create().parse_overrides(overrides)
        choices = [[f"{o.get_key_element()}={v}" for v in o.sweep_string_iterator()] if o.is_sweep_override()
                   else [str(o.input_line)] for o in parsed]
    except HydraException:
        return None  # e.g. an interval sweep for an optimiser plugin: left to Hydra and the job's own check
    first = [c[0] for c in choices]
    jobs = [first]
    for i, values in enumerate(choices):
        jobs += [[*first[:i], v, *first[i + 1:]] for v in values[1:]]
    return jobs[:MAX_PRECHECKED_JOBS]


def precheck(argv: list[str], config_name: str, check: Callable[[DictConfig], object]) -> DictConfig | None:
    """Compose the config exactly as the job will get it and ``check`` it; a user error exits here.

    Returns the composed config (with its ``hydra`` node) of a single run; None for a sweep or when nothing was
    checked.

    Runs before Hydra starts the job (no run dir, no logging set-up, no model): a bad override, an unknown key or
    option, a wrong type or range is one line on stderr and exit status 2. Hydra's informational flags (--help,
    --cfg, --info, ...) and custom config locations (--config-path/-dir/-name) go to Hydra unchecked.
    """
    from hydra import compose, initialize_config_dir
    from hydra._internal.utils import get_args_parser
    from hydra.errors import HydraException
    from omegaconf.errors import OmegaConfBaseException

    from gdro.common.validate import ConfigError

    args, unknown = get_args_parser().parse_known_args(argv)
    if unknown or args.help or args.hydra_help or args.cfg or args.info or args.shell_completion or \
            args.config_path or args.config_dir or args.config_name or args.experimental_rerun:
        return None
    overrides = list(args.overrides)
    multirun = args.multirun or any(o.replace(" ", "") in ("hydra.mode=MULTIRUN", "++hydra.mode=MULTIRUN")
                                    for o in overrides)
    jobs = _sweep_jobs(overrides) if multirun else [overrides]
    if jobs is None:
        return None

    def compose_job(job: list[str]) -> DictConfig:
        with initialize_config_dir(config_dir=CONF_DIR, version_base="1.3", job_name="cli"):
            return compose(config_name=config_name, overrides=job, return_hydra_config=True)

    def compose_without(job: list[str]) -> Callable[[str], DictConfig | None]:
        def without(key: str) -> DictConfig | None:
            rest = [o for o in job if o.split("=", 1)[0].lstrip("+~") != key]
            try:
                return compose_job(rest)
            except (HydraException, OmegaConfBaseException):
                return None
        return without

    for job in jobs:
        try:
            cfg = compose_job(job)
        except (HydraException, OmegaConfBaseException) as err:
            if os.environ.get("HYDRA_FULL_ERROR") == "1":
                raise
            line, hint = _hydra_error_line(err, compose_without(job), job)
            fail(_in_sweep_job(line, job if multirun else None, overrides) + hint)
        HydraConfig.instance().set_config(cfg)  # `${hydra:...}` resolves as it will in the job
        try:
            with user_errors():
                try:
                    check(cfg)
                except ConfigError as err:  # the key's other options, the sweep's job
                    if not multirun and not getattr(err, "key", None):
                        raise
                    choices = OmegaConf.to_container(cfg.hydra.runtime.choices)
                    hint = _options_having(err.key, job, choices) if getattr(err, "key", None) else ""
                    line = str(err).split(" (", 1)[0] if hint else str(err)
                    raise type(err)(_in_sweep_job(line, job if multirun else None, overrides) + hint) from err
        finally:
            HydraConfig.instance().cfg = None  # Hydra sets it again for the job
    return None if multirun else cfg


def planned_run_dir(cfg: DictConfig) -> tuple[Path, bool]:
    """The run dir Hydra will make for a single run of ``cfg`` (composed with its ``hydra`` node), and whether its
    pattern holds ``${now:...}`` (then Hydra's own resolution, a moment later, may differ)."""
    HydraConfig.instance().set_config(cfg)  # `${hydra:runtime.choices...}` in the dir's pattern
    try:
        run_dir = Path(str(OmegaConf.select(cfg, "hydra.run.dir"))).absolute()
    finally:
        HydraConfig.instance().cfg = None
    return run_dir, "${now:" in str(OmegaConf.to_container(cfg.hydra.run, resolve=False).get("dir"))


def save_hydra_files(cfg: DictConfig, run_dir: Path) -> None:
    """Write what Hydra writes into ``<run_dir>/.hydra/`` (config.yaml, hydra.yaml, overrides.yaml), each whole or
    not at all, a failure naming its file (Hydra's own writing, turned off by ``hydra.output_subdir: null``, fails on
    a full disk with a traceback). gdro-train writes them once it holds the run dir and the start is accepted
    (gdro.compose.build.build_training's ``accepted``: Hydra writes them before the job starts, over the files of a
    run that holds the dir and refuses us, or that refuses a changed config); gdro-eval as its job starts."""
    hydra_cfg = HydraConfig.instance().cfg
    out = run_dir / HYDRA_SUBDIR
    with named_io(out):
        out.mkdir(parents=True, exist_ok=True)
    for name, node in (("config.yaml", cfg), ("hydra.yaml", hydra_cfg),
                       ("overrides.yaml", hydra_cfg.hydra.overrides.task)):
        atomic_write_text(out / name, OmegaConf.to_yaml(node))
