"""Models: load any causal LM from the Hugging Face format, place it, and say how it computes.

Every model — the shipped 0.8M-parameter Qwen3 at ``TINY_DIR`` or ``Qwen/Qwen3-1.7B-Base`` — goes through the same
``AutoModelForCausalLM`` / ``AutoTokenizer.from_pretrained`` path, so the trainer never special-cases the toy. How
the tiny model and its tokenizer are built and warm-started is :mod:`gdro.models.tiny`; where the weights are read
from (a hub id, a local dir, the fallback copy) is :mod:`gdro.models.source`; what keeps a model dir from loading
is found by :mod:`gdro.models.dir_checks`.
"""

from __future__ import annotations

import contextlib
import inspect
import logging
import os
import pickle
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

import torch

from gdro.common import portable
from gdro.models.dir_checks import (
    chat_template_problem,
    missing_weights,
    model_dir_problem,
    shape_mismatch,
    shape_problem,
    special_tokens_problem,
    tokenizer_problem,
    weights_problem,
)
from gdro.models.lora import LoraSpec
from gdro.models.source import model_path

if TYPE_CHECKING:
    from gdro.common.rollouts import Generator

DTYPES = {"float32": torch.float32, "bfloat16": torch.bfloat16, "float16": torch.float16}


# ---------------------------------------------------------------------------------------------------------------
# Loading any causal LM
# ---------------------------------------------------------------------------------------------------------------
class ModelUnavailableError(OSError):
    """The model's files are neither on disk nor downloadable (offline, no network, unknown id)."""


@dataclass(frozen=True)
class ModelSpec:
    """Which causal LM to load and how. ``name_or_path="tiny"`` means the shipped ``TINY_DIR`` checkpoint.

    Args:
        name_or_path: a hub id (``Qwen/Qwen3-1.7B-Base``), a local directory, or ``"tiny"``.
        max_prompt_len: longest prompt in tokens (the rollout engine rejects longer ones).
        max_new_tokens: generation budget per completion.
        dtype: the compute dtype (float32 | bfloat16 | float16): the weights of the reference model, the rollout
            engine and saved checkpoints, and the autocast dtype of the trained policy's forwards.
        master_dtype: the dtype of the trained policy's own weights, gradients and optimiser state (its "master
            weights"), float32 by default: with ``dtype=bfloat16`` the policy trains in fp32 under bf16 autocast (the
            paper's BF16 mixed precision). ``None`` trains in ``dtype`` itself: half the memory, but bf16 weights
            round small updates away (at lr 1e-6 an update below ~0.4% of a weight is lost).
        attn_implementation: passed to ``from_pretrained`` (e.g. "sdpa", "eager", "flash_attention_2"); None = default.
        trust_remote_code: passed to ``from_pretrained``.
        use_chat_template: format prompts with the tokenizer's chat template (else raw text).
        revision: hub revision (branch, tag or commit); None = default branch.
        gradient_checkpointing: recompute each decoder layer's activations in the backward instead of keeping them
            (``model.activation_checkpointing_enable``, formerly ``gradient_checkpointing_enable``; non-reentrant): far less activation memory for long
            sequences, ~1/3 more compute. Only training forwards are affected (generation and no-grad passes are not).
        lora: LoRA adapters on the trained policy (:class:`gdro.models.lora.LoraSpec`: ``r`` 0 = full fine-tuning,
            ``alpha``, ``dropout``, ``target_modules``); an evaluation loads the model without them.
        fallback: a local model directory used when ``name_or_path`` is a hub id that cannot be had here (not in the
            local Hugging Face cache, and no network or ``HF_HUB_OFFLINE`` set): the hub's weights where they can
            be reached, an offline copy elsewhere. Which one a run used is in its run.json (``model``). None = none.
        hub_kernels: let transformers swap layers for kernels fetched from the hub (its ``use_kernels``; since
            transformers 5 on by default where the ``kernels`` package is installed, and a failure offline: found on
            the first GPU run, docs/gpu.md). Off by default: the layers are the model's own, everywhere.
    """

    name_or_path: str
    max_prompt_len: int
    max_new_tokens: int
    dtype: str = "float32"
    master_dtype: str | None = "float32"
    attn_implementation: str | None = None
    trust_remote_code: bool = False
    use_chat_template: bool = True
    revision: str | None = None
    gradient_checkpointing: bool = False
    lora: LoraSpec = field(default_factory=LoraSpec)
    hub_kernels: bool = False
    fallback: str | None = None

    def __post_init__(self) -> None:
        if not isinstance(self.name_or_path, str) or not self.name_or_path.strip():
            raise ValueError(f"name_or_path must be a non-empty string, got {self.name_or_path!r}")
        if not isinstance(self.max_prompt_len, int) or self.max_prompt_len < 1:
            raise ValueError(f"max_prompt_len must be a positive int, got {self.max_prompt_len!r}")
        if not isinstance(self.max_new_tokens, int) or self.max_new_tokens < 1:
            raise ValueError(f"max_new_tokens must be a positive int, got {self.max_new_tokens!r}")
        if self.dtype not in DTYPES:
            raise ValueError(f"dtype must be one of {sorted(DTYPES)}, got {self.dtype!r}")
        if self.master_dtype is not None and self.master_dtype not in DTYPES:
            raise ValueError(f"master_dtype must be null or one of {sorted(DTYPES)}, got {self.master_dtype!r}")
        if self.attn_implementation is not None and not str(self.attn_implementation).strip():
            raise ValueError("attn_implementation must be None or a non-empty string")
        if self.revision is not None and not str(self.revision).strip():
            raise ValueError("revision must be None or a non-empty string")
        if not isinstance(self.gradient_checkpointing, bool):
            raise TypeError(f"gradient_checkpointing must be true or false, got {self.gradient_checkpointing!r}")
        if not isinstance(self.hub_kernels, bool):
            raise TypeError(f"hub_kernels must be true or false, got {self.hub_kernels!r}")
        if self.fallback is not None and (not isinstance(self.fallback, str) or not self.fallback.strip()):
            raise ValueError(f"fallback must be null or a local directory, got {self.fallback!r}")
        try:
            object.__setattr__(self, "lora", LoraSpec.of(self.lora))
        except (TypeError, ValueError) as err:
            raise ValueError(f"lora: {err}") from err

    @property
    def torch_dtype(self) -> torch.dtype:
        """The compute dtype (``dtype``)."""
        return DTYPES[self.dtype]

    @property
    def train_dtype(self) -> torch.dtype:
        """The trained policy's parameter dtype (``master_dtype``, else ``dtype``)."""
        return DTYPES[self.master_dtype or self.dtype]


