"""Online difficulty classifier: a per-prompt moving pass-rate mapped to bins (paper §3.1, Eqs. 10–11).

Each prompt of the training pool keeps a window of its last ``H`` visits (``H = 0``: its whole history). A visit
records how many of the rollouts it drew were correct. The estimate is either

* ``any_correct`` (the official code): the mean over the available visits of the any-correct indicator
  ``c_s = 1{correct_s > 0}`` (paper Eq. 10 with "available history" for new prompts). Its scale is
  pass@(rollouts per visit), e.g. pass@4 with n = 4, not pass@8.
* ``unbiased_passk`` (the paper's ``k``): pass@k from all correct/total rollouts pooled over the window
  (``gdro.controllers.bins.passk_from_window``), meaningful even when a visit draws fewer than ``k`` rollouts.

The estimate is binned with edges (Eq. 11) and hysteresis ``delta`` relative to the stored bin (L227). Bins read
at step t come from history up to step t-1: ``bins()`` is a pure read and only ``update()``/``record()`` change them.
Never-seen prompts go to bin 0 (``unseen="hardest"``, the official code) or to an extra bin ``B``
(``unseen="separate"``).

Per-prompt history for the allocators and skips that need the *per-rollout* success rate p (Knapsack RL, GRESO), not
the pass@k-scale estimate the bins read: :meth:`success_rate` (a seen prompt's pooled correct / total over its newest
visits holding ≥ ``success_rollouts`` rollouts; a never-seen prompt's is the stated prior ``unseen_p``),
:meth:`seen`, and :meth:`zero_variance_streak` (how many of its latest visits in a row were all correct or all wrong).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from gdro.common.interfaces import BinSpec, PromptPool, StepFeedback
from gdro.controllers.batch_metrics import batch_mechanism
from gdro.controllers.bins import hysteresis_bins, make_edges, passk_from_window

__all__ = ["ESTIMATORS", "UNSEEN_POLICIES", "OnlineDifficultyClassifier"]

ESTIMATORS = ("any_correct", "unbiased_passk")
UNSEEN_POLICIES = ("hardest", "separate")
ROUND_DECIMALS = 12  # estimates are rounded so that exact rationals on an edge bin deterministically
PAPER_EDGES = (0.1, 0.2, 0.3, 0.4, 0.5, 0.6, 0.7, 0.8, 0.9)  # Appendix A: 10 bins, edges at 0.1, ..., 0.9


def _int_array(name: str, x: Any) -> np.ndarray:
    """``x`` as a 1-D int64 array; a ValueError naming ``name`` if it is not integer-valued."""
    arr = np.asarray(x)
    if arr.ndim != 1:
        raise ValueError(f"{name} must be a 1-D array, got shape {arr.shape}")
    if arr.dtype.kind in "iu":
        return arr.astype(np.int64, copy=False)
    if arr.dtype.kind == "f" and np.all(np.isfinite(arr)) and np.all(arr == np.round(arr)):
        return arr.astype(np.int64)
    if arr.size == 0:
        return arr.astype(np.int64)
    raise ValueError(f"{name} must be integer-valued, got dtype {arr.dtype}")


class OnlineDifficultyClassifier:
    """Per-prompt windowed pass-rate → difficulty bin, with hysteresis (paper Eqs. 10–11, L227).

    Args:
        edges: interior bin edges, strictly increasing inside (0, 1); default the paper's 0.1, ..., 0.9.
        num_bins: equal-width bins instead of ``edges``; exactly one of the two is set.
        window: H, the number of most recent visits kept per prompt; 0 keeps the whole history.
        estimator: ``"any_correct"`` (official code) or ``"unbiased_passk"`` (the paper's pass@k).
        k: the k of pass@k for ``unbiased_passk`` (paper: 8); unused by ``any_correct``.
        hysteresis: delta, the margin past a bin edge needed to change bin; < half the narrowest bin width.
        unseen: ``"hardest"`` (bin 0, official code) or ``"separate"`` (an extra bin with index B).
        unseen_p: the success rate :meth:`success_rate` states for a never-seen prompt (0.5: maximum variance).
        success_rollouts: :meth:`success_rate` pools a prompt's newest visits until they hold at least this many
            rollouts (Knapsack RL's official code: 16); 0 pools the whole window.
    """

    def __init__(
        self,
        edges: Sequence[float] | None = PAPER_EDGES,
        num_bins: int | None = None,
        window: int = 50,
        estimator: str = "any_correct",
        k: int = 8,
        hysteresis: float = 0.0,
        unseen: str = "separate",
        unseen_p: float = 0.5,
        success_rollouts: int = 16,
    ):
        self.full_edges = make_edges(edges, num_bins)
        if isinstance(window, bool) or int(window) != window or window < 0:
            raise ValueError(f"window must be an integer >= 0 (0 = whole history), got {window!r}")
        if estimator not in ESTIMATORS:
            raise ValueError(f"estimator must be one of {ESTIMATORS}, got {estimator!r}")
        if isinstance(k, bool) or int(k) != k or k < 1:
            raise ValueError(f"k must be an integer >= 1, got {k!r}")
        half = float(np.min(np.diff(self.full_edges))) / 2
        if not 0.0 <= hysteresis < half:
            raise ValueError(
                f"hysteresis must be >= 0 and < half the narrowest bin width ({half:.6g}), got {hysteresis!r}"
            )
        if unseen not in UNSEEN_POLICIES:
            raise ValueError(f"unseen must be one of {UNSEEN_POLICIES}, got {unseen!r}")
        if not 0.0 <= unseen_p <= 1.0:
            raise ValueError(f"unseen_p must be in [0, 1], got {unseen_p!r}")
        if isinstance(success_rollouts, bool) or int(success_rollouts) != success_rollouts or success_rollouts < 0:
            raise ValueError(f"success_rollouts must be an integer >= 0 (0 = the whole window), got {success_rollouts!r}")
        self.unseen_p, self.success_rollouts = float(unseen_p), int(success_rollouts)
        self.window, self.estimator, self.k = int(window), estimator, int(k)
        self.hysteresis, self.unseen = float(hysteresis), unseen
        self.num_pass_bins = len(self.full_edges) - 1  # B: bins over the pass-rate
        self._unseen_bin = 0 if unseen == "hardest" else self.num_pass_bins
        self._moved_frac = float("nan")
        self._batch_bins = np.zeros(0, dtype=np.int64)  # the last step's bins (as the controllers used them)
        self._batch_c = np.zeros(0, dtype=np.int64)  # ... and each of its prompts' correct rollouts / rollouts
        self._batch_n = np.zeros(0, dtype=np.int64)
        self._attach([])

    # ---------------------------------------------------------------- pool
    def bind(self, pool: PromptPool) -> None:
        """Attach the training pool (prompt id i is ``pool.uids[i]``) and clear all history."""
        self._attach(pool.uids)

    def _attach(self, uids: Sequence[str]) -> None:
        self.uids = [str(u) for u in uids]
        self._index = {u: i for i, u in enumerate(self.uids)}
        if len(self._index) != len(self.uids):
            dup = next(u for i, u in enumerate(self.uids) if self._index[u] != i)
            raise ValueError(f"uids must be unique, got duplicate {dup!r}")
        size, h = len(self.uids), max(self.window, 1)
        self._visits = np.zeros(size, dtype=np.int64)  # visits ever
        self._csum = np.zeros(size, dtype=np.int64)  # correct rollouts in the window
        self._tsum = np.zeros(size, dtype=np.int64)  # rollouts in the window
        self._hits = np.zeros(size, dtype=np.int64)  # visits with >= 1 correct in the window
        self._ring_c = np.zeros((size if self.window else 0, h), dtype=np.int32)  # ring buffers (window > 0)
        self._ring_t = np.zeros((size if self.window else 0, h), dtype=np.int32)
        self._bin = np.full(size, -1, dtype=np.int64)  # stored bin; -1 = never seen
        self._p = np.full(size, np.nan, dtype=np.float64)  # current estimate; NaN = never seen
        self._streak = np.zeros(size, dtype=np.int64)  # latest visits in a row that were all correct or all wrong

    @property
    def num_bins(self) -> int:
        """Number of bins: B, plus one when ``unseen="separate"``."""
        return self.num_pass_bins + (self.unseen == "separate")

    def bin_labels(self) -> list[str]:
        """``"0"``, ..., ``"B-1"`` (0 = hardest), then ``"unseen"`` when unseen prompts have their own bin."""
        return [str(b) for b in range(self.num_pass_bins)] + (["unseen"] if self.unseen == "separate" else [])

    def bin_spec(self) -> BinSpec:
        """The bins as the sampler and allocator see them: labels, and the first ``num_pass_bins`` pass-rate ordered."""
        return BinSpec(tuple(self.bin_labels()), self.num_pass_bins)

    def _ids(self, ids: Any) -> np.ndarray:
        ids = _int_array("ids", ids)
        if ids.size and (ids.min() < 0 or ids.max() >= len(self.uids)):
            raise ValueError(f"ids must index the bound pool of {len(self.uids)} prompts (call bind first)")
        return ids

    # ---------------------------------------------------------------- reads
    def bins(self, ids: np.ndarray) -> np.ndarray:
        """Current bins of ``ids`` (int64), from visits up to the last ``update``; no state change."""
        b = self._bin[self._ids(ids)]
        return np.where(b < 0, self._unseen_bin, b)

    def all_bins(self) -> np.ndarray:
        """Current bins of the whole pool (int64, length of the pool)."""
        return np.where(self._bin < 0, self._unseen_bin, self._bin)

    def passrate(self, ids: np.ndarray) -> np.ndarray:
        """Current pass-rate estimate of ``ids`` (NaN for never-seen prompts)."""
        return self._p[self._ids(ids)].copy()

    def seen(self, ids: np.ndarray) -> np.ndarray:
        """(G,) bool: whether each prompt has been visited."""
        return self._visits[self._ids(ids)] > 0

    def success_rate(self, ids: np.ndarray) -> np.ndarray:
        """(G,) per-rollout success rate p in [0, 1], never NaN: a seen prompt's correct / total pooled over its
        newest visits, taken whole and newest first, until they hold ≥ ``success_rollouts`` rollouts (0: its whole
        window; ``window: 0``: its whole history); a never-seen prompt's is ``unseen_p`` (the stated prior)."""
        ids = self._ids(ids)
        out = np.full(len(ids), self.unseen_p, dtype=np.float64)
        for j, i in enumerate(ids):
            v = int(self._visits[i])
            if v == 0:
                continue
            if not self.window or not self.success_rollouts:
                out[j] = self._csum[i] / self._tsum[i]
                continue
            newest_first = (v - 1 - np.arange(min(v, self.window))) % self.window
            t = self._ring_t[i, newest_first]
            take = int(np.searchsorted(np.cumsum(t), self.success_rollouts)) + 1  # visits until the sum reaches it
            out[j] = self._ring_c[i, newest_first[:take]].sum() / t[:take].sum()
        return out

    def zero_variance_streak(self, ids: np.ndarray) -> np.ndarray:
        """(G,) int64: how many of each prompt's latest visits in a row had all rollouts correct or all wrong (0 for
        a never-seen prompt, or one whose latest visit was mixed)."""
        return self._streak[self._ids(ids)].copy()

    # ---------------------------------------------------------------- update
    def update(self, feedback: StepFeedback) -> None:
        """Record the step: each prompt's visit with its correct rollouts out of the rollouts it drew."""
        self.record(feedback.ids, feedback.n_correct, feedback.n)
        self._batch_bins = np.asarray(feedback.bins, dtype=np.int64).copy()
        self._batch_c = np.asarray(feedback.n_correct, dtype=np.int64).copy()
        self._batch_n = np.asarray(feedback.n, dtype=np.int64).copy()

    def record(self, ids: np.ndarray, correct: np.ndarray, total: np.ndarray) -> None:
        """Record one visit per entry: ``correct`` of ``total`` rollouts right (ragged totals allowed).

        An id repeated within one call is processed in order, each visit updating estimate and bin in turn.
        """
        ids = self._ids(ids)
        correct, total = _int_array("correct", correct), _int_array("total", total)
        if not (correct.shape == total.shape == ids.shape):
            raise ValueError(
                f"correct and total must match ids {ids.shape}, got {correct.shape}, {total.shape}"
            )
        if total.size and total.min() < 1:
            raise ValueError(f"total must be >= 1 rollout per visit, got min {total.min()}")
        if correct.size and (correct.min() < 0 or np.any(correct > total)):
            raise ValueError("correct must satisfy 0 <= correct <= total per visit")
        if ids.size == 0:
            return
        rank = _occurrence_rank(ids)
        if rank.max() == 0:  # the usual case: every id once
            moved, had_bin = self._visit(ids, correct, total)
        else:
            moved, had_bin = 0, 0
            for r in range(int(rank.max()) + 1):  # one round per repeat; ids are unique within a round
                sel = rank == r
                m, h = self._visit(ids[sel], correct[sel], total[sel])
                moved, had_bin = moved + m, had_bin + h
        self._moved_frac = moved / had_bin if had_bin else float("nan")

    def _visit(self, ids: np.ndarray, c: np.ndarray, t: np.ndarray) -> tuple[int, int]:
        """One visit for each of the unique ``ids``: push into the window, re-estimate, re-bin (Eqs. 10–11)."""
        hit = (c > 0).astype(np.int64)
        if self.window:
            slot = self._visits[ids] % self.window
            full = self._visits[ids] >= self.window  # the slot holds the visit falling out of the window
            old_c, old_t = self._ring_c[ids, slot], self._ring_t[ids, slot]
            self._csum[ids] += c - np.where(full, old_c, 0)
            self._tsum[ids] += t - np.where(full, old_t, 0)
            self._hits[ids] += hit - np.where(full, old_c > 0, 0)
            self._ring_c[ids, slot], self._ring_t[ids, slot] = c, t
        else:
            self._csum[ids] += c
            self._tsum[ids] += t
            self._hits[ids] += hit
        self._visits[ids] += 1
        self._streak[ids] = np.where((c == 0) | (c == t), self._streak[ids] + 1, 0)
        p = self._estimate(ids)
        prev = self._bin[ids]
        new = hysteresis_bins(p, prev, self.full_edges, self.hysteresis)
        self._bin[ids], self._p[ids] = new, p
        had = prev >= 0
        return int(np.count_nonzero(had & (new != prev))), int(np.count_nonzero(had))

    def _estimate(self, ids: np.ndarray) -> np.ndarray:
        """Windowed estimate for seen ``ids``: any-correct mean (Eq. 10) or pooled unbiased pass@k.

        Rounded to 12 decimals: the estimates are rationals, and one exactly on an edge (e.g. pass@8 = 1/2 from
        16 rollouts with 1 correct) must land in the bin above, whatever float error the product carries.
        """
        if self.estimator == "unbiased_passk":
            p = passk_from_window(self._csum[ids], self._tsum[ids], self.k)
        else:
            count = np.minimum(self._visits[ids], self.window) if self.window else self._visits[ids]
            p = self._hits[ids] / count
        return np.round(p, ROUND_DECIMALS)

    # ---------------------------------------------------------------- logging
    def metrics(self) -> dict[str, float]:
        """Seen fraction, mean pass-rate over seen prompts, bin changes at the last update, pool count per bin; and
        the last step's batch as the controllers saw it, whatever the sampler: its share per bin
        (``difficulty/batch/<bin>``) and its mean pass-rate bin over the prompts already seen
        (``difficulty/batch_mean_bin``; bin 0 = hardest; NaN while the batch holds only unseen prompts)."""
        seen = self._bin >= 0
        out = {
            "difficulty/seen_frac": float(seen.mean()) if seen.size else 0.0,
            "difficulty/passrate_mean": float(self._p[seen].mean()) if seen.any() else float("nan"),
            "difficulty/moved_frac": self._moved_frac,
        }
        counts = np.bincount(self.all_bins(), minlength=self.num_bins)
        out |= {f"difficulty/pool/{lab}": float(n) for lab, n in zip(self.bin_labels(), counts)}
        batch = self._batch_bins
        if batch.size:
            share = np.bincount(batch, minlength=self.num_bins) / batch.size
            out |= {f"difficulty/batch/{lab}": float(v) for lab, v in zip(self.bin_labels(), share)}
            # unseen prompts are in bin 0 with unseen="hardest": then every prompt counts (no way to tell apart)
            rated = batch[batch < self.num_pass_bins]
            out["difficulty/batch_mean_bin"] = float(rated.mean()) if rated.size else float("nan")
            out |= batch_mechanism(batch, self._batch_c, self._batch_n, self.bin_labels())
        return out

    # ---------------------------------------------------------------- checkpointing
    def state_dict(self) -> dict[str, Any]:
        """JSON-friendly state of the seen prompts, keyed by uid (columns of plain lists).

        Window > 0: per-prompt visit lists ``correct`` / ``total`` in chronological order (oldest first).
        Window = 0: the cumulative ``correct`` / ``total`` / ``hits`` sums.
        """
        idx = np.flatnonzero(self._visits > 0)
        state: dict[str, Any] = {
            "full_edges": self.full_edges.tolist(),
            "window": self.window,
            "uids": [self.uids[i] for i in idx],
            "visits": self._visits[idx].tolist(),
            "bin": self._bin[idx].tolist(),
            "streak": self._streak[idx].tolist(),
        }
        if self.window:
            cs, ts = [], []
            for i in idx:
                n = min(int(self._visits[i]), self.window)
                order = (int(self._visits[i]) - n + np.arange(n)) % self.window
                cs.append(self._ring_c[i, order].tolist())
                ts.append(self._ring_t[i, order].tolist())
            state |= {"correct": cs, "total": ts}
        else:
            state |= {
                "correct": self._csum[idx].tolist(),
                "total": self._tsum[idx].tolist(),
                "hits": self._hits[idx].tolist(),
            }
        return state

    def load_state_dict(self, state: dict[str, Any]) -> None:
        """Restore from ``state_dict()`` into a classifier already bound to a pool holding those uids."""
        if not np.array_equal(np.asarray(state["full_edges"], dtype=np.float64), self.full_edges):
            raise ValueError(
                f"edges of the state {state['full_edges']} differ from this classifier's {self.full_edges}"
            )
        if int(state["window"]) != self.window:
            raise ValueError(
                f"window of the state ({state['window']}) differs from this classifier's ({self.window})"
            )
        missing = [u for u in state["uids"] if u not in self._index]
        if missing:
            raise ValueError(f"uids of the state are missing from the bound pool, e.g. {missing[0]!r}")
        self._attach(self.uids)
        idx = np.asarray([self._index[u] for u in state["uids"]], dtype=np.int64)
        if idx.size == 0:
            return
        self._visits[idx] = state["visits"]
        self._bin[idx] = state["bin"]
        self._streak[idx] = state["streak"]  # an older checkpoint's: filled in by gdro.run.migrations
        if self.window:
            for i, v, cs, ts in zip(idx, self._visits[idx], state["correct"], state["total"]):
                order = (int(v) - len(cs) + np.arange(len(cs))) % self.window
                self._ring_c[i, order], self._ring_t[i, order] = cs, ts
            self._csum[idx] = self._ring_c[idx].sum(axis=1)
            self._tsum[idx] = self._ring_t[idx].sum(axis=1)
            self._hits[idx] = (self._ring_c[idx] > 0).sum(axis=1)  # unfilled slots hold 0
        else:
            self._csum[idx], self._tsum[idx], self._hits[idx] = (
                state["correct"],
                state["total"],
                state["hits"],
            )
        self._p[idx] = self._estimate(idx)


def _occurrence_rank(ids: np.ndarray) -> np.ndarray:
    """For each entry, how many earlier entries carry the same id (0 for a first occurrence)."""
    order = np.argsort(ids, kind="stable")
    s = ids[order]
    start = np.r_[0, np.flatnonzero(s[1:] != s[:-1]) + 1]
    run_start = np.repeat(start, np.diff(np.r_[start, len(s)]))
    rank = np.empty_like(ids)
    rank[order] = np.arange(len(s)) - run_start
    return rank
