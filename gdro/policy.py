"""The policy side of a GRPO step: recompute log-probs, then clipped-surrogate updates (paper Eq. 4–7).

Sequences are laid out as generation saw them: the prompt left-padded to the batch's longest prompt,
the completion right-padded after it, positions counted from the first real token. The training
log-probs therefore equal the sampler's (``RolloutBatch.logprobs``) up to float rounding.

Memory at a large vocabulary (Qwen3: 151,936 tokens). Full-vocabulary float32 logits of a ``(B, L)`` batch take
``4·B·L·V`` bytes (8 rows × 4,096 tokens: 20 GB), and autograd would keep them for the backward. So
``completion_logprobs`` materialises the logits of a whole micro-batch only while they fit in
``LOGITS_CHUNK_ELEMENTS`` float32 values (the tiny model always does: that path is the plain
``log_softmax(model(...).logits)``, bit for bit). Past that it runs the model's backbone, then the LM head and the
log-softmax on chunks of completion positions, each under activation checkpointing (``torch.utils.checkpoint``):
only one chunk's logits exist at a time, in the forward and in the backward, and only real (unpadded) completion
positions are computed. Micro-batches may be formed by a token budget (``OptimConfig.micro_batch_tokens``) so that
long responses do not run out of memory; gradient accumulation stays exact because the loss divides by
mini-batch-wide counts.

Shared prompt prefix (``OptimConfig.shared_prefix``, issue #11). A group's rollouts share their prompt, which is
most of each sequence on short-answer tasks. With the option on, micro-batches hold whole groups
(``group_micro_batches``: longest first, under the same row and token limits, a group split only when it cannot fit
alone), and ``shared_prefix_logprobs`` runs each distinct prompt once, expands its KV cache to the group's rows and
runs only the completions against it: the same log-probs and gradients up to float rounding (~1e-6 in float32),
about 1.6x faster for the reference pass and the update on the toy step (``scripts/bench_shared_prefix.py``). HF
activation checkpointing drops KV caches in training forwards, so a checkpointed policy's update falls back to one
sequence per row (its no-grad passes still share).
"""

from __future__ import annotations

import inspect
import time
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
import torch
from torch.utils.checkpoint import checkpoint

from gdro.loss import LossConfig, grpo_loss, per_response_mean
from gdro.models import autocast_context, cache_kwarg
from gdro.rollout.base import RolloutBatch, left_pad


@dataclass(frozen=True)
class OptimConfig:
    """Optimiser and update schedule (conf/optim/*.yaml)."""

    lr: float = 1e-4
    weight_decay: float = 0.01
    beta1: float = 0.9
    beta2: float = 0.999
    eps: float = 1e-8
    warmup_steps: int = 10
    grad_clip: float = 1.0  # max global grad norm; 0 disables clipping
    ppo_epochs: int = 1
    mini_batches: int = 1  # optimiser steps per epoch; rollouts are split into this many mini-batches
    micro_batch_size: int = 128  # rollouts per forward/backward (gradient accumulation)
    micro_batch_tokens: int | None = None  # if set: micro-batches by padded tokens (rows × width) instead of rows
    skip_zero_adv: bool = True  # exact speed-up when beta_kl = 0: rows with A = 0 add no gradient
    shared_prefix: bool = True  # encode each prompt once per micro-batch and reuse its KV cache for its group's rows
    pack: bool = True  # with shared_prefix: a group's completions packed after its prompt in one sequence where it fits

    def __post_init__(self) -> None:
        checks = [
            ("lr", self.lr > 0, "must be > 0"),
            ("weight_decay", self.weight_decay >= 0, "must be >= 0"),
            ("beta1", 0 <= self.beta1 < 1, "must be in [0, 1)"),
            ("beta2", 0 <= self.beta2 < 1, "must be in [0, 1)"),
            ("eps", self.eps > 0, "must be > 0"),
            ("warmup_steps", self.warmup_steps >= 0, "must be >= 0"),
            ("grad_clip", self.grad_clip >= 0, "must be >= 0 (0 disables clipping)"),
            ("ppo_epochs", self.ppo_epochs >= 1, "must be >= 1"),
            ("mini_batches", self.mini_batches >= 1, "must be >= 1"),
            ("micro_batch_size", self.micro_batch_size >= 1, "must be >= 1"),
            ("micro_batch_tokens", self.micro_batch_tokens is None or self.micro_batch_tokens >= 1,
             "must be null or >= 1"),
        ]
        for key, ok, why in checks:
            if not ok:
                raise ValueError(f"{key} {why}, got {getattr(self, key)}")
        for key in ("shared_prefix", "pack"):
            if not isinstance(getattr(self, key), bool):
                raise TypeError(f"{key} must be true or false, got {getattr(self, key)!r}")

    def make(self, params) -> tuple[torch.optim.Optimizer, torch.optim.lr_scheduler.LambdaLR]:
        opt = torch.optim.AdamW(
            params, lr=self.lr, betas=(self.beta1, self.beta2), eps=self.eps, weight_decay=self.weight_decay
        )
        warm = self.warmup_steps
        sched = torch.optim.lr_scheduler.LambdaLR(opt, lambda s: min(1.0, (s + 1) / warm) if warm else 1.0)
        return opt, sched


