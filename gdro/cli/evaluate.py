"""``gdro-eval``: evaluate a model (base or trained checkpoint) on a benchmark suite (spec §6.5).

Hydra app with the primary config ``conf/eval_app.yaml``. Everything cheap is validated first — the model,
eval, reward and rollout options, the benchmark names and local files, the checkpoint directory — and every
benchmark is loaded before the model, so a bad value fails with a message naming its key before any weights
load.

Metrics (percentages; ``k`` = ``eval.k``, paper: 8 samples at T 0.6, top-p 0.8, top-k 20):

* ``eval/<bench>/mean@k``, ``eval/<bench>/pass@k``, ``eval/<bench>/n_problems``, ``.../len_mean``,
  ``.../truncated_frac``; for the toy copy task also ``eval/toy_copy/{mean,pass}@k/level_<L>``;
* ``eval/aime/mean@k`` and ``eval/aime/pass@k``: the average of aime2024 and aime2025 when both are
  evaluated (Table 1's AIME column);
* ``eval/pass@k`` and ``eval/mean@k``: pooled over **all prompts of all benchmarks** (prompt-weighted).
  Ambiguity: the paper does not say how Table 1's single pass@8 column is aggregated; the official code's
  ``val-core/acc/pass@k`` pools all validation prompts, which is what this reports. (The official code also
  merges prompts with identical text across files; here each benchmark's problems count separately.)
  ``eval/mean@k/macro``: the unweighted average of the benchmark columns as Table 1 lays them out (AIME
  counted once, as the 2024/2025 average).

``pass@k`` uses the unbiased estimator with n = k samples, which equals the empirical "any of k correct".
"""

from __future__ import annotations

import dataclasses
import json
import logging
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal

import hydra
from hydra.core.hydra_config import HydraConfig
from omegaconf import DictConfig, ListConfig, OmegaConf

from gdro.cli.app import (
    CONF_DIR,
    job_log_files_closed,
    job_log_held_back,
    planned_run_dir,
    precheck,
    save_hydra_files,
    user_errors,
)
from gdro.common.interfaces import Problem
from gdro.common.ioerrors import atomic_write, atomic_write_text, named_io
from gdro.common.rollouts import close_engine
from gdro.common.validate import ConfigError, validate_config
from gdro.compose.build import check_engine, load_splits, make_policy, place
from gdro.data.benchmark_specs import BENCHMARKS
from gdro.data.benchmarks import load_benchmark
from gdro.data.synthetic import CopyTask
from gdro.models.source import model_provenance
from gdro.parallel.distributed import Dist

if TYPE_CHECKING:
    from gdro.algorithm.heldout import EvalConfig
    from gdro.common.interfaces import Reward
    from gdro.models.loading import ModelSpec

log = logging.getLogger("gdro.eval")

TOY = "toy_copy"
GROUPS = ("model", "eval", "reward", "rollout")
AIME = ("aime2024", "aime2025")


def known_benchmarks() -> list[str]:
    return sorted([*BENCHMARKS, TOY])


@dataclass(frozen=True)
class EvalAppConfig:
    """gdro-eval's own keys (conf/eval_app.yaml; the groups model, eval, reward and rollout are components)."""

    benchmarks: Any  # a list: the suite: entries {name, data_files, ...} (conf/suite/*.yaml), checked by _entries
    checkpoint: str | None = None  # a model directory (e.g. <run_dir>/checkpoint) replacing model.name_or_path
    out: str | None = None  # where eval.json, eval.md and samples.jsonl go (null: the Hydra run dir)
    threads: int | Literal["auto"] | None = None  # torch CPU threads (a number, auto: the free cores, null: torch's default)
    device: str = "auto"  # auto | cpu | cuda | cuda:N

    def __post_init__(self) -> None:
        from gdro.models.loading import check_placement

        if self.checkpoint is not None:
            from gdro.models.dir_checks import model_dir_problem

            problem = model_dir_problem(str(self.checkpoint))  # a run dir, a save cut short, cut weights: named
            if problem is not None:
                raise ValueError(problem)
            if not (Path(str(self.checkpoint)) / "config.json").is_file():
                raise ValueError(f"checkpoint is not a model directory (no config.json), got {self.checkpoint!r}")
        check_placement(self.threads, self.device)  # the same check as gdro-train's


