"""The rollout-engine protocol and the ragged batch it returns.

A batch is *ragged* from the start: prompt ``g`` receives ``group_sizes[g]`` rollouts, and every
rollout row carries ``group_index[i] = g``. Nothing downstream reshapes by a fixed ``n``.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Protocol, runtime_checkable

import numpy as np
import torch


@dataclass(frozen=True)
class SamplingParams:
    """Sampling parameters of one generation call.

    ``logprobs``: also return each sampled token's log-probability (``RolloutBatch.logprobs``). Off by default:
    training recomputes them in its own forward pass, and an engine may have to keep per-step logits to supply
    them (the HF engine holds one float32 ``(batch, vocab)`` tensor per generated token while ``generate`` runs).
    """

    temperature: float = 1.0
    top_p: float = 1.0
    top_k: int = 0  # 0 = no top-k truncation
    max_new_tokens: int = 16
    logprobs: bool = False  # return the sampled tokens' log-probs (RolloutBatch.logprobs); None when False

    def __post_init__(self) -> None:
        if not self.temperature > 0:
            raise ValueError(f"temperature must be > 0, got {self.temperature}")
        if not 0 < self.top_p <= 1:
            raise ValueError(f"top_p must be in (0, 1], got {self.top_p}")
        if self.top_k < 0:
            raise ValueError(f"top_k must be >= 0 (0 disables it), got {self.top_k}")
        if self.max_new_tokens < 1:
            raise ValueError(f"max_new_tokens must be >= 1, got {self.max_new_tokens}")
        if not isinstance(self.logprobs, bool):
            raise TypeError(f"logprobs must be true or false, got {self.logprobs!r}")


@dataclass
class RolloutBatch:
    """Ragged rollouts for ``G`` prompts, ``N = sum(group_sizes)`` completions.

    ``logprobs`` is ``None`` unless the call asked for them (``SamplingParams.logprobs=True``); then
    ``logprobs[i]`` are the sampled tokens' log-probabilities under the policy at the sampling
    temperature (``log_softmax(logits / T)``, before top-k/top-p truncation) — the same quantity the
    trainer recomputes (``gdro.policy.completion_logprobs``), so the two can be compared.
    """

    prompt_token_ids: list[list[int]]  # (G,) tokenised prompts (chat template applied)
    group_index: np.ndarray  # (N,) int64, prompt of each rollout
    completion_ids: list[list[int]]  # (N,) sampled tokens, including EOS when emitted
    logprobs: list[np.ndarray] | None  # (N,) float32 arrays, one value per completion token; None unless requested
    texts: list[str]  # (N,) decoded completions, special tokens removed
    finish_reasons: list[str]  # (N,) "stop" (EOS emitted) | "length" (hit max_new_tokens)

    @property
    def num_groups(self) -> int:
        return len(self.prompt_token_ids)

    @property
    def group_sizes(self) -> np.ndarray:
        return np.bincount(self.group_index, minlength=self.num_groups)

    @property
    def finished(self) -> np.ndarray:
        return np.array([r == "stop" for r in self.finish_reasons], dtype=bool)

    @property
    def lengths(self) -> np.ndarray:
        return np.array([len(c) for c in self.completion_ids], dtype=np.int64)

    def __len__(self) -> int:
        return len(self.completion_ids)


def concat_rollouts(batches: Sequence[RolloutBatch]) -> RolloutBatch:
    """The batches' groups one after another (group indices shifted), as one batch."""
    if not batches:
        raise ValueError("concat_rollouts needs at least one batch")
    if len(batches) == 1:
        return batches[0]
    offsets = np.cumsum([0] + [b.num_groups for b in batches[:-1]])
    with_lp = [b.logprobs is not None for b in batches]
    if any(with_lp) and not all(with_lp):
        raise ValueError("concat_rollouts: some batches carry log-probs and some do not")
    return RolloutBatch(
        prompt_token_ids=[p for b in batches for p in b.prompt_token_ids],
        group_index=np.concatenate([b.group_index + o for b, o in zip(batches, offsets)]).astype(np.int64),
        completion_ids=[c for b in batches for c in b.completion_ids],
        logprobs=[x for b in batches for x in b.logprobs] if all(with_lp) else None,
        texts=[t for b in batches for t in b.texts],
        finish_reasons=[r for b in batches for r in b.finish_reasons],
    )


@runtime_checkable
class Generator(Protocol):
    """What the trainer and the evaluator need from a rollout engine (built by ``gdro.rollout.make_engine``).

    ``isinstance(engine, Generator)`` checks that the members exist (not their signatures).
    """

    pad_id: int  # the token id that pads prompts and completions in the trainer's token batches

    def generate(
        self, prompts: Sequence[str], n: Sequence[int], *, seed: int, sampling: SamplingParams
    ) -> RolloutBatch:
        """Sample ``n[g]`` completions for ``prompts[g]`` (``n[g]`` may be 0), deterministically in ``seed``.

        ``sampling.logprobs`` only adds ``RolloutBatch.logprobs``; the sampled tokens do not depend on it.
        """
        ...

    def sync_weights(self, model: torch.nn.Module) -> None:
        """Make the engine sample from ``model``'s current weights."""
        ...


def expand_groups(n: Sequence[int]) -> np.ndarray:
    """``group_index`` for per-prompt counts ``n``: prompt g repeated n[g] times, in prompt order."""
    counts = np.asarray(n, dtype=np.int64)
    if counts.ndim != 1:
        raise ValueError(f"n must be a 1-D sequence of per-prompt rollout counts, got shape {counts.shape}")
    if (counts < 0).any():
        raise ValueError(f"n must be >= 0 for every prompt, got min {counts.min()}")
    return np.repeat(np.arange(len(counts), dtype=np.int64), counts)


def left_pad(rows: Sequence[Sequence[int]], pad_id: int) -> tuple[torch.Tensor, torch.Tensor]:
    """Left-padded ``input_ids`` and ``attention_mask`` for token rows of unequal length."""
    width = max(len(r) for r in rows)
    ids = torch.full((len(rows), width), pad_id, dtype=torch.long)
    mask = torch.zeros((len(rows), width), dtype=torch.long)
    for i, r in enumerate(rows):
        if len(r):
            ids[i, width - len(r) :] = torch.tensor(r, dtype=torch.long)
            mask[i, width - len(r) :] = 1
    return ids, mask


def close_engine(engine: object) -> None:
    """Release what an engine holds, at a known point (vLLM: its in-process engine; the HF engine holds nothing)."""
    close = getattr(engine, "close", None)
    if callable(close):
        close()
