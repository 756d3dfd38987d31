"""Prompt encoding: the token ids a model is fed for a user prompt, as every engine and the data filter count them.

A prompt goes in as one user turn of the model's chat template with the generation prompt added
(``use_chat_template``; special tokens come from the template), or as raw text with the tokenizer's special tokens.
"""

from __future__ import annotations

from collections.abc import Sequence


def encode_prompts(tokenizer, prompts: Sequence[str], *, use_chat_template: bool, max_prompt_len: int) -> list[list[int]]:
    """Token ids of each prompt, as a single user turn when ``use_chat_template``; too-long prompts are an error."""
    if use_chat_template:
        texts = [
            tokenizer.apply_chat_template([{"role": "user", "content": p}], add_generation_prompt=True, tokenize=False)
            for p in prompts
        ]
    else:
        texts = list(prompts)
    ids = tokenizer(texts, add_special_tokens=not use_chat_template)["input_ids"]
    for i, row in enumerate(ids):
        if len(row) > max_prompt_len:
            raise ValueError(
                f"prompt {i} has {len(row)} tokens > model.max_prompt_len={max_prompt_len}: {prompts[i][:80]!r}..."
            )
    return [list(r) for r in ids]


def format_prompt(tokenizer, prompt: str, use_chat_template: bool) -> str:
    """The text fed to the model for a user ``prompt``: chat-formatted (generation prompt added) or raw."""
    if not use_chat_template:
        return prompt
    if tokenizer.chat_template is None:
        raise ValueError("use_chat_template=True but the tokenizer has no chat_template; set it False")
    return tokenizer.apply_chat_template([{"role": "user", "content": prompt}], add_generation_prompt=True,
                                         tokenize=False)
