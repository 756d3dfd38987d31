"""The advantage estimators (``advantage=grpo|dr-grpo|rloo|reinforce-pp|grpo-passk``, issue #50), an axis apart from
the loss: each against an independent reference written group by group from its paper / verl formula (exact rational
arithmetic, plain loops) on random ragged groups; composed with every loss and a few controls; refused where it
makes no sense; a tiny real run each; and the migration of the advantage keys the losses held before #50.
"""

from __future__ import annotations

import json
import math
import sys
from dataclasses import dataclass
from fractions import Fraction

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st
from omegaconf import OmegaConf

from gdro.cli import train as cli
from gdro.common.validate import ConfigError
from gdro.compose.build import build_components, build_training
from gdro.loss import (
    AdvantageEstimator,
    DrGRPOAdvantage,
    GRPOAdvantage,
    GRPOLoss,
    GRPOPassKAdvantage,
    ReinforcePPAdvantage,
    RLOOAdvantage,
)
from gdro.loss.advantage_estimators import check_group_sizes
from gdro.loss.advantages import group_advantages, scaled_advantages
from gdro.run import migrations
from gdro.run.record import config_differences
from tests.conftest import FAST, compose_cfg

torch.set_num_threads(1)
F64 = torch.float64
ESTIMATORS = ["grpo", "dr-grpo", "rloo", "reinforce-pp", "grpo-passk"]
LOSSES = ["grpo", "gspo", "dr-grpo", "dapo", "bnpo", "cispo", "sapo", "vespo", "luspo"]


# ------------------------------------------------------------------------------ references: rationals, plain loops
def _by_group(groups: list[int]) -> dict[int, list[int]]:
    out: dict[int, list[int]] = {}
    for i, g in enumerate(groups):
        out.setdefault(g, []).append(i)
    return out


def _var(values: list[Fraction], ddof: int) -> Fraction:
    mean = sum(values) / len(values)
    return sum((v - mean) ** 2 for v in values) / max(len(values) - ddof, 1)


def ref_grpo(rewards, groups, *, scale: str, eps: float, unbiased: bool) -> list[float]:
    """Eq. 3 with TRL's scale_rewards: (r - mean_g) / (std + eps), std the group's, the batch's, or none; a group of one
    and a centred reward of exactly 0 give 0."""
    r, ddof, out = [Fraction(x) for x in rewards], int(unbiased), [0.0] * len(rewards)
    batch_std = math.sqrt(_var(r, ddof)) if r else 0.0
    for rows in _by_group(groups).values():
        if len(rows) == 1:
            continue
        vals = [r[i] for i in rows]
        mean, std = sum(vals) / len(vals), math.sqrt(_var(vals, ddof))
        for i in rows:
            c = r[i] - mean
            if c != 0:
                out[i] = float(c) if scale == "none" else float(c) / ((std if scale == "group" else batch_std) + eps)
    return out


def ref_rloo(rewards, groups) -> list[float]:
    """RLOO: r_i minus the mean of the other responses of its group (a group of one: 0)."""
    r, out = [Fraction(x) for x in rewards], [0.0] * len(rewards)
    for rows in _by_group(groups).values():
        for i in rows:
            others = [r[j] for j in rows if j != i]
            out[i] = float(r[i] - sum(others) / len(others)) if others else 0.0
    return out


def ref_reinforce_pp(rewards, groups, *, baseline: str, eps: float, unbiased: bool) -> list[float]:
    """REINFORCE++: x = r (minus the group mean, 0 for a group of one, with the group baseline), then
    (x - mean_batch x) / (std_batch x + eps)."""
    r = [Fraction(v) for v in rewards]
    x = list(r)
    if baseline == "group":
        for rows in _by_group(groups).values():
            mean = sum(r[i] for i in rows) / len(rows)
            for i in rows:
                x[i] = r[i] - mean
    if not x:
        return []
    m, std = sum(x) / len(x), math.sqrt(_var(x, int(unbiased)))
    return [float(v - m) / (std + eps) if v != m else 0.0 for v in x]


def ref_passk(rewards, groups, *, norm: bool, eps: float, unbiased: bool) -> list[float]:
    """verl's grpo_passk: the best response of a group gets r_max - r_2nd (over std + eps with norm), others 0."""
    r, out = [Fraction(v) for v in rewards], [0.0] * len(rewards)
    for rows in _by_group(groups).values():
        if len(rows) < 2:
            continue
        ranked = sorted(rows, key=lambda i: r[i], reverse=True)
        gap = r[ranked[0]] - r[ranked[1]]
        if gap != 0:
            out[ranked[0]] = float(gap) / (math.sqrt(_var([r[i] for i in rows], int(unbiased))) + eps) if norm \
                else float(gap)
    return out


