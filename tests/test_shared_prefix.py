"""Shared-prefix log-probs (issue #11): each prompt encoded once per micro-batch, its KV cache reused by its rows.

``shared_prefix_logprobs`` must be the same function as ``completion_logprobs`` (one prompt+completion sequence per
row) up to float rounding: values, gradients of a GRPO loss, and a whole ``ppo_update``, on real rollouts of the
tiny model with ragged group sizes (0, 1, ...), completions of length 1 and of the maximum length, and an empty one.

Tolerances (float32, the tiny model): log-probs agree to ~2e-6 absolute (asserted 1e-5), gradients to ~1e-6 of
each parameter's gradient norm (asserted 1e-4 relative); in float64 the log-probs are bit-identical
(asserted 1e-10) and the gradients agree to ~6e-8 relative (float32 RMSNorm inside HF's Qwen3).
"""

from __future__ import annotations

import copy
import dataclasses

import numpy as np
import pytest
import torch

from gdro.common.rollouts import SamplingParams
from gdro.loss import GRPOLoss, grpo_loss
from gdro.models.loading import ModelSpec, load_model
from gdro.policy import (
    Forward,
    OptimConfig,
    completion_logprobs,
    ppo_update,
)
from gdro.policy import forward as policy_forward
from gdro.policy.layouts import caches_dropped, make_shared_batch, make_token_batch, shared_prefix_logprobs
from gdro.policy.microbatch import group_micro_batches, micro_batches
from gdro.policy.packing import make_packed_batch, packable, packed_logprobs
from gdro.rollout.hf import HFGenerator

MAX_NEW = 16
ATOL_LP = 1e-5  # float32 log-probs, absolute
RTOL_GRAD = 1e-4  # float32 gradients, relative to each parameter's gradient norm


@pytest.fixture(scope="module")
def tiny():
    model, tok = load_model(ModelSpec("tiny", max_prompt_len=64, max_new_tokens=MAX_NEW), train=True)
    return model, tok


@pytest.fixture(scope="module")
def roll(tiny):
    """Real rollouts: groups of 3, 0, 1, 6, 2 and 4 rows; one row cut to a single token, one emptied."""
    model, tok = tiny
    engine = HFGenerator(model, tok, use_chat_template=True, max_prompt_len=64)
    prompts = ["Copy: " + p for p in ("ab", "abcdefghijkl", "xyz", "hello world", "q", "mnopqrstu")]
    r = engine.generate(prompts, [3, 0, 1, 6, 2, 4], seed=0,
                        sampling=SamplingParams(temperature=1.5, max_new_tokens=MAX_NEW))
    model.train()
    comps = [list(c) for c in r.completion_ids]
    comps[1] = comps[1][:1]  # a one-token completion
    comps[9] = []  # an empty completion (the engine always emits >= 1 token)
    r = dataclasses.replace(r, completion_ids=comps)
    lengths = r.lengths
    assert lengths.max() == MAX_NEW and (lengths == 1).any() and (lengths == 0).any()
    assert r.group_sizes.tolist() == [3, 0, 1, 6, 2, 4]
    return r


def _pad_id(tok):
    return tok.pad_token_id


def _unshared(model, roll, rows, pad_id, temp, **kw):
    tb = make_token_batch(roll, rows, pad_id)
    return completion_logprobs(model, tb, temp, **kw), tb.mask


def _shared(model, roll, rows, pad_id, temp, packed=False, **kw):
    """The KV-cache path, or (``packed``) each group as one sequence under a block mask."""
    if packed:
        pb = make_packed_batch(roll, rows, pad_id)
        return packed_logprobs(model, pb, temp, **kw), pb.mask
    sb = make_shared_batch(roll, rows, pad_id)
    return shared_prefix_logprobs(model, sb, temp, **kw), sb.mask


PATHS = pytest.mark.parametrize("packed", [False, True], ids=["kv-cache", "packed"])
# the three ways ppo_update can run the same micro-batches
CONFIGS = [{"shared_prefix": False}, {"shared_prefix": True, "pack": False}, {"shared_prefix": True, "pack": True}]


