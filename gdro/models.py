"""Models: load any causal LM from the Hugging Face format; build and warm-start the embedded tiny model.

Every model — the shipped 0.8M-parameter Qwen3 at ``TINY_DIR`` or ``Qwen/Qwen3-1.7B-Base`` — goes through the same
``AutoModelForCausalLM`` / ``AutoTokenizer.from_pretrained`` path, so the trainer never special-cases the toy.

The tiny model is a ``Qwen3ForCausalLM`` (hidden 128, 4 layers, 4/2 heads, tied embeddings) with a character-level
tokenizer built locally by the ``tokenizers`` library (nothing is downloaded). It is warm-started by a short SFT
on the copy task (``gdro.data.synthetic``) and stopped on purpose while the long levels are still mostly unsolved,
so GRPO has headroom: see ``build_tiny`` and ``scripts/build_tiny_model.py``.
"""

from __future__ import annotations

import contextlib
import inspect
import json
import math
import os
import time
from dataclasses import asdict, dataclass
from pathlib import Path

import numpy as np
import torch

from gdro.data.synthetic import CopyTask, Problem, copy_completion

TINY_DIR = Path(__file__).parent / "assets" / "tiny-copy"

PAD, BOS_CHAT, EOS = "<|endoftext|>", "<|im_start|>", "<|im_end|>"
SPECIAL_TOKENS = (PAD, BOS_CHAT, EOS)
# Frequent words as single (non-special) tokens: shorter prompts, faster rollouts.
WORD_TOKENS = ("\\boxed{", "Copy:", "user", "assistant", "system")
# Character alphabet: printable ASCII plus newline and tab, so any ASCII text round-trips (others map to <unk>).
ALPHABET = ("\n", "\t", *(chr(i) for i in range(32, 127)))
CHATML_TEMPLATE = (
    "{% for message in messages %}"
    "{{ '<|im_start|>' + message['role'] + '\\n' + message['content'] + '<|im_end|>' + '\\n' }}"
    "{% endfor %}"
    "{% if add_generation_prompt %}{{ '<|im_start|>assistant\\n' }}{% endif %}"
)
DTYPES = {"float32": torch.float32, "bfloat16": torch.bfloat16, "float16": torch.float16}


# ---------------------------------------------------------------------------------------------------------------
# Tokenizer and config of the tiny model
# ---------------------------------------------------------------------------------------------------------------
def build_tokenizer(out_dir: str | Path | None = None):
    """Character-level ChatML tokenizer (a ``PreTrainedTokenizerFast``); saved to ``out_dir`` if given."""
    from tokenizers import AddedToken, Regex, Tokenizer, decoders, models, pre_tokenizers
    from transformers import PreTrainedTokenizerFast

    vocab: dict[str, int] = {}
    for t in (*SPECIAL_TOKENS, "<unk>", *ALPHABET):
        vocab.setdefault(t, len(vocab))
    tok = Tokenizer(models.WordLevel(vocab=vocab, unk_token="<unk>"))
    tok.pre_tokenizer = pre_tokenizers.Split(Regex(r"[\s\S]"), behavior="isolated")  # one piece per character
    tok.decoder = decoders.Fuse()  # concatenate, no spaces between pieces
    # Specials must be registered as added tokens, or "<|im_start|>" is split into characters.
    tok.add_special_tokens([AddedToken(t, special=True, normalized=False) for t in SPECIAL_TOKENS])
    tok.add_tokens([AddedToken(t, special=False, normalized=False) for t in WORD_TOKENS])
    hf_tok = PreTrainedTokenizerFast(
        tokenizer_object=tok, eos_token=EOS, pad_token=PAD, unk_token="<unk>", chat_template=CHATML_TEMPLATE,
        clean_up_tokenization_spaces=False, model_max_length=128,
    )
    if out_dir is not None:
        hf_tok.save_pretrained(str(out_dir))
    return hf_tok