@st.composite
def ragged_batch(draw: st.DrawFn) -> tuple[list[float], list[int], int]:
    """Random group sizes (0, 1 and all-equal groups among them), rows shuffled so groups are not contiguous."""
    sizes = draw(st.lists(st.integers(0, 7), min_size=1, max_size=8))
    kind = draw(st.sampled_from(["binary", "float", "constant"]))
    reward = {"binary": st.sampled_from([0.0, 1.0]), "float": st.floats(-5, 5, allow_nan=False, width=32),
              "constant": st.just(0.1)}[kind]
    groups = [g for g, s in enumerate(sizes) for _ in range(s)]
    rewards = draw(st.lists(reward, min_size=len(groups), max_size=len(groups)))
    perm = draw(st.permutations(list(range(len(groups)))))
    return [rewards[p] for p in perm], [groups[p] for p in perm], len(sizes)


def _check(got: torch.Tensor, want: list[float]) -> None:
    assert got.dtype == F64 and not torch.isnan(got).any()
    torch.testing.assert_close(got, torch.tensor(want, dtype=F64), rtol=1e-7, atol=1e-7)
    assert torch.equal(got == 0, torch.tensor(want, dtype=F64) == 0)  # zeros exactly where the formula gives 0


def _t(batch):
    rewards, groups, num_groups = batch
    return torch.tensor(rewards, dtype=F64), torch.tensor(groups, dtype=torch.long), num_groups


@settings(max_examples=150, deadline=None)
@given(batch=ragged_batch(), scale=st.sampled_from(["group", "batch", "none"]), unbiased=st.booleans(),
       eps=st.sampled_from([1e-6, 0.1]))
def test_grpo_matches_its_reference(batch, scale, unbiased, eps):
    got = GRPOAdvantage(scale_rewards=scale, eps=eps, unbiased_std=unbiased)(*_t(batch))
    _check(got, ref_grpo(batch[0], batch[1], scale=scale, eps=eps, unbiased=unbiased))


@settings(max_examples=100, deadline=None)
@given(batch=ragged_batch())
def test_dr_grpo_and_rloo_match_their_references(batch):
    _check(DrGRPOAdvantage()(*_t(batch)), ref_grpo(batch[0], batch[1], scale="none", eps=0.0, unbiased=False))
    _check(RLOOAdvantage()(*_t(batch)), ref_rloo(batch[0], batch[1]))


@settings(max_examples=150, deadline=None)
@given(batch=ragged_batch(), baseline=st.sampled_from(["group", "none"]), unbiased=st.booleans(),
       eps=st.sampled_from([1e-6, 0.1]))
def test_reinforce_pp_matches_its_reference(batch, baseline, unbiased, eps):
    got = ReinforcePPAdvantage(baseline=baseline, eps=eps, unbiased_std=unbiased)(*_t(batch))
    _check(got, ref_reinforce_pp(batch[0], batch[1], baseline=baseline, eps=eps, unbiased=unbiased))


@settings(max_examples=150, deadline=None)
@given(batch=ragged_batch(), norm=st.booleans(), unbiased=st.booleans(), eps=st.sampled_from([0.0, 1e-6, 0.1]))
def test_grpo_passk_matches_its_reference(batch, norm, unbiased, eps):
    got = GRPOPassKAdvantage(norm_adv_by_std=norm, eps=eps, unbiased_std=unbiased)(*_t(batch))
    _check(got, ref_passk(batch[0], batch[1], norm=norm, eps=eps, unbiased=unbiased))


