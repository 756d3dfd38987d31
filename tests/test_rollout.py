"""The HF rollout engine on the shipped tiny Qwen3 model: ragged, seeded, log-probs (only when asked for)
consistent with training; the engine factory and the Generator protocol."""

from __future__ import annotations

import dataclasses
import inspect

import numpy as np
import pytest
import torch

from gdro.common.rollouts import SamplingParams, expand_groups
from gdro.models.loading import ModelSpec, load_model
from gdro.policy import completion_logprobs
from gdro.policy.layouts import make_token_batch
from gdro.rollout import Generator, make_engine
from gdro.rollout.hf import HFEngineConfig, HFGenerator, sampled_logprobs

PROMPTS = ["Copy: 3 8 9.", "Copy: 1 2 3 4 5 6 7.", "Copy: 5.", "Copy: 9 9 1 2."]
SPEC = ModelSpec("tiny", max_prompt_len=64, max_new_tokens=16)


@pytest.fixture(scope="module")
def engine():
    model, tok = load_model(SPEC, device="cpu")
    return make_engine(HFEngineConfig(batch_size=7), model, tok, SPEC)


def test_factory_builds_the_hf_engine_and_it_is_a_generator(engine):
    assert isinstance(engine, HFGenerator) and isinstance(engine, Generator)  # runtime_checkable: members exist
    assert (engine.batch_size, engine.max_prompt_len, engine.use_chat_template) == (7, 64, True)
    assert isinstance(engine.pad_id, int) and engine.pad_id == engine.tokenizer.pad_token_id
    for name in ("generate", "sync_weights"):  # and the signatures match the protocol's
        proto, impl = inspect.signature(getattr(Generator, name)), inspect.signature(getattr(HFGenerator, name))
        assert [(p.name, p.kind) for p in impl.parameters.values()] == \
            [(p.name, p.kind) for p in proto.parameters.values()], name
    engine.sync_weights(engine.model)
    with pytest.raises(ValueError, match="same model"):
        engine.sync_weights(torch.nn.Linear(1, 1))
    with pytest.raises(ValueError, match="unsupported engine config SamplingParams.*HFEngineConfig"):
        make_engine(SamplingParams(), engine.model, engine.tokenizer, SPEC)


def test_no_logprobs_by_default_and_asking_for_them_changes_no_token(engine):
    sp = SamplingParams(temperature=0.9, top_p=0.95, top_k=5, max_new_tokens=16)
    assert sp.logprobs is False
    plain = engine.generate(PROMPTS, [3, 1, 2, 2], seed=7, sampling=sp)
    with_lp = engine.generate(PROMPTS, [3, 1, 2, 2], seed=7, sampling=dataclasses.replace(sp, logprobs=True))
    assert plain.logprobs is None
    assert with_lp.logprobs is not None and len(with_lp.logprobs) == len(with_lp) == 8
    assert plain.completion_ids == with_lp.completion_ids and plain.texts == with_lp.texts
    assert plain.finish_reasons == with_lp.finish_reasons
    with pytest.raises(TypeError, match="logprobs must be true or false"):
        SamplingParams(logprobs=1)


def test_sampled_logprobs_step_by_step_equal_the_stacked_reference():
    gen = torch.Generator().manual_seed(0)
    steps = [torch.randn(3, 11, generator=gen) * 4 for _ in range(5)]
    tokens = torch.randint(0, 11, (3, 5), generator=gen)
    ref = torch.log_softmax(torch.stack(steps, dim=1) / 0.7, dim=-1).gather(-1, tokens.unsqueeze(-1)).squeeze(-1)
    got = sampled_logprobs(steps, tokens, 0.7)
    assert got.dtype == torch.float32 and got.device.type == "cpu"
    torch.testing.assert_close(got, ref, atol=1e-6, rtol=0)
    with pytest.raises(ValueError, match="5 steps but 4 sampled tokens"):
        sampled_logprobs(steps, tokens[:, :4], 0.7)


def test_ragged_counts_including_zero(engine):
    n = [3, 0, 5, 1]
    roll = engine.generate(PROMPTS, n, seed=0, sampling=SamplingParams(max_new_tokens=16, logprobs=True))
    assert len(roll) == 9 and roll.group_sizes.tolist() == n
    assert roll.group_index.tolist() == expand_groups(n).tolist()
    assert len(roll.texts) == len(roll.logprobs) == len(roll.finish_reasons) == 9
    for c, lp, fr in zip(roll.completion_ids, roll.logprobs, roll.finish_reasons):
        assert len(c) == len(lp) >= 1 and np.all(lp <= 0)
        assert fr in ("stop", "length")
        assert (fr == "stop") == (c[-1] in engine.eos_ids)
        assert fr == "stop" or len(c) == 16


def test_seeded_and_leaves_the_global_rng_alone(engine):
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


def test_chunking_and_left_padding_do_not_change_greedy_rollouts(engine):
    """batch_size only chunks the rows: greedy completions and their log-probs are the same for 1 row per
    generate() call (no padding), chunks that split a group, and one call for all rows. (Sampled completions do
    depend on batch_size: one RNG stream is drawn per chunk, so batch_size is part of a run's config.)"""
    sp = SamplingParams(top_k=1, max_new_tokens=16, logprobs=True)
    n = [2, 0, 3, 1]
    ref = HFGenerator(engine.model, engine.tokenizer, use_chat_template=True, max_prompt_len=64, batch_size=512)
    a = ref.generate(PROMPTS, n, seed=0, sampling=sp)
    for batch_size in (1, 4):
        other = HFGenerator(engine.model, engine.tokenizer, use_chat_template=True, max_prompt_len=64,
                            batch_size=batch_size)
        b = other.generate(PROMPTS, n, seed=0, sampling=sp)
        assert b.completion_ids == a.completion_ids and b.finish_reasons == a.finish_reasons, batch_size
        for x, y in zip(b.logprobs, a.logprobs):
            np.testing.assert_allclose(x, y, atol=1e-5)


def test_logprobs_match_training_recompute(engine):
    """Requested engine log-probs (per step, before top-k/top-p) equal the training forward's recomputation."""
    sp = SamplingParams(temperature=0.8, top_p=0.9, top_k=0, max_new_tokens=16, logprobs=True)
    roll = engine.generate(PROMPTS, [2, 3, 1, 2], seed=3, sampling=sp)
    rows = list(range(len(roll)))
    tb = make_token_batch(roll, rows, engine.pad_id, device=engine.device)
    with torch.no_grad():
        lp = completion_logprobs(engine.model, tb, sp.temperature).cpu()
    for i in rows:
        n = len(roll.completion_ids[i])
        np.testing.assert_allclose(lp[i, :n].numpy(), roll.logprobs[i], atol=1e-5, rtol=0)
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