@dataclass(frozen=True)
class ResponseLosses:
    """Per-response token means ``(N,)`` from the first epoch: clipped PG loss (with the advantages the update
    used) and KL to π_ref (zeros without a reference)."""

    pg: np.ndarray
    kl: np.ndarray


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


LOGITS_CHUNK_ELEMENTS = 2**26  # float32 logits alive at once (256 MiB): ~440 positions at V = 151,936
# Causal LMs whose logits are exactly ``lm_head(base_model(...).last_hidden_state)`` (no soft-capping or scaling):
# only these take the chunked path; any other model computes full logits and chunks the log-softmax only.
SPLIT_HEAD_MODEL_TYPES = frozenset({"qwen2", "qwen3", "qwen2_moe", "qwen3_moe", "llama", "mistral"})


def _upcast(logits: torch.Tensor) -> torch.Tensor:
    """float32 logits (``.float()``: a no-op on float32), float64 ones kept as they are."""
    return logits if logits.dtype == torch.float64 else logits.float()


def _token_logprobs(head, hidden: torch.Tensor, tokens: torch.Tensor, temperature: float) -> torch.Tensor:
    """``log_softmax(head(hidden) / T)[token]`` in float32 for ``(n, H)`` hidden states and ``(n,)`` tokens."""
    logits = _upcast(head(hidden)) / temperature
    return torch.log_softmax(logits, dim=-1).gather(-1, tokens.unsqueeze(-1)).squeeze(-1)