# ------------------------------------------------------------------------------------------------- hand values
def test_hand_values_over_ragged_groups():
    """g0 = rows 0, 3, 5: rewards 1, 0, 0; g1 = row 2: 1 (alone); g2 = rows 1, 4: 1, 1 (all equal); id 3 empty."""
    r, g = torch.tensor([1.0, 1.0, 1.0, 0.0, 1.0, 0.0], dtype=F64), torch.tensor([0, 2, 1, 0, 2, 0])
    torch.testing.assert_close(RLOOAdvantage()(r, g, 4), torch.tensor([1.0, 0, 0, -0.5, 0, -0.5], dtype=F64))
    bessel = math.sqrt(1 / 3)  # std of 1, 0, 0 with n - 1
    torch.testing.assert_close(GRPOPassKAdvantage(eps=0.0)(r, g, 4),
                               torch.tensor([1 / bessel, 0, 0, 0, 0, 0], dtype=F64))
    assert torch.equal(GRPOPassKAdvantage(norm_adv_by_std=False)(r, g, 4), torch.tensor([1.0, 0, 0, 0, 0, 0], dtype=F64))
    tied = GRPOPassKAdvantage()(torch.tensor([1.0, 1.0, 0.0]), torch.tensor([0, 0, 0]), 1)
    assert torch.equal(tied, torch.zeros(3))  # a tied best: r_max - r_2nd = 0 for everyone
    x = [2 / 3, 0, 0, -1 / 3, 0, -1 / 3]  # group-centred rewards: batch mean 0, Bessel variance (6/9) / 5
    torch.testing.assert_close(ReinforcePPAdvantage(eps=0.0)(r, g, 4),
                               torch.tensor([v / math.sqrt(6 / 45) for v in x], dtype=F64))


@pytest.mark.parametrize("name", ESTIMATORS)
@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_groups_of_one_and_all_equal_groups_are_exactly_zero(name, dtype):
    """Constant groups whose float sum / n rounds (3 x 0.1, 7 x 2.2) and a group of one: exact zeros, any dtype."""
    r = torch.tensor([0.1, 0.7, 0.1, 0.1] + [2.2] * 7, dtype=dtype)
    g = torch.tensor([0, 1, 0, 0, 4, 4, 4, 4, 4, 4, 4])
    adv = _estimator(name)(r, g, 5)
    assert adv.dtype == dtype and torch.equal(adv, torch.zeros_like(r))
    assert _estimator(name)(torch.zeros(0, dtype=dtype), torch.zeros(0, dtype=torch.long), 2).shape == (0,)


def test_reinforce_pp_without_baseline_whitens_the_raw_rewards():
    assert torch.equal(ReinforcePPAdvantage(baseline="none", eps=0.0)(torch.full((4,), 0.3), torch.arange(4), 4),
                       torch.zeros(4))  # a constant batch: 0, not 0/0
    got = ReinforcePPAdvantage(baseline="none", eps=0.0)(torch.tensor([1.0, 0.0, 0.0, 0.0]), torch.arange(4), 4)
    torch.testing.assert_close(got, torch.tensor([0.75, -0.25, -0.25, -0.25]) / math.sqrt(0.25))  # groups of one count


def test_bad_values_name_the_key():
    for make, message in [(lambda: GRPOAdvantage(eps=-1.0), "eps must be >= 0, got -1.0"),
                          (lambda: GRPOAdvantage(scale_rewards="std"), "scale_rewards must be one of"),
                          (lambda: ReinforcePPAdvantage(baseline="batch"), "baseline must be one of"),
                          (lambda: GRPOPassKAdvantage(eps=float("nan")), "eps must be >= 0")]:
        with pytest.raises(ValueError, match=message):
            make()


# --------------------------------------------------------------------------- the default: today's values, bit for bit
def test_the_default_is_the_advantages_of_before_the_move_to_the_bit():
    """``advantage=grpo`` with its defaults is what every loss but dr-grpo computed before #50 (scaled_advantages with
    group scale, eps 1e-6, population std: group_advantages); loss=dr-grpo's is group_advantages without std."""
    g = torch.Generator().manual_seed(7)
    groups = torch.randint(0, 13, (97,), generator=g)
    rewards = torch.randint(0, 2, (97,), generator=g).float()
    comp = build_components(compose_cfg())
    assert comp.advantage == GRPOAdvantage()
    want = group_advantages(rewards, groups, 13)
    assert torch.equal(comp.advantage(rewards, groups, 13), want)
    assert torch.equal(want, scaled_advantages(rewards, groups, 13, scale="group", eps=1e-6, unbiased_std=False))
    dr = build_components(compose_cfg(["loss=dr-grpo"])).advantage
    assert torch.equal(dr(rewards, groups, 13), group_advantages(rewards, groups, 13, norm_by_std=False))


# ------------------------------------------------------------------------------------------ composition and checks
def _estimator(name: str):
    return {"grpo": GRPOAdvantage(), "dr-grpo": DrGRPOAdvantage(), "rloo": RLOOAdvantage(),
            "reinforce-pp": ReinforcePPAdvantage(), "grpo-passk": GRPOPassKAdvantage()}[name]