def tiny_config(vocab_size: int, *, eos_token_id: int, pad_token_id: int, hidden_size: int = 128,
                num_hidden_layers: int = 4, num_attention_heads: int = 4, num_key_value_heads: int = 2,
                head_dim: int = 32, intermediate_size: int = 384, max_position_embeddings: int = 128):
    """A ~0.8M-parameter ``Qwen3Config`` with tied embeddings."""
    from transformers import Qwen3Config

    return Qwen3Config(
        vocab_size=vocab_size, hidden_size=hidden_size, num_hidden_layers=num_hidden_layers,
        num_attention_heads=num_attention_heads, num_key_value_heads=num_key_value_heads, head_dim=head_dim,
        intermediate_size=intermediate_size, max_position_embeddings=max_position_embeddings,
        tie_word_embeddings=True, eos_token_id=eos_token_id, pad_token_id=pad_token_id, bos_token_id=None,
    )


def chat_affixes(tokenizer) -> tuple[str, str]:
    """(prefix, suffix) such that the chat-formatted prompt of ``p`` is ``prefix + p + suffix``."""
    sentinel = "\x00SENTINEL\x00"
    text = tokenizer.apply_chat_template([{"role": "user", "content": sentinel}], add_generation_prompt=True,
                                         tokenize=False)
    prefix, suffix = text.split(sentinel)
    return prefix, suffix


def encode_sft_batch(tokenizer, problems: list[Problem]) -> dict[str, torch.Tensor]:
    """Right-padded SFT batch: chat prompt + ``\\boxed{answer}`` + EOS; labels only on the completion."""
    prefix, suffix = chat_affixes(tokenizer)  # one template render, then batched Rust tokenisation
    prompts = tokenizer([prefix + p.prompt + suffix for p in problems], add_special_tokens=False)["input_ids"]
    comps = tokenizer([copy_completion(p.answer) for p in problems], add_special_tokens=False)["input_ids"]
    seqs = [(p, c + [tokenizer.eos_token_id]) for p, c in zip(prompts, comps)]
    width = max(len(p) + len(c) for p, c in seqs)
    ids = torch.full((len(seqs), width), tokenizer.pad_token_id, dtype=torch.long)
    labels = torch.full((len(seqs), width), -100, dtype=torch.long)
    mask = torch.zeros((len(seqs), width), dtype=torch.long)
    for i, (p, c) in enumerate(seqs):
        ids[i, : len(p) + len(c)] = torch.tensor(p + c)
        labels[i, len(p): len(p) + len(c)] = torch.tensor(c)
        mask[i, : len(p) + len(c)] = 1
    return {"input_ids": ids, "attention_mask": mask, "labels": labels}


# ---------------------------------------------------------------------------------------------------------------
# Warm start
# ---------------------------------------------------------------------------------------------------------------
def _sft_loss(model, batch: dict[str, torch.Tensor]) -> torch.Tensor:
    """Token-mean cross entropy over completion tokens (labels shifted by one)."""
    logits = model(input_ids=batch["input_ids"], attention_mask=batch["attention_mask"]).logits
    return torch.nn.functional.cross_entropy(
        logits[:, :-1].reshape(-1, logits.shape[-1]).float(), batch["labels"][:, 1:].reshape(-1), ignore_index=-100)


def _lr_factor(step: int, steps: int, warmup: int, min_ratio: float) -> float:
    """Linear warmup over ``warmup`` steps, then cosine from 1 to ``min_ratio`` (1.0 = constant)."""
    if step < warmup:
        return (step + 1) / warmup
    frac = (step - warmup) / max(1, steps - warmup)
    return min_ratio + (1 - min_ratio) * 0.5 * (1 + math.cos(math.pi * min(1.0, frac)))


