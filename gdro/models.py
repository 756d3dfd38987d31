"""Models: load any causal LM from the Hugging Face format, place it, and say how it computes.

Every model — the shipped 0.8M-parameter Qwen3 at ``TINY_DIR`` or ``Qwen/Qwen3-1.7B-Base`` — goes through the same
``AutoModelForCausalLM`` / ``AutoTokenizer.from_pretrained`` path, so the trainer never special-cases the toy. How
the tiny model and its tokenizer are built and warm-started is :mod:`gdro.tiny`.
"""

from __future__ import annotations

import contextlib
import inspect
import os
from dataclasses import dataclass
from pathlib import Path

import torch

from gdro.prompts import format_prompt  # noqa: F401 (re-exported: it lived here)

TINY_DIR = Path(__file__).parent / "assets" / "tiny-copy"

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


def check_placement(threads: int | None, device: str) -> None:
    """The ``threads`` and ``device`` settings every entry point takes, checked one way: threads >= 1 or null, and
    a device this machine has (:func:`resolve_device`). Raises ValueError (or TypeError) naming the key."""
    if threads is not None and threads < 1:
        raise ValueError(f"threads must be >= 1 or null, got {threads}")
    resolve_device(device)


def resolve_path(name_or_path: str) -> str:
    """``"tiny"`` → the shipped checkpoint directory; ``"qwen3-rehearsal"`` → the rehearsal model (Qwen3's
    architecture, vocabulary and real tokenizer, random weights; built once on first use, :mod:`gdro.qwen3`);
    anything else unchanged (hub id or local path)."""
    if name_or_path in ("qwen3-rehearsal", "qwen3-1.7b-random"):
        from gdro.qwen3 import build_rehearsal_model

        return str(build_rehearsal_model(name=name_or_path))
    return str(TINY_DIR) if name_or_path == "tiny" else name_or_path


WEIGHT_FILES = ("model.safetensors", "model.safetensors.index.json", "pytorch_model.bin", "pytorch_model.bin.index.json")
TOKENIZER_FILES = ("tokenizer.json", "tokenizer_config.json")


def model_dir_problem(path: str | Path) -> str | None:
    """What keeps a local model directory from loading, in one line (None: it looks complete, or it is no local
    directory). A save cut short leaves ``config.json`` without weights or tokenizer: transformers would then fail
    far from the cause (a chat-template error)."""
    path = Path(path)
    if not path.is_dir():
        return None
    names = {p.name for p in path.iterdir()}
    missing = [what for what, files in (("config.json", ("config.json",)), ("weights", WEIGHT_FILES),
                                        ("tokenizer", TOKENIZER_FILES)) if not names & set(files)]
    if "run.json" in names:
        return f"{str(path)!r} is a gdro run dir; its final policy is {str(path / 'checkpoint')!r}"
    if len(missing) == 3:
        return None  # no model dir at all (from_pretrained's own message says so)
    if missing:
        return (f"{str(path)!r} is not a complete model directory: no {' and no '.join(missing)} (a save cut short? "
                "rerunning the gdro-train command that wrote it finishes it)")
    from safetensors import SafetensorError, safe_open

    for weights in sorted(path.glob("*.safetensors")):  # the header and the file's length: cheap, nothing loaded
        try:
            with safe_open(str(weights), framework="pt"):
                pass
        except (SafetensorError, OSError) as err:
            return f"{str(weights)!r} is unreadable, truncated or corrupt ({' '.join(str(err).split())})"
    return None


def _unavailable(spec: ModelSpec, path: str, err: BaseException) -> ModelUnavailableError:
    if spec.name_or_path == "tiny" or os.path.isabs(path) or path.startswith("."):
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

    path = resolve_path(spec.name_or_path)
    problem = model_dir_problem(path)
    if problem is not None:
        raise ModelUnavailableError(f"Cannot load model {path!r}: {problem}")
    try:
        tokenizer = AutoTokenizer.from_pretrained(path, revision=spec.revision, trust_remote_code=spec.trust_remote_code)
    except (OSError, HfHubHTTPError, HFValidationError) as err:
        raise _unavailable(spec, path, err) from err
    tokenizer.padding_side = "left"
    if tokenizer.pad_token is None:
        tokenizer.pad_token = tokenizer.eos_token
    return tokenizer


COMPUTE_DTYPE_ATTR = "gdro_compute_dtype"


def compute_dtype(model: torch.nn.Module) -> torch.dtype:
    """The dtype ``model``'s forwards compute in: ``spec.dtype`` for a model from :func:`load_model`, else its
    parameters' dtype. Differs from the parameters' dtype for a policy with fp32 master weights (autocast)."""
    return getattr(model, COMPUTE_DTYPE_ATTR, None) or next(model.parameters()).dtype


def autocast_context(model) -> contextlib.AbstractContextManager:
    """Autocast to the model's compute dtype (:func:`gdro.models.compute_dtype`) where it is lower precision than
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
    path = resolve_path(spec.name_or_path)
    try:
        model = AutoModelForCausalLM.from_pretrained(
            path, dtype=spec.train_dtype if train else spec.torch_dtype, attn_implementation=spec.attn_implementation,
            revision=spec.revision, trust_remote_code=spec.trust_remote_code)
    except (OSError, HfHubHTTPError, HFValidationError) as err:
        raise _unavailable(spec, path, err) from err
    except SafetensorError as err:  # truncated or corrupt weights
        raise ModelUnavailableError(f"Cannot load model {path!r}: its weights are unreadable, truncated or corrupt "
                                    f"({err})") from err
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
    setattr(model, COMPUTE_DTYPE_ATTR, spec.torch_dtype)
    return model.to(target).eval(), tokenizer
