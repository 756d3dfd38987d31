"""Forward layouts: three ways to lay a micro-batch of rollout rows out for one forward pass, each ending in the same
kernel (:func:`gdro.policy.kernels.completion_token_logprobs`), each giving the same ``(B, L)`` log-probs of the
completion tokens at the sampling temperature up to float rounding.

- **rows** (:func:`completion_logprobs`): one sequence per row, as generation saw it: the prompt left-padded to the
  batch's longest prompt, the completion right-padded after it, positions counted from the first real token. The
  training log-probs therefore equal the sampler's (``RolloutBatch.logprobs``) up to float rounding.
- **shared prefix** (:func:`shared_prefix_logprobs`, ``OptimConfig.shared_prefix``): each distinct prompt runs
  once, its KV cache is expanded to the group's rows, and only the completions run against it (~1.6x faster on the
  toy step). HF activation checkpointing drops KV caches in training forwards (:func:`caches_dropped`).
- **packed** (:mod:`gdro.policy.packing`, ``OptimConfig.pack``): each group one span under a block attention mask.

Which layout a micro-batch takes is :class:`gdro.policy.forward.Forward`'s decision.
"""

from __future__ import annotations

import inspect
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
import torch

from gdro.common.rollouts import RolloutBatch, left_pad
from gdro.models.loading import autocast_context, cache_kwarg
from gdro.policy.kernels import LOGITS_CHUNK_ELEMENTS, completion_token_logprobs, split_head, vocab_size


@dataclass
class TokenBatch:
    """Padded tensors for a set of rollout rows: prompt left-padded, completion right-padded."""

    input_ids: torch.Tensor  # (B, P+L)
    attention_mask: torch.Tensor  # (B, P+L)
    position_ids: torch.Tensor  # (B, P+L)
    completion: torch.Tensor  # (B, L) completion token ids (pad after the end)
    mask: torch.Tensor  # (B, L) 1.0 on completion tokens
    prompt_width: int


def make_token_batch(roll: RolloutBatch, rows: Sequence[int], pad_id: int,
                     device: torch.device | str | None = None) -> TokenBatch:
    """The rows' token tensors, built on the CPU and moved to ``device`` (the model's; None = stay on the CPU)."""
    prompts = [roll.prompt_token_ids[roll.group_index[i]] for i in rows]
    comps = [roll.completion_ids[i] for i in rows]
    p_w, c_w = max(len(p) for p in prompts), max(max(len(c) for c in comps), 1)
    b = len(rows)
    ids = torch.full((b, p_w + c_w), pad_id, dtype=torch.long)
    att = torch.zeros((b, p_w + c_w), dtype=torch.long)
    for j, (p, c) in enumerate(zip(prompts, comps)):
        ids[j, p_w - len(p) : p_w] = torch.tensor(p, dtype=torch.long)
        ids[j, p_w : p_w + len(c)] = torch.tensor(c, dtype=torch.long)
        att[j, p_w - len(p) : p_w + len(c)] = 1
    ids, att = ids.to(device), att.to(device)
    pos = (att.cumsum(-1) - 1).clamp(min=0)
    return TokenBatch(ids, att, pos, ids[:, p_w:], att[:, p_w:].float(), p_w)


def completion_logprobs(model, tb: TokenBatch, temperature: float, *,
                        chunk_elements: int = LOGITS_CHUNK_ELEMENTS) -> torch.Tensor:
    """log π(y_t | x, y_<t) of each completion token at the sampling temperature, (B, L), on the model's device.

    ``tb`` should already be there (``make_token_batch(..., device=...)``); a batch elsewhere is copied over.
    While the batch's full float32 logits (``B × width × V``) fit in ``chunk_elements`` this is one forward and one
    log-softmax over them, as it always was. Otherwise (see :mod:`gdro.policy.kernels`) the backbone's hidden
    states go through the LM head and the log-softmax a chunk of real completion positions at a time; the values
    are the same up to float rounding, and padded positions (``tb.mask == 0``) hold 0 (a model without a separable
    head: its logits, chunked over every position). Gradients flow in both paths. The log-softmax is float32
    whatever the model's dtype (float64 for a float64 model).
    """
    dev = next(model.parameters()).device
    ids, att, pos = tb.input_ids.to(dev), tb.attention_mask.to(dev), tb.position_ids.to(dev)
    tokens, mask = tb.completion.to(dev), tb.mask.to(dev)
    b, width = ids.shape
    split = split_head(model)
    full = b * width * vocab_size(model, split) <= chunk_elements  # the model's own logits, prompt included
    with autocast_context(model):
        if full or split is None:
            states = model(input_ids=ids, attention_mask=att, position_ids=pos, use_cache=False).logits
            head = torch.nn.Identity()
            mask = mask if full else torch.ones_like(mask)  # no separable head: every position, as computed
        else:
            states = split[0](input_ids=ids, attention_mask=att, position_ids=pos, use_cache=False).last_hidden_state
            head = split[1]
        states = states[:, tb.prompt_width - 1 : -1]
        return completion_token_logprobs(head, states, tokens, mask, temperature, full=full,
                                         chunk_elements=chunk_elements)


