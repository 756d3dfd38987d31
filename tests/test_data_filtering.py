"""drop_long_prompts with the shipped tiny model's real tokenizer: lengths are the rollout engine's."""

from __future__ import annotations

import pytest
from transformers import AutoTokenizer

from gdro.common.interfaces import Problem
from gdro.data.filtering import _CHUNK, drop_long_prompts, prompt_lengths
from gdro.data.prompts import encode_prompts
from gdro.models.source import TINY_DIR


@pytest.fixture(scope="module")
def tokenizer():
    return AutoTokenizer.from_pretrained(TINY_DIR)


def _problems(sizes: list[int]) -> list[Problem]:
    return [
        Problem(uid=f"p{i}", prompt="ab" * (n // 2) + "c" * (n % 2), answer="x", level=0)
        for i, n in enumerate(sizes)
    ]


@pytest.mark.parametrize("use_chat_template", [True, False])
def test_lengths_are_those_of_encode_prompts(tokenizer, use_chat_template):
    problems = _problems([1, 7, 30, 64, 65, 200])
    prompts = [p.prompt for p in problems]
    lengths = prompt_lengths(prompts, tokenizer, use_chat_template=use_chat_template)
    ids = encode_prompts(tokenizer, prompts, use_chat_template=use_chat_template, max_prompt_len=10**6)
    assert lengths == [len(r) for r in ids]
    # and counted the way the engine says it counts: the template as one user turn plus the generation prompt
    texts = prompts
    if use_chat_template:
        texts = [
            tokenizer.apply_chat_template(
                [{"role": "user", "content": p}], add_generation_prompt=True, tokenize=False
            )
            for p in prompts
        ]
    assert lengths == [
        len(tokenizer(t, add_special_tokens=not use_chat_template)["input_ids"]) for t in texts
    ]


def test_chat_template_adds_tokens(tokenizer):
    prompts = [p.prompt for p in _problems([5, 40])]
    plain = prompt_lengths(prompts, tokenizer, use_chat_template=False)
    chat = prompt_lengths(prompts, tokenizer, use_chat_template=True)
    overhead = {c - p for c, p in zip(chat, plain, strict=True)}
    assert len(overhead) == 1 and overhead.pop() > 0


@pytest.mark.parametrize("use_chat_template", [True, False])
def test_drop_long_prompts_keeps_what_the_engine_accepts(tokenizer, use_chat_template):
    problems = _problems([3, 90, 20, 61, 64, 10, 300])
    lengths = prompt_lengths([p.prompt for p in problems], tokenizer, use_chat_template=use_chat_template)
    limit = sorted(lengths)[3]  # exactly four prompts fit (lengths are distinct), one of them at the limit
    kept, dropped = drop_long_prompts(
        problems, tokenizer, max_prompt_len=limit, use_chat_template=use_chat_template
    )
    assert dropped == 3 and len(kept) == 4
    assert kept == [p for p, n in zip(problems, lengths, strict=True) if n <= limit]  # order kept
    assert (
        max(prompt_lengths([p.prompt for p in kept], tokenizer, use_chat_template=use_chat_template)) == limit
    )
    # the engine accepts every kept prompt and rejects every dropped one
    encode_prompts(
        tokenizer, [p.prompt for p in kept], use_chat_template=use_chat_template, max_prompt_len=limit
    )
    for p in problems:
        if p not in kept:
            with pytest.raises(ValueError, match="max_prompt_len"):
                encode_prompts(
                    tokenizer, [p.prompt], use_chat_template=use_chat_template, max_prompt_len=limit
                )


def test_drop_long_prompts_edges(tokenizer):
    assert drop_long_prompts([], tokenizer, max_prompt_len=8, use_chat_template=True) == ([], 0)
    problems = _problems([4, 5])
    assert drop_long_prompts(problems, tokenizer, max_prompt_len=10**6, use_chat_template=True) == (
        problems,
        0,
    )
    assert drop_long_prompts(problems, tokenizer, max_prompt_len=1, use_chat_template=True) == ([], 2)
    with pytest.raises(ValueError, match="max_prompt_len"):
        drop_long_prompts(problems, tokenizer, max_prompt_len=0, use_chat_template=True)


def test_more_prompts_than_one_chunk(tokenizer):
    problems = _problems([(i * 7) % 50 + 1 for i in range(_CHUNK + 37)])
    lengths = prompt_lengths([p.prompt for p in problems], tokenizer, use_chat_template=False)
    ids = encode_prompts(
        tokenizer, [p.prompt for p in problems], use_chat_template=False, max_prompt_len=10**6
    )
    assert lengths == [len(r) for r in ids]
    kept, dropped = drop_long_prompts(problems, tokenizer, max_prompt_len=25, use_chat_template=False)
    assert dropped == sum(n > 25 for n in lengths) > 0 and len(kept) + dropped == len(problems)
