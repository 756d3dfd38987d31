"""The options every loss shares with TRL 1.16's trainer (gdro/loss/options.py: ``use_bias_correction_kl``,
``off_policy_mask_threshold``, ``top_entropy_quantile``), against TRL's own ``GRPOTrainer._compute_loss`` on
tests/test_trl_losses.py's harness (value and gradient, ragged masks with an empty row, advantages of both signs
and 0), on two TRL layouts (one micro-batch; two micro-batches of gradient accumulation, which gdro cuts the same
way). Also: the defaults leave every loss bit for bit what it computes without the options; ``count_empty_rows``
(TRL's ``grpo`` denominator) and the documented difference without it; ``clip_ratio_c`` below ``1 + clip_high``
refused, at it equal to TRL's ``delta``; bad values refused naming their key. docs/losses-vs-trl.md.
"""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest
import torch
from test_trl_losses import (
    F64,
    LENGTHS,
    LOSSES,
    B,
    T,
    _batch,
    _ours,
    _theirs,
    _tol,
    _trl,
)

from gdro.loss import (
    BatchCounts,
    DAPOLoss,
    DrGRPOLoss,
    GRPOLoss,
    GSPOLoss,
    LossInputs,
    LUSPOLoss,
    SAPOLoss,
    VESPOLoss,
)
from gdro.loss.options import high_entropy_mask, off_policy_mask

# one of each TRL loss_type gdro has, with a KL (the bias correction needs one)
BASES = ["grpo", "dr-grpo", "gspo", "dapo", "bnpo", "cispo", "sapo", "vespo", "luspo", "luspo-token-delta"]
OPTIONS = {
    "bias-correction": {"use_bias_correction_kl": True},
    "off-policy-mask": {"off_policy_mask_threshold": 0.04},  # drops rows 3 and 7 (A < 0, mean KL 0.05 and 0.15)
    "top-entropy": {"top_entropy_quantile": 0.3},
    "all": {"use_bias_correction_kl": True, "off_policy_mask_threshold": 0.04, "top_entropy_quantile": 0.5},
}
LAYOUTS = {"one-micro-batch": (1, [list(range(B))]), "two-micro-batches": (2, [[0, 1, 2, 3], [4, 5, 6, 7]])}


@pytest.fixture(scope="module")
def trl_trainer_class():
    from trl import GRPOTrainer  # a dev extra (pyproject), as in tests/test_trl_losses.py

    return GRPOTrainer


def _entropy(seed: int = 7) -> torch.Tensor:
    """Distinct positive entropies (padded positions too: both sides must ignore them), float32 values as the
    update's (TRL's quantile is a float32's: a float64 maximum can lie below its own float32 rounding)."""
    g = torch.Generator().manual_seed(seed)
    return (0.05 + 3.0 * torch.rand(B, T, generator=g, dtype=F64)).float().double()


# bnpo with two micro-batches of unequal tokens is TRL's mean of micro-batch means, not gdro's (gdro/loss/bnpo.py)
CASES = [(n, o, lay) for n in BASES for o in OPTIONS for lay in LAYOUTS if not (n == "bnpo" and lay != "one-micro-batch")]


@pytest.mark.parametrize(("name", "option", "layout"), CASES, ids=["-".join(c) for c in CASES])
def test_each_option_equals_trls_compute_loss(trl_trainer_class, name, option, layout):
    """gdro's loss with the option against TRL's with the same option, the micro-batches cut alike (TRL takes the
    entropy quantile over each micro-batch, as gdro does); and the option acts (the value changes)."""
    loss = dataclasses.replace(LOSSES[name], **OPTIONS[option])
    ga, parts = LAYOUTS[layout]
    logp, old, ref, mask, adv = _batch()
    entropy = _entropy()
    counts = BatchCounts.of(np.array(LENGTHS))
    got, got_grad = _ours(loss, logp, old, ref, mask, adv, counts, parts, entropy=entropy)
    trainer = _trl(trl_trainer_class, loss, ga=ga, spg=ga)
    want, want_grad = _theirs(trainer, logp, old, ref, mask, adv, float(sum(LENGTHS)), parts, entropy=entropy)
    torch.testing.assert_close(got, want, **_tol(name))
    torch.testing.assert_close(got_grad, want_grad, **_tol(name))
    assert got_grad[mask == 0].abs().sum() == 0
    _, plain_grad = _ours(LOSSES[name], logp, old, ref, mask, adv, counts, parts, entropy=entropy)
    assert not torch.allclose(got_grad, plain_grad, rtol=1e-6, atol=1e-9)  # the option acts


def test_the_masks_select_what_they_say():
    logp, old, _, mask, adv = _batch()
    keep = off_policy_mask(adv, logp, old, mask, 0.04).squeeze(-1)
    assert keep.tolist() == [1, 1, 1, 0, 1, 1, 1, 0]  # only A < 0 rows past the threshold; the empty row is kept
    entropy = _entropy()
    for q in (0.0, 0.3, 1.0):
        sel = high_entropy_mask(entropy, mask, q)
        valid = entropy[mask > 0]
        assert not sel[mask == 0].any()
        assert sel.sum() == (1 if q == 0.0 else valid.numel() if q == 1.0 else (valid >= valid.float().quantile(0.7)).sum())
    assert not high_entropy_mask(entropy, torch.zeros_like(mask), 0.3).any()  # no valid token: none kept