DEVICE_CHOICES = "auto, cpu, cuda or cuda:N"


def resolve_device(setting: str | torch.device) -> torch.device:
    """The torch device of a ``device`` setting: ``auto`` (CUDA when present, else CPU) | ``cpu`` | ``cuda`` | ``cuda:N``.

    A malformed setting, or CUDA asked for where there is none, is a one-line ``ValueError`` naming ``device``
    (a ``TypeError`` for a non-string).
    """
    if isinstance(setting, torch.device):
        setting = str(setting)
    if not isinstance(setting, str):
        raise TypeError(f"device must be one of {DEVICE_CHOICES}, got {setting!r}")
    s = setting.strip().lower()
    if s == "auto":
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    if s == "cpu":
        return torch.device("cpu")
    kind, colon, index = s.partition(":")
    if kind != "cuda" or (colon and not index.isdigit()):
        raise ValueError(f"device must be one of {DEVICE_CHOICES}, got {setting}")
    if not torch.cuda.is_available():
        raise ValueError(f"device asks for CUDA but torch.cuda.is_available() is False (torch {torch.__version__}); "
                         f"use device=auto or device=cpu, got {setting}")
    if index and int(index) >= torch.cuda.device_count():
        raise ValueError(f"device names a CUDA device that does not exist ({torch.cuda.device_count()} present), "
                         f"got {setting}")
    return torch.device(s)


