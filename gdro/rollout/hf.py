"""HF ``generate`` rollout engine: batched, left-padded, ragged, seeded — the default engine.

It samples from the very model object the trainer updates, so its weights are always the current
policy's; ``sync_weights`` only checks that this is so. Inputs go to the model's device (CPU or CUDA);
outputs come back as CPU lists and numpy arrays.

Log-probs are computed only when asked for (``SamplingParams.logprobs``): then ``generate`` keeps each
step's raw logits (HF ``output_logits``: one float32 ``(batch, vocab)`` tensor per new token — at Qwen3's
151,936-token vocabulary ~0.6 MB per row and token, so prefer a small ``batch_size``), and they are reduced one
step at a time; without them no logits are kept at all.

Finished rows leave the batch (``prune_every``, issue #11). ``generate`` decodes every row until the longest one
ends, so on short-answer tasks most row-steps decode padding after an EOS (on the toy at the start of training:
256 rows, ≈ 6 tokens each on average, up to 13). With ``prune_every = k > 0`` a call decodes ``k`` tokens at a time:
after each phase the rows that produced an EOS are done, and ``generate`` continues the others from their own KV
cache (index-selected to those rows; it then feeds only their last sampled token). Each row's samples follow the
same distribution as in one call, and the log-probs the trainer recomputes match the engine's (tested), but the
random stream is consumed differently, so the samples themselves differ from ``prune_every = 0`` (one call), as
they differ with ``batch_size``.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
import torch

from gdro.common.rollouts import RolloutBatch, SamplingParams, expand_groups, left_pad
from gdro.data.prompts import encode_prompts
from gdro.models.loading import autocast_context, cache_kwarg


@dataclass(frozen=True)
class HFEngineConfig:
    """Hyperparameters of the HF engine (conf/rollout/hf.yaml)."""

    batch_size: int = 512  # rollout rows per generate() call
    shared_prefix: bool = True  # prefill each distinct prompt once per call; its rows decode from a copy of its cache
    prune_every: int = 4  # > 0: decode this many tokens at a time and drop the rows that ended (0 = one generate())
    temperature: float = 1.0  # training-time sampling
    top_p: float = 1.0
    top_k: int = 0

    def __post_init__(self) -> None:
        if self.batch_size < 1:
            raise ValueError(f"batch_size must be >= 1, got {self.batch_size}")
        if not isinstance(self.shared_prefix, bool):
            raise TypeError(f"shared_prefix must be true or false, got {self.shared_prefix!r}")
        if self.prune_every < 0:
            raise ValueError(f"prune_every must be >= 0 (0 = off), got {self.prune_every}")
        SamplingParams(self.temperature, self.top_p, self.top_k, 1)  # validates the sampling values

    def sampling(self, max_new_tokens: int) -> SamplingParams:
        return SamplingParams(self.temperature, self.top_p, self.top_k, max_new_tokens)


def eos_token_ids(model: torch.nn.Module, tokenizer) -> list[int]:
    """Every id that ends a completion: the generation config's EOS id(s) and the tokenizer's."""
    ids: set[int] = set()
    gen_eos = getattr(getattr(model, "generation_config", None), "eos_token_id", None)
    if isinstance(gen_eos, int):
        ids.add(gen_eos)
    elif gen_eos is not None:
        ids.update(int(i) for i in gen_eos)
    if tokenizer.eos_token_id is not None:
        ids.add(int(tokenizer.eos_token_id))
    if not ids:
        raise ValueError("the model has no EOS token id (generation_config.eos_token_id and tokenizer.eos_token)")
    return sorted(ids)


def pad_token_id(tokenizer, eos_ids: Sequence[int]) -> int:
    """The tokenizer's pad id, or the first EOS id when it has none."""
    pad = tokenizer.pad_token_id
    return int(pad if pad is not None else eos_ids[0])


def encode_request(tokenizer, prompts: Sequence[str], n: Sequence[int], *, use_chat_template: bool,
                   max_prompt_len: int) -> tuple[list[list[int]], np.ndarray]:
    """Every engine's first step: each prompt's token ids (as ``encode_prompts``) and each rollout's prompt index."""
    if len(prompts) != len(n):
        raise ValueError(f"got {len(prompts)} prompts but {len(n)} rollout counts")
    ids = encode_prompts(tokenizer, prompts, use_chat_template=use_chat_template, max_prompt_len=max_prompt_len)
    return ids, expand_groups(n)


