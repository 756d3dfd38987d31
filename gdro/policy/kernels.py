"""Log-prob kernels shared by every forward layout: the float32 log-softmax at the sampling temperature, chunked
over positions when a micro-batch's full-vocabulary logits would not fit, and the one ending every layout uses.

Memory at a large vocabulary (Qwen3: 151,936 tokens). Full-vocabulary float32 logits of a ``(B, L)`` batch take
``4·B·L·V`` bytes (8 rows × 4,096 tokens: 20 GB), and autograd would keep them for the backward. So a layout
materialises the logits of a whole micro-batch only while they fit in ``LOGITS_CHUNK_ELEMENTS`` float32 values (the
tiny model always does: that path is the plain ``log_softmax(logits)``, bit for bit). Past that the LM head and the
log-softmax run on chunks of real (unpadded) completion positions, each under activation checkpointing
(``torch.utils.checkpoint``): only one chunk's logits exist at a time, in the forward and in the backward.

The policy's entropy comes from the same log-softmax (:func:`recording_entropy`): while the update records it, the
ending also returns each position's full-softmax entropy, detached, computed from the log-softmax it already holds a
chunk of positions at a time (``ENTROPY_CHUNK_ELEMENTS``), so no second forward and no further full-vocabulary tensor.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from contextvars import ContextVar

import torch
from torch.utils.checkpoint import checkpoint

LOGITS_CHUNK_ELEMENTS = 2**26  # float32 logits alive at once (256 MiB): ~440 positions at V = 151,936
# Causal LMs whose logits are exactly ``lm_head(base_model(...).last_hidden_state)`` (no soft-capping or scaling):
# only these take the chunked path; any other model computes full logits and chunks the log-softmax only.
SPLIT_HEAD_MODEL_TYPES = frozenset({"qwen2", "qwen3", "qwen2_moe", "qwen3_moe", "llama", "mistral"})
# the entropy's one temporary: at most a chunk of logits, whose float32 logits the log-softmax freed just before (so the
# peak stays the log-softmax's); large enough to be the allocator's own mapping, returned to the system when freed
ENTROPY_CHUNK_ELEMENTS = LOGITS_CHUNK_ELEMENTS

# while the update records the entropy: where each ending puts its (B, L) per-position entropy (recording_entropy)
_ENTROPY: ContextVar[list[torch.Tensor] | None] = ContextVar("gdro_entropy", default=None)


@contextmanager
def recording_entropy() -> Iterator[list[torch.Tensor]]:
    """While the block runs, each :func:`completion_token_logprobs` appends to the yielded list the ``(B, L)``
    full-softmax entropy (nats, at the sampling temperature) of the distribution at each position it computed,
    detached (0 at positions it did not compute). The log-probs, their graph and their gradients are unchanged."""
    out: list[torch.Tensor] = []
    token = _ENTROPY.set(out)
    try:
        yield out
    finally:
        _ENTROPY.reset(token)


def _entropy(logp: torch.Tensor) -> torch.Tensor:
    """``-sum_v p_v log p_v`` over the last dim of a log-softmax ``(..., V)``, without gradient, a few rows at a time
    (one temporary of at most ``ENTROPY_CHUNK_ELEMENTS`` values; ``0 log 0`` counts 0)."""
    with torch.no_grad():
        flat = logp.detach().reshape(-1, logp.shape[-1])
        out = flat.new_empty(flat.shape[0])
        rows = max(1, ENTROPY_CHUNK_ELEMENTS // max(flat.shape[1], 1))
        for s in range(0, flat.shape[0], rows):
            lp = flat[s : s + rows]
            out[s : s + rows] = -lp.exp().mul_(lp).nan_to_num_(nan=0.0).sum(-1)
        return out.view(logp.shape[:-1])


def _upcast(logits: torch.Tensor) -> torch.Tensor:
    """float32 logits (``.float()``: a no-op on float32), float64 ones kept as they are."""
    return logits if logits.dtype == torch.float64 else logits.float()


def _token_logprobs(head, hidden: torch.Tensor, tokens: torch.Tensor, temperature: float,
                    entropy: list[torch.Tensor] | None = None) -> torch.Tensor:
    """``log_softmax(head(hidden) / T)[token]`` in float32 for ``(n, H)`` hidden states and ``(n,)`` tokens.

    ``entropy``: an empty list receives the ``(n,)`` entropies (detached); once it holds them (the backward's
    recomputation under activation checkpointing) they are not computed again."""
    logp = torch.log_softmax(_upcast(head(hidden)) / temperature, dim=-1)  # the logits freed before the entropy
    if entropy is not None and not entropy:
        entropy.append(_entropy(logp))
    return logp.gather(-1, tokens.unsqueeze(-1)).squeeze(-1)


def chunked_token_logprobs(head, hidden: torch.Tensor, tokens: torch.Tensor, temperature: float,
                           chunk_elements: int = LOGITS_CHUNK_ELEMENTS,
                           entropy: list[torch.Tensor] | None = None) -> torch.Tensor:
    """``_token_logprobs`` over chunks of ``chunk_elements // V`` positions (at least one), ``(n,)``.

    When a gradient is recorded, each chunk runs under ``torch.utils.checkpoint``: autograd keeps only the chunk's
    hidden states, and the backward recomputes one chunk's logits at a time, so the logits of all positions never
    coexist. ``head`` is any module mapping ``(n, H)`` to ``(n, V)`` (an LM head, or identity on logits).
    ``entropy``: a list that receives the ``(n,)`` entropies of the positions (detached), from each chunk's own
    log-softmax.
    """
    vocab = getattr(head, "out_features", None) or hidden.shape[-1]
    rows = max(1, chunk_elements // vocab)
    grad = torch.is_grad_enabled() and (hidden.requires_grad or any(p.requires_grad for p in head.parameters()))
    parts, ents = [], []
    for s in range(0, hidden.shape[0], rows):
        h, t = hidden[s : s + rows], tokens[s : s + rows]
        box = None if entropy is None else []  # this chunk's entropies (filled by its forward only)
        if grad:
            # no RNG in the head: nothing to replay, so the RNG state is not saved per chunk
            parts.append(checkpoint(_token_logprobs, head, h, t, temperature, box, use_reentrant=False,
                                    preserve_rng_state=False))
        else:
            parts.append(_token_logprobs(head, h, t, temperature, box))
        ents += box or []
    if entropy is not None:
        entropy.append(torch.cat(ents) if ents else _upcast(hidden.new_zeros(0)))
    return torch.cat(parts) if parts else _upcast(hidden.new_zeros(0))


def split_head(model):
    """``(backbone, lm_head)`` when the model's logits are ``lm_head(backbone(...).last_hidden_state)``, else None."""
    cfg = getattr(model, "config", None)
    if getattr(cfg, "model_type", None) not in SPLIT_HEAD_MODEL_TYPES:
        return None
    backbone, head = getattr(model, "base_model", model), model.get_output_embeddings()
    if backbone is model or not isinstance(head, torch.nn.Linear):
        return None
    return backbone, head