@pytest.mark.parametrize("loss", LOSSES)
@pytest.mark.parametrize("advantage", ESTIMATORS)
def test_every_estimator_composes_with_every_loss(loss, advantage):
    comp = build_components(compose_cfg([f"loss={loss}", f"advantage={advantage}"]))
    assert comp.advantage == _estimator(advantage) and not hasattr(comp.loss, "advantages")
    assert isinstance(comp.advantage, AdvantageEstimator) and comp.advantage.name == advantage


@pytest.mark.parametrize("loss", LOSSES)
def test_loss_dr_grpo_still_selects_its_advantages(loss):
    """loss=dr-grpo means both of Dr. GRPO's changes, as before #50; every other loss keeps advantage=grpo."""
    cfg = compose_cfg([f"loss={loss}"], return_hydra_config=True)
    want = "dr-grpo" if loss == "dr-grpo" else "grpo"
    assert cfg.hydra.runtime.choices.advantage == want
    assert build_components(cfg).advantage == _estimator(want)
    assert build_components(compose_cfg([f"loss={loss}", "advantage=rloo"])).advantage == RLOOAdvantage()


@pytest.mark.parametrize("advantage", ESTIMATORS)
@pytest.mark.parametrize("controls", [["sampler=uniform", "allocator=knapsack"],
                                      ["sampler=learnability", "allocator=rollout-gdro", "filter=dynamic"],
                                      ["sampler=mopps", "allocator=sqrt", "skip=greso"],
                                      ["allocator=zero-variance", "filter=dynamic"]], ids=lambda c: "+".join(c))
def test_estimators_compose_with_controls(advantage, controls):
    comp = build_components(compose_cfg([f"advantage={advantage}", *controls]))
    assert comp.advantage == _estimator(advantage)


@pytest.mark.parametrize(("overrides", "message"), [
    (["advantage=grpo-passk", "rollouts_per_prompt=1"], "rollouts_per_prompt=1: advantage=grpo-passk needs groups of 2"),
    (["advantage=rloo", "rollouts_per_prompt=1"], "rollouts_per_prompt=1: advantage=rloo needs groups of 2"),
    (["advantage=rloo", "allocator=knapsack", "allocator.n_min=1"], "allocator.n_min=1: advantage=rloo needs groups"),
    (["advantage=grpo-passk", "allocator=rollout-gdro", "allocator.n_min=1"], "allocator.n_min=1: advantage=grpo-passk"),
    (["advantage=reinforce-pp", "rollouts_per_prompt=1"], "advantage.baseline=none whitens the raw rewards"),
    (["advantage.norm_adv_by_std=false", "advantage.scale_rewards=batch"], "advantage.scale_rewards=batch: must not"),
    (["advantage=rloo", "+advantage.scale_rewards=batch"], "unknown key 'advantage.scale_rewards'"),
    (["advantage=reinforce-pp", "advantage.baseline=group2"], "advantage.baseline=group2: must be one of"),
    (["+loss.adv_eps=1e-4"], "loss.adv_eps: moved to advantage.eps (#50"),
    (["loss=gspo", "+loss.scale_rewards=batch"], "loss.scale_rewards: moved to advantage.scale_rewards"),
])
def test_combinations_that_make_no_sense_are_refused_in_one_line(overrides, message):
    with pytest.raises(ConfigError) as err:
        build_components(compose_cfg(overrides))
    assert message in str(err.value) and "\n" not in str(err.value)


def test_groups_of_one_stay_allowed_where_they_were():
    """grpo and dr-grpo accept groups of one as before #50 (advantage 0), reinforce-pp without a baseline too."""
    for overrides in (["rollouts_per_prompt=1"], ["loss=dr-grpo", "rollouts_per_prompt=1"],
                      ["advantage=reinforce-pp", "advantage.baseline=none", "rollouts_per_prompt=1"],
                      ["advantage=rloo", "allocator=knapsack", "allocator.n_min=2"]):
        build_components(compose_cfg(overrides))
    check_group_sizes(RLOOAdvantage(), 2, "rollouts_per_prompt")
    with pytest.raises(ValueError, match=r"^allocator.n_min=1: advantage=rloo"):
        check_group_sizes(RLOOAdvantage(), 1, "allocator.n_min")


@dataclass(frozen=True)
class OldStyleLoss(GRPOLoss):
    """A loss written before #50: its ``advantages`` would no longer be called."""

    def advantages(self, rewards, group_index, num_groups):
        return rewards


@dataclass(frozen=True)
class ScaledLoss(GRPOLoss):
    """A user's loss with a key of the name a moved key had."""

    scale_rewards: str = "group"