@dataclass
class EvalParts:
    """The evaluation's components, one per config group of :data:`GROUPS`."""

    model: ModelSpec
    eval: EvalConfig
    reward: Reward
    rollout: Any  # the engine's config: gdro.rollout.hf.HFEngineConfig | gdro.rollout.vllm.VLLMEngineConfig


@dataclass
class EvalPlan:
    """Validated, model-free parts of an evaluation: its own settings, the components and every benchmark's
    problems."""

    app: EvalAppConfig
    parts: EvalParts
    benchmarks: dict[str, list[Problem]]
    reports: dict[str, str] = field(default_factory=dict)
    golds: dict[str, Any] = field(default_factory=dict)  # benchmark -> its golds prepared at load (GoldTable)


def suites() -> list[str]:
    """The benchmark suites, one file each in ``conf/suite/`` (``suite=paper`` fills ``benchmarks``)."""
    return sorted(p.stem for p in (Path(CONF_DIR) / "suite").glob("*.yaml"))


def _entries(raw: Any) -> list[dict[str, Any]]:
    raw = OmegaConf.to_container(raw, resolve=True) if isinstance(raw, (DictConfig, ListConfig)) else raw
    if not isinstance(raw, list) or not raw:
        raise ConfigError(f"benchmarks={raw}: not a suite ({', '.join(suites())}) nor a non-empty list of benchmark "
                          "names or {name: ..., data_files: ...} entries, e.g. "
                          "'benchmarks=[{name: math500, data_files: math500.jsonl}]'")
    out, seen = [], set()
    for i, entry in enumerate(raw):
        if isinstance(entry, str):
            entry = {"name": entry}
        if not isinstance(entry, dict) or "name" not in entry:
            raise ConfigError(f"benchmarks[{i}] must be a mapping with a 'name' key, got {entry!r}")
        name = entry["name"]
        if name not in BENCHMARKS and name != TOY:
            raise ConfigError(f"benchmarks[{i}].name: unknown benchmark {name!r}; known: {', '.join(known_benchmarks())}")
        if name in seen:
            raise ConfigError(f"benchmarks[{i}].name: benchmark {name!r} is listed twice")
        seen.add(name)
        files = entry.get("data_files")
        if name == TOY and files is not None:
            raise ConfigError(f"benchmarks[{i}].data_files must be null for {TOY} (the split is generated)")
        for f in [files] if isinstance(files, str) else (files or []):
            if not Path(f).is_file():
                raise ConfigError(f"benchmarks[{i}].data_files: no such file {f!r} (benchmark {name})")
        out.append(dict(entry))
    return out


def _load_problems(entry: dict[str, Any], i: int) -> tuple[list[Problem], str, Any]:
    name = entry.pop("name")
    files = entry.pop("data_files", None)
    golds = None
    try:
        if name == TOY:
            problems = CopyTask(**entry).test()
            summary = f"{TOY} (embedded CopyTask test split): {len(problems)} problems"
        else:
            problems, report = load_benchmark(name, data_files=files, **entry)
            summary, golds = report.summary(), report.golds
    except (TypeError, ValueError) as err:
        raise ConfigError(f"benchmarks[{i}] ({name}): {err}") from err
    if not problems:
        raise ConfigError(f"benchmarks[{i}] ({name}) has no usable problems: {summary}")
    return problems, summary, golds


def build_plan(cfg: DictConfig) -> EvalPlan:
    """Validate the whole config and load every benchmark — no model is loaded here."""
    app, groups = validate_config(cfg, GROUPS, EvalAppConfig)  # keys, types, ranges: one-line errors
    parts = EvalParts(**groups)
    check_engine(parts.rollout)
    if app.checkpoint is not None:
        parts.model = dataclasses.replace(parts.model, name_or_path=str(app.checkpoint))
    entries = _entries(app.benchmarks)
    benchmarks, reports, golds = {}, {}, {}
    for i, entry in enumerate(entries):
        name = entry["name"]
        benchmarks[name], reports[name], golds[name] = _load_problems(entry, i)
        log.info("%s", reports[name])
    return EvalPlan(app, parts, benchmarks, reports, golds=golds)