def process_device(device: torch.device, processes: int) -> torch.device:
    """This process's device, made current on CUDA: with several ``processes`` (torchrun, or a submitit job of
    several tasks), CUDA without an index is the process's own GPU, ``cuda:LOCAL_RANK`` (the one place it is read)."""
    if device.type == "cuda" and device.index is None:  # set_device needs an index
        own = int(os.environ.get("LOCAL_RANK", "0")) if processes > 1 else torch.cuda.current_device()
        device = torch.device("cuda", own)  # several processes: one GPU each
    if device.type == "cuda":
        torch.cuda.set_device(device)
    return device


def _kernel_kwargs(hub_kernels: bool) -> dict[str, bool]:
    """``use_kernels`` for ``from_pretrained``: passed where transformers defaults it on (5.x) or when asked for."""
    import transformers

    return {"use_kernels": hub_kernels} if hub_kernels or int(transformers.__version__.split(".")[0]) >= 5 else {}


def check_placement(threads: int | str | None, device: str) -> None:
    """The ``threads`` and ``device`` settings every entry point takes, checked one way: threads >= 1 or null, and
    a device this machine has (:func:`resolve_device`); under ``GDRO_PORTABLE=1``, 1 or null. Raises ValueError (or TypeError) naming the key."""
    if threads == "auto":  # the free cores (gdro.common.threads); one under GDRO_PORTABLE=1
        threads = None
    elif threads is not None and (isinstance(threads, bool) or not isinstance(threads, int) or threads < 1):
        raise ValueError(f"threads must be >= 1, auto or null, got {threads!r}")
    portable.check_threads(threads)  # GDRO_PORTABLE=1 runs one thread
    resolve_device(device)


def _unavailable(spec: ModelSpec, path: str, err: BaseException) -> ModelUnavailableError:
    if spec.fallback is not None and path == spec.fallback:
        hint = (f"{spec.name_or_path} cannot be had here and its local copy (model.fallback) does not hold a "
                "loadable model: build or copy the model there (model=smollm2-135m: `python scripts/get_smollm2.py`)")
    elif spec.name_or_path == "tiny" or os.path.isabs(path) or path.startswith("."):
        hint = ("this local directory does not hold a loadable model"
                + ("; rebuild it with `python scripts/build_tiny_model.py`" if spec.name_or_path == "tiny" else ""))
    else:
        offline = os.environ.get("HF_HUB_OFFLINE", "0").lower() in ("1", "true", "yes")
        hint = ("it is not in the local Hugging Face cache"
                + (" and HF_HUB_OFFLINE is set" if offline else " and could not be downloaded")
                + f". Download it first (`hf download {path}`) with network access, point HF_HOME"
                  " at a cache that holds it, or pass a local directory as name_or_path")
    return ModelUnavailableError(f"Cannot load model {path!r}: {hint}. (Underlying error: {err})")


def load_tokenizer(spec: ModelSpec):
    """The model's tokenizer with left padding and a pad token (cheap: lets data be checked before the model loads).

    Raises ``ModelUnavailableError`` (an ``OSError``) naming the model when its files cannot be had.
    """
    from huggingface_hub.errors import HfHubHTTPError, HFValidationError
    from transformers import AutoTokenizer

    path = model_path(spec)
    problem = model_dir_problem(path)
    if problem is not None:
        raise ModelUnavailableError(f"Cannot load model {path!r}: {problem}")
    try:
        tokenizer = AutoTokenizer.from_pretrained(path, revision=spec.revision, trust_remote_code=spec.trust_remote_code)
    except (OSError, HfHubHTTPError, HFValidationError) as err:
        raise _unavailable(spec, path, err) from err
    except Exception as err:  # a local file that does not parse (JSONDecodeError; tokenizers raises a bare Exception)
        if not Path(path).is_dir():
            raise
        raise ModelUnavailableError(f"Cannot load model {path!r}: {tokenizer_problem(path, err)}") from err
    problem = special_tokens_problem(path, tokenizer) or (
        chat_template_problem(path, tokenizer) if spec.use_chat_template else None)
    if problem is not None:
        raise ModelUnavailableError(f"Cannot load model {path!r}: {problem}")
    tokenizer.padding_side = "left"
    if tokenizer.pad_token is None:
        tokenizer.pad_token = tokenizer.eos_token
    return tokenizer


