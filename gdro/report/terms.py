"""Sweep report, the names its outputs share, each defined once (issue #49): every table and figure that uses one of
them takes it from here, so that one name means one thing across mechanism.md, paper_mechanism.md, compute.md,
paired.md, wave.md and the PNGs.

- **Two weighted standard errors against uniform.** ``WSE_BATCH`` ("WSE (batch σ)", mechanism.md and
  ``wse_ratio_batch.png``): ``difficulty/wse_ratio`` as the runs log it, Σ_b q_b σ_b / √n_b over the same at the
  batch's mean group size, σ_b = √(p_b(1 − p_b)) from bin b's realised accuracy *in that step's batch*.
  ``WSE_PAPER`` ("WSE (Eq. 33, the paper's)", paper_mechanism.md and ``wse_ratio.png``): the same ratio with σ̂_b
  estimated *once, offline*, one value per bin pooled over the sweep (gdro/report/paper_figures.py). Each output
  names the other and says why they differ (:data:`WSE_DIFFER`).
- **High bins** (:func:`high_bins`): the pass-rate bins whose pass-rate lower edge is ≥ ``HIGH_EDGE`` (0.5: accbin_5+
  of the paper's ten bins, "> 80% of the budget to accbin_5+"); the unseen bin is never one. paper_mechanism.md's
  snapshot table and ``macro_dynamics.png`` use this rule and state it (:func:`high_rule`).
- **Data share, budget share, rollouts per prompt** (``DATA_SHARE``, ``BUDGET_SHARE``, ``ROLLOUTS``): a bin's share
  of the batch's prompts; its share of the batch's generated rollouts; its mean rollouts per prompt (figure titles use
  these words, not the formulas' q_t(b), which the README uses for Prompt-GDRO's weights).
- **"at start"** (:func:`reach_cell`): a "tokens / steps to reach" figure of a run whose step-0 evaluation (before any
  training) already reaches the threshold, as when GRPO ends below its own start: x = 0, counted as reached, written
  "at start", never as 0.0k tokens or 0 steps.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence

import numpy as np

WSE_BATCH = "WSE (batch σ)"
WSE_PAPER = "WSE (Eq. 33, the paper's)"
WSE_DIFFER = ("They differ because the batch σ_b is measured on the step's own rollouts (a bin whose groups were all "
              "wrong or all right that step has σ_b = 0, so rollouts moved off it cost nothing), while Eq. 33's σ̂_b is "
              "one offline value per bin for the whole sweep, the same for every step and method.")
WSE_BATCH_NOTE = (f"{WSE_BATCH} ÷ uniform is `difficulty/wse_ratio` as logged: Σ_b q_b σ_b / √n_b over the same at "
                  f"the batch's mean group size, σ_b = √(p_b(1 − p_b)) from bin b's accuracy in that step's batch. "
                  f"paper_mechanism.md reports {WSE_PAPER} ÷ uniform, whose σ̂_b is estimated once, offline, "
                  f"pooled over the sweep. {WSE_DIFFER}")
WSE_PAPER_NOTE = (f"{WSE_PAPER} ÷ uniform uses the offline σ̂_b above. mechanism.md reports {WSE_BATCH} ÷ uniform "
                  f"(`difficulty/wse_ratio`, σ_b from each step's own batch). {WSE_DIFFER}")

DATA_SHARE = "data share"  # q_t(b): the bin's share of the batch's prompts
BUDGET_SHARE = "budget share"  # s_t(b) = q_t(b) n_b(t) / Σ_b' q_t(b') n_b'(t): its share of the generated rollouts
ROLLOUTS = "rollouts per prompt"  # n_b(t): the bin's mean rollouts per prompt

HIGH_EDGE = 0.5  # the high bins: pass-rate lower edge >= 0.5 (accbin_5+ of ten bins)

AT_START = "at start"


def reach_note(column: str, stat: str) -> str:
    """The sentence under a table whose ``column`` has a cell "at start" (:func:`reach_cell`)."""
    return (f"“{AT_START}” in {column}: the run's step-0 evaluation, before any training, already reaches the "
            f"threshold (x = 0, counted as reached and in the {stat}).")


def _pass_index(label: str) -> int | None:
    try:
        f = float(label)
    except ValueError:
        return None
    return int(f) if f.is_integer() and f >= 0 else None


def high_bins(bins: Sequence[str], edges: dict[str, tuple[float, float]], edge: float = HIGH_EDGE) -> list[str]:
    """The high bins among ``bins``: pass-rate bins whose interval's lower edge (``edges[b][0]``) is ≥ ``edge``."""
    return [b for b in bins if _pass_index(b) is not None and edges[b][0] >= edge - 1e-9]


def high_rule(high: Sequence[str], edge: float = HIGH_EDGE) -> str:
    """The rule as every output states it: ``high bins: pass-rate lower edge ≥ 0.5 (bins 5, 6, 7, 8, 9)``."""
    return f"high bins: pass-rate lower edge ≥ {edge:g} (bins {', '.join(high) or 'none'})"


def reach_cell(xs: Sequence[float | None], fmt: Callable[[float], str], stat: Callable = np.mean,
               starts: Sequence[bool] | None = None) -> str:
    """A "to reach" cell over runs (x None: never reached): ``stat`` of the reached x with reached/runs, the runs
    that reached it at start (``starts``, per run; default: x = 0, for x a step) counted; ``at start (k/n)`` when
    every run that reached it did so at its start."""
    if not xs:
        return "–"
    starts = [x == 0 for x in xs] if starts is None else list(starts)
    got = [(float(x), s) for x, s in zip(xs, starts) if x is not None and math.isfinite(x)]
    if not got:
        return f"never (0/{len(xs)})"
    start = sum(bool(s) for _, s in got)
    if start == len(got):
        return f"{AT_START} ({len(got)}/{len(xs)})"
    return (f"{fmt(float(stat([x for x, _ in got])))} ({len(got)}/{len(xs)}"
            + (f"; {start} {AT_START})" if start else ")"))
