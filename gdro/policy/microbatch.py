"""Micro-batches: how a set of rollout rows is cut for gradient accumulation — by rows or by a padded-token budget,
and (for the shared-prefix and packed layouts) in whole groups, longest first."""

from __future__ import annotations

import numpy as np

from gdro.common.rollouts import RolloutBatch


def micro_batches(roll: RolloutBatch, rows: np.ndarray, micro_batch_size: int,
                  micro_batch_tokens: int | None = None) -> list[np.ndarray]:
    """Split ``rows`` into micro-batches: ``micro_batch_size`` rows each in order (``micro_batch_tokens`` None), or
    greedily by padded tokens: rows longest first, each micro-batch as many as fit in ``rows × (longest prompt +
    longest completion) <= micro_batch_tokens`` (a row longer than the budget on its own forms its own batch)."""
    if micro_batch_tokens is None:
        return [rows[s : s + micro_batch_size] for s in range(0, len(rows), micro_batch_size)]
    p_len = np.array([len(roll.prompt_token_ids[roll.group_index[i]]) for i in rows], dtype=np.int64)
    c_len = np.array([len(roll.completion_ids[i]) for i in rows], dtype=np.int64)
    order = np.argsort(-(p_len + np.maximum(c_len, 1)), kind="stable")
    out: list[np.ndarray] = []
    cur: list[int] = []
    p_w = c_w = 0
    for k in order:
        p, c = max(p_w, int(p_len[k])), max(c_w, int(c_len[k]), 1)
        if cur and (len(cur) + 1) * (p + c) > micro_batch_tokens:
            out.append(rows[np.sort(cur)])
            cur, p, c = [], int(p_len[k]), max(int(c_len[k]), 1)
        cur.append(int(k))
        p_w, c_w = p, c
    if cur:
        out.append(rows[np.sort(cur)])
    return out


def group_micro_batches(roll: RolloutBatch, rows: np.ndarray, micro_batch_size: int,
                        micro_batch_tokens: int | None = None) -> list[np.ndarray]:
    """Split ``rows`` into micro-batches of whole groups (rows of one prompt) for the shared-prefix and packed
    layouts, under the same limits as :func:`micro_batches`: at most ``micro_batch_size`` rows, and with
    ``micro_batch_tokens`` at most that many padded tokens ``rows × (longest prompt + longest completion)``.

    Groups are taken longest first (prompt + longest completion), so groups of similar lengths share a micro-batch
    and little is padded; a group is moved whole to the next micro-batch when it does not fit in the current one,
    and split only when it does not fit in an empty one (a single row over the token budget goes alone). Rows
    inside a micro-batch are in that order, not the caller's: results are keyed by row index.
    """
    rows = np.asarray(rows)
    if len(rows) == 0:
        return []
    g_of = roll.group_index[rows]
    p_len = np.array([len(roll.prompt_token_ids[g]) for g in g_of], dtype=np.int64)
    c_len = np.array([max(len(roll.completion_ids[i]), 1) for i in rows], dtype=np.int64)
    by_group: dict[int, list[int]] = {}
    for k, g in enumerate(g_of):
        by_group.setdefault(int(g), []).append(k)
    groups = [sorted(ks, key=lambda k: -c_len[k]) for ks in by_group.values()]  # stable: longest completion first
    groups.sort(key=lambda ks: (-(p_len[ks[0]] + c_len[ks[0]]), -c_len[ks[0]]))

    def fits(n: int, p_w: int, c_w: int) -> bool:
        return n <= micro_batch_size and (micro_batch_tokens is None or n * (p_w + c_w) <= micro_batch_tokens)

    out: list[np.ndarray] = []
    cur: list[int] = []
    p_w = c_w = 0
    for ks in groups:
        gp, gc = int(p_len[ks[0]]), int(c_len[ks[0]])
        if cur and not fits(len(cur) + len(ks), max(p_w, gp), max(c_w, gc)) and fits(len(ks), gp, gc):
            out.append(rows[np.array(cur)])
            cur, p_w, c_w = [], 0, 0
        for k in ks:
            p, c = max(p_w, gp), max(c_w, int(c_len[k]))
            if cur and not fits(len(cur) + 1, p, c):
                out.append(rows[np.array(cur)])
                cur, p, c = [], gp, int(c_len[k])
            cur.append(k)
            p_w, c_w = p, c
    if cur:
        out.append(rows[np.array(cur)])
    return out