def lora_target_problem(spec: ModelSpec) -> str | None:
    """``model.lora.target_modules`` checked against the modules of ``spec``'s model, built on the meta device from
    its config (no weight is read), in one line naming the targets it lacks and its linear layers (None: no
    adapters, ``all-linear``, the targets are there, or the config cannot be read here: loading says why)."""
    from transformers import AutoConfig, AutoModelForCausalLM

    from gdro.models.lora import target_problem, targets_text

    targets = spec.lora.target_modules
    if not spec.lora.enabled or targets == "all-linear":
        return None
    try:
        config = AutoConfig.from_pretrained(model_path(spec), revision=spec.revision,
                                            trust_remote_code=spec.trust_remote_code)
        with torch.device("meta"):
            skeleton = AutoModelForCausalLM.from_config(config, trust_remote_code=spec.trust_remote_code)
    except Exception:  # noqa: BLE001 (not checkable here: loading the model says what is wrong, if anything)
        return None
    problem = target_problem(skeleton, targets)
    return None if problem is None else f"model.lora.target_modules={targets_text(targets)}: {problem}"


COMPUTE_DTYPE_ATTR = "gdro_compute_dtype"


def compute_dtype(model: torch.nn.Module) -> torch.dtype:
    """The dtype ``model``'s forwards compute in: ``spec.dtype`` for a model from :func:`load_model`, else its
    parameters' dtype. Differs from the parameters' dtype for a policy with fp32 master weights (autocast)."""
    return getattr(model, COMPUTE_DTYPE_ATTR, None) or next(model.parameters()).dtype


def autocast_context(model) -> contextlib.AbstractContextManager:
    """Autocast to the model's compute dtype (:func:`gdro.models.loading.compute_dtype`) where it is lower precision than
    its weights (fp32 master weights, ``dtype=bfloat16``), on any device; bf16 autocast for a bfloat16 model on
    CUDA; nothing otherwise (a float32 run is unchanged). The log-probs stay float32 either way: the logits are
    cast up before the log-softmax."""
    p = next(model.parameters())
    dt = compute_dtype(model)
    if dt != p.dtype and dt in (torch.bfloat16, torch.float16) and p.dtype in (torch.float32, torch.float64):
        return torch.autocast(p.device.type, dtype=dt)
    if p.device.type == "cuda" and p.dtype == torch.bfloat16:
        return torch.autocast("cuda", dtype=torch.bfloat16)
    return contextlib.nullcontext()


def cache_kwarg(module) -> str:
    """The keyword a model's forward takes its KV cache by: ``cache`` (transformers >= 5.x) or ``past_key_values``."""
    try:
        params = inspect.signature(module.forward).parameters
    except (TypeError, ValueError):
        return "past_key_values"
    return "cache" if "cache" in params else "past_key_values"


@contextlib.contextmanager
def _held_load_report() -> Iterator[None]:
    """transformers' load report (a table of missing, unexpected and mismatched weights, logged as a warning of many
    lines), held back while a model loads: logged after a load that succeeds, dropped with a load that fails (whose
    one-line error says what matters in it)."""
    logger = logging.getLogger("transformers.modeling_utils")
    held: list[logging.LogRecord] = []

    def hold(record: logging.LogRecord) -> bool:
        held.append(record)
        return False

    logger.addFilter(hold)
    try:
        yield
    finally:
        logger.removeFilter(hold)
    for record in held:  # reached only when the load succeeded
        logger.handle(record)


