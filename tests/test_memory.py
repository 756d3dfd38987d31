"""Memory-safe training: chunked log-probs, token-budget micro-batches, gradient checkpointing (issue #10).

The chunked log-probs must be the same function as the plain ``log_softmax(model(...).logits)``: bit for bit on
the tiny model (which always fits in one chunk, so the main job's metrics do not move), and equal in value and
gradient on a Qwen3-shaped model with the real 151,936-token vocabulary, in float64.
"""

from __future__ import annotations

import copy
import subprocess
import sys

import numpy as np
import pytest
import torch

from gdro.common.rollouts import RolloutBatch
from gdro.loss import GRPOLoss
from gdro.models.loading import ModelSpec, load_model
from gdro.policy import (
    Forward,
    OptimConfig,
    completion_logprobs,
    ppo_update,
)
from gdro.policy.kernels import LOGITS_CHUNK_ELEMENTS, _token_logprobs
from gdro.policy.layouts import make_token_batch
from gdro.policy.microbatch import micro_batches
from tests.conftest import REPO

QWEN3_VOCAB = 151_936


def _legacy_logprobs(model, tb, temperature):
    """The code completion_logprobs replaced, verbatim."""
    out = model(input_ids=tb.input_ids, attention_mask=tb.attention_mask, position_ids=tb.position_ids)
    logits = out.logits[:, tb.prompt_width - 1 : -1].float() / temperature
    return torch.log_softmax(logits, dim=-1).gather(-1, tb.completion.unsqueeze(-1)).squeeze(-1)


def _ragged_batch(vocab: int, n_groups: int = 4, per_group: int = 3, seed: int = 0, max_len: int = 9,
                  max_prompt: int = 7) -> RolloutBatch:
    """Random prompts and completions of ragged lengths (token ids in [5, vocab): no pad id among them)."""
    rng = np.random.default_rng(seed)
    prompts = [rng.integers(5, vocab, rng.integers(2, max_prompt + 1)).tolist() for _ in range(n_groups)]
    group_index = np.repeat(np.arange(n_groups), per_group)
    comps = [rng.integers(5, vocab, rng.integers(1, max_len + 1)).tolist() for _ in group_index]
    return RolloutBatch(prompts, group_index, comps, None, [""] * len(comps), ["length"] * len(comps))


def _grads(model, fn, weights):
    model.zero_grad(set_to_none=True)
    lp = fn()
    (lp * weights).sum().backward()
    return lp.detach(), {k: p.grad.detach().clone() for k, p in model.named_parameters() if p.grad is not None}


@pytest.fixture(scope="module")
def tiny():
    model, tok = load_model(ModelSpec("tiny", max_prompt_len=64, max_new_tokens=16))
    return model.train(), tok


@pytest.fixture(scope="module")
def big_vocab_model():
    """Random-init Qwen3-shaped model with the real vocabulary, tiny otherwise, in float64."""
    from transformers import Qwen3Config, Qwen3ForCausalLM

    cfg = Qwen3Config(vocab_size=QWEN3_VOCAB, hidden_size=32, num_hidden_layers=1, num_attention_heads=2,
                      num_key_value_heads=1, head_dim=16, intermediate_size=64, max_position_embeddings=64,
                      tie_word_embeddings=True, pad_token_id=0, eos_token_id=1, bos_token_id=None)
    torch.manual_seed(0)
    return Qwen3ForCausalLM(cfg).double().train()


# ------------------------------------------------------------------------------------------ log-probs
def test_tiny_model_is_bit_identical_to_the_previous_code(tiny):
    """Everything fits in one chunk: values and every parameter's gradient equal the old code's exactly."""
    model, tok = tiny
    roll = _ragged_batch(len(tok), n_groups=6, per_group=4)
    tb = make_token_batch(roll, np.arange(len(roll)), tok.pad_token_id)
    assert tb.input_ids.numel() * model.config.vocab_size <= LOGITS_CHUNK_ELEMENTS
    w = torch.randn(tb.mask.shape, generator=torch.Generator().manual_seed(1)) * tb.mask
    for temp in (1.0, 0.7):
        old, g_old = _grads(model, lambda temp=temp: _legacy_logprobs(model, tb, temp), w)
        new, g_new = _grads(model, lambda temp=temp: completion_logprobs(model, tb, temp), w)
        assert torch.equal(old, new)
        assert g_old.keys() == g_new.keys() and all(torch.equal(g_old[k], g_new[k]) for k in g_old)


