"""``gdro-rescore``: score stored completions against a benchmark's golds, without loading a model.

Researchers compare graders by rescoring the same completions; gdro-eval writes every completion it scored to
``samples.jsonl`` beside ``eval.json``, and this reads that file back (or any JSON-lines file of completions)::

    gdro-rescore outputs/eval/<run>/samples.jsonl --benchmark minerva=data/minerva.jsonl --benchmark math500=...
    gdro-rescore gens.jsonl --benchmark minerva=minerva_qwen_eval.jsonl --set solution_key=solution --window train

Each line is a JSON object with the completion(s) and the problem it answers:

* the completion: ``completion`` / ``response`` (a string) or ``completions`` / ``responses`` (a list);
  ``finished`` (default true: a completion cut by the length limit scores wrong, as in training and gdro-eval);
* the problem, first found wins: ``uid`` (gdro's ``<benchmark>/<split>/<row id>``, as in samples.jsonl);
  ``index`` / ``idx`` (0-based row of the benchmark file; ``benchmark`` names it when several are given);
  ``problem`` / ``question`` (the question text, compared without surrounding whitespace).

It prints, per benchmark, the problems and completions matched, mean@n and pass@n (n = completions per problem,
pass@n = any correct), and where the lines carry a stored verdict (``correct``, ``score``, ``reward`` or ``acc``;
true or > 0.5 is correct), how many verdicts agree with gdro's and how many differ. ``--out`` writes one line per
completion with gdro's verdict. ``--window eval`` (default) reads the last ``\\boxed{}`` of the whole completion as
gdro-eval does; ``--window train`` reads the training reward's window (``reward.tail_chars``, the official 300).
A line that names no known problem is counted and skipped; a bad argument or file is one line on stderr, exit 2;
an ``--out`` that cannot be written (a full disk, an unwritable directory) one line naming it, exit 74, and no file
is left behind (it is written whole or not at all: a file already there stays as it was).
"""

from __future__ import annotations

import argparse
import errno
import json
import os
import sys
from collections import Counter, defaultdict
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, NoReturn

import numpy as np

from gdro.common.interfaces import Problem
from gdro.common.ioerrors import EXIT_IO_ERROR, atomic_write, check_creatable, is_environment_error, one_line
from gdro.data.benchmark_specs import BENCHMARKS, MATH_SUFFIX
from gdro.data.benchmarks import DataFileError, load_benchmark, read_json_lines
from gdro.grading.reward_config import EVAL_BOXES, RewardConfig
from gdro.grading.rewards import MathVerifyReward

TEXT_KEYS = ("completion", "response")
LIST_KEYS = ("completions", "responses")
VERDICT_KEYS = ("correct", "score", "reward", "acc")


class RescoreError(ValueError):
    """A bad argument or input file; the message is one line naming it."""


@dataclass
class Index:
    """Where a line's problem is found: by uid, by (benchmark, row index), by question text."""

    by_uid: dict[str, tuple[str, Problem]] = field(default_factory=dict)
    by_row: dict[tuple[str, int], Problem] = field(default_factory=dict)
    by_text: dict[str, tuple[str, Problem]] = field(default_factory=dict)

    def add(self, name: str, problems: list[Problem]) -> None:
        for i, p in enumerate(problems):
            self.by_uid[p.uid] = (name, p)
            self.by_row[(name, i)] = p
            self.by_text.setdefault(p.prompt.removesuffix(MATH_SUFFIX).strip(), (name, p))

    def find(self, row: dict[str, Any], names: list[str]) -> tuple[str, Problem] | None:
        if isinstance(row.get("uid"), str):
            return self.by_uid.get(row["uid"])
        for key in ("index", "idx"):
            if isinstance(row.get(key), int) and not isinstance(row.get(key), bool):
                name = row.get("benchmark", names[0] if len(names) == 1 else None)
                hit = self.by_row.get((name, row[key]))
                return (name, hit) if hit is not None else None
        for key in ("problem", "question"):
            if isinstance(row.get(key), str):
                return self.by_text.get(row[key].strip())
        return None


def _completions(row: dict[str, Any]) -> list[str] | None:
    for key in TEXT_KEYS:
        if isinstance(row.get(key), str):
            return [row[key]]
    for key in LIST_KEYS:
        value = row.get(key)
        if isinstance(value, list) and all(isinstance(v, str) for v in value):
            return value
    return None