def load_model(spec: ModelSpec, *, device: str | torch.device = "cpu", tokenizer=None, train: bool = False):
    """Load ``(model, tokenizer)`` for any causal LM on ``device``; left padding and a pad token are guaranteed.

    ``device`` is a setting as :func:`resolve_device` takes it (``auto`` | ``cpu`` | ``cuda`` | ``cuda:N``) or a
    ``torch.device``; it is checked before any weights load. Raises ``ModelUnavailableError`` (an ``OSError``)
    naming the model when its files cannot be had. ``spec.gradient_checkpointing`` is switched on here.
    The weights are ``spec.dtype``, or ``spec.train_dtype`` (the master weights) for the policy to train
    (``train=True``); either way the model computes in ``spec.dtype`` (:func:`compute_dtype`).
    """
    from huggingface_hub.errors import HfHubHTTPError, HFValidationError
    from safetensors import SafetensorError
    from transformers import AutoModelForCausalLM

    target = resolve_device(device)
    tokenizer = load_tokenizer(spec) if tokenizer is None else tokenizer
    path = model_path(spec)
    problem = shape_problem(path, spec.trust_remote_code) if Path(path).is_dir() else None
    if problem is not None:
        raise ModelUnavailableError(f"Cannot load model {path!r}: {problem}")
    try:
        with _held_load_report():
            model, info = AutoModelForCausalLM.from_pretrained(
                path, dtype=spec.train_dtype if train else spec.torch_dtype,
                attn_implementation=spec.attn_implementation, revision=spec.revision,
                trust_remote_code=spec.trust_remote_code, ignore_mismatched_sizes=True, output_loading_info=True,
                **_kernel_kwargs(spec.hub_kernels))
            if info.get("mismatched_keys"):  # (weights shape_problem cannot read): the report held back is dropped
                raise ModelUnavailableError(f"Cannot load model {path!r}: "
                                            f"{shape_mismatch(path, info['mismatched_keys'])}")
            if info.get("missing_keys"):  # weights the model would start from random values: never silently
                raise ModelUnavailableError(f"Cannot load model {path!r}: {missing_weights(path, info['missing_keys'])}")
    except (OSError, HfHubHTTPError, HFValidationError) as err:
        if isinstance(err, ModelUnavailableError):
            raise
        raise _unavailable(spec, path, err) from err
    except (SafetensorError, RuntimeError, EOFError, pickle.UnpicklingError) as err:  # truncated or corrupt weights
        problem = weights_problem(path) if Path(path).is_dir() else None
        if problem is None and not isinstance(err, SafetensorError) and "PytorchStreamReader" not in str(err) \
                and not isinstance(err, (EOFError, pickle.UnpicklingError)):
            raise
        raise ModelUnavailableError(f"Cannot load model {path!r}: " + (problem or "its weights are unreadable, "
                                    f"truncated or corrupt ({' '.join(str(err).split())})")) from err
    if model.generation_config.pad_token_id is None:
        model.generation_config.pad_token_id = tokenizer.pad_token_id
    if model.generation_config.eos_token_id is None:
        model.generation_config.eos_token_id = tokenizer.eos_token_id
    if spec.gradient_checkpointing:
        # non-reentrant: no need for inputs that require grad, and it composes with the chunked log-probs' own
        # checkpoints (gdro.policy); HF applies it only in training mode, so generation is untouched
        kwargs = {"use_reentrant": False}
        if hasattr(model, "activation_checkpointing_enable"):  # transformers >= 5.x (the old name is deprecated)
            model.activation_checkpointing_enable(activation_checkpointing_kwargs=kwargs)
        else:
            model.gradient_checkpointing_enable(gradient_checkpointing_kwargs=kwargs)
    if train and spec.lora.enabled:  # only the adapters train (gdro.models.lora)
        from gdro.models.lora import add_adapters

        model = add_adapters(model, spec.lora)
    setattr(model, COMPUTE_DTYPE_ATTR, spec.torch_dtype)
    return model.to(target).eval(), tokenizer


@dataclass
class Policy:
    """The model a run trains (or an evaluation samples from), its tokenizer, its rollout engine and, for a KL term,
    its frozen reference (gdro.compose.build.make_policy)."""

    model: torch.nn.Module
    tokenizer: Any
    engine: Generator
    reference: torch.nn.Module | None = None


def save_model_dir(model: torch.nn.Module, tokenizer: Any, path: Path, state: dict[str, torch.Tensor] | None) -> None:
    """``model`` as a HF model dir at ``path`` (``state``: the weights to write, None: the model's own) with its
    tokenizer; a LoRA policy (``state`` then holds the merged weights) also writes its adapter to ``path/adapter``."""
    from gdro.models.lora import ADAPTER_DIR, has_adapters, save_adapter

    model.save_pretrained(path, safe_serialization=True, state_dict=state)
    tokenizer.save_pretrained(path)
    if has_adapters(model):
        save_adapter(model, Path(path) / ADAPTER_DIR)