def _grad_loss(lp, mask, adv):
    loss, _, _ = grpo_loss(lp, lp.detach(), adv, mask, clip_low=0.2, clip_high=0.28, beta_kl=0.0, ref_logp=None,
                           kl_estimator="k3", agg="token-mean", denom=float(mask.sum()))
    return loss


def _grads(model, fn, adv):
    model.zero_grad(set_to_none=True)
    lp, mask = fn()
    # a GRPO loss with log-probs that differ from the "old" ones, so the ratio is not 1 everywhere
    (_grad_loss(lp, mask, adv) + (lp * mask * 0.1).sum()).backward()
    return lp.detach(), mask, {k: p.grad.detach().clone() for k, p in model.named_parameters() if p.grad is not None}


def _assert_grads_close(g_a, g_b, rtol):
    assert g_a.keys() == g_b.keys()
    for k in g_a:
        scale = g_a[k].norm().item()
        err = (g_b[k] - g_a[k]).norm().item()
        assert err <= rtol * scale + 1e-12, (k, err, scale)


# ------------------------------------------------------------------------------------------ log-probs
@PATHS
@pytest.mark.parametrize("temp", [1.0, 0.7])
def test_logprobs_equal_the_unshared_path(tiny, roll, temp, packed):
    model, tok = tiny
    rows = np.arange(len(roll))
    with torch.no_grad():
        a, mask = _unshared(model, roll, rows, _pad_id(tok), temp)
        b, mask_b = _shared(model, roll, rows, _pad_id(tok), temp, packed)
    assert a.shape == b.shape and torch.equal(mask, mask_b)
    real = mask.bool()
    assert (a - b)[real].abs().max().item() <= ATOL_LP
    assert torch.isfinite(b).all()


@PATHS
def test_logprobs_under_the_chunked_path(tiny, roll, packed):
    """A small chunk_elements forces the chunked LM head: same values; padded positions hold 0."""
    model, tok = tiny
    rows = np.arange(len(roll))
    chunk = 5 * len(tok)  # 5 positions per chunk
    with torch.no_grad():
        a, mask = _unshared(model, roll, rows, _pad_id(tok), 0.9)
        b, _ = _shared(model, roll, rows, _pad_id(tok), 0.9, packed, chunk_elements=chunk)
    real = mask.bool()
    assert (a - b)[real].abs().max().item() <= ATOL_LP
    assert (b[~real] == 0).all()


@PATHS
@pytest.mark.parametrize("micro,tokens", [(3, None), (128, 60), (1, None), (128, None)])
def test_logprobs_no_grad_in_any_micro_batching(tiny, roll, micro, tokens, packed):
    """Micro-batches that split groups (3 rows, 1 row, a token budget) or hold them all; rows in a scrambled order."""
    model, tok = tiny
    rows = np.random.default_rng(1).permutation(len(roll))
    want = Forward(_pad_id(tok), 1.0).logprobs_no_grad(model, roll, rows)
    fwd = Forward(_pad_id(tok), 1.0, micro, tokens, shared_prefix=True, pack=packed)
    got = fwd.logprobs_no_grad(model, roll, rows)
    if micro == 3:
        parts = group_micro_batches(roll, rows, micro, tokens)
        assert any(len(set(roll.group_index[p]) & set(roll.group_index[q])) for p in parts for q in parts
                   if p is not q)  # some group really is split
    for i, (w, g) in enumerate(zip(want, got)):
        assert g.shape == w.shape == (len(roll.completion_ids[rows[i]]),)
        if len(w):
            assert (w - g).abs().max().item() <= ATOL_LP


