"""What the model writes: a bounded sample of completions, every ``samples.every`` training steps and at each held-out
evaluation, as ``samples/train_NNNNNN.jsonl`` / ``samples/eval_NNNNNN.jsonl`` in the run dir and a W&B table
(``samples/train``, ``samples/eval``): TRL's ``log_completions``, verl's generations table.

The trainer puts a step's records in its row under :data:`ROW_KEYS`; the run's logger
(:class:`gdro.algorithm.tracking.RunLogger`) takes them out of the row, so metrics.jsonl is as it was, and writes each
file atomically (a step rerun after a resume replaces its own file). Which records are shown is a pure function of
the step and the batch (:func:`pick`): no RNG is drawn, so a run's metrics are the same with samples on or off.
"""

from __future__ import annotations

import json
import os
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from gdro.common.ioerrors import named_io

SAMPLES_DIR = "samples"
ROW_KEYS = {"train": "samples/train", "eval": "samples/eval"}  # kind -> the row key and the W&B table's name
COLUMNS = ("step", "group", "rollout", "uid", "level", "bin", "n", "prompt", "completion", "reward", "correct",
           "verdict", "finish_reason")  # rollout: the completion's index within its group (0 .. n-1)
# ``bin``: the classifier's bin index of the prompt when drawn (0 = hardest). A prompt not yet seen is bin 0 under
# ``classifier.unseen=hardest`` and bin B, one past the last pass bin (10 with ten bins: the metrics' ``unseen``
# label), under ``unseen=separate``; None in eval records (held-out prompts are not binned). conf/train.yaml and the
# README's run-dir table say the same. With a user's reward functions (reward.functions) a record also has ``terms``:
# {name: raw value, null where the function returned None or failed} (in the files, not in the W&B table).


@dataclass(frozen=True)
class SampleConfig:
    """The ``samples:`` block of conf/train.yaml: how many completions are shown, and how often."""

    every: int = 10  # training steps between two training samples (steps every, 2·every, ...); 0: none
    train: int = 4  # training completions per sample (0: none)
    eval: int = 4  # held-out completions at each evaluation (0: none)

    def __post_init__(self) -> None:
        for name in ("every", "train", "eval"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int) or value < 0:
                raise ValueError(f"{name} must be an integer >= 0, got {value!r}")

    @classmethod
    def of(cls, value: SampleConfig | Mapping[str, Any]) -> SampleConfig:
        """The block as given (a mapping: its keys, checked); an error names the key (``samples.every=-1: ...``)."""
        if isinstance(value, cls):
            return value
        names = ("every", "train", "eval")
        if not isinstance(value, Mapping):
            raise TypeError(f"samples must be a block of keys ({', '.join(names)}), got {value!r}")
        unknown = [key for key in value if key not in names]
        try:
            if unknown:
                raise ValueError(f"unknown key 'samples.{unknown[0]}' (valid keys of samples: {', '.join(names)})")
            return cls(**dict(value))
        except ValueError as err:
            name, _, why = str(err).partition(" ")
            keyed = ValueError(str(err) if unknown else f"samples.{name}={value.get(name)}: {why.split(', got ')[0]}")
            keyed.keyed = True  # it names the key inside the block (gdro.common.validate.rewrite)
            raise keyed from err

    def due(self, step: int) -> bool:
        """Whether training step ``step`` shows its completions."""
        return self.every > 0 and self.train > 0 and step % self.every == 0