class HFGenerator:
    """Rollouts with ``model.generate`` (sampling), chunked into batches of ``batch_size`` rows."""

    def __init__(self, model, tokenizer, *, use_chat_template: bool, max_prompt_len: int, batch_size: int = 512,
                 shared_prefix: bool = False, prune_every: int = 0):
        self.model = model
        self.shared_prefix = shared_prefix
        self.prune_every = prune_every
        self.tokenizer = tokenizer
        self.use_chat_template = use_chat_template
        self.max_prompt_len = max_prompt_len
        self.batch_size = batch_size
        self.eos_ids = eos_token_ids(model, tokenizer)
        self.pad_id = pad_token_id(tokenizer, self.eos_ids)

    @property
    def device(self) -> torch.device:
        """Where the model's weights (and so every input tensor) live."""
        return next(self.model.parameters()).device

    def sync_weights(self, model: torch.nn.Module) -> None:
        """Nothing to do when ``model`` is the engine's own model (one process: the policy itself). Anything else
        that is not a module (``gdro.parallel.distributed.StateView``: the full weights of a sharded policy) is loaded into
        the engine's own copy."""
        if model is self.model:
            return
        if isinstance(model, torch.nn.Module):
            raise ValueError("HFGenerator samples from the policy object itself; pass that same model")  # noqa: TRY004
        self.model.load_state_dict(model.state_dict())

    def generate(
        self, prompts: Sequence[str], n: Sequence[int], *, seed: int, sampling: SamplingParams
    ) -> RolloutBatch:
        prompt_ids, group_index = encode_request(
            self.tokenizer, prompts, n, use_chat_template=self.use_chat_template, max_prompt_len=self.max_prompt_len
        )
        completions: list[list[int]] = []
        logprobs: list[np.ndarray] = []
        was_training = self.model.training
        self.model.eval()
        dev = self.device
        cuda = [dev.index if dev.index is not None else torch.cuda.current_device()] if dev.type == "cuda" else []
        # A private RNG stream (also the CUDA one when sampling there): sampling is a pure function of
        # (weights, prompts, n, seed), and the caller's RNG streams are left as they were.
        with torch.random.fork_rng(devices=cuda), torch.inference_mode():
            torch.manual_seed(seed)
            for start in range(0, len(group_index), self.batch_size):
                rows = [prompt_ids[g] for g in group_index[start : start + self.batch_size]]
                c, lp = self._generate_chunk(rows, sampling)
                completions += c
                logprobs += lp
        self.model.train(was_training)
        finish = ["stop" if c and c[-1] in self.eos_ids else "length" for c in completions]
        texts = self.tokenizer.batch_decode(completions, skip_special_tokens=True)
        return RolloutBatch(prompt_ids, group_index, completions, logprobs if sampling.logprobs else None, texts,
                            finish)

    def _generate_chunk(self, rows: list[list[int]], sp: SamplingParams) -> tuple[list[list[int]], list[np.ndarray]]:
        """Completions (cut after the first EOS) and, when ``sp.logprobs``, their log-probs; [] otherwise."""
        input_ids, attention_mask = left_pad(rows, self.pad_id)
        input_ids, attention_mask = input_ids.to(self.device), attention_mask.to(self.device)
        eos = torch.tensor(self.eos_ids, device=self.device)
        n_rows = input_ids.shape[0]
        new = torch.full((n_rows, sp.max_new_tokens), self.pad_id, dtype=torch.long)
        lp = torch.zeros((n_rows, sp.max_new_tokens), dtype=torch.float32) if sp.logprobs else None
        live = torch.arange(n_rows, device=self.device)  # rows still decoding, as indices into the chunk
        done = 0  # tokens decoded so far by every live row
        with autocast_context(self.model):  # a policy with fp32 master weights samples in its compute dtype
            cache = self._shared_prompt_cache(rows, input_ids, attention_mask) if self.shared_prefix else None
            while done < sp.max_new_tokens and len(live):
                step = min(self.prune_every or sp.max_new_tokens, sp.max_new_tokens - done)
                out = self.model.generate(
                    input_ids=input_ids,
                    attention_mask=attention_mask,
                    **({cache_kwarg(self.model): cache} if cache is not None else {}),
                    do_sample=True,
                    temperature=sp.temperature,
                    top_p=sp.top_p,
                    top_k=sp.top_k,
                    max_new_tokens=step,
                    eos_token_id=self.eos_ids,
                    pad_token_id=self.pad_id,
                    return_dict_in_generate=True,
                    output_logits=sp.logprobs,  # raw per-step logits, kept only when log-probs are wanted
                )
                got = out.sequences[:, input_ids.shape[1] :]
                k, at = got.shape[1], live.cpu()
                new[at, done : done + k] = got.cpu()
                if lp is not None:
                    lp[at, done : done + k] = sampled_logprobs(out.logits, got, sp.temperature)
                done += k
                ended = torch.isin(got, eos).any(dim=1)  # (generate stops early only when every row has ended)
                if self.prune_every == 0 or bool(ended.all()) or done >= sp.max_new_tokens:
                    break
                # continue the rows without an EOS from their own cache: it holds every token but the last sampled
                cache = out.cache if getattr(out, "cache", None) is not None else out.past_key_values  # 5.x: cache
                input_ids = out.sequences
                if ended.any():
                    keep = torch.nonzero(~ended).flatten()
                    cache.reorder_cache(keep)
                    input_ids, attention_mask = input_ids.index_select(0, keep), attention_mask.index_select(0, keep)
                    live = live.index_select(0, keep)
                attention_mask = torch.cat([attention_mask, attention_mask.new_ones((len(live), k))], dim=1)
        new = new[:, :done]
        is_eos = torch.isin(new, eos.cpu())
        completions, logprobs = [], []
        for i in range(new.shape[0]):
            hits = torch.nonzero(is_eos[i]).flatten()
            length = int(hits[0]) + 1 if len(hits) else new.shape[1]
            completions.append(new[i, :length].tolist())
            if lp is not None:
                logprobs.append(lp[i, :length].numpy().astype(np.float32))
        return completions, logprobs

    def _shared_prompt_cache(self, rows: list[list[int]], input_ids: torch.Tensor, attention_mask: torch.Tensor):
        """The KV cache of every row's prompt but its last token, computed once per distinct prompt and expanded to
        the rows (``None`` when no prompt repeats or one has fewer than 2 tokens). ``generate`` then runs only the
        last prompt token and the new ones: the samples are those of the unshared prefill up to float rounding."""
        from transformers import DynamicCache

        first: dict[tuple[int, ...], int] = {}  # distinct prompt -> its index, in order of first appearance
        row_prompt = [first.setdefault(tuple(r), len(first)) for r in rows]
        if len(first) == len(rows) or min(len(r) for r in rows) < 2:
            return None
        first_row = {j: i for i, j in reversed(list(enumerate(row_prompt)))}  # prompt index -> its first row
        uniq = torch.tensor([first_row[j] for j in range(len(first))], device=input_ids.device)
        ids, att = input_ids.index_select(0, uniq)[:, :-1], attention_mask.index_select(0, uniq)[:, :-1]
        pos = (att.cumsum(-1) - 1).clamp(min=0)
        cache = DynamicCache(config=self.model.config)
        self.model(input_ids=ids, attention_mask=att, position_ids=pos, use_cache=True, logits_to_keep=1,
                   **{cache_kwarg(self.model): cache})
        cache.reorder_cache(torch.tensor(row_prompt, device=input_ids.device))
        return cache


def sampled_logprobs(step_logits: Sequence[torch.Tensor], tokens: torch.Tensor, temperature: float) -> torch.Tensor:
    """``log_softmax(logits_t / T)[token_t]`` for every step t, as a CPU ``(B, L)`` float32 tensor.

    ``step_logits`` are ``generate``'s raw per-step ``(B, V)`` logits (before top-k/top-p), ``tokens`` the ``(B, L)``
    sampled ids. One step at a time: the extra memory is one float32 ``(B, V)`` tensor, never ``(B, L, V)``.
    """
    if len(step_logits) != tokens.shape[1]:
        raise ValueError(f"got logits for {len(step_logits)} steps but {tokens.shape[1]} sampled tokens")
    out = torch.empty(tokens.shape, dtype=torch.float32, device=tokens.device)
    for t, logits in enumerate(step_logits):
        step = torch.log_softmax(logits.float() / temperature, dim=-1)
        out[:, t] = step.gather(-1, tokens[:, t : t + 1]).squeeze(-1)
    return out.cpu()
