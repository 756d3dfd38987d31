"""The embedded tiny model: build its tokenizer and config, and warm-start it on the copy task.

The tiny model is a ``Qwen3ForCausalLM`` (hidden 128, 4 layers, 4/2 heads, tied embeddings) with a character-level
tokenizer built locally by the ``tokenizers`` library (nothing is downloaded). It is warm-started by a short SFT
on the copy task (``gdro.data.synthetic``) and stopped on purpose while the long levels are still mostly unsolved,
so GRPO has headroom: see :func:`build_tiny` and ``scripts/build_tiny_model.py``. It ships in
``gdro/assets/tiny-copy`` (:data:`gdro.models.source.TINY_DIR`) and loads like any other model (``model.name_or_path=tiny``).
"""

from __future__ import annotations

import json
import math
import time
from dataclasses import asdict
from pathlib import Path

import numpy as np
import torch

from gdro.common.interfaces import Problem
from gdro.data.synthetic import CopyTask, copy_completion

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