def chunked_token_logprobs(head, hidden: torch.Tensor, tokens: torch.Tensor, temperature: float,
                           chunk_elements: int = LOGITS_CHUNK_ELEMENTS) -> torch.Tensor:
    """``_token_logprobs`` over chunks of ``chunk_elements // V`` positions (at least one), ``(n,)``.

    When a gradient is recorded, each chunk runs under ``torch.utils.checkpoint``: autograd keeps only the chunk's
    hidden states, and the backward recomputes one chunk's logits at a time, so the logits of all positions never
    coexist. ``head`` is any module mapping ``(n, H)`` to ``(n, V)`` (an LM head, or identity on logits).
    """
    vocab = getattr(head, "out_features", None) or hidden.shape[-1]
    rows = max(1, chunk_elements // vocab)
    grad = torch.is_grad_enabled() and (hidden.requires_grad or any(p.requires_grad for p in head.parameters()))
    parts = []
    for s in range(0, hidden.shape[0], rows):
        h, t = hidden[s : s + rows], tokens[s : s + rows]
        if grad:
            # no RNG in the head: nothing to replay, so the RNG state is not saved per chunk
            parts.append(checkpoint(_token_logprobs, head, h, t, temperature, use_reentrant=False,
                                    preserve_rng_state=False))
        else:
            parts.append(_token_logprobs(head, h, t, temperature))
    return torch.cat(parts) if parts else _upcast(hidden.new_zeros(0))


def _split_head(model):
    """``(backbone, lm_head)`` when the model's logits are ``lm_head(backbone(...).last_hidden_state)``, else None."""
    cfg = getattr(model, "config", None)
    if getattr(cfg, "model_type", None) not in SPLIT_HEAD_MODEL_TYPES:
        return None
    backbone, head = getattr(model, "base_model", model), model.get_output_embeddings()
    if backbone is model or not isinstance(head, torch.nn.Linear):
        return None
    return backbone, head


def completion_logprobs(model, tb: TokenBatch, temperature: float, *,
                        chunk_elements: int = LOGITS_CHUNK_ELEMENTS) -> torch.Tensor:
    """log π(y_t | x, y_<t) of each completion token at the sampling temperature, (B, L), on the model's device.

    ``tb`` should already be there (``make_token_batch(..., device=...)``); a batch elsewhere is copied over.
    While the batch's full float32 logits (``B × width × V``) fit in ``chunk_elements`` this is one forward and one
    log-softmax over them, as it always was. Otherwise (see the module docstring) the backbone's hidden states go
    through the LM head and the log-softmax a chunk of real completion positions at a time; the values are the
    same up to float rounding, and padded positions (``tb.mask == 0``) hold 0. Gradients flow in both paths.
    The log-softmax is float32 whatever the model's dtype (float64 for a float64 model).
    """
    dev = next(model.parameters()).device
    ids, att, pos = tb.input_ids.to(dev), tb.attention_mask.to(dev), tb.position_ids.to(dev)
    tokens = tb.completion.to(dev)
    b, width = ids.shape
    split = _split_head(model)
    vocab = split[1].out_features if split is not None else model.config.vocab_size
    with autocast_context(model):
        if b * width * vocab <= chunk_elements or split is None:
            logits = model(input_ids=ids, attention_mask=att, position_ids=pos, use_cache=False).logits
            logits = logits[:, tb.prompt_width - 1 : -1]
            if b * width * vocab <= chunk_elements:
                return torch.log_softmax(_upcast(logits) / temperature, dim=-1).gather(-1, tokens.unsqueeze(-1)).squeeze(-1)
            flat = chunked_token_logprobs(torch.nn.Identity(), logits.reshape(-1, vocab), tokens.reshape(-1),
                                          temperature, chunk_elements)
            return flat.view(b, -1)
        backbone, head = split
        hidden = backbone(input_ids=ids, attention_mask=att, position_ids=pos, use_cache=False).last_hidden_state
        hidden = hidden[:, tb.prompt_width - 1 : -1]
        real = tb.mask.to(dev) != 0
        lp = chunked_token_logprobs(head, hidden[real], tokens[real], temperature, chunk_elements)
    out = torch.zeros(tokens.shape, dtype=lp.dtype, device=dev)
    if lp.numel() == 0:  # no completion token at all: keep the output attached to the graph (zero gradient)
        return out + 0.0 * hidden.sum().to(lp.dtype)
    return out.index_put(real.nonzero(as_tuple=True), lp)


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


# ------------------------------------------------------------------------------------------ shared prompt prefix
def group_micro_batches(roll: RolloutBatch, rows: np.ndarray, micro_batch_size: int,
                        micro_batch_tokens: int | None = None) -> list[np.ndarray]:
    """Split ``rows`` into micro-batches of whole groups (rows of one prompt) for :func:`shared_prefix_logprobs`,
    under the same limits as :func:`micro_batches`: at most ``micro_batch_size`` rows, and with
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
    positions continuing each prompt's own length. float32 log-softmax at ``temperature``, under
    ``autocast_context(model)``; past ``chunk_elements`` logits the LM head and log-softmax run on chunks of real
    positions as in :func:`completion_logprobs`. Padded positions hold 0 on the chunked path, finite values else.
    """
    from transformers import DynamicCache

    dev = next(model.parameters()).device
    p_ids, p_att = sb.prompt_ids.to(dev), sb.prompt_mask.to(dev)
    p_pos = (p_att.cumsum(-1) - 1).clamp(min=0)
    rows, tokens, mask = sb.row_prompt.to(dev), sb.completion.to(dev), sb.mask.to(dev)
    b, width = tokens.shape
    split = _split_head(model)
    vocab = split[1].out_features if split is not None else model.config.vocab_size
    net = split[0] if split is not None else model
    kw = cache_kwarg(net)
    with autocast_context(model):
        cache = DynamicCache(config=model.config)
        extra = {}
        if split is None and "logits_to_keep" in inspect.signature(model.forward).parameters:
            extra["logits_to_keep"] = 1
        out = net(input_ids=p_ids, attention_mask=p_att, position_ids=p_pos, use_cache=True, **{kw: cache}, **extra)
        states = (out.last_hidden_state if split is not None else out.logits)[:, -1:].index_select(0, rows)
        if width > 1:  # the last completion token predicts nothing: inputs are tokens 0 .. L-2
            cache.reorder_cache(rows)
            att = torch.cat([p_att.index_select(0, rows), mask[:, :-1].to(p_att.dtype)], dim=1)
            pos = sb.prompt_len.to(dev).index_select(0, rows)[:, None] + torch.arange(width - 1, device=dev)
            out = net(input_ids=tokens[:, :-1], attention_mask=att, position_ids=pos, use_cache=True, **{kw: cache})
            states = torch.cat([states, out.last_hidden_state if split is not None else out.logits], dim=1)
        del cache, out
        head = split[1] if split is not None else torch.nn.Identity()
        if b * width * vocab <= chunk_elements:
            logits = _upcast(head(states)) / temperature
            return torch.log_softmax(logits, dim=-1).gather(-1, tokens.unsqueeze(-1)).squeeze(-1)
        real = mask != 0
        lp = chunked_token_logprobs(head, states[real], tokens[real], temperature, chunk_elements)
    res = torch.zeros(tokens.shape, dtype=lp.dtype, device=dev)
    if lp.numel() == 0:  # no completion token at all: keep the output attached to the graph (zero gradient)
        return res + 0.0 * states.sum().to(lp.dtype)
    return res.index_put(real.nonzero(as_tuple=True), lp)


# Packing limit: the block mask of a packed micro-batch (groups × width²) in elements; past it, the KV-cache path.
PACK_MASK_ELEMENTS = 2**24
PACK_ATTENTION = frozenset({"sdpa"})  # attention implementations that take a custom 4D boolean mask as given


@dataclass
class PackedBatch:
    """A micro-batch laid out for :func:`packed_logprobs`. Each group becomes one span: its prompt, then each of its
    rows' completions (all tokens but the last, which predicts nothing); spans are packed into sequences of the
    longest span's width (first fit, longest first), so several short groups share one sequence.

    ``group`` and ``segment`` say whose each position is (``group``: the span's index, -1 on padding; ``segment``: 0
    for the prompt, ``j + 1`` for row ``j``'s completion); ``source[j, t]`` is the flat position
    (``sequence × width + offset``) whose output predicts completion token ``t`` of row ``j``: its prompt's last
    position for ``t = 0``, the row's own token ``t - 1`` after that."""

    input_ids: torch.Tensor  # (S, W)
    position_ids: torch.Tensor  # (S, W)
    group: torch.Tensor  # (S, W) long
    segment: torch.Tensor  # (S, W) long
    source: torch.Tensor  # (B, L) long
    completion: torch.Tensor  # (B, L) completion token ids (pad after the end)
    mask: torch.Tensor  # (B, L) 1.0 on completion tokens

    @property
    def mask_elements(self) -> int:
        """Elements of :meth:`attention_mask`: sequences × width²."""
        n_seq, width = self.input_ids.shape
        return n_seq * width * width

    def attention_mask(self) -> torch.Tensor:
        """``(S, 1, W, W)`` boolean, True where query position q may attend to key position k: causal (k <= q), in
        the same span, and within the prompt or from a completion to the prompt and to its own earlier tokens; a
        padding position attends only to itself (no query row is empty)."""
        grp, seg = self.group, self.segment
        width = seg.shape[1]
        idx = torch.arange(width, device=seg.device)
        causal = idx[None, :] <= idx[:, None]
        same = (grp[:, :, None] == grp[:, None, :]) & (grp[:, :, None] >= 0)
        sq, sk = seg[:, :, None], seg[:, None, :]
        allowed = causal & same & ((sk == 0) | (sk == sq))
        return (allowed | torch.eye(width, dtype=torch.bool, device=seg.device))[:, None]


def _pack_spans(lengths: Sequence[int]) -> tuple[list[list[int]], int]:
    """First-fit decreasing of spans into sequences of the longest span's width: ``(spans per sequence, width)``."""
    width = max(lengths, default=0)
    bins: list[list[int]] = []
    free: list[int] = []
    for k in sorted(range(len(lengths)), key=lambda k: -lengths[k]):
        for b, room in enumerate(free):
            if lengths[k] <= room:
                bins[b].append(k)
                free[b] -= lengths[k]
                break
        else:
            bins.append([k])
            free.append(width - lengths[k])
    return bins, width


def make_packed_batch(roll: RolloutBatch, rows: Sequence[int], pad_id: int,
                      device: torch.device | str | None = None) -> PackedBatch:
    """The rows packed by group (see :class:`PackedBatch`), built on the CPU and moved to ``device``."""
    rows = np.asarray(rows)
    groups, row_group = np.unique(roll.group_index[rows], return_inverse=True)
    row_group = row_group.reshape(-1)
    spans = [list(roll.prompt_token_ids[g]) for g in groups]
    pos = [list(range(len(t))) for t in spans]
    seg = [[0] * len(t) for t in spans]
    comps = [roll.completion_ids[i] for i in rows]
    c_w = max(max(len(c) for c in comps), 1)
    where = np.zeros((len(rows), c_w, 2), dtype=np.int64)  # (span, offset in the span) of each source position
    for j, c in enumerate(comps):
        k = int(row_group[j])
        p_len, start = len(roll.prompt_token_ids[groups[k]]), len(spans[k])
        if len(c):
            where[j, 0] = (k, p_len - 1)
            where[j, 1 : len(c), 0] = k
            where[j, 1 : len(c), 1] = start + np.arange(len(c) - 1)
        spans[k].extend(c[:-1])
        pos[k].extend(range(p_len, p_len + len(c) - 1))
        seg[k].extend([j + 1] * (len(c) - 1))
    bins, width = _pack_spans([len(t) for t in spans])
    n_seq = len(bins)
    # numpy buffers filled span by span, one tensor each at the end (per-span torch.tensor calls cost ~5 ms a batch)
    ids = np.full((n_seq, width), pad_id, dtype=np.int64)
    position = np.zeros((n_seq, width), dtype=np.int64)
    group = np.full((n_seq, width), -1, dtype=np.int64)
    segment = np.full((n_seq, width), -1, dtype=np.int64)
    base = np.zeros(len(spans), dtype=np.int64)  # flat index of each span's first position
    for b, members in enumerate(bins):
        at = 0
        for k in members:
            n = len(spans[k])
            ids[b, at : at + n] = spans[k]
            position[b, at : at + n] = pos[k]
            segment[b, at : at + n] = seg[k]
            group[b, at : at + n] = k
            base[k] = b * width + at
            at += n
    c_ids = np.full((len(rows), c_w), pad_id, dtype=np.int64)
    c_mask = np.zeros((len(rows), c_w), dtype=np.float32)
    for j, c in enumerate(comps):
        c_ids[j, : len(c)] = c
        c_mask[j, : len(c)] = 1.0
    source = base[where[..., 0]] + where[..., 1]
    return PackedBatch(*(torch.from_numpy(a).to(device) for a in (ids, position, group, segment, source, c_ids, c_mask)))


def packable(model, roll: RolloutBatch, rows: Sequence[int]) -> bool:
    """Whether :func:`packed_logprobs` can run ``rows`` at all: an attention that takes a custom 4D mask (SDPA) and
    every prompt non-empty. (Whether the batch's block mask is small enough is :attr:`PackedBatch.mask_elements`.)"""
    if getattr(getattr(model, "config", None), "_attn_implementation", None) not in PACK_ATTENTION:
        return False
    return all(len(roll.prompt_token_ids[g]) for g in roll.group_index[np.asarray(rows)])


def packed_logprobs(model, pb: PackedBatch, temperature: float, *,
                    chunk_elements: int = LOGITS_CHUNK_ELEMENTS) -> torch.Tensor:
    """The same ``(B, L)`` log-probs as :func:`completion_logprobs`, with each group as ONE span of a sequence.

    A group's prompt is followed by each of its rows' completions; a block attention mask
    (:meth:`PackedBatch.attention_mask`) lets each completion see its prompt and its own earlier tokens only, and
    positions restart after the prompt for every row, so each token sees exactly what it saw in its own
    prompt+completion sequence. One forward, no KV cache (so it also runs under activation checkpointing), each
    prompt once, and padding only where spans do not fill a sequence. float32 log-softmax at ``temperature`` under
    ``autocast_context(model)``; past ``chunk_elements`` logits the LM head and log-softmax run on chunks of real
    positions. Padded completion positions hold 0 on the chunked path, finite values else.
    """
    dev = next(model.parameters()).device
    ids, pos, src = pb.input_ids.to(dev), pb.position_ids.to(dev), pb.source.to(dev)
    tokens, mask = pb.completion.to(dev), pb.mask.to(dev)
    b, width = tokens.shape
    split = _split_head(model)
    vocab = split[1].out_features if split is not None else model.config.vocab_size
    net = split[0] if split is not None else model
    att = pb.attention_mask().to(dev)
    with autocast_context(model):
        out = net(input_ids=ids, attention_mask=att, position_ids=pos, use_cache=False)
        flat = (out.last_hidden_state if split is not None else out.logits).flatten(0, 1)
        head = split[1] if split is not None else torch.nn.Identity()
        if b * width * vocab <= chunk_elements:
            logits = _upcast(head(flat.index_select(0, src.reshape(-1)).view(b, width, -1))) / temperature
            return torch.log_softmax(logits, dim=-1).gather(-1, tokens.unsqueeze(-1)).squeeze(-1)
        real = mask != 0
        lp = chunked_token_logprobs(head, flat.index_select(0, src[real]), tokens[real], temperature, chunk_elements)
    res = torch.zeros(tokens.shape, dtype=lp.dtype, device=dev)
    if lp.numel() == 0:  # no completion token at all: keep the output attached to the graph (zero gradient)
        return res + 0.0 * flat.sum().to(lp.dtype)
    return res.index_put(real.nonzero(as_tuple=True), lp)


def _micro_batches(roll: RolloutBatch, rows: np.ndarray, micro: int, micro_tokens: int | None,
                   shared: bool) -> list[np.ndarray]:
    return (group_micro_batches if shared else micro_batches)(roll, np.asarray(rows), micro, micro_tokens)


def _part_logprobs(model, roll: RolloutBatch, part: np.ndarray, pad_id: int, temp: float, shared: bool,
                   device, pack: bool = False, one_pass: bool = False) -> tuple[torch.Tensor, torch.Tensor]:
    if one_pass:  # a sharded model: the whole computation inside one call of its root unit (gdro.distributed)
        from gdro.distributed import in_root

        return in_root(model, _part_logprobs_inner, model, roll, part, pad_id, temp, shared, device, pack, True)
    return _part_logprobs_inner(model, roll, part, pad_id, temp, shared, device, pack, False)


def _part_logprobs_inner(model, roll: RolloutBatch, part: np.ndarray, pad_id: int, temp: float, shared: bool,
                         device, pack: bool, one_pass: bool) -> tuple[torch.Tensor, torch.Tensor]:
    """``(log-probs, mask)``, both ``(B, L)``, of a micro-batch's rows: packed per group (``pack``, where
    :func:`packable` and the block mask fits in ``PACK_MASK_ELEMENTS``), shared-prefix KV cache, or one sequence
    per row."""
    if shared and pack and packable(model, roll, part):
        pb = make_packed_batch(roll, part, pad_id, device=device)
        if pb.mask_elements <= PACK_MASK_ELEMENTS:  # else: the KV-cache path below
            return packed_logprobs(model, pb, temp), pb.mask
    # one_pass (a sharded model): one forward per micro-batch on every path, so processes issue the same gathers
    if shared and not one_pass and not caches_dropped(model) and all(len(roll.prompt_token_ids[g]) for g in roll.group_index[part]):
        sb = make_shared_batch(roll, part, pad_id, device=device)
        return shared_prefix_logprobs(model, sb, temp), sb.mask
    tb = make_token_batch(roll, part, pad_id, device=device)
    return completion_logprobs(model, tb, temp), tb.mask


def logprobs_no_grad(model, roll: RolloutBatch, rows: np.ndarray, micro: int, pad_id: int, temp: float,
                     micro_tokens: int | None = None, *, shared_prefix: bool = False,
                     pack: bool = False, dist=None) -> list[torch.Tensor]:
    """Per-row log-probs (unpadded 1-D tensors on the model's device, in the order of ``rows``) without gradient,
    in micro-batches (``micro_batches(roll, rows, micro, micro_tokens)``; with ``shared_prefix``,
    ``group_micro_batches`` and :func:`shared_prefix_logprobs`, or :func:`packed_logprobs` with ``pack``).
    ``dist`` (a sharded ``model``): every process runs as many forwards as the busiest one (FSDP's gathers are
    collectives), the extra ones on a row whose result is dropped."""
    at = {int(i): k for k, i in enumerate(rows)}
    out: list[torch.Tensor | None] = [None] * len(rows)
    device = next(model.parameters()).device
    one_pass = dist is not None and dist.active
    parts = _micro_batches(roll, rows, micro, micro_tokens, shared_prefix)
    extra = _padding(parts, dist, rows)
    with torch.no_grad():
        for part in parts:
            lp, _ = _part_logprobs(model, roll, part, pad_id, temp, shared_prefix, device, pack, one_pass)
            for j, i in enumerate(part):
                out[at[int(i)]] = lp[j, : len(roll.completion_ids[i])]
        for part in extra:
            _part_logprobs(model, roll, part, pad_id, temp, shared_prefix, device, pack, one_pass)
    return out


def _padding(parts: list[np.ndarray], dist, rows: np.ndarray) -> list[np.ndarray]:
    """The dummy micro-batches this process runs so that every process runs the same number (none in one process):
    one row each, its result unused (forward) or multiplied by zero (training)."""
    if dist is None or not dist.active:
        return []
    missing = dist.max_int(len(parts)) - len(parts)
    row = np.asarray([int(rows[0]) if len(rows) else 0])
    return [row] * missing


def _stack(rows: list[torch.Tensor], width: int) -> torch.Tensor:
    buf = torch.zeros(len(rows), width, device=rows[0].device if rows else None)  # where the rows are
    for j, r in enumerate(rows):
        buf[j, : len(r)] = r
    return buf


def ppo_update(
    model,
    optimizer: torch.optim.Optimizer,
    scheduler,
    roll: RolloutBatch,
    adv: torch.Tensor,
    loss_cfg: LossConfig,
    optim_cfg: OptimConfig,
    *,
    temperature: float,
    pad_id: int,
    rng: np.random.Generator,
    ref_model=None,
    local_rows: np.ndarray | None = None,
    dist=None,
) -> tuple[dict[str, float | None], ResponseLosses]:
    """One GRPO policy update on a ragged rollout batch; returns aggregated statistics and per-response losses.

    With one epoch and one mini-batch there is a single optimiser step, so π_old = π_θ and the
    old log-probs are the current ones (detached): no extra forward pass.

    The per-response losses (from the first epoch) are reductions of the per-token terms the loss itself
    computed (``grpo_loss``'s ``TokenTerms``), not a second evaluation: ``pg`` — the token mean of the clipped PG
    loss with the advantages ``adv`` as given — and ``kl`` — the token mean of the KL to π_ref (0 without a
    reference). Rows skipped as zero-advantage have ``pg`` exactly 0.

    Across processes (``dist``, gdro.distributed): every process holds the whole batch but forwards and backwards
    only ``local_rows``; the loss's denominators are the whole mini-batch's, the sharded model sums the gradients,
    and the per-response losses and statistics are summed over processes (each row is computed by one process).
    """
    n = len(roll)
    lengths = roll.lengths
    single_step = optim_cfg.ppo_epochs == 1 and optim_cfg.mini_batches == 1
    all_rows = np.arange(n)
    mine = all_rows if local_rows is None else np.asarray(local_rows, dtype=np.int64)
    one_pass = dist is not None and dist.active
    grad_scale = float(dist.world) if one_pass else 1.0
    is_mine = np.zeros(n, dtype=bool)
    is_mine[mine] = True
    micro, micro_tokens = optim_cfg.micro_batch_size, optim_cfg.micro_batch_tokens
    shared, pack = optim_cfg.shared_prefix, optim_cfg.pack

    def by_row(lps: list[torch.Tensor]) -> list[torch.Tensor | None]:
        out: list[torch.Tensor | None] = [None] * n
        for k, i in enumerate(mine):
            out[int(i)] = lps[k]
        return out

    old = None if single_step else by_row(logprobs_no_grad(model, roll, mine, micro, pad_id, temperature,
                                                           micro_tokens, shared_prefix=shared, pack=pack, dist=dist))
    ref = None
    t_ref = time.perf_counter()
    if loss_cfg.beta_kl > 0:
        if ref_model is None:
            raise ValueError("loss.beta_kl > 0 needs a reference model")
        # the reference model is not sharded (no collective): no padding
        ref = by_row(logprobs_no_grad(ref_model, roll, mine, micro, pad_id, temperature, micro_tokens,
                                      shared_prefix=shared, pack=pack))
    t_ref = time.perf_counter() - t_ref
    skip = optim_cfg.skip_zero_adv and loss_cfg.beta_kl == 0
    sig_pg = np.zeros(n, dtype=np.float64)
    sig_kl = np.zeros(n, dtype=np.float64)
    totals: dict[str, float] = {}
    grad_norms = []
    device = next(model.parameters()).device
    model.train()
    for epoch in range(optim_cfg.ppo_epochs):
        order = all_rows if single_step else rng.permutation(n)
        for mb in np.array_split(order, optim_cfg.mini_batches):
            if len(mb) == 0:
                continue
            # mini-batch-wide denominators: micro-batch losses then sum to the mini-batch loss exactly
            n_tok = float(lengths[mb].sum())
            n_seq = float((lengths[mb] > 0).sum()) if loss_cfg.agg == "seq-mean-token-mean" else float(len(mb))
            rows = mb[adv[mb].abs().numpy() > 0] if skip else mb
            rows = rows[is_mine[rows]]
            optimizer.zero_grad(set_to_none=True)
            parts = _micro_batches(roll, rows, micro, micro_tokens, shared)
            for part in _padding(parts, dist, mine):  # FSDP: as many forward/backward passes as the busiest process
                logp, _ = _part_logprobs(model, roll, part, pad_id, temperature, shared, device, pack, one_pass)
                (logp.sum() * 0.0).backward()
            for part in parts:
                logp, mask = _part_logprobs(model, roll, part, pad_id, temperature, shared, device, pack, one_pass)
                width = logp.shape[1]
                old_lp = logp.detach() if old is None else _stack([old[i] for i in part], width)
                ref_lp = None if ref is None else _stack([ref[i] for i in part], width)
                loss, stats, terms = grpo_loss(
                    logp, old_lp, adv[part].to(logp.device, logp.dtype), mask,
                    clip_low=loss_cfg.clip_low, clip_high=loss_cfg.clip_high, beta_kl=loss_cfg.beta_kl,
                    ref_logp=ref_lp, kl_estimator=loss_cfg.kl_estimator, agg=loss_cfg.agg,
                    denom=n_tok if loss_cfg.agg == "token-mean" else n_seq, token_denom=n_tok,
                    clip_ratio_c=loss_cfg.clip_ratio_c,
                )
                # FSDP averages the gradients over processes; the loss is already normalised by the whole batch
                (loss * grad_scale).backward()
                if epoch == 0:  # the controllers' per-response losses: reductions of the loss's own terms
                    sig_pg[part] = per_response_mean(terms.pg, mask).double().cpu().numpy()
                    if terms.kl is not None:
                        sig_kl[part] = per_response_mean(terms.kl, mask).double().cpu().numpy()
                for k, v in stats.items():
                    totals[k] = totals.get(k, 0.0) + float(v)
                totals["loss"] = totals.get("loss", 0.0) + float(loss.detach())
            # clip_grad_norm_ with max_norm=inf only measures the norm (0 when no row had gradient)
            gn = torch.nn.utils.clip_grad_norm_(model.parameters(), optim_cfg.grad_clip or float("inf"))
            grad_norms.append(float(gn))
            optimizer.step()
    scheduler.step()
    if dist is not None and dist.active:  # each row was computed by one process: sums over processes are totals
        sig_pg, sig_kl = dist.sum_array(sig_pg), dist.sum_array(sig_kl)
        keys = sorted({k for ks in dist.all_gather_object(sorted(totals)) for k in ks})
        summed = dist.sum_array(np.asarray([totals.get(k, 0.0) for k in keys]))
        totals = dict(zip(keys, (float(v) for v in summed)))
    n_steps = optim_cfg.ppo_epochs * optim_cfg.mini_batches
    out = {f"train/{k}": v / n_steps for k, v in totals.items()}
    if ref is None:
        out["train/kl"] = None  # no reference model (beta_kl = 0): KL to π_ref is not measured
    out["train/grad_norm"] = float(np.mean(grad_norms)) if grad_norms else 0.0
    out["train/lr"] = float(scheduler.get_last_lr()[0])
    out["train/rows_in_update"] = float(n if not skip else int((adv.abs() > 0).sum()))
    out["time/ref_s"] = t_ref  # the reference model's forward (0 without one)
    return out, ResponseLosses(pg=sig_pg, kl=sig_kl)
