"""Policy entropy (``train/entropy``) and the clip fraction per side (``train/clip_frac_low`` / ``_high``), issue #37.

The entropy comes from the log-softmax the update's forwards compute anyway (gdro.policy.kernels.recording_entropy).
It must equal a full-softmax computation on the tiny model (``torch.softmax`` over the whole vocabulary, one
unpadded sequence per row) in every forward layout (rows, shared-prefix KV cache, packed) and in the chunked
ending, and must change nothing else: log-probs, gradients and every other statistic of ``ppo_update`` are
bit-identical with it recorded or not.
"""

from __future__ import annotations

import contextlib
import copy

import numpy as np
import pytest
import torch

from gdro.loss import GRPOLoss, grpo_loss
from gdro.loss.base import BatchCounts
from gdro.policy import Forward, OptimConfig, ppo_update
from gdro.policy import update as policy_update
from gdro.policy.kernels import recording_entropy
from tests.test_shared_prefix import CONFIGS, _pad_id, _shared, _unshared, roll, tiny  # noqa: F401 (fixtures)

ATOL = 1e-5
LAYOUTS = ["rows", "kv-cache", "packed"]


def _layout(model, roll, rows, pad_id, temp, layout, **kw):  # noqa: F811
    if layout == "rows":
        return _unshared(model, roll, rows, pad_id, temp, **kw)
    return _shared(model, roll, rows, pad_id, temp, packed=layout == "packed", **kw)


def _reference(model, roll, rows, temp):  # noqa: F811
    """Per row, the entropy of softmax(logits / T) over the full vocabulary at each completion position, from one
    unpadded prompt + completion sequence."""
    out = []
    with torch.no_grad():
        for i in rows:
            prompt, comp = roll.prompt_token_ids[roll.group_index[i]], roll.completion_ids[i]
            ids = torch.tensor([prompt + comp], dtype=torch.long)
            logits = model(input_ids=ids).logits[0, len(prompt) - 1 : len(prompt) + len(comp) - 1].double()
            p = torch.softmax(logits / temp, dim=-1)
            out.append(-(p * torch.log(p)).nan_to_num(0.0).sum(-1))
    return out


@pytest.mark.parametrize("chunk", [None, 5], ids=["full", "chunked"])
@pytest.mark.parametrize("layout", LAYOUTS)
def test_entropy_matches_a_full_softmax(tiny, roll, layout, chunk):  # noqa: F811
    """Every layout, whole logits or chunks of a few positions (with a gradient: under activation checkpointing,
    whose backward recomputes each chunk without recording it twice)."""
    model, tok = tiny
    rows = np.arange(len(roll))
    kw = {} if chunk is None else {"chunk_elements": chunk * model.config.vocab_size}
    temp = 0.7
    with recording_entropy() as ent:
        lp, mask = _layout(model, roll, rows, _pad_id(tok), temp, layout, **kw)
    (lp * mask).sum().backward()  # a checkpointed chunk's recomputation adds nothing to the record
    model.zero_grad(set_to_none=True)
    assert len(ent) == 1 and ent[0].shape == lp.shape and not ent[0].requires_grad
    ref = _reference(model, roll, rows, temp)
    for j, i in enumerate(rows):
        n = len(roll.completion_ids[i])
        assert mask[j, :n].eq(1).all()
        torch.testing.assert_close(ent[0][j, :n].double(), ref[j], atol=ATOL, rtol=0)


@pytest.mark.parametrize("how", CONFIGS, ids=LAYOUTS)
def test_train_entropy_is_the_token_mean_of_the_full_softmax(tiny, roll, how):  # noqa: F811
    """``train/entropy`` of a one-step update (the main job's shape): the token mean over every valid token of the
    rows forwarded, at the sampling temperature."""
    model, tok = tiny
    adv = torch.randn(len(roll), generator=torch.Generator().manual_seed(3))
    policy = copy.deepcopy(model)
    cfg = OptimConfig(lr=1e-3, warmup_steps=0, **how)
    opt, sched = cfg.make(policy.parameters())
    ref = _reference(model, roll, np.arange(len(roll)), 0.8)
    stats, _ = ppo_update(policy, opt, sched, roll, adv, GRPOLoss(beta_kl=0.0), cfg,
                          Forward.bind(cfg, pad_id=_pad_id(tok), temperature=0.8), rng=np.random.default_rng(0))
    want = float(torch.cat(ref).mean())
    assert stats["train/entropy"] == pytest.approx(want, abs=ATOL)