def aggregate(per_bench: dict[str, dict[str, float]], k: int) -> dict[str, float]:
    """Per-benchmark keys, the AIME average, the pooled overall figures and the macro average."""
    out: dict[str, float] = {}
    for name, m in per_bench.items():
        for key, v in m.items():
            sub = key.removeprefix("eval/")
            if name != TOY and "/level_" in sub:
                continue  # real benchmarks all have level 0: the per-level keys repeat the totals
            out[f"eval/{name}/{sub}"] = v
    total = sum(m["eval/n_problems"] for m in per_bench.values())
    for stat in ("mean", "pass"):
        key = f"eval/{stat}@{k}"
        out[key] = sum(m[key] * m["eval/n_problems"] for m in per_bench.values()) / total
        if all(a in per_bench for a in AIME):
            out[f"eval/aime/{stat}@{k}"] = sum(per_bench[a][key] for a in AIME) / len(AIME)
    cols = [per_bench[n][f"eval/mean@{k}"] for n in per_bench if n not in AIME or not all(a in per_bench for a in AIME)]
    if all(a in per_bench for a in AIME):
        cols.append(out[f"eval/aime/mean@{k}"])
    out[f"eval/mean@{k}/macro"] = sum(cols) / len(cols)
    out["eval/n_problems"] = float(total)
    return out


def markdown(metrics: dict[str, float], names: list[str], k: int) -> str:
    rows = [f"| benchmark | mean@{k} | pass@{k} | n |", "|---|---:|---:|---:|"]
    for name in [*names, *(["aime"] if f"eval/aime/mean@{k}" in metrics else [])]:
        n = metrics.get(f"eval/{name}/n_problems")
        label = name if n is not None else "aime (avg 2024, 2025)"
        rows.append(
            f"| {label} | {metrics[f'eval/{name}/mean@{k}']:.2f} | {metrics[f'eval/{name}/pass@{k}']:.2f} | "
            f"{int(n) if n is not None else ''} |"
        )
    rows.append(
        f"| **all (pooled over prompts)** | {metrics[f'eval/mean@{k}']:.2f} | {metrics[f'eval/pass@{k}']:.2f} | "
        f"{int(metrics['eval/n_problems'])} |"
    )
    return "\n".join(rows) + "\n"


