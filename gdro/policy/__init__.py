"""The policy side of a GRPO step (paper Eq. 4–7), one job per file:

- ``update``: :func:`ppo_update` — epochs, mini-batches, gradient accumulation, clipping;
- ``config``: :class:`OptimConfig` — the optimiser, the schedule and the forward switches (conf/optim);
- ``forward``: :class:`Forward` — how the forwards run, bound once: its :meth:`~Forward.plan` and log-probs;
- ``layouts``: one sequence per row, and the shared-prompt KV cache; ``packing``: each group one packed span;
- ``kernels``: the float32 log-softmax, chunked at a large vocabulary, and the ending every layout shares;
- ``microbatch``: cutting rows into micro-batches, by rows or tokens, in whole groups.
"""

from gdro.models import autocast_context
from gdro.policy.config import OptimConfig
from gdro.policy.forward import Forward, Plan
from gdro.policy.kernels import (
    LOGITS_CHUNK_ELEMENTS,
    SPLIT_HEAD_MODEL_TYPES,
    _token_logprobs,
    chunked_token_logprobs,
    completion_token_logprobs,
    split_head,
)
from gdro.policy.layouts import (
    SharedTokenBatch,
    TokenBatch,
    caches_dropped,
    completion_logprobs,
    make_shared_batch,
    make_token_batch,
    shared_prefix_logprobs,
)
from gdro.policy.microbatch import group_micro_batches, micro_batches
from gdro.policy.packing import (
    PACK_ATTENTION,
    PACK_MASK_ELEMENTS,
    PackedBatch,
    make_packed_batch,
    packable,
    packed_logprobs,
)
from gdro.policy.update import ResponseLosses, ppo_update

__all__ = [
    "LOGITS_CHUNK_ELEMENTS", "PACK_ATTENTION", "PACK_MASK_ELEMENTS", "SPLIT_HEAD_MODEL_TYPES", "Forward",
    "OptimConfig", "PackedBatch", "Plan", "ResponseLosses", "SharedTokenBatch", "TokenBatch", "_token_logprobs",
    "autocast_context", "caches_dropped", "chunked_token_logprobs", "completion_logprobs",
    "completion_token_logprobs", "group_micro_batches", "make_packed_batch", "make_shared_batch",
    "make_token_batch", "micro_batches", "packable", "packed_logprobs", "ppo_update", "shared_prefix_logprobs",
    "split_head",
]