def test_a_loss_that_still_computes_advantages_is_refused_and_a_key_of_its_own_is_kept():
    with pytest.raises(ConfigError, match=r"^loss._target_=tests.test_advantage.OldStyleLoss: defines advantages\(\)"):
        build_components(compose_cfg(["loss._target_=tests.test_advantage.OldStyleLoss"]))
    comp = build_components(compose_cfg(["loss._target_=tests.test_advantage.ScaledLoss", "+loss.scale_rewards=batch"]))
    assert comp.loss.scale_rewards == "batch" and comp.advantage == GRPOAdvantage()


@pytest.mark.parametrize(("overrides", "named"), [
    ("advantage=grpo-passk rollouts_per_prompt=1", "rollouts_per_prompt=1: advantage=grpo-passk"),
    ("advantage=rloo advantage.scale_rewards=batch", "a key of advantage=grpo"),
    ("+loss.unbiased_std=true", "loss.unbiased_std: moved to advantage.unbiased_std"),
    ("loss.scale_rewards=batch", "'loss.scale_rewards'"),
])
def test_the_cli_refuses_in_one_line_before_anything_loads(overrides, named, tmp_path, monkeypatch, capsys):
    monkeypatch.delenv("HYDRA_FULL_ERROR", raising=False)
    monkeypatch.setattr(sys, "argv", ["gdro-train", "logger=jsonl", "progress=false", *overrides.split(),
                                      f"hydra.run.dir={tmp_path}/run"])
    with pytest.raises(SystemExit) as exit_:
        cli.train()
    lines = [x for x in capsys.readouterr().err.splitlines() if x.strip()]
    assert exit_.value.code == 2 and len(lines) == 1 and named in lines[0], lines
    assert not (tmp_path / "run").exists()


class _Recording:
    """An estimator that records what it returned (the trainer's advantages before Prompt-GDRO's multipliers)."""

    def __init__(self, inner):
        self.inner, self.out = inner, []

    def __call__(self, rewards, group_index, num_groups):
        self.out.append(self.inner(rewards, group_index, num_groups))
        return self.out[-1]


@pytest.mark.parametrize("advantage", ESTIMATORS)
def test_each_estimator_trains_two_steps(advantage, tmp_path):
    """A real 2-step run per estimator (tests/conftest.py's FAST): the trainer uses the run's estimator, and the
    advantages it logs (train/adv_abs_mean) are the estimator's."""
    training = build_training(compose_cfg([*FAST, f"advantage={advantage}", "data.train_size=16"]), tmp_path / "run")
    objective = training.trainer.objective
    assert objective.advantage == _estimator(advantage)
    training.trainer.objective = objective._replace(advantage=(rec := _Recording(objective.advantage)))
    try:
        rows = [r for r in training.fit() if r.get("step")]
    finally:
        training.logger.close()
    assert [r["step"] for r in rows] == [1, 2] and len(rec.out) == 2
    for r, adv in zip(rows, rec.out, strict=True):
        assert math.isfinite(r["train/loss"]) and r["train/adv_abs_mean"] == float(adv.abs().mean())


# -------------------------------------------------------------------------------------------------------- migration
def _before_the_move(new: dict) -> dict:
    """A resolved config as gdro wrote it before #50: no advantage group, its keys in the loss (the TRL losses had no
    norm_adv_by_std; loss=dr-grpo had none of them)."""
    old = json.loads(json.dumps(new))
    adv = old.pop("advantage")
    target = old["loss"]["_target_"]
    if not target.endswith("DrGRPOLoss"):
        moved = {"scale_rewards": "scale_rewards", "adv_eps": "eps", "unbiased_std": "unbiased_std"}
        if target.endswith(("GRPOLoss", "GSPOLoss")):
            moved["norm_adv_by_std"] = "norm_adv_by_std"
        old["loss"].update({k: adv[v] for k, v in moved.items()})
    return old


def _resolved(overrides: list[str]) -> dict:
    return OmegaConf.to_container(compose_cfg(overrides), resolve=True)


@pytest.mark.parametrize("loss", LOSSES)
def test_a_config_written_before_the_move_is_no_difference(loss):
    new = _resolved([f"loss={loss}"])
    old = _before_the_move(new)
    assert config_differences(old, new, schema=1) == []
    assert config_differences(old, new, schema=0) == []
    assert config_differences(old, new, schema=migrations.SCHEMA) != []  # today's checkpoints hold today's names