# ------------------------------------------------------------------------------------------ gradients
@PATHS
@pytest.mark.parametrize("chunk", [None, 5])
def test_grpo_loss_gradients_equal(tiny, roll, chunk, packed):
    model, tok = tiny
    rows = np.arange(len(roll))
    kw = {} if chunk is None else {"chunk_elements": chunk * len(tok)}
    adv = torch.randn(len(rows), generator=torch.Generator().manual_seed(3))
    a, mask, g_a = _grads(model, lambda: _unshared(model, roll, rows, _pad_id(tok), 1.0), adv)
    b, _, g_b = _grads(model, lambda: _shared(model, roll, rows, _pad_id(tok), 1.0, packed, **kw), adv)
    assert (a - b)[mask.bool()].abs().max().item() <= ATOL_LP
    _assert_grads_close(g_a, g_b, RTOL_GRAD)
    assert "model.embed_tokens.weight" in g_b  # the prompt encoding receives gradient too


def test_prompt_positions_receive_gradient(tiny, roll):
    """Gradient flows back through the expanded KV cache into the prompt's hidden states (not only the last one)."""
    model, tok = tiny
    rows = np.flatnonzero(roll.group_index == 3)
    sb = make_shared_batch(roll, rows, _pad_id(tok))
    emb = model.get_input_embeddings()
    seen = []

    def keep(module, inputs, output):  # returns None: the output is left as it is
        output.retain_grad()
        seen.append(output)

    handle = emb.register_forward_hook(keep)
    try:
        lp = shared_prefix_logprobs(model, sb, 1.0)
        (lp * sb.mask).sum().backward()
    finally:
        handle.remove()
        model.zero_grad(set_to_none=True)
    prompt_emb = seen[0]  # the prompt forward's embeddings, (1, P, H)
    assert prompt_emb.shape[0] == 1
    assert (prompt_emb.grad[0].abs().sum(-1) > 0).all()  # every prompt position


# ------------------------------------------------------------------------------------------ ppo_update
@pytest.mark.parametrize("micro", [{"micro_batch_size": 4}, {"micro_batch_tokens": 90}])
def test_ppo_update_equal(tiny, roll, micro):
    """shared_prefix true vs false: same statistics, per-response losses and parameters (2 epochs x 2 mini-batches,
    KL to a reference, micro-batches that split groups)."""
    model, tok = tiny
    adv = torch.randn(len(roll), generator=torch.Generator().manual_seed(8))
    adv[roll.group_index == 4] = 0.0  # some zero-advantage rows
    loss_cfg = GRPOLoss(beta_kl=0.01)
    results = []
    for how in CONFIGS:
        policy = copy.deepcopy(model)
        ref = copy.deepcopy(model).eval().requires_grad_(False)
        cfg = OptimConfig(lr=1e-3, warmup_steps=0, ppo_epochs=2, mini_batches=2, **how, **micro)
        opt, sched = cfg.make(policy.parameters())
        stats, losses = ppo_update(policy, opt, sched, roll, adv, loss_cfg, cfg,
                                   Forward.bind(cfg, pad_id=_pad_id(tok), temperature=1.0),
                                   rng=np.random.default_rng(0), ref_model=ref)
        results.append((stats, losses, dict(policy.named_parameters())))
    for (s_a, l_a, p_a), (s_b, l_b, p_b) in [(results[0], results[1]), (results[0], results[2])]:
        _assert_updates_close(model, s_a, l_a, p_a, s_b, l_b, p_b)


def _assert_updates_close(model, s_a, l_a, p_a, s_b, l_b, p_b):
    assert s_a.keys() == s_b.keys()
    for k in s_a:
        if s_a[k] is not None and not k.startswith("time/"):
            assert s_b[k] == pytest.approx(s_a[k], rel=1e-4, abs=1e-6), k
    np.testing.assert_allclose(l_b.pg, l_a.pg, rtol=1e-4, atol=1e-6)
    np.testing.assert_allclose(l_b.kl, l_a.kl, rtol=1e-3, atol=1e-6)  # KL amplifies a log-ratio's rounding
    start = dict(model.named_parameters())
    for k in p_a:  # 4 AdamW steps at lr 1e-3: Adam's g / sqrt(v) turns float32 rounding into small moves
        step = (p_a[k] - start[k]).norm()
        assert (p_b[k] - p_a[k]).norm() <= 1e-3 * step + 1e-6 and (p_b[k] - p_a[k]).abs().max() <= 1e-4, k
    assert any(not torch.equal(p_a[k], start[k]) for k in p_a)  # it did update


