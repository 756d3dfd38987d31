"""The update's TRL options (issue #37), on real rollouts of the tiny model:

* ``optim.mask_truncated_completions`` (TRL's name; DAPO's overlong filtering): an update with it equals the update
  on the finished rows alone (same parameters, statistics over the finished rows' tokens);
* ``optim.engine_is_mode`` (TRL's ``vllm_importance_sampling_*``): the weight of each mode by hand, and a whole
  update whose engine log-probs sit a known amount off the trainer's equals the update with the advantages scaled
  by the hand-computed, truncated weights (every gdro loss is linear in A for a positive factor);
* the ``dapo``/``cispo`` normaliser under ``optim.mini_batches > 1``: TRL's generation-batch tokens times the
  mini-batch's share (BatchCounts.step_token_share), as the update now passes the step's lengths.

The losses against TRL's own code with a weight: tests/test_trl_losses.py::test_the_engine_importance_weight_equals_trls.
"""

from __future__ import annotations

import copy
import dataclasses
import math

import numpy as np
import pytest
import torch

from gdro.loss import BatchCounts, DAPOLoss, GRPOLoss, GSPOLoss
from gdro.policy import Forward, OptimConfig, ppo_update
from gdro.policy.update import EngineIS
from tests.test_shared_prefix import _pad_id, roll, tiny  # noqa: F401 (fixtures)

RTOL = 1e-5


def _update(model, tok, roll, adv, cfg, loss):  # noqa: F811
    policy = copy.deepcopy(model)
    opt, sched = cfg.make(policy.parameters())
    stats, losses = ppo_update(policy, opt, sched, roll, adv, loss, cfg,
                               Forward.bind(cfg, pad_id=_pad_id(tok), temperature=1.0), rng=np.random.default_rng(0))
    return stats, losses, {k: p.detach().clone() for k, p in policy.named_parameters()}


def _close(a: dict, b: dict, atol: float = 1e-7) -> None:
    for k, value in a.items():
        torch.testing.assert_close(value, b[k], rtol=RTOL, atol=atol)


def _subset(roll, rows):  # noqa: F811
    """The rollout batch of ``rows`` only (every group kept, some emptied)."""
    return dataclasses.replace(roll, group_index=roll.group_index[rows],
                               completion_ids=[roll.completion_ids[i] for i in rows],
                               texts=[roll.texts[i] for i in rows], finish_reasons=[roll.finish_reasons[i] for i in rows],
                               logprobs=None if roll.logprobs is None else [roll.logprobs[i] for i in rows])


@pytest.mark.parametrize("loss", [GRPOLoss(beta_kl=0.0), DAPOLoss(beta_kl=0.0)], ids=["grpo", "dapo"])
def test_masking_truncated_completions_is_training_on_the_finished_rows(tiny, roll, loss):  # noqa: F811
    model, tok = tiny
    truncated = {0, 4, 7, 12}
    marked = dataclasses.replace(roll, finish_reasons=["length" if i in truncated else "stop" for i in range(len(roll))])
    adv = torch.randn(len(roll), generator=torch.Generator().manual_seed(4))
    cfg = OptimConfig(lr=1e-3, warmup_steps=0, micro_batch_size=5, mask_truncated_completions=True)
    stats, losses, params = _update(model, tok, marked, adv, cfg, loss)
    kept = np.array([i for i in range(len(roll)) if i not in truncated])
    want_stats, want_losses, want_params = _update(model, tok, _subset(marked, kept), adv[kept],
                                                   dataclasses.replace(cfg, mask_truncated_completions=False), loss)
    _close(params, want_params)
    assert stats["train/pg_loss"] == pytest.approx(want_stats["train/pg_loss"], rel=RTOL)
    assert stats["train/entropy"] == pytest.approx(want_stats["train/entropy"], rel=RTOL)
    assert stats["train/rows_in_update"] == len(kept) - int((adv[kept] == 0).sum())
    assert (losses.pg[sorted(truncated)] == 0).all()  # a masked row gives the controllers no loss
    np.testing.assert_allclose(losses.pg[kept], want_losses.pg, rtol=RTOL, atol=1e-7)
    # off (the default): the truncated rows train
    _, _, unmasked = _update(model, tok, marked, adv, dataclasses.replace(cfg, mask_truncated_completions=False), loss)
    assert any(not torch.allclose(unmasked[k], params[k]) for k in params)