def _stored(row: dict[str, Any], n: int) -> list[bool] | None:
    for key in VERDICT_KEYS:
        value = row.get(key)
        values = value if isinstance(value, list) else [value]
        if len(values) == n and all(isinstance(v, (bool, int, float)) for v in values):
            return [bool(v) if isinstance(v, bool) else float(v) > 0.5 for v in values]
    return None


def _parse_benchmarks(specs: list[str], overrides: dict[str, Any]) -> dict[str, tuple[list[Problem], str, Any]]:
    out = {}
    for spec in specs:
        name, _, path = spec.partition("=")
        if name not in BENCHMARKS:
            raise RescoreError(f"--benchmark {spec}: unknown benchmark {name!r}; known: {', '.join(sorted(BENCHMARKS))}")
        try:
            problems, report = load_benchmark(name, data_files=path or None, **overrides)
        except (DataFileError, TypeError, ValueError) as err:
            raise RescoreError(f"--benchmark {spec}: {err}") from err
        if not problems:
            raise RescoreError(f"--benchmark {spec}: no usable problem ({report.summary()})")
        out[name] = (problems, report.summary(), report.golds)
    return out


def _overrides(pairs: list[str]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for pair in pairs:
        key, sep, value = pair.partition("=")
        if not sep or not key:
            raise RescoreError(f"--set {pair!r}: expected key=value (a load_benchmark setting, e.g. solution_key=solution)")
        try:
            out[key] = json.loads(value)
        except json.JSONDecodeError:
            out[key] = value
    return out


def rescore(
    completions_file: str, benchmarks: list[str], *, window: str = "eval", overrides: dict[str, Any] | None = None,
    out: str | None = None, reward: MathVerifyReward | None = None,
) -> dict[str, dict[str, float]]:
    """Score ``completions_file`` against ``benchmarks`` (``NAME`` or ``NAME=PATH``); per-benchmark figures."""
    if window not in ("eval", "train"):
        raise RescoreError(f"--window must be eval or train, got {window!r}")
    loaded = _parse_benchmarks(benchmarks, overrides or {})
    reward = reward or MathVerifyReward(RewardConfig())
    scorer = reward.for_eval() if window == "eval" else reward
    index = Index()
    for name, (problems, _summary, golds) in loaded.items():
        index.add(name, problems)
        reward.use_golds(golds)
    try:
        rows, n_bad, _first = read_json_lines(completions_file)
    except DataFileError as err:
        raise RescoreError(str(err)) from err
    texts, golds_, finished, where, stored = [], [], [], [], []
    skipped: Counter = Counter({"malformed line": n_bad} if n_bad else {})
    for line, row in enumerate(rows):
        comps = _completions(row)
        hit = index.find(row, list(loaded))
        if comps is None or hit is None:
            skipped["no completion" if comps is None else "no known problem"] += 1
            continue
        name, problem = hit
        texts += comps
        golds_ += [problem.answer] * len(comps)
        finished += [bool(row.get("finished", True))] * len(comps)
        where += [(name, problem.uid, line, j) for j in range(len(comps))]
        stored += _stored(row, len(comps)) or [None] * len(comps)
    if not texts:
        raise RescoreError(f"{completions_file}: no line names a known problem with a completion ({dict(skipped)})")
    scored = scorer.score(texts, golds_, finished)
    figures = _figures(where, scored.correct, stored)
    _print(figures, loaded, skipped, window)
    if out:
        atomic_write(out, lambda fh: fh.writelines(
            json.dumps({"benchmark": name, "uid": uid, "line": line, "sample": j, "correct": ok,
                        **({"stored": was} if was is not None else {})}) + "\n"
            for (name, uid, line, j), ok, was in zip(where, scored.correct.tolist(), stored)))
    return figures


def _figures(where: list, correct: np.ndarray, stored: list) -> dict[str, dict[str, float]]:
    per: dict[str, dict[str, list[bool]]] = defaultdict(lambda: defaultdict(list))
    agree: Counter = Counter()
    for (name, uid, _line, _j), ok, was in zip(where, correct.tolist(), stored):
        per[name][uid].append(ok)
        if was is not None:
            agree[(name, "agree" if was == ok else "differ")] += 1
    out = {}
    for name, groups in per.items():
        means = [float(np.mean(v)) for v in groups.values()]
        out[name] = {
            "problems": float(len(groups)),
            "completions": float(sum(len(v) for v in groups.values())),
            "mean": 100.0 * float(np.mean(means)),
            "pass": 100.0 * float(np.mean([any(v) for v in groups.values()])),
            "agree": float(agree[(name, "agree")]),
            "differ": float(agree[(name, "differ")]),
        }
    return out


def _print(figures: dict, loaded: dict, skipped: Counter, window: str) -> None:
    for name, (_p, summary, _g) in loaded.items():
        print(f"[gdro-rescore] {summary}")
    print(f"| benchmark | problems | completions | mean@n | pass@n | stored verdicts agree / differ |  (window: {window})")
    print("|---|---:|---:|---:|---:|---|")
    for name, f in figures.items():
        stored = f"{int(f['agree'])} / {int(f['differ'])}" if f["agree"] + f["differ"] else "none stored"
        print(f"| {name} | {int(f['problems'])} | {int(f['completions'])} | {f['mean']:.2f} | {f['pass']:.2f} | {stored} |")
    if skipped:
        print("[gdro-rescore] lines skipped: " + ", ".join(f"{k}: {v}" for k, v in sorted(skipped.items())))


class _Parser(argparse.ArgumentParser):
    """argparse with its usage errors in one line, as gdro-report's (its own print the usage block first)."""

    def error(self, message: str) -> NoReturn:
        print(f"{self.prog}: error: {' '.join(message.split())} (see {self.prog} --help)", file=sys.stderr)
        sys.exit(2)


def main(argv: list[str] | None = None) -> int:
    """Console script ``gdro-rescore``; a bad argument or file is one line on stderr, exit 2; an ``--out`` that cannot
    be written one line naming it, exit 74 (checked before the scoring, and again by the write itself)."""
    ap = _Parser(prog="gdro-rescore", description=__doc__.split("\n\n")[0])
    ap.add_argument("completions", help="JSON-lines file of completions (gdro-eval's samples.jsonl or your own)")
    ap.add_argument("--benchmark", action="append", required=True, metavar="NAME[=PATH]",
                    help="a benchmark and its local file (no PATH: the hub dataset); repeat for several")
    ap.add_argument("--set", action="append", default=[], metavar="KEY=VALUE",
                    help="a loader setting for every benchmark (e.g. solution_key=solution)")
    ap.add_argument("--window", default="eval", help="eval (whole completion, default) | train (training window)")
    ap.add_argument("--boxes", default="last", choices=EVAL_BOXES,
                    help="last (the last \\boxed{}, as training; default) | join (a gold of several items reads the "
                         "final boxes joined, as math-verify does): the reward's eval_boxes (docs/scoring.md)")
    ap.add_argument("--out", help="write one line per completion with gdro's verdict")
    args = ap.parse_args(argv)
    try:
        if not Path(args.completions).is_file():
            raise RescoreError(f"{args.completions}: no such file")
        _check_out(args.out)
        rescore(args.completions, args.benchmark, window=args.window, overrides=_overrides(args.set), out=args.out,
                reward=MathVerifyReward(RewardConfig(eval_boxes=args.boxes)))
    except OSError as err:
        if not is_environment_error(err):
            print(f"gdro-rescore: error: {err}", file=sys.stderr)
            return 2
        print(f"gdro-rescore: error: {one_line(err)}", file=sys.stderr)
        return EXIT_IO_ERROR
    except RescoreError as err:
        print(f"gdro-rescore: error: {err}", file=sys.stderr)
        return 2
    return 0


def _check_out(out: str | None) -> None:
    """``--out`` before the scoring: a directory is a usage error; a place where no file can be written (a file or
    nothing where its directory should be, an unwritable or read-only directory) an ``OSError`` naming the directory.
    A device or a FIFO (``/dev/stdout``) is written in place and not checked here."""
    if out is None:
        return
    path = Path(out)
    if path.is_dir():
        raise RescoreError(f"--out {out}: is a directory")
    if path.exists() and not path.is_file():
        return
    parent = path.absolute().parent
    check_creatable(parent)
    if not parent.is_dir():
        raise FileNotFoundError(errno.ENOENT, os.strerror(errno.ENOENT), str(parent))


if __name__ == "__main__":
    sys.exit(main())