def test_single_step_update_equal_without_reference(tiny, roll):
    """The main job's shape: one epoch, one mini-batch, beta_kl = 0 (zero-advantage rows skipped), default micro."""
    model, tok = tiny
    adv = torch.randn(len(roll), generator=torch.Generator().manual_seed(5))
    adv[roll.group_index == 0] = 0.0
    out = []
    for how in CONFIGS:
        policy = copy.deepcopy(model)
        cfg = OptimConfig(lr=1e-3, warmup_steps=0, **how)
        opt, sched = cfg.make(policy.parameters())
        stats, losses = ppo_update(policy, opt, sched, roll, adv, GRPOLoss(beta_kl=0.0), cfg,
                                   Forward.bind(cfg, pad_id=_pad_id(tok), temperature=1.0),
                                   rng=np.random.default_rng(0))
        out.append((stats, losses, dict(policy.named_parameters())))
    s_a, l_a, p_a = out[0]
    for s_b, l_b, p_b in out[1:]:
        for k in s_a:
            if s_a[k] is not None and not k.startswith("time/"):
                assert s_b[k] == pytest.approx(s_a[k], rel=1e-4, abs=1e-6), k
        np.testing.assert_allclose(l_b.pg, l_a.pg, rtol=1e-4, atol=1e-6)
        for k in p_a:
            assert (p_b[k] - p_a[k]).abs().max() <= 1e-4, k


# ------------------------------------------------------------------------------------------ float64
@PATHS
def test_float64_is_exact(tiny, roll, packed):
    """In float64 the log-probs agree to rounding (observed: bit for bit), so the shared path computes the same
    function. The gradients agree to ~6e-8 relative only: HF's Qwen3 RMSNorm computes in float32 even in a float64
    model, so backward float64 sums taken in a different order are rounded to float32 there (asserted 1e-6)."""
    model, tok = tiny
    m64 = copy.deepcopy(model).double()
    rows = np.arange(len(roll))
    adv = torch.randn(len(rows), generator=torch.Generator().manual_seed(4), dtype=torch.float64)
    a, mask, g_a = _grads(m64, lambda: _unshared(m64, roll, rows, _pad_id(tok), 0.8), adv)
    b, _, g_b = _grads(m64, lambda: _shared(m64, roll, rows, _pad_id(tok), 0.8, packed), adv)
    assert a.dtype == b.dtype == torch.float64
    assert (a - b)[mask.bool()].abs().max().item() <= 1e-10
    _assert_grads_close(g_a, g_b, 1e-6)


# ------------------------------------------------------------------------------------------ micro-batches, options
@pytest.mark.parametrize("micro,tokens", [(4, None), (8, None), (128, None), (128, 1), (128, 90), (128, 400)])
def test_group_micro_batches(roll, micro, tokens):
    rows = np.random.default_rng(2).permutation(len(roll))
    parts = group_micro_batches(roll, rows, micro, tokens)
    assert sorted(np.concatenate(parts).tolist()) == sorted(rows.tolist())  # every row exactly once
    sizes = {int(g): int(s) for g, s in enumerate(roll.group_sizes)}
    for p in parts:
        assert len(p) <= micro
        tb = make_token_batch(roll, p, pad_id=0)
        assert len(p) == 1 or tokens is None or tb.input_ids.numel() <= tokens
    # a group that fits in an empty micro-batch is never split
    for g, size in sizes.items():
        holding = [p for p in parts if (roll.group_index[p] == g).any()]
        fits_alone = size <= micro and (tokens is None or size * (
            len(roll.prompt_token_ids[g]) + max(1, max(len(roll.completion_ids[i]) for i in np.flatnonzero(
                roll.group_index == g)))) <= tokens) if size else True
        if fits_alone and size:
            assert len(holding) == 1, (g, [p.tolist() for p in parts])
    assert group_micro_batches(roll, np.array([], dtype=np.int64), 4) == []