def test_a_changed_advantage_value_is_still_a_difference():
    old = _before_the_move(_resolved(["loss=dapo", "advantage.scale_rewards=batch"]))
    assert old["loss"]["scale_rewards"] == "batch"
    assert config_differences(old, _resolved(["loss=dapo"]), schema=1) == [
        'advantage.scale_rewards: "batch" -> "group"']
    dr = _before_the_move(_resolved(["loss=dr-grpo"]))
    assert config_differences(dr, _resolved(["loss=dr-grpo", "advantage=grpo"]), schema=1)[0].startswith(
        'advantage._target_: "gdro.loss.advantage_estimators.DrGRPOAdvantage" -> ')


def test_the_moved_keys_are_one_table():
    assert {m.old: m.new for m in migrations.applying(0, "key")} == {
        "loss.scale_rewards": "advantage.scale_rewards", "loss.norm_adv_by_std": "advantage.norm_adv_by_std",
        "loss.adv_eps": "advantage.eps", "loss.unbiased_std": "advantage.unbiased_std"}
    assert migrations.moved_key("loss.adv_eps").new == "advantage.eps" and migrations.moved_key("loss.agg") is None
    flat = {"loss._target_": "gdro.loss.dr_grpo.DrGRPOLoss", "loss.adv_eps": 1e-4}
    assert migrations.migrated(flat, 1) == {"loss._target_": "gdro.loss.dr_grpo.DrGRPOLoss", "advantage.eps": 1e-4,
                                            "advantage._target_": "gdro.loss.advantage_estimators.DrGRPOAdvantage"}
    assert migrations.migrated(flat, migrations.SCHEMA) == flat


@pytest.mark.slow
def test_a_checkpoint_written_before_the_move_resumes(tmp_path):
    """A real checkpoint whose meta.json holds the loss's advantage keys (as gdro before #50 wrote it) resumes."""
    from tests.test_renamed_targets import _resume_after

    def rewrite(config):
        config.update(_before_the_move(config))
        config.pop("advantage", None)
        assert config["loss"]["adv_eps"] == 1e-6

    _resume_after(tmp_path, rewrite)


@pytest.mark.parametrize(("old", "new"), [("loss.scale_rewards=batch", "advantage.scale_rewards"),
                                          ("loss.adv_eps=1e-4", "advantage.eps"),
                                          ("loss.unbiased_std=true", "advantage.unbiased_std")])
def test_a_moved_key_on_the_command_line_names_its_new_place(old, new, monkeypatch, capsys, tmp_path):
    from gdro.cli import train as cli

    monkeypatch.delenv("HYDRA_FULL_ERROR", raising=False)
    monkeypatch.setattr(sys, "argv", ["gdro-train", old, f"hydra.run.dir={tmp_path}/run"])
    with pytest.raises(SystemExit) as exit_:
        cli.train()
    assert exit_.value.code == 2
    key = old.split("=")[0]
    assert capsys.readouterr().err.strip() == f"config error: unknown key '{key}' (moved to '{new}')"


def test_the_ledgers_groups_with_gradient_are_the_groups_with_a_non_zero_advantage():
    """compute/groups_with_grad: the mixed groups where an estimator's zeros are exactly the unmixed ones; otherwise
    (grpo-passk's tie at the top, reinforce-pp without a baseline) the groups whose advantages are not all 0."""
    import numpy as np

    from gdro.loss.advantage_estimators import (
        GRPOAdvantage,
        GRPOPassKAdvantage,
        ReinforcePPAdvantage,
        groups_with_gradient,
    )

    rewards = torch.tensor([1.0, 1.0, 0.0, 0.0, 1.0, 0.0, 0.0, 0.0, 1.0, 1.0])  # tie at the top | mixed | 0s | 1s
    group_index = np.array([0, 0, 0, 0, 1, 1, 2, 2, 3, 3])
    mixed = np.array([True, True, False, False])
    for est, expect in ((GRPOAdvantage(), [True, True, False, False]),
                        (GRPOPassKAdvantage(), [False, True, False, False]),
                        (ReinforcePPAdvantage(baseline="none"), [True, True, True, True]),
                        (ReinforcePPAdvantage(), [True, True, False, False])):
        adv = est(rewards, torch.as_tensor(group_index), 4)
        got = groups_with_gradient(est, mixed, adv, group_index, 4)
        nonzero = [bool((adv[group_index == g] != 0).any()) for g in range(4)]
        assert got.tolist() == expect == nonzero, est.name