def run_eval(cfg: DictConfig, out_dir: str | Path, *, choices: dict[str, str] | None = None,
             accepted: Callable[[], object] | None = None) -> dict[str, float]:
    """Validate ``cfg``, load the model, evaluate every benchmark, write ``samples.jsonl``, ``eval.md`` and, last,
    ``eval.json`` to ``out_dir`` (:func:`write_results`). ``accepted`` (gdro-eval: its ``.hydra/`` files and the
    job log's first lines written) is called once the config, the benchmarks and the model have passed every check,
    so that a refused evaluation changes no file of a dir that holds an earlier one."""
    from gdro.algorithm.heldout import evaluate

    plan = build_plan(cfg)
    device = place(plan.app.threads, plan.app.device)
    spec, eval_cfg, eng_cfg = plan.parts.model, plan.parts.eval, plan.parts.rollout
    out_dir = Path(out_dir)
    _check_out(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    splits = load_splits(spec, plan.benchmarks)  # the engine cannot take longer prompts: dropped (not scored)
    plan.benchmarks, dropped = splits.problems, splits.dropped
    engine = make_policy(spec, eng_cfg, device, splits.tokenizer, Dist()).engine  # samples on the model's device
    if accepted is not None:
        try:
            accepted()
        except BaseException:
            close_engine(engine)
            raise
    k = eval_cfg.k
    reward = plan.parts.reward
    for table in plan.golds.values():  # golds prepared at load: scoring never parses one (no time bound there)
        if table is not None:
            reward.use_golds(table)
    per_bench: dict[str, dict[str, float]] = {}
    samples: list[dict] = []
    try:
        for name, problems in plan.benchmarks.items():
            t0 = time.perf_counter()
            per_bench[name] = evaluate(engine, problems, reward, eval_cfg, spec.max_new_tokens, samples=samples)
            log.info("%s: mean@%d %.2f pass@%d %.2f (%d problems, %.1fs)", name, k, per_bench[name][f"eval/mean@{k}"],
                     k, per_bench[name][f"eval/pass@{k}"], per_bench[name]["eval/n_problems"],
                     time.perf_counter() - t0)
    finally:
        close_engine(engine)  # vLLM: shut down here, not whenever the collector gets to it
    metrics = aggregate(per_bench, k)
    md = markdown(metrics, list(plan.benchmarks), k)
    record = {
        "metrics": metrics,
        "model": spec.name_or_path,
        "model_source": model_provenance(spec),  # the path read (a fallback used?) and how gdro built a local copy
        "k": k,
        "benchmarks": plan.reports,
        "dropped_long_prompts": dropped,
        "choices": choices or {},
        "config": OmegaConf.to_container(cfg, resolve=True),
    }
    write_results(out_dir, record, samples, md)
    print(md, end="")
    return metrics


def write_results(out_dir: Path, record: dict[str, Any], samples: list[dict], md: str) -> None:
    """``samples.jsonl`` (every completion and its verdict, read by gdro-rescore), ``eval.md``, then ``eval.json``:
    each whole or not at all (gdro.common.ioerrors.atomic_write; a failure names its file), eval.json last, so that
    it is there only when the evaluation finished and its other files are this evaluation's. An earlier
    evaluation's eval.json goes first: a failure midway leaves none, not one beside newer files."""
    with named_io(out_dir / "eval.json"):
        (out_dir / "eval.json").unlink(missing_ok=True)
    atomic_write(out_dir / "samples.jsonl", lambda fh: fh.writelines(json.dumps(row) + "\n" for row in samples))
    atomic_write_text(out_dir / "eval.md", md)
    atomic_write_text(out_dir / "eval.json", json.dumps(record, indent=2, default=str))


@hydra.main(config_path=CONF_DIR, config_name="eval_app", version_base="1.3")
@user_errors()
def _eval(cfg: DictConfig) -> float:
    hc = HydraConfig.get()
    choices = {k: v for k, v in hc.runtime.choices.items() if not k.startswith("hydra")}
    out = cfg.get("out") or hc.runtime.output_dir
    with job_log_held_back(Path(hc.runtime.output_dir)) as write_log:
        def accepted() -> None:  # conf/eval_app.yaml: hydra.output_subdir null
            save_hydra_files(cfg, Path(hc.runtime.output_dir))
            write_log()

        metrics = run_eval(cfg, out, choices=choices, accepted=accepted)
    log.info("wrote %s/eval.json and eval.md", out)
    return float(metrics[f"eval/pass@{cfg.eval.k}"])


def _check_out(out: Path) -> None:
    """``out`` must be a directory, or creatable as one: an existing file is a config error, an unwritable place an
    I/O error naming the directory (both before any model loads)."""
    from gdro.common.ioerrors import check_creatable

    if out.exists() and not out.is_dir():
        raise ConfigError(f"out={out}: is a file; eval.json and eval.md go into a directory")
    check_creatable(out)


def _check(cfg: DictConfig) -> None:
    """Before Hydra starts the job: known top-level keys, every group's and top-level key's type and range, the
    shape of the benchmark list (and its files exist) and ``out``."""
    app, _parts = validate_config(cfg, GROUPS, EvalAppConfig)
    _entries(app.benchmarks)
    if app.out is not None:
        _check_out(Path(str(app.out)))


def _suite_alias(argv: list[str]) -> list[str]:
    """``benchmarks=paper`` names a suite (the form gdro-eval has always taken): it becomes ``suite=paper``, so
    that ``benchmarks`` itself stays a plain list (``benchmarks=[...]``, ``benchmarks.0.data_files=...``)."""
    names = set(suites())
    out = []
    for arg in argv:
        key, eq, value = arg.partition("=")
        if eq and key == "benchmarks" and value and all(v.strip() in names for v in value.split(",")):
            arg = f"suite={value}"
        out.append(arg)
    return out


def main() -> None:
    """Console script ``gdro-eval``: a user error (bad key, value, benchmark, checkpoint, output) is one line on
    stderr with a non-zero exit (gdro.cli.app.user_errors)."""
    logging.raiseExceptions = False  # a full disk must not print a traceback for every log line the file can't take
    sys.argv[1:] = _suite_alias(sys.argv[1:])
    cfg = precheck(sys.argv[1:], "eval_app", _check)
    if cfg is not None:  # Hydra's own mkdir would fail with a traceback
        from gdro.common.ioerrors import check_creatable

        with user_errors():
            check_creatable(planned_run_dir(cfg)[0])
    with job_log_files_closed():  # a later command in this process does not log into this one's file
        _eval()


if __name__ == "__main__":
    main()