def test_tiny_model_chunked_path_matches(tiny):
    """Forcing many chunks (3 positions each) on the tiny model: same log-probs and gradients within float32
    rounding (a 3-row matmul rounds differently from a large one: a few ulp), zeros at padded positions."""
    model, tok = tiny
    roll = _ragged_batch(len(tok), n_groups=3, per_group=3, seed=2)
    tb = make_token_batch(roll, np.arange(len(roll)), tok.pad_token_id)
    w = torch.randn(tb.mask.shape, generator=torch.Generator().manual_seed(3)) * tb.mask
    ref, g_ref = _grads(model, lambda: _legacy_logprobs(model, tb, 0.9), w)
    got, g_got = _grads(model, lambda: completion_logprobs(model, tb, 0.9, chunk_elements=3 * len(tok)), w)
    real = tb.mask != 0
    torch.testing.assert_close(got[real], ref[real], rtol=1e-6, atol=1e-6)
    assert torch.all(got[~real] == 0)
    for k in g_ref:  # float32 rounding, relative to the gradient's size
        assert (g_got[k] - g_ref[k]).norm() <= 1e-5 * g_ref[k].norm(), k


def test_large_vocab_chunked_equals_full_in_float64(big_vocab_model):
    """V = 151,936, float64: chunked (5 positions per chunk, checkpointed) vs one full log-softmax, values and
    gradients of every parameter (the tied embedding/LM head included)."""
    model = big_vocab_model
    roll = _ragged_batch(QWEN3_VOCAB, n_groups=2, per_group=2, seed=4, max_len=8, max_prompt=5)
    tb = make_token_batch(roll, np.arange(len(roll)), pad_id=0)
    w = torch.randn(tb.mask.shape, dtype=torch.float64, generator=torch.Generator().manual_seed(5)) * tb.mask
    full, g_full = _grads(model, lambda: completion_logprobs(model, tb, 0.8), w)  # fits: one log-softmax
    chunked, g_chunk = _grads(model, lambda: completion_logprobs(model, tb, 0.8, chunk_elements=5 * QWEN3_VOCAB), w)
    assert full.dtype == torch.float64
    real = tb.mask != 0
    torch.testing.assert_close(chunked[real], full[real], rtol=1e-12, atol=1e-12)
    assert g_full.keys() == g_chunk.keys()
    for k in g_full:
        torch.testing.assert_close(g_chunk[k], g_full[k], rtol=1e-10, atol=1e-14, msg=k)
    with torch.no_grad():  # the no-grad passes (reference, old policy) take the same path
        torch.testing.assert_close(completion_logprobs(model, tb, 0.8, chunk_elements=5 * QWEN3_VOCAB)[real],
                                   full[real], rtol=1e-12, atol=1e-12)


def test_chunked_backward_keeps_no_logits(big_vocab_model):
    """What autograd saves for the backward: with the chunked path far less than one full-vocabulary logits
    tensor of the batch (the checkpointed chunks save nothing but their inputs); without checkpointing, it would
    keep every chunk's logits (as the unchunked head does, checked last)."""
    model = big_vocab_model.float()
    try:
        roll = _ragged_batch(QWEN3_VOCAB, n_groups=2, per_group=2, seed=6, max_len=40, max_prompt=5)
        tb = make_token_batch(roll, np.arange(len(roll)), pad_id=0)
        n_real = int(tb.mask.sum())
        saved = []

        def pack(t):
            saved.append(t.numel() * t.element_size())
            return t

        chunk = 8 * QWEN3_VOCAB
        with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
            lp = completion_logprobs(model, tb, 1.0, chunk_elements=chunk)
        logits_bytes = n_real * QWEN3_VOCAB * 4
        assert sum(saved) < logits_bytes / 10, (sum(saved), logits_bytes)
        (lp * tb.mask).sum().backward()  # and the backward runs through the checkpoints
        assert model.lm_head.weight.grad is not None and model.lm_head.weight.grad.abs().sum() > 0
        # the measure is sensitive: one unchunked, uncheckpointed head + log-softmax saves the logits
        saved.clear()
        h = torch.randn(n_real, model.config.hidden_size, requires_grad=True)
        with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
            _token_logprobs(model.lm_head, h, torch.randint(0, QWEN3_VOCAB, (n_real,)), 1.0)
        assert sum(saved) >= logits_bytes
    finally:
        model.zero_grad(set_to_none=True)
        model.double()


# ------------------------------------------------------------------------------------------ micro-batches
def test_micro_batches_by_rows_is_the_old_split():
    roll = _ragged_batch(100, n_groups=5, per_group=3)
    rows = np.arange(len(roll))[::-1].copy()
    parts = micro_batches(roll, rows, 4)
    assert [p.tolist() for p in parts] == [rows[s : s + 4].tolist() for s in range(0, len(rows), 4)]


@pytest.mark.parametrize("budget", [1, 20, 45, 1000])
def test_micro_batches_by_tokens_respect_the_budget(budget):
    roll = _ragged_batch(100, n_groups=6, per_group=4, seed=budget, max_len=12)
    rows = np.random.default_rng(0).permutation(len(roll))
    parts = micro_batches(roll, rows, 4, budget)
    assert sorted(np.concatenate(parts).tolist()) == sorted(rows.tolist())  # every row exactly once
    for p in parts:
        assert p.tolist() == [r for r in rows.tolist() if r in set(p.tolist())]  # in the caller's order
        tb = make_token_batch(roll, p, pad_id=0)
        assert len(p) == 1 or tb.input_ids.numel() <= budget  # a row over budget goes alone
    if budget == 1000:
        assert len(parts) == 1