@pytest.mark.parametrize("name", list(LOSSES))
def test_defaults_change_nothing_to_the_bit(name):
    """The options at their defaults take no branch (gate and KL weight None); an off-policy threshold no response
    reaches multiplies by exactly 1: the value, gradient, stats and per-token terms are the same bits."""
    loss = LOSSES[name]
    assert (loss.use_bias_correction_kl, loss.off_policy_mask_threshold, loss.top_entropy_quantile) == (False, None, 1.0)
    logp, old, ref, mask, adv = _batch(4)
    counts = BatchCounts.of(np.array(LENGTHS))
    runs = []
    for variant in (loss, dataclasses.replace(loss, off_policy_mask_threshold=1e9)):
        x = logp.clone().requires_grad_(True)
        value, stats, terms = variant.compute(LossInputs(x, old, mask, adv, ref if loss.beta_kl > 0 else None), counts)
        value.backward()
        runs.append((value.detach(), x.grad, stats, terms))
    (v0, g0, s0, t0), (v1, g1, s1, t1) = runs
    assert torch.equal(v0, v1) and torch.equal(g0, g1) and torch.equal(t0.pg, t1.pg)
    assert s0.keys() == s1.keys() and all(torch.equal(s0[k], s1[k]) for k in s0)


@pytest.mark.parametrize("name", ["grpo", "gspo"])
def test_empty_rows_trls_denominator_or_the_documented_difference(trl_trainer_class, name):
    """A row without a valid token (row 1; optim.mask_truncated_completions makes them): with ``count_empty_rows``
    ``seq-mean-token-mean`` divides by all 8 responses, as TRL's ``grpo``; without it (the default, verl's) by the
    7 that have a token, TRL's value and gradient times 8/7 exactly."""
    trl_like = LOSSES[name]
    logp, old, ref, mask, adv = _batch(5)
    counts = BatchCounts.of(np.array(LENGTHS))
    want, want_grad = _theirs(_trl(trl_trainer_class, trl_like), logp, old, ref, mask, adv, float(sum(LENGTHS)),
                              [list(range(B))])
    got, got_grad = _ours(trl_like, logp, old, ref, mask, adv, counts, [list(range(B))])
    torch.testing.assert_close(got, want, rtol=1e-9, atol=1e-9)
    verl_like = dataclasses.replace(trl_like, count_empty_rows=False)
    got, got_grad = _ours(verl_like, logp, old, ref, mask, adv, counts, [list(range(B))])
    assert counts.rows == 8 and counts.responses == 7
    torch.testing.assert_close(got, want * 8 / 7, rtol=1e-9, atol=1e-9)
    torch.testing.assert_close(got_grad, want_grad * 8 / 7, rtol=1e-9, atol=1e-9)
    full = torch.ones_like(mask)  # without an empty row the two denominators agree
    a, _ = _ours(trl_like, logp, old, ref, full, adv, BatchCounts.of(np.full(B, T)), [list(range(B))])
    b, _ = _ours(verl_like, logp, old, ref, full, adv, BatchCounts.of(np.full(B, T)), [list(range(B))])
    assert torch.equal(a, b)


@pytest.mark.parametrize("make", [
    lambda c: GRPOLoss(clip_high=0.28, clip_ratio_c=c), lambda c: DrGRPOLoss(10, clip_high=0.28, clip_ratio_c=c),
    lambda c: DAPOLoss(clip_high=0.28, clip_ratio_c=c), lambda c: LUSPOLoss(clip_high=0.28, clip_ratio_c=c),
])
def test_clip_ratio_c_below_one_plus_clip_high_is_refused(make):
    """Below 1 + clip_high TRL's ``delta`` caps A > 0 tokens too and verl's dual clip does not: refused, naming
    both keys; from 1 + clip_high up both are one thing (the next test), accepted."""
    with pytest.raises(ValueError, match=r"^clip_ratio_c must be >= 1 \+ clip_high = 1.28 .*, got 1.2$"):
        make(1.2)
    with pytest.raises(ValueError, match=r"^clip_ratio_c must be > 1"):
        make(1.0)
    assert make(1.28).clip_ratio_c == 1.28


@pytest.mark.parametrize("name", ["grpo", "dapo", "luspo-token-delta"])
def test_clip_ratio_c_at_the_edge_equals_trls_delta(trl_trainer_class, name):
    loss = dataclasses.replace(LOSSES[name], clip_high=0.2, clip_ratio_c=1.2)
    logp, old, ref, mask, adv = _batch(6)
    counts = BatchCounts.of(np.array(LENGTHS))
    got, got_grad = _ours(loss, logp, old, ref, mask, adv, counts, [list(range(B))])
    want, want_grad = _theirs(_trl(trl_trainer_class, loss), logp, old, ref, mask, adv, float(sum(LENGTHS)),
                              [list(range(B))])
    torch.testing.assert_close(got, want, rtol=1e-9, atol=1e-9)
    torch.testing.assert_close(got_grad, want_grad, rtol=1e-9, atol=1e-9)