def build_tiny(out_dir: str | Path, *, task: CopyTask | None = None, sft_steps: int = 70, batch_size: int = 128,
               lr: float = 2e-3, warmup: int = 50, min_lr_ratio: float = 0.1, sft_decay: float = 0.6,
               seed: int = 0, progress: bool = True) -> Path:
    """Build the tiny Qwen3 + tokenizer and warm-start it by SFT on the copy task; save to ``out_dir``.

    Deterministic for a fixed seed and thread count (single process, seeded torch and numpy). SFT problems have
    levels ∝ ``sft_decay``^L over the task's levels and never use a held-out string; the loss is the token mean
    over completion tokens (``\\boxed{...}`` + EOS). AdamW, lr warmed up linearly over ``warmup`` steps, then
    cosine down to ``min_lr_ratio * lr``.

    The defaults were measured (seed 0, 2 threads, ~16 s) to stop on purpose mid-way: held-out mean@8 at
    T=0.6/top-p 0.8/top-k 20 is ≥ 95% on L1–L5, 61% on L6, 29% on L7 and 3% on L8 (overall 69.5; 44.6 at T=1),
    leaving GRPO a frontier and a hard tail. The cosine decay matters: at a constant lr the checkpoint is caught
    mid-oscillation (easy levels drop below 90% at some steps). Other seeds move the frontier by about a level.
    """
    import tokenizers
    import transformers
    from tqdm.auto import tqdm
    from transformers import GenerationConfig, Qwen3ForCausalLM

    task = task if task is not None else CopyTask()
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    torch.manual_seed(seed)
    rng = np.random.default_rng(seed)
    tokenizer = build_tokenizer()
    config = tiny_config(len(tokenizer), eos_token_id=tokenizer.eos_token_id, pad_token_id=tokenizer.pad_token_id)
    model = Qwen3ForCausalLM(config).train()
    opt = torch.optim.AdamW(model.parameters(), lr=lr, betas=(0.9, 0.95), weight_decay=0.0)
    sched = torch.optim.lr_scheduler.LambdaLR(opt, lambda s: _lr_factor(s, sft_steps, warmup, min_lr_ratio))
    problems = task.sample_problems(sft_steps * batch_size, rng, decay=sft_decay)
    t0, loss_ema = time.perf_counter(), float("nan")
    bar = tqdm(range(sft_steps), desc="SFT warm start", disable=not progress)
    for step in bar:
        batch = encode_sft_batch(tokenizer, problems[step * batch_size: (step + 1) * batch_size])
        loss = _sft_loss(model, batch)
        opt.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        sched.step()
        loss_ema = loss.item() if step == 0 else 0.9 * loss_ema + 0.1 * loss.item()
        bar.set_postfix(loss=f"{loss_ema:.4f}")
    model.eval()
    model.generation_config = GenerationConfig(eos_token_id=tokenizer.eos_token_id,
                                               pad_token_id=tokenizer.pad_token_id)
    model.save_pretrained(str(out), safe_serialization=True)
    tokenizer.save_pretrained(str(out))
    record = {
        "args": {"sft_steps": sft_steps, "batch_size": batch_size, "lr": lr, "warmup": warmup,
                 "min_lr_ratio": min_lr_ratio, "sft_decay": sft_decay, "seed": seed, "task": asdict(task)},
        "final_loss_ema": loss_ema,
        "num_params": sum(p.numel() for p in model.parameters()),
        "torch_num_threads": torch.get_num_threads(),
        "versions": {"torch": torch.__version__, "transformers": transformers.__version__,
                     "tokenizers": tokenizers.__version__},
    }
    (out / "gdro_build.json").write_text(json.dumps(record, indent=2) + "\n")
    if progress:
        print(f"built tiny model in {time.perf_counter() - t0:.1f}s -> {out}")
    return out


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


def format_prompt(tokenizer, prompt: str, use_chat_template: bool) -> str:
    """The text fed to the model for a user ``prompt``: chat-formatted (generation prompt added) or raw."""
    if not use_chat_template:
        return prompt
    if tokenizer.chat_template is None:
        raise ValueError("use_chat_template=True but the tokenizer has no chat_template; set it False")
    return tokenizer.apply_chat_template([{"role": "user", "content": prompt}], add_generation_prompt=True,
                                         tokenize=False)
