"""How the policy side of a step runs, bound once: :class:`Forward` holds the forward settings (pad id, sampling
temperature, micro-batching by rows or tokens, shared prefix, packing) and the distribution strategy, and answers
two questions for the update: how a set of rows is cut into forward passes (:meth:`Forward.plan`), and what the
log-probs of a micro-batch are (:meth:`Forward.logprobs`, :meth:`Forward.logprobs_no_grad`). The update never
branches on a layout or on the number of processes; a new speed path is one more branch of
:meth:`Forward._layout_logprobs`.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np
import torch

from gdro.common.rollouts import RolloutBatch
from gdro.parallel.distributed import Dist
from gdro.parallel.fsdp import in_root, is_sharded
from gdro.policy.config import OptimConfig
from gdro.policy.layouts import (
    caches_dropped,
    completion_logprobs,
    make_shared_batch,
    make_token_batch,
    shared_prefix_logprobs,
)
from gdro.policy.microbatch import group_micro_batches, micro_batches
from gdro.policy.packing import PACK_MASK_ELEMENTS, make_packed_batch, packable, packed_logprobs


@dataclass(frozen=True)
class Plan:
    """A set of rows cut into forward passes: ``parts`` (micro-batches of row indices) and ``filler`` (one-row
    passes whose results are unused, so that every process runs as many passes as the busiest one: a sharded
    model's forwards are collectives; none in one process)."""

    parts: list[np.ndarray]
    filler: list[np.ndarray]


@dataclass(frozen=True)
class Forward:
    """The policy-side forward settings of a run, and how its passes are spread over processes (``dist``)."""

    pad_id: int
    temperature: float  # the sampling temperature: log-probs are those of the distribution that was sampled
    micro_batch_size: int = 128  # rows per forward (or the most rows, with micro_batch_tokens)
    micro_batch_tokens: int | None = None  # micro-batches by padded tokens (rows × width) instead of rows
    shared_prefix: bool = False  # each prompt once per micro-batch (KV cache), in whole groups
    pack: bool = False  # with shared_prefix: each group one span under a block mask where it fits
    dist: Dist = field(default_factory=Dist)

    @classmethod
    def bind(cls, optim: OptimConfig, *, pad_id: int, temperature: float, dist: Dist | None = None) -> Forward:
        """The forward of a run: ``optim``'s micro-batching and layout switches, the engine's pad id, the training
        sampling temperature."""
        return cls(pad_id, temperature, optim.micro_batch_size, optim.micro_batch_tokens, optim.shared_prefix,
                   optim.pack, dist if dist is not None else Dist())

    def plan(self, model, roll: RolloutBatch, rows: np.ndarray, pool: np.ndarray | None = None) -> Plan:
        """``rows`` cut into micro-batches (whole groups, longest first, with ``shared_prefix``), and the filler
        passes that keep a sharded ``model``'s collectives aligned (on a row of ``pool``, default ``rows``)."""
        cut = group_micro_batches if self.shared_prefix else micro_batches
        parts = cut(roll, np.asarray(rows), self.micro_batch_size, self.micro_batch_tokens)
        return Plan(parts, self.dist.filler(model, len(parts), rows if pool is None else pool))

    def logprobs(self, model, roll: RolloutBatch, part: np.ndarray) -> tuple[torch.Tensor, torch.Tensor]:
        """``(log-probs, mask)``, both ``(B, L)``, of a micro-batch's rows (with a gradient where one is recorded).
        A sharded model runs the whole computation inside one call of its root unit (:func:`in_root`)."""
        return in_root(model, self._layout_logprobs, model, roll, part, is_sharded(model))

    def logprobs_no_grad(self, model, roll: RolloutBatch, rows: np.ndarray) -> list[torch.Tensor]:
        """Per-row log-probs (unpadded 1-D tensors on the model's device, in the order of ``rows``), no gradient."""
        at = {int(i): k for k, i in enumerate(rows)}
        out: list[torch.Tensor | None] = [None] * len(rows)
        plan = self.plan(model, roll, rows)
        with torch.no_grad():
            for part in plan.parts:
                lp, _ = self.logprobs(model, roll, part)
                for j, i in enumerate(part):
                    out[at[int(i)]] = lp[j, : len(roll.completion_ids[i])]
            for part in plan.filler:
                self.logprobs(model, roll, part)
        return out

    def _layout_logprobs(self, model, roll: RolloutBatch, part: np.ndarray,
                         one_pass: bool) -> tuple[torch.Tensor, torch.Tensor]:
        """The layout each micro-batch takes: packed per group (``pack``, where :func:`packable` and the block mask
        fits in ``PACK_MASK_ELEMENTS``), shared-prefix KV cache, or one sequence per row."""
        device, shared, pad_id, temp = next(model.parameters()).device, self.shared_prefix, self.pad_id, self.temperature
        if shared and self.pack and packable(model, roll, part):
            pb = make_packed_batch(roll, part, pad_id, device=device)
            if pb.mask_elements <= PACK_MASK_ELEMENTS:  # else: the KV-cache path below
                return packed_logprobs(model, pb, temp), pb.mask
        # one_pass (a sharded model): one forward per micro-batch on every path, so processes issue the same gathers
        prompts_present = all(len(roll.prompt_token_ids[g]) for g in roll.group_index[part])
        if shared and not one_pass and not caches_dropped(model) and prompts_present:
            sb = make_shared_batch(roll, part, pad_id, device=device)
            return shared_prefix_logprobs(model, sb, temp), sb.mask
        tb = make_token_batch(roll, part, pad_id, device=device)
        return completion_logprobs(model, tb, temp), tb.mask