def test_the_entropy_option_needs_the_entropies():
    logp, old, _, mask, adv = _batch()
    with pytest.raises(ValueError, match="top_entropy_quantile=0.2 needs the tokens' entropies"):
        DAPOLoss(beta_kl=0.0, top_entropy_quantile=0.2).compute(LossInputs(logp, old, mask, adv),
                                                                BatchCounts.of(np.array(LENGTHS)))


@pytest.mark.parametrize(("make", "message"), [
    (lambda: GRPOLoss(use_bias_correction_kl="yes"), "use_bias_correction_kl must be true or false"),
    (lambda: SAPOLoss(off_policy_mask_threshold=0.0), "off_policy_mask_threshold must be > 0 or None"),
    (lambda: GSPOLoss(off_policy_mask_threshold=float("inf")), "off_policy_mask_threshold must be > 0 or None"),
    (lambda: DrGRPOLoss(10, top_entropy_quantile=1.5), r"top_entropy_quantile must be in \[0, 1\]"),
    (lambda: VESPOLoss(top_entropy_quantile=-0.1), r"top_entropy_quantile must be in \[0, 1\]"),
    (lambda: GRPOLoss(count_empty_rows=1), "count_empty_rows must be true or false"),
    (lambda: GSPOLoss(count_empty_rows="no"), "count_empty_rows must be true or false"),
    (lambda: VESPOLoss(k_pos=-1.0), "k_pos must be >= 0"),
    (lambda: VESPOLoss(lambda_neg=0.0), "lambda_neg must be > 0"),
    (lambda: VESPOLoss(k_neg=float("nan")), "k_neg must be >= 0"),
    (lambda: LUSPOLoss(level="seq"), "level must be one of"),
    (lambda: LUSPOLoss(clip_low=1.0), "clip_low must be in"),
    (lambda: LUSPOLoss(beta_kl=-0.1), "beta_kl must be >= 0"),
])
def test_bad_values_name_the_key(make, message):
    """Each message starts with its key (gdro.common.validate rewrites it as ``loss.<key>=<value>: ...``; a
    boolean's is a TypeError, as gdro's other boolean keys')."""
    with pytest.raises((ValueError, TypeError), match="^" + message):
        make()


@pytest.mark.parametrize("name", ["vespo", "luspo"])
def test_option_files_build_the_loss(name):
    """conf/loss/<name>.yaml's keys are the class's fields, at its defaults (a key missing from a checkpoint's
    config then reads as today's behaviour on resume)."""
    from pathlib import Path

    import yaml

    from gdro.loss import LUSPOLoss as Luspo
    from gdro.loss import VESPOLoss as Vespo

    with open(Path(__file__).resolve().parents[1] / "conf" / "loss" / f"{name}.yaml") as f:
        cfg = yaml.safe_load(f)
    cls = {"vespo": Vespo, "luspo": Luspo}[name]
    assert cfg.pop("_target_") == f"{cls.__module__}.{cls.__name__}"
    assert cls(**cfg) == cls()


@pytest.mark.slow
@pytest.mark.parametrize("loss", ["vespo", "luspo"])
def test_the_new_losses_and_options_train(loss: str, tmp_path):
    """``gdro-train experiment=smoke loss=<loss>`` with the three options on and 2 mini-batches (π_old ≠ π_θ from
    the 2nd, so the off-policy mask can act; the update hands the loss the forward's entropies and skips no row)."""
    import json
    import math
    import subprocess
    import sys
    from pathlib import Path

    run_dir = tmp_path / "run"
    overrides = ["experiment=smoke", f"loss={loss}", "loss.top_entropy_quantile=0.5", "loss.off_policy_mask_threshold=0.5",
                 "loss.use_bias_correction_kl=true", "optim.mini_batches=2", "progress=false", "eval.at_start=false",
                 "eval.at_end=false", f"hydra.run.dir={run_dir}"]
    proc = subprocess.run([sys.executable, "-m", "gdro.cli.train", *overrides], cwd=Path(__file__).resolve().parents[1],
                          capture_output=True, text=True, timeout=900, check=False)
    assert proc.returncode == 0, proc.stderr[-3000:]
    rows = [json.loads(x) for x in (run_dir / "metrics.jsonl").read_text().splitlines() if x.strip()]
    assert [r["step"] for r in rows] == [1, 2, 3]
    for r in rows:
        assert all(math.isfinite(r[k]) for k in ("train/loss", "train/pg_loss", "train/kl", "train/grad_norm"))
        assert r["train/rows_in_update"] == r["rollout/n_total"]  # top_entropy_quantile < 1: no row skipped