def test_engine_weights_by_hand():
    """Two rows of three tokens (the second has two valid ones); trainer-minus-engine log-prob differences
    ``d = [[0.5, -1.5, 2.0], [0.1, 1.2, 9.9]]`` (the masked 9.9 counts nowhere). Token weights exp(d):
    1.6487, 0.2231, 7.3891 / 1.1052, 3.3201; sequence weights exp(1.0) = 2.7183, exp(1.3) = 3.6693."""
    old = torch.tensor([[0.0, 0.0, 0.0], [0.0, 0.0, 0.0]], dtype=torch.float64)
    engine = -torch.tensor([[0.5, -1.5, 2.0], [0.1, 1.2, 9.9]], dtype=torch.float64)
    mask = torch.tensor([[1.0, 1.0, 1.0], [1.0, 1.0, 0.0]], dtype=torch.float64)
    counts = BatchCounts.of(np.array([3, 2]))
    e = math.exp
    cases = {
        ("token_truncate", None, 3.0): [[e(0.5), e(-1.5), 3.0], [e(0.1), 3.0, 1.0]],
        ("token_truncate", 0.5, 3.0): [[e(0.5), 0.5, 3.0], [e(0.1), 3.0, 1.0]],
        ("token_mask", None, 3.0): [[e(0.5), e(-1.5), 0.0], [e(0.1), 0.0, 1.0]],
        ("token_mask", 0.5, 3.0): [[e(0.5), 0.0, 0.0], [e(0.1), 0.0, 1.0]],
        ("sequence_truncate", None, 3.0): [[e(1.0)], [3.0]],
        ("sequence_mask", None, 3.0): [[e(1.0)], [0.0]],
        ("sequence_mask", 2.8, None): [[0.0], [e(1.3)]],
    }
    for (mode, lo, hi), want in cases.items():
        w, stats = EngineIS(mode, lo, hi, []).weights(old, engine, mask, counts)
        want = torch.tensor(want, dtype=torch.float64)
        valid = mask if mode.startswith("token") else torch.ones_like(want)
        torch.testing.assert_close(w * valid, want * valid, rtol=1e-12, atol=1e-12, msg=f"{mode} {lo} {hi}")
        applied = (want.expand_as(mask) * mask).sum() / 5
        assert float(stats["engine_is_mean"]) == pytest.approx(float(applied), rel=1e-12)
    # bounded tokens: token_truncate (None, 3): 7.39 and 3.32 -> 2 of 5 valid tokens; sequence: row 2's 2 tokens
    assert float(EngineIS("token_truncate", None, 3.0, []).weights(old, engine, mask, counts)[1]
                 ["engine_is_bounded_frac"]) == pytest.approx(2 / 5)
    assert float(EngineIS("sequence_mask", None, 3.0, []).weights(old, engine, mask, counts)[1]
                 ["engine_is_bounded_frac"]) == pytest.approx(2 / 5)


@pytest.mark.parametrize("mode", ["token_truncate", "sequence_truncate"])
@pytest.mark.parametrize("loss", [GRPOLoss(beta_kl=0.0), GSPOLoss(beta_kl=0.0)], ids=["grpo", "gspo"])
def test_an_engine_a_known_amount_off(tiny, roll, mode, loss):  # noqa: F811
    """Engine log-probs = the trainer's minus ``c_i`` on every token of row ``i``: the token weight is ``exp(c_i)``
    (the sequence weight ``exp(c_i · |y_i|)``), truncated at 3, the same on every token of the row; so the update
    equals the uncorrected one with ``A_i`` times that weight."""
    model, tok = tiny
    # AdamW with eps = 1 and lr = 1: a first step of g / (|g| + 1), smooth in the gradient (eps 1e-8 would turn the
    # float32 rounding of a near-zero gradient coordinate into a step of ~lr)
    cfg = OptimConfig(lr=1.0, eps=1.0, weight_decay=0.0, grad_clip=0.0, warmup_steps=0, micro_batch_size=5)
    fwd = Forward.bind(cfg, pad_id=_pad_id(tok), temperature=1.0)
    rows = np.arange(len(roll))
    trainer_lp = fwd.logprobs_no_grad(model, roll, rows)
    c = np.linspace(-0.6, 1.4, len(roll))
    engine_roll = dataclasses.replace(roll, logprobs=[lp.double().numpy() - c[i] for i, lp in enumerate(trainer_lp)])
    adv = torch.randn(len(roll), generator=torch.Generator().manual_seed(6))
    stats, _, params = _update(model, tok, engine_roll, adv, dataclasses.replace(cfg, engine_is_mode=mode), loss)
    per_row = c if mode.startswith("token") else c * roll.lengths
    w = np.minimum(np.exp(per_row), 3.0)
    _, _, want = _update(model, tok, roll, adv * torch.as_tensor(w, dtype=adv.dtype), cfg, loss)
    _close(params, want, atol=1e-6)  # the weights are exp(c_i) up to the float32 log-probs' rounding
    assert 0 < stats["train/engine_is_bounded_frac"] < 1 and stats["train/engine_is_mean"] > 0