def net_states(out, split) -> torch.Tensor:
    """What a forward hands the ending: the backbone's hidden states (a separable head), else the logits."""
    return out.last_hidden_state if split is not None else out.logits


@dataclass
class SharedTokenBatch:
    """A micro-batch laid out for :func:`shared_prefix_logprobs`: each distinct prompt once, left-padded, and each
    row's completion right-padded; ``row_prompt[j]`` is row ``j``'s prompt (an index into the prompts)."""

    prompt_ids: torch.Tensor  # (G, P)
    prompt_mask: torch.Tensor  # (G, P) 1 on prompt tokens
    prompt_len: torch.Tensor  # (G,)
    row_prompt: torch.Tensor  # (B,) long
    completion: torch.Tensor  # (B, L) completion token ids (pad after the end)
    mask: torch.Tensor  # (B, L) 1.0 on completion tokens


def make_shared_batch(roll: RolloutBatch, rows: Sequence[int], pad_id: int,
                      device: torch.device | str | None = None) -> SharedTokenBatch:
    """The rows' prompts (once each) and completions, built on the CPU and moved to ``device``."""
    rows = np.asarray(rows)
    groups, row_prompt = np.unique(roll.group_index[rows], return_inverse=True)
    prompts = [roll.prompt_token_ids[g] for g in groups]
    comps = [roll.completion_ids[i] for i in rows]
    c_w = max(max(len(c) for c in comps), 1)
    p_ids, p_att = left_pad(prompts, pad_id)
    c_ids = torch.full((len(rows), c_w), pad_id, dtype=torch.long)
    c_mask = torch.zeros((len(rows), c_w))
    for j, c in enumerate(comps):
        c_ids[j, : len(c)] = torch.tensor(c, dtype=torch.long)
        c_mask[j, : len(c)] = 1.0
    p_len = torch.tensor([len(p) for p in prompts], dtype=torch.long)
    row_prompt = torch.as_tensor(row_prompt.reshape(-1), dtype=torch.long)
    return SharedTokenBatch(p_ids.to(device), p_att.to(device), p_len.to(device), row_prompt.to(device),
                            c_ids.to(device), c_mask.to(device))


def caches_dropped(model) -> bool:
    """Whether a forward now would run without a KV cache: HF's activation checkpointing drops the cache in
    training mode while gradients are recorded, so the shared-prefix path cannot be used then."""
    if not (torch.is_grad_enabled() and model.training):
        return False
    return any(getattr(m, "gradient_checkpointing", False) is True for m in model.modules())


def shared_prefix_logprobs(model, sb: SharedTokenBatch, temperature: float, *,
                           chunk_elements: int = LOGITS_CHUNK_ELEMENTS) -> torch.Tensor:
    """The same ``(B, L)`` log-probs as :func:`completion_logprobs`, with each distinct prompt run once.

    A forward over the ``G`` prompts (left-padded, ``use_cache=True``) gives their KV cache and the last prompt
    position's hidden state (the logits of the first completion token); the cache is expanded to the ``B`` rows
    (``Cache.reorder_cache``, an ``index_select``: gradients flow back into the prompt encoding), and a second
    forward runs the completions (right-padded) against it, with the full attention mask (prompt + completion) and
    positions continuing each prompt's own length. Then the shared ending (:mod:`gdro.policy.kernels`).
    """
    from transformers import DynamicCache

    dev = next(model.parameters()).device
    p_ids, p_att = sb.prompt_ids.to(dev), sb.prompt_mask.to(dev)
    p_pos = (p_att.cumsum(-1) - 1).clamp(min=0)
    rows, tokens, mask = sb.row_prompt.to(dev), sb.completion.to(dev), sb.mask.to(dev)
    b, width = tokens.shape
    split = split_head(model)
    net = split[0] if split is not None else model
    kw = cache_kwarg(net)
    with autocast_context(model):
        cache = DynamicCache(config=model.config)
        extra = {}
        if split is None and "logits_to_keep" in inspect.signature(model.forward).parameters:
            extra["logits_to_keep"] = 1
        out = net(input_ids=p_ids, attention_mask=p_att, position_ids=p_pos, use_cache=True, **{kw: cache}, **extra)
        states = net_states(out, split)[:, -1:].index_select(0, rows)
        if width > 1:  # the last completion token predicts nothing: inputs are tokens 0 .. L-2
            cache.reorder_cache(rows)
            att = torch.cat([p_att.index_select(0, rows), mask[:, :-1].to(p_att.dtype)], dim=1)
            pos = sb.prompt_len.to(dev).index_select(0, rows)[:, None] + torch.arange(width - 1, device=dev)
            out = net(input_ids=tokens[:, :-1], attention_mask=att, position_ids=pos, use_cache=True, **{kw: cache})
            states = torch.cat([states, net_states(out, split)], dim=1)
        del cache, out
        head = split[1] if split is not None else torch.nn.Identity()
        full = b * width * vocab_size(model, split) <= chunk_elements
        return completion_token_logprobs(head, states, tokens, mask, temperature, full=full,
                                         chunk_elements=chunk_elements)