def vocab_size(model, split) -> int:
    """The width of the model's logits."""
    return split[1].out_features if split is not None else model.config.vocab_size


def completion_token_logprobs(head, states: torch.Tensor, tokens: torch.Tensor, mask: torch.Tensor,
                              temperature: float, *, full: bool,
                              chunk_elements: int = LOGITS_CHUNK_ELEMENTS) -> torch.Tensor:
    """The ending every layout shares: ``(B, L)`` log-probs of ``tokens`` from ``states`` ``(B, L, H)``, the
    outputs at the positions that predict them (hidden states with the LM ``head``, or logits with an identity).

    ``full`` (the layout's logits fit in ``chunk_elements``): one head application and one float32 log-softmax over
    the whole batch; otherwise the head and the log-softmax run a chunk of real positions (``mask != 0``) at a time, and
    padded positions hold 0. With no real position at all the result stays attached to the graph (zero gradient).
    Under :func:`recording_entropy`, the positions' entropies ``(B, L)`` too (0 where none was computed).
    """
    sink = _ENTROPY.get()
    if full:
        logp = torch.log_softmax(_upcast(head(states)) / temperature, dim=-1)  # the logits freed before the entropy
        if sink is not None:
            sink.append(_entropy(logp))
        return logp.gather(-1, tokens.unsqueeze(-1)).squeeze(-1)
    real = mask != 0
    ent: list[torch.Tensor] | None = None if sink is None else []
    lp = chunked_token_logprobs(head, states[real], tokens[real], temperature, chunk_elements, entropy=ent)
    if sink is not None:
        sink.append(torch.zeros(tokens.shape, dtype=lp.dtype, device=tokens.device).index_put(
            real.nonzero(as_tuple=True), ent[0].to(lp.dtype)))
    out = torch.zeros(tokens.shape, dtype=lp.dtype, device=tokens.device)
    if lp.numel() == 0:  # no completion token at all: keep the output attached to the graph (zero gradient)
        return out + 0.0 * states.sum().to(lp.dtype)
    return out.index_put(real.nonzero(as_tuple=True), lp)