def test_engine_correction_needs_the_engines_logprobs(tiny, roll):  # noqa: F811
    model, tok = tiny
    cfg = OptimConfig(engine_is_mode="token_mask")
    with pytest.raises(ValueError, match="engine_is_mode=token_mask needs the engine's log-probs"):
        _update(model, tok, dataclasses.replace(roll, logprobs=None), torch.ones(len(roll)), cfg, GRPOLoss(beta_kl=0.0))


class _Recording(DAPOLoss):
    """loss=dapo that keeps the counts each micro-batch was divided by (a probe of the update's schedule)."""

    def compute(self, batch, counts):
        object.__getattribute__(self, "seen").append(counts)
        return super().compute(batch, counts)


def test_dapo_divides_by_the_generation_batch_share_with_two_mini_batches(tiny, roll):  # noqa: F811
    model, tok = tiny
    loss = _Recording(beta_kl=0.0)
    object.__setattr__(loss, "seen", [])
    cfg = OptimConfig(lr=1e-3, warmup_steps=0, mini_batches=2, skip_zero_adv=False)
    _update(model, tok, roll, torch.randn(len(roll), generator=torch.Generator().manual_seed(1)), cfg, loss)
    total, n = int(roll.lengths.sum()), len(roll)
    assert len(loss.seen) >= 2
    for counts in loss.seen:
        assert (counts.step_rows, counts.step_tokens) == (n, total)
        assert counts.step_token_share() == pytest.approx(total * counts.rows / n)


@pytest.mark.parametrize(("kwargs", "message"), [
    ({"engine_is_mode": "tokens"}, "engine_is_mode must be one of"),
    ({"engine_is_max": 0.0}, "engine_is_max must be a finite number > 0 or null"),
    ({"engine_is_min": float("inf")}, "engine_is_min must be a finite number > 0 or null"),
    ({"engine_is_min": 3.0, "engine_is_max": 2.0}, "engine_is_min must be < engine_is_max"),
    ({"engine_is_mode": "token_truncate", "engine_is_max": None}, "needs engine_is_max or engine_is_min"),
    ({"mask_truncated_completions": "yes"}, "mask_truncated_completions must be true or false"),
])
def test_bad_values_name_the_key(kwargs, message):
    with pytest.raises((ValueError, TypeError), match=message):
        OptimConfig(**kwargs)


def test_a_run_with_every_option(tmp_path, monkeypatch):
    """``gdro-train experiment=smoke`` with the format term, the overlong punishment (L_max from model.max_new_tokens),
    truncated completions masked and the engine correction (the HF engine returns its log-probs): it runs, logs each
    option's metrics, and the shaped reward is correctness plus the format term (no completion reaches the buffer:
    the tiny model's copies end well before 16 - 4 tokens, as overlong_frac says). The real entry point
    (``gdro.cli.train:train``) runs in this process, on a real command line."""
    import json
    import sys

    from gdro.cli import train as cli

    run_dir = tmp_path / "run"
    overrides = ["experiment=smoke", "steps=2", "progress=false", "reward.format_weight=0.5", "reward.overlong_buffer=4",
                 "optim.mask_truncated_completions=true", "optim.engine_is_mode=token_truncate", f"hydra.run.dir={run_dir}"]
    monkeypatch.setattr(sys, "argv", ["gdro-train", *overrides])
    cli.train()  # a failure raises (a user error: SystemExit with its status)
    rows = [json.loads(x) for x in (run_dir / "metrics.jsonl").read_text().splitlines() if x.strip()]
    train = [r for r in rows if "train/loss" in r]
    assert len(train) == 2
    for r in train:
        assert r["train/engine_is_mean"] == pytest.approx(1.0, abs=1e-3)  # the engine is the trainer's own model
        assert r["reward/overlong_frac"] == 0.0
        assert r["reward/mean"] == pytest.approx(r["reward/accuracy"] + 0.5 * r["reward/format_frac"])
    config = (run_dir / "config.yaml").read_text()
    assert "overlong_max_tokens: 16" in config and "engine_is_mode: token_truncate" in config