def test_token_budget_update_equals_row_micro_batches(tiny):
    """Same rollouts, same start: micro_batch_tokens vs micro_batch_size give the same loss statistics,
    per-response losses and parameters (2 epochs x 2 mini-batches, KL to a reference)."""
    model, tok = tiny
    roll = _ragged_batch(len(tok), n_groups=4, per_group=4, seed=7, max_len=12)
    adv = torch.randn(len(roll), generator=torch.Generator().manual_seed(8))
    loss_cfg = GRPOLoss(beta_kl=0.01)
    results = []
    for micro in ({"micro_batch_size": 128}, {"micro_batch_tokens": 60}):
        policy = copy.deepcopy(model)
        ref = copy.deepcopy(model).eval().requires_grad_(False)
        cfg = OptimConfig(lr=1e-3, warmup_steps=0, ppo_epochs=2, mini_batches=2, **micro)
        opt, sched = cfg.make(policy.parameters())
        stats, losses = ppo_update(policy, opt, sched, roll, adv, loss_cfg, cfg,
                                   Forward.bind(cfg, pad_id=tok.pad_token_id, temperature=1.0),
                                   rng=np.random.default_rng(0), ref_model=ref)
        results.append((stats, losses, dict(policy.named_parameters())))
    (s_a, l_a, p_a), (s_b, l_b, p_b) = results
    assert len(micro_batches(roll, np.arange(len(roll)), 128, 60)) > 2  # really several micro-batches
    assert s_a.keys() == s_b.keys()
    for k in s_a:
        if s_a[k] is not None and not k.startswith("time/"):
            assert s_b[k] == pytest.approx(s_a[k], rel=1e-5, abs=1e-7), k
    np.testing.assert_allclose(l_b.pg, l_a.pg, rtol=1e-5, atol=1e-7)
    np.testing.assert_allclose(l_b.kl, l_a.kl, rtol=1e-4, atol=1e-6)  # KL amplifies a log-ratio's rounding
    start = dict(model.named_parameters())
    for k in p_a:  # 4 AdamW steps at lr 1e-3: Adam's g / sqrt(v) turns float32 rounding into up to ~1e-5 moves
        step = (p_a[k] - start[k]).norm()
        assert (p_b[k] - p_a[k]).norm() <= 1e-3 * step + 1e-6 and (p_b[k] - p_a[k]).abs().max() <= 1e-4, k
    assert any(not torch.equal(p_a[k], start[k]) for k in p_a)  # it did update


def test_optim_config_checks_micro_batch_tokens():
    with pytest.raises(ValueError, match="micro_batch_tokens"):
        OptimConfig(micro_batch_tokens=0)
    assert OptimConfig().micro_batch_tokens is None


# ------------------------------------------------------------------------------------------ checkpointing, GPU
def test_gradient_checkpointing_option(tiny):
    """model.gradient_checkpointing=true switches HF's layer checkpointing on; values and gradients unchanged."""
    model, tok = tiny
    ckpt, _ = load_model(ModelSpec("tiny", 64, 16, gradient_checkpointing=True), tokenizer=tok)
    def on(m):
        return m.is_activation_checkpointing if hasattr(m, "is_activation_checkpointing") else m.is_gradient_checkpointing

    assert on(ckpt) and not on(model)
    ckpt.train()
    roll = _ragged_batch(len(tok), seed=9)
    tb = make_token_batch(roll, np.arange(len(roll)), tok.pad_token_id)
    w = tb.mask.clone()
    a, g_a = _grads(model, lambda: completion_logprobs(model, tb, 1.0), w)
    b, g_b = _grads(ckpt, lambda: completion_logprobs(ckpt, tb, 1.0), w)
    assert torch.equal(a, b)
    for k in g_a:
        torch.testing.assert_close(g_b[k], g_a[k], rtol=1e-5, atol=1e-7, msg=k)
    with pytest.raises(TypeError, match="gradient_checkpointing"):
        ModelSpec("tiny", 64, 16, gradient_checkpointing="yes")


def test_gpu_check_refuses_cleanly_without_cuda():
    if torch.cuda.is_available():
        pytest.skip("a GPU is present: scripts/gpu_check.py would run for real")
    proc = subprocess.run([sys.executable, str(REPO / "scripts" / "gpu_check.py")], capture_output=True, text=True,
                          timeout=120, check=False)
    assert proc.returncode == 2
    assert "CUDA" in proc.stderr and "Traceback" not in proc.stderr
