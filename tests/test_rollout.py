"""The HF rollout engine on the shipped tiny Qwen3 model: ragged, seeded, log-probs consistent with training."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from gdro.models import ModelSpec, load_model
from gdro.policy import completion_logprobs, make_token_batch
from gdro.rollout.base import SamplingParams, expand_groups
from gdro.rollout.hf import HFGenerator

PROMPTS = ["Copy: 3 8 9.", "Copy: 1 2 3 4 5 6 7.", "Copy: 5.", "Copy: 9 9 1 2."]


@pytest.fixture(scope="module")
def engine():
    model, tok = load_model(ModelSpec("tiny", max_prompt_len=64, max_new_tokens=16))
    return HFGenerator(model, tok, use_chat_template=True, max_prompt_len=64, batch_size=7)


def test_ragged_counts_including_zero(engine):
    n = [3, 0, 5, 1]
    roll = engine.generate(PROMPTS, n, seed=0, sampling=SamplingParams(max_new_tokens=16))
    assert len(roll) == 9 and roll.group_sizes.tolist() == n
    assert roll.group_index.tolist() == expand_groups(n).tolist()
    assert len(roll.texts) == len(roll.logprobs) == len(roll.finish_reasons) == 9
    for c, lp, fr in zip(roll.completion_ids, roll.logprobs, roll.finish_reasons):
        assert len(c) == len(lp) >= 1 and np.all(lp <= 0)
        assert fr in ("stop", "length")
        assert (fr == "stop") == (c[-1] in engine.eos_ids)
        assert fr == "stop" or len(c) == 16


def test_seeded_and_batch_size_independent_of_seed_stream(engine):
    sp = SamplingParams(temperature=1.0, max_new_tokens=16)
    a = engine.generate(PROMPTS, [4] * 4, seed=11, sampling=sp)
    b = engine.generate(PROMPTS, [4] * 4, seed=11, sampling=sp)
    c = engine.generate(PROMPTS, [4] * 4, seed=12, sampling=sp)
    assert a.completion_ids == b.completion_ids and a.texts == b.texts
    assert a.completion_ids != c.completion_ids
    # the engine does not disturb the global RNG stream
    torch.manual_seed(0)
    x = torch.rand(3)
    torch.manual_seed(0)
    engine.generate(PROMPTS, [1] * 4, seed=5, sampling=sp)
    assert torch.equal(torch.rand(3), x)


def test_logprobs_match_training_recompute(engine):
    sp = SamplingParams(temperature=0.8, top_p=0.9, top_k=0, max_new_tokens=16)
    roll = engine.generate(PROMPTS, [2, 3, 1, 2], seed=3, sampling=sp)
    rows = list(range(len(roll)))
    tb = make_token_batch(roll, rows, engine.pad_id)
    with torch.no_grad():
        lp = completion_logprobs(engine.model, tb, sp.temperature)
    for i in rows:
        n = len(roll.completion_ids[i])
        np.testing.assert_allclose(lp[i, :n].numpy(), roll.logprobs[i], atol=1e-4)
        assert torch.all(tb.mask[i, :n] == 1) and torch.all(tb.mask[i, n:] == 0)


def test_top_k_one_is_greedy(engine):
    a = engine.generate(PROMPTS, [3] * 4, seed=1, sampling=SamplingParams(top_k=1, max_new_tokens=16))
    for g in range(4):
        texts = {a.texts[i] for i in np.flatnonzero(a.group_index == g)}
        assert len(texts) == 1  # greedy: every rollout of a prompt is the same


def test_bad_input(engine):
    with pytest.raises(ValueError, match="rollout counts"):
        engine.generate(PROMPTS, [1, 2], seed=0, sampling=SamplingParams())
    with pytest.raises(ValueError, match="n must be >= 0"):
        engine.generate(PROMPTS, [1, -1, 1, 1], seed=0, sampling=SamplingParams())
    with pytest.raises(ValueError, match="max_prompt_len"):
        engine.generate(["Copy: " + "1 " * 80], [1], seed=0, sampling=SamplingParams())
    with pytest.raises(ValueError, match="temperature"):
        SamplingParams(temperature=0)