def _run(model, roll, tok, how, record: bool, monkeypatch):  # noqa: F811
    """A 2-epoch x 2-mini-batch update with a reference; ``record=False``: the entropy is not recorded at all."""
    if not record:
        monkeypatch.setattr(policy_update, "recording_entropy", contextlib.nullcontext)
    adv = torch.randn(len(roll), generator=torch.Generator().manual_seed(8))
    policy, ref = copy.deepcopy(model), copy.deepcopy(model).eval().requires_grad_(False)
    cfg = OptimConfig(lr=1e-3, warmup_steps=0, ppo_epochs=2, mini_batches=2, micro_batch_size=5, **how)
    opt, sched = cfg.make(policy.parameters())
    stats, losses = ppo_update(policy, opt, sched, roll, adv, GRPOLoss(beta_kl=0.01), cfg,
                               Forward.bind(cfg, pad_id=_pad_id(tok), temperature=1.0),
                               rng=np.random.default_rng(0), ref_model=ref)
    monkeypatch.undo()
    return stats, losses, {k: p.detach().clone() for k, p in policy.named_parameters()}


@pytest.mark.parametrize("how", CONFIGS, ids=LAYOUTS)
def test_entropy_changes_nothing_else(tiny, roll, how, monkeypatch):  # noqa: F811
    model, tok = tiny
    s_on, l_on, p_on = _run(model, roll, tok, how, True, monkeypatch)
    s_off, l_off, p_off = _run(model, roll, tok, how, False, monkeypatch)
    assert s_on["train/entropy"] > 0 and s_off["train/entropy"] is None
    same = lambda s: {k: v for k, v in s.items() if k != "train/entropy" and not k.startswith("time/")}
    assert same(s_on) == same(s_off)  # to the bit
    assert np.array_equal(l_on.pg, l_off.pg) and np.array_equal(l_on.kl, l_off.kl)
    assert all(torch.equal(p_on[k], p_off[k]) for k in p_on)
    # the per-side clip fractions split the loss's clip_frac (no dual clip), and some tokens are clipped
    assert s_on["train/clip_frac_low"] + s_on["train/clip_frac_high"] == pytest.approx(s_on["train/clip_frac"],
                                                                                        abs=1e-7)
    assert s_on["train/clip_frac"] > 0


def test_clip_sides_by_hand():
    """Four tokens of a positive-advantage row and three of a negative one, the last token of each padded."""
    logp = torch.log(torch.tensor([[1.0, 1.5, 0.5, 9.0], [0.5, 1.0, 1.3, 9.0]]))
    old = torch.zeros(2, 4)
    mask = torch.tensor([[1.0, 1, 1, 0], [1, 1, 1, 0]])
    adv = torch.tensor([1.0, -1.0])
    counts = BatchCounts.of(np.array([3, 3]))
    sides = policy_update.clip_sides(GRPOLoss(clip_low=0.2, clip_high=0.28), logp, old, mask, adv, counts)
    # high: rho 1.5 > 1.28 with A > 0 (rho 9 is padding); low: rho 0.5 < 0.8 with A < 0; rho 0.5 with A > 0 and
    # rho 1.3 with A < 0 are not clipped
    assert float(sides["clip_frac_high"]) == pytest.approx(1 / 6) and float(sides["clip_frac_low"]) == pytest.approx(1 / 6)
    _, stats, _ = grpo_loss(logp, old, adv, mask, clip_low=0.2, clip_high=0.28, beta_kl=0.0, token_denom=6.0)
    assert float(stats["clip_frac"]) == pytest.approx(2 / 6)
    assert policy_update.clip_sides(object(), logp, old, mask, adv, counts) == {}  # a loss without clip edges