def test_group_micro_batches_pad_less(roll):
    """Sorting by length: padded tokens of group micro-batches <= those of the in-order row split."""
    rows = np.arange(len(roll))
    pad = sum(make_token_batch(roll, p, 0).input_ids.numel() for p in group_micro_batches(roll, rows, 4))
    old = sum(make_token_batch(roll, p, 0).input_ids.numel() for p in micro_batches(roll, rows, 4))
    assert pad <= old


def test_gradient_checkpointing_falls_back(tiny, roll):
    """HF activation checkpointing drops the KV cache in training forwards: the update then uses one sequence per
    row (same result), while no-grad passes still share the prompt."""
    model, tok = tiny
    ckpt, _ = load_model(ModelSpec("tiny", 64, MAX_NEW, gradient_checkpointing=True), tokenizer=tok, train=True)
    ckpt.train()
    assert caches_dropped(ckpt) and not caches_dropped(model)
    with torch.no_grad():
        assert not caches_dropped(ckpt)
    adv = torch.randn(len(roll), generator=torch.Generator().manual_seed(6))
    out = []
    for how in CONFIGS:
        policy = copy.deepcopy(ckpt)
        cfg = OptimConfig(lr=1e-3, warmup_steps=0, micro_batch_size=5, **how)
        opt, sched = cfg.make(policy.parameters())
        stats, _ = ppo_update(policy, opt, sched, roll, adv, GRPOLoss(beta_kl=0.0), cfg,
                              Forward.bind(cfg, pad_id=_pad_id(tok), temperature=1.0), rng=np.random.default_rng(0))
        out.append(stats)
    for other in out[1:]:  # (the packed path needs no KV cache: it runs under checkpointing as it is)
        for k in out[0]:
            if out[0][k] is not None and not k.startswith("time/"):
                assert other[k] == pytest.approx(out[0][k], rel=1e-4, abs=1e-6), k


def test_option_is_checked():
    with pytest.raises(TypeError, match="shared_prefix"):
        OptimConfig(shared_prefix="yes")
    with pytest.raises(TypeError, match="pack"):
        OptimConfig(pack=1)


# ------------------------------------------------------------------------------------------ packing
def test_packed_layout_and_mask(roll):
    """Group 4 (2 rows) packed: its prompt once, then each row's completion but its last token; each completion
    sees the prompt and its own earlier tokens only; positions restart after the prompt for each row."""
    rows = np.flatnonzero(roll.group_index == 4)
    pb = make_packed_batch(roll, rows, pad_id=0)
    prompt = roll.prompt_token_ids[4]
    c0, c1 = (roll.completion_ids[i] for i in rows)
    p = len(prompt)
    assert pb.input_ids[0].tolist()[: p + len(c0) - 1 + len(c1) - 1] == list(prompt) + list(c0[:-1]) + list(c1[:-1])
    assert pb.position_ids[0, p : p + len(c0) - 1].tolist() == list(range(p, p + len(c0) - 1))
    assert pb.position_ids[0, p + len(c0) - 1 : p + len(c0) - 1 + len(c1) - 1].tolist() == list(range(p, p + len(c1) - 1))
    att = pb.attention_mask()[0, 0]
    second = p + len(c0) - 1  # first position of row 1's segment
    assert att[:p, :p].equal(torch.ones(p, p, dtype=torch.bool).tril())  # causal prompt
    assert att[second, :p].all() and not att[second, p:second].any() and att[second, second]  # not row 0's tokens
    assert pb.source[0, 0] == p - 1 and pb.source[1, 0] == p - 1  # the prompt's last state predicts token 0
    assert pb.source[1, 1] == second


