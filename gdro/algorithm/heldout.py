"""Held-out evaluation: k samples per problem, mean@k and pass@k overall and per difficulty level."""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from gdro.algorithm import samples as run_samples
from gdro.common.rollouts import Generator, SamplingParams
from gdro.grading.passk import pass_at_k


@dataclass(frozen=True)
class EvalConfig:
    """Periodic evaluation (conf/eval/*.yaml). Sampling defaults are the paper's validation settings."""

    every: int = 25  # evaluate every N training steps; 0 = no periodic evaluation
    at_start: bool = True  # evaluate the initial policy before step 1
    at_end: bool = True  # evaluate after the last step (all three off: no evaluation at all)
    k: int = 8  # samples per problem → mean@k and pass@k
    temperature: float = 0.6
    top_p: float = 0.8
    top_k: int = 20
    max_problems: int | None = None  # evaluate N held-out problems, evenly spaced (None = all)
    seed: int = 12345  # sampling seed: the same at every evaluation, so evaluations differ only by weights
    format_metrics: bool = False  # also the answer format, overall and per level: eval/boxed (a complete \boxed{}
    # present) and eval/finished (the end token emitted within the limit), in % of completions

    def __post_init__(self) -> None:
        if self.every < 0:
            raise ValueError(f"every must be >= 0, got {self.every}")
        if self.k < 1:
            raise ValueError(f"k must be >= 1, got {self.k}")
        if self.max_problems is not None and self.max_problems < 1:
            raise ValueError(f"max_problems must be >= 1 or null, got {self.max_problems}")
        if not 0 <= self.seed < 2**64:  # torch.manual_seed takes an unsigned 64-bit seed
            raise ValueError(f"seed must be in [0, 2**64), got {self.seed}")
        SamplingParams(self.temperature, self.top_p, self.top_k, 1)

    def sampling(self, max_new_tokens: int) -> SamplingParams:
        return SamplingParams(self.temperature, self.top_p, self.top_k, max_new_tokens)


def subset(problems: Sequence, max_problems: int | None) -> list:
    """All problems, or ``max_problems`` of them evenly spaced through the split (so every level stays)."""
    probs = list(problems)
    if max_problems is None or max_problems >= len(probs):
        return probs
    idx = np.unique(np.linspace(0, len(probs) - 1, max_problems).round().astype(np.int64))
    return [probs[i] for i in idx]


def summarize(correct: np.ndarray, group_index: np.ndarray, levels: Sequence[int], k: int, prefix: str = "eval") -> dict[str, float]:
    """mean@k / pass@k (unbiased estimator) overall and per level from per-sample correctness."""
    n_groups = len(levels)
    n = np.bincount(group_index, minlength=n_groups)
    c = np.bincount(group_index, weights=correct.astype(np.float64), minlength=n_groups)
    mean_k = c / np.maximum(n, 1)
    pass_k = pass_at_k(n, c.astype(np.int64), k)
    out = {f"{prefix}/mean@{k}": 100.0 * float(mean_k.mean()), f"{prefix}/pass@{k}": 100.0 * float(pass_k.mean())}
    by_level: dict[int, list[int]] = defaultdict(list)
    for g, lv in enumerate(levels):
        by_level[int(lv)].append(g)
    for lv in sorted(by_level):
        idx = np.asarray(by_level[lv])
        out[f"{prefix}/mean@{k}/level_{lv}"] = 100.0 * float(mean_k[idx].mean())
        out[f"{prefix}/pass@{k}/level_{lv}"] = 100.0 * float(pass_k[idx].mean())
    return out


def evaluate(
    engine: Generator, problems: Sequence, reward, cfg: EvalConfig, max_new_tokens: int,
    samples: list[dict] | None = None, shown: int = 0,
) -> dict[str, Any]:
    """Sample ``cfg.k`` completions for each problem and score them; figures are percentages.

    Scoring uses the reward's evaluation form (``reward.for_eval()``; gdro's reads the whole completion, not the
    training reward's window). ``samples``, when given, receives one record per completion (uid,
    sample index, completion, finished, correct): what ``gdro-rescore`` reads back. ``shown`` > 0: ``shown`` of the
    completions, evenly spaced and the same ones at every evaluation (so their problems can be followed across a
    run), also go out as records under ``samples/eval`` (gdro.algorithm.samples; no RNG is drawn).
    """
    probs = subset(problems, cfg.max_problems)
    roll = engine.generate(
        [p.prompt for p in probs], [cfg.k] * len(probs), seed=cfg.seed, sampling=cfg.sampling(max_new_tokens)
    )
    scorer = reward.for_eval()
    rows = {"problems": [probs[g] for g in roll.group_index], "completion_ids": roll.completion_ids} \
        if getattr(scorer, "reads_problems", False) else {}  # a user's correctness function reads them
    scored = scorer.score(roll.texts, [probs[g].answer for g in roll.group_index], roll.finished, **rows)
    if samples is not None:
        seen: dict[int, int] = defaultdict(int)
        for i, g in enumerate(roll.group_index.tolist()):
            samples.append({"uid": probs[g].uid, "sample": seen[g], "completion": roll.texts[i],
                            "finished": bool(roll.finished[i]), "correct": bool(scored.correct[i])})
            seen[g] += 1
    levels = [p.level for p in probs]
    out: dict[str, Any] = summarize(scored.correct, roll.group_index, levels, cfg.k)
    if cfg.format_metrics:
        out |= format_rates(roll.texts, roll.finished, roll.group_index, levels)
    out["eval/len_mean"] = float(roll.lengths.mean())
    out["eval/truncated_frac"] = float((~roll.finished).mean())
    out["eval/n_problems"] = float(len(probs))
    if shown > 0:
        rows = run_samples.pick(len(roll.texts), shown)
        out[run_samples.ROW_KEYS["eval"]] = run_samples.records(roll, scored, probs, rows, bins=None,
                                                                n=roll.group_sizes)
    return out


def format_rates(texts: Sequence[str], finished: np.ndarray, group_index: np.ndarray,
                 levels: Sequence[int]) -> dict[str, float]:
    """The answer format apart from the answer, in % of completions, overall and per level: ``eval/boxed`` (a
    complete ``\\boxed{}`` present, whatever it holds), ``eval/finished`` (the end token emitted in time) and, overall,
    ``eval/final_box`` (finished with the answer in a final box: the format ``reward.format_weight`` rewards,
    :func:`gdro.grading.answers.final_box` over the whole completion)."""
    from gdro.grading.answers import final_box, last_boxed

    boxed = np.array([last_boxed(t) is not None for t in texts], dtype=bool)
    finished = np.asarray(finished, dtype=bool)
    final = np.array([final_box(t) for t in texts], dtype=bool) & finished
    row_level = np.asarray(levels)[np.asarray(group_index)]
    out = {"eval/boxed": 100.0 * float(boxed.mean()), "eval/finished": 100.0 * float(finished.mean()),
           "eval/final_box": 100.0 * float(final.mean())}
    for lv in sorted(set(row_level.tolist())):
        m = row_level == lv
        out[f"eval/boxed/level_{lv}"] = 100.0 * float(boxed[m].mean())
        out[f"eval/finished/level_{lv}"] = 100.0 * float(finished[m].mean())
    return out