def pick(total: int, count: int, offset: int = 0) -> list[int]:
    """``count`` of ``total`` row indices, evenly spaced, the first at ``offset`` (mod ``total``): the step, so
    successive samples show other prompts. Deterministic; no RNG is drawn."""
    if count <= 0 or total <= 0:
        return []
    if count >= total:
        return list(range(total))
    return sorted((offset + (i * total) // count) % total for i in range(count))


def _verdict(scored: Any, i: int) -> str:
    """``correct``, or the failure kind where the reward's batch names one per completion (a ``kinds`` sequence),
    else ``incorrect``."""
    if bool(scored.correct[i]):
        return "correct"
    kinds = getattr(scored, "kinds", None)
    return str(kinds[i]) if kinds is not None and kinds[i] else "incorrect"


def records(roll: Any, scored: Any, problems: Sequence[Any], rows: Sequence[int], *, bins: Sequence[int] | None,
            n: Sequence[int]) -> list[dict[str, Any]]:
    """One record per row of ``rows`` of a rollout batch ``roll`` (gdro.common.rollouts.RolloutBatch) scored as
    ``scored`` (gdro.common.interfaces.RewardBatch); ``problems[g]``, ``bins[g]`` and ``n[g]`` are group ``g``'s problem,
    difficulty bin (None: not binned; an unseen prompt's as :data:`COLUMNS`' comment says) and rollouts. The step is stamped when the records are written."""
    out = []
    for i in rows:
        g = int(roll.group_index[i])
        p = problems[g]
        out.append({"group": g, "rollout": int((roll.group_index[:i] == g).sum()), "uid": p.uid, "level": p.level,
                    "bin": None if bins is None else int(bins[g]), "n": int(n[g]), "prompt": p.prompt,
                    "completion": roll.texts[i], "reward": float(scored.rewards[i]), "correct": bool(scored.correct[i]),
                    "verdict": _verdict(scored, i), "finish_reason": roll.finish_reasons[i]})
        terms = getattr(scored, "terms", None)
        if terms:  # a user's reward functions (reward.functions): each term's raw value, null where None or failed
            out[-1]["terms"] = {k: None if np.isnan(v[i]) else float(v[i]) for k, v in terms.items()}
    return out


def train_records(step: int, kept: Any, pool: Sequence[Any], count: int) -> list[dict[str, Any]]:
    """``count`` records of a training step's trained groups ``kept`` (gdro.algorithm.filters.Drawn: ids, bins, n, roll,
    scored), drawn from the training ``pool`` of problems, the rows at :func:`pick`'s places."""
    rows = pick(len(kept.roll.texts), count, step)
    return records(kept.roll, kept.scored, [pool[i] for i in kept.ids], rows, bins=kept.bins, n=kept.n)


def path_of(run_dir: Path, kind: str, step: int) -> Path:
    return Path(run_dir) / SAMPLES_DIR / f"{kind}_{step:06d}.jsonl"


def write(run_dir: Path, kind: str, step: int, recs: Sequence[Mapping[str, Any]]) -> Path:
    """``samples/<kind>_<step>.jsonl``, each record with its step, written atomically (a temporary file, then
    renamed over the step's file): a rerun of the step replaces it whole, and a kill leaves the old one or the new."""
    path = path_of(run_dir, kind, step)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.tmp")
    try:
        with named_io(path), tmp.open("w", encoding="utf-8") as fh:
            fh.writelines(json.dumps({"step": step, **r}) + "\n" for r in recs)
        os.replace(tmp, path)
    except OSError as err:
        if tmp.is_file():
            tmp.unlink()
        if err.filename == str(tmp) and err.errno is not None:  # the file a user looks for, not its temp file
            raise OSError(err.errno, err.strerror or os.strerror(err.errno), str(path)) from err
        raise
    return path


def prune_after(run_dir: Path, step: int) -> list[Path]:
    """Remove the sample files of steps after ``step`` (a resume from ``step``'s checkpoint: the run redoes those
    steps, or stops before them), as metrics.jsonl is cut back to the checkpoint; returns what was removed."""
    gone = []
    for path in sorted((Path(run_dir) / SAMPLES_DIR).glob("*_*.jsonl")):
        kind, _, num = path.stem.rpartition("_")
        if kind in ROW_KEYS and num.isdigit() and int(num) > step:
            path.unlink()
            gone.append(path)
    return gone


def read(path: Path) -> list[dict[str, Any]]:
    """The records of one sample file."""
    with Path(path).open(encoding="utf-8") as fh:
        return [json.loads(line) for line in fh if line.strip()]


def wandb_table(step: int, recs: Sequence[Mapping[str, Any]]):
    """The records as a ``wandb.Table`` (columns :data:`COLUMNS`)."""
    import wandb

    return wandb.Table(columns=list(COLUMNS), data=[[{"step": step, **r}.get(c) for c in COLUMNS] for r in recs])