def test_packable_needs_sdpa_and_a_mask_within_the_limit(tiny, roll, monkeypatch):
    model, tok = tiny
    rows = np.arange(len(roll))
    assert model.config._attn_implementation == "sdpa" and packable(model, roll, rows)
    pb = make_packed_batch(roll, rows, _pad_id(tok))
    assert pb.mask_elements == pb.attention_mask().numel() > 10
    # a mask over the limit takes the KV-cache path: same values, and no packed forward at all
    want = Forward(_pad_id(tok), 1.0).logprobs_no_grad(model, roll, rows)
    monkeypatch.setattr(policy_forward, "PACK_MASK_ELEMENTS", 10)
    monkeypatch.setattr(policy_forward, "packed_logprobs", lambda *a, **k: pytest.fail("packed over the limit"))
    got = Forward(_pad_id(tok), 1.0, shared_prefix=True, pack=True).logprobs_no_grad(model, roll, rows)
    assert max((w - g).abs().max().item() for w, g in zip(want, got) if len(w)) <= ATOL_LP
    monkeypatch.undo()
    eager, _ = load_model(ModelSpec("tiny", 64, MAX_NEW, attn_implementation="eager"), tokenizer=tok)
    assert not packable(eager, roll, rows)
    # an eager model takes the KV-cache path inside ppo_update / logprobs_no_grad, with the same values
    want = Forward(_pad_id(tok), 1.0).logprobs_no_grad(model, roll, rows)
    got = Forward(_pad_id(tok), 1.0, shared_prefix=True, pack=True).logprobs_no_grad(eager, roll, rows)
    assert max((w - g).abs().max().item() for w, g in zip(want, got) if len(w)) <= ATOL_LP


def test_packing_pads_less_than_the_kv_cache_path(roll):
    """Short groups share a sequence (first fit, longest first; the equivalence tests above run on this layout), and
    fewer tokens are fed than prompts + padded completions on the KV-cache path."""
    rows = np.arange(len(roll))
    for part in group_micro_batches(roll, rows, 128):
        pb, sb = make_packed_batch(roll, part, 0), make_shared_batch(roll, part, 0)
        assert pb.input_ids.numel() < sb.prompt_ids.numel() + sb.completion.numel()
        assert any(len(set(r.tolist()) - {-1}) > 1 for r in pb.group)
        assert pb.input_ids.shape[0] < len(set(roll.group_index[part].tolist()))


# ------------------------------------------------------------------------------------------ generation
def test_hf_generation_with_a_shared_prompt_cache_samples_the_same(tiny):
    """rollout.shared_prefix: each distinct prompt is prefilled once and its rows decode from copies of its cache;
    ragged n (0 and 1 included) and one prompt text in two groups. Same sampled tokens (up to a float-rounding tie,
    none seen: 160 of 160 rows measured), same log-probs to 1e-5, deterministic."""
    model, tok = tiny
    prompts = ["Copy: 1 2 3.", "Copy: 9 8 7 6 5 4 3.", "Copy: 5.", "Copy: 1 2 3.", "Copy: 4 4 2 1 9."]
    n = [8, 0, 1, 6, 5]
    sp = SamplingParams(temperature=1.0, max_new_tokens=MAX_NEW, logprobs=True)
    was = model.training
    out = {}
    for shared in (False, True, True):
        eng = HFGenerator(model, tok, use_chat_template=True, max_prompt_len=64, shared_prefix=shared)
        out.setdefault(shared, []).append(eng.generate(prompts * 8, n * 8, seed=4, sampling=sp))
    model.train(was)
    a, b = out[False][0], out[True][0]
    assert out[True][1].completion_ids == b.completion_ids  # deterministic
    assert len(a) == len(b) == 160 and a.group_index.tolist() == b.group_index.tolist()
    same = [i for i in range(len(a)) if a.completion_ids[i] == b.completion_ids[i]]
    assert len(same) >= 0.98 * len(a), f"{len(a) - len(same)} rows differ"
    assert max(float(np.abs(a.logprobs[i] - b.logprobs[i]).max()) for i in same) < ATOL_LP


def test_hf_engine_option_is_wired_from_the_config():
    from gdro.rollout import make_engine
    from gdro.rollout.hf import HFEngineConfig

    model, tok = load_model(ModelSpec("tiny", max_prompt_len=64, max_new_tokens=MAX_NEW))
    spec = ModelSpec("tiny", max_prompt_len=64, max_new_tokens=MAX_NEW)
    assert make_engine(HFEngineConfig(), model, tok, spec).shared_prefix is True
    assert make_engine(HFEngineConfig(shared_prefix=False), model, tok, spec).shared_prefix is False
    with pytest.raises(TypeError, match="shared_prefix must be true or false"):
        HFEngineConfig(shared_prefix="yes")
    assert make_engine(HFEngineConfig(prune_every=3), model, tok, spec).prune_every == 3
    assert HFEngineConfig().prune_every == 4 and HFEngineConfig(prune_every=0).prune_every == 0
    with pytest.raises(ValueError, match="prune_every must be >= 0"):
        HFEngineConfig(prune_every=-1)


# ------------------------------------------------------------------------------------------ pruning ended rows
@pytest.mark.parametrize("shared", [False, True])
@pytest.mark.parametrize("prune", [1, 3])
def test_pruned_generation_log_probs_match_the_trainer(tiny, prune, shared):
    """rollout.prune_every: rows that ended leave the batch and the others continue from their own cache. If a
    continued row saw any other context than its own prompt and tokens, the engine's log-probs would not be what
    the trainer recomputes from (prompt, completion): they agree to 1e-5, and every row ends with EOS or at the
    length limit, with the EOS only at its end. Deterministic under a seed; ragged n (0 and 1 included)."""
    model, tok = tiny
    prompts = ["Copy: 1 2 3.", "Copy: 9 8 7 6 5 4 3.", "Copy: 5.", "Copy: 1 2 3 4 5 6 7 8.", "Copy: 4 4 2 1 9."]
    n = [8, 0, 1, 6, 5]
    sp = SamplingParams(temperature=1.3, max_new_tokens=MAX_NEW, logprobs=True)
    was = model.training
    eng = HFGenerator(model, tok, use_chat_template=True, max_prompt_len=64, shared_prefix=shared,
                      prune_every=prune)
    r = eng.generate(prompts * 4, n * 4, seed=7, sampling=sp)
    again = eng.generate(prompts * 4, n * 4, seed=7, sampling=sp)
    model.train(was)
    assert again.completion_ids == r.completion_ids
    lengths = r.lengths
    assert len(set(lengths.tolist())) > 3 and lengths.max() > prune  # ragged: rows really were pruned
    for c, f in zip(r.completion_ids, r.finish_reasons):
        ends = [j for j, t in enumerate(c) if t in eng.eos_ids]
        assert ends == ([len(c) - 1] if f == "stop" else []) and (f == "stop" or len(c) == MAX_NEW)
    rows = np.arange(len(r))
    with torch.no_grad():
        lp = completion_logprobs(model, make_token_batch(r, rows, eng.pad_id), sp.temperature)
    err = max(float(np.abs(lp[i, : lengths[i]].numpy() - r.logprobs[i]).max()) for i in rows if lengths[i])
    assert err < ATOL_LP


def test_pruned_generation_samples_the_same_distribution(tiny):
    """Pruning changes which random numbers each row draws, not what it samples from: on 48 toy prompts x 16 rows
    the share of correct answers and the mean length with and without pruning agree within sampling noise
    (4 standard errors)."""
    from gdro.data.synthetic import CopyTask
    from gdro.grading.rewards import MathVerifyReward

    model, tok = tiny
    probs = CopyTask().train()[:48]
    sp = SamplingParams(temperature=1.0, max_new_tokens=MAX_NEW)
    stats = []
    for prune in (0, 4):
        eng = HFGenerator(model, tok, use_chat_template=True, max_prompt_len=64, shared_prefix=True,
                          prune_every=prune)
        r = eng.generate([p.prompt for p in probs], [16] * 48, seed=11, sampling=sp)
        ok = MathVerifyReward().score(r.texts, [probs[g].answer for g in r.group_index], r.finished).correct
        stats.append((ok.mean(), r.lengths.mean(), r.lengths.std(), r.completion_ids))
    (p0, m0, s0, c0), (p1, m1, s1, c1) = stats
    assert c0 != c1  # different random draws ...
    n = 48 * 16
    assert abs(p0 - p1) <= 4 * np.sqrt(2 * 0.25 / n)  # ... from the same distribution
    assert abs(m0 - m1) <= 4 * np.sqrt((s0**2 + s1**2) / n)
