"""GRPO group-relative advantages over *ragged* groups (paper Eq. 3).

A batch of N responses carries ``group_index (N,)``: the id in ``[0, G)`` of the prompt (GRPO group) each
response belongs to. Groups may have different sizes (Rollout-GDRO gives each bin its own n) and the rows of a
group need not be contiguous, so every statistic is computed with segment operations (``bincount``,
``index_add_``, ``scatter_reduce``), never by reshaping to ``(G, n)``.

Eq. 3:  A_{i,j} = (r_{i,j} - mu_i) / (sigma_i + eps),  mu_i = mean_j r_{i,j},  sigma_i = std_j r_{i,j}.

The paper writes the population std (divide by n); verl uses ``torch.std`` (Bessel, divide by n - 1),
selected here with ``unbiased_std=True``. Degenerate groups are defined to give exactly 0: a group whose
rewards are all equal (no learning signal) and a group of one response (no baseline). Note that verl instead
gives a group of one mean 0 and std 1, i.e. A = r; we follow the paper's intent that a lone response carries
no relative signal.

``scaled_advantages`` adds TRL's ``scale_rewards`` (``advantage=grpo``'s ``scale_rewards`` key): ``group`` divides by
each group's std (Eq. 3, ``group_advantages``), ``batch`` centres on each group's mean but divides by the std of
the whole step's rewards (PPO-Lite, arXiv 2508.08221), ``none`` only centres (Dr. GRPO).

The other estimators of ``advantage=<name>`` (gdro/loss/advantage_estimators.py binds each to its config), over the
same ragged groups: ``rloo_advantages`` (leave-one-out baseline), ``reinforce_pp_advantages`` (REINFORCE++: batch
whitening), ``passk_advantages`` (verl's ``grpo_passk``: only each group's best response).
"""

from __future__ import annotations

import math

import torch

__all__ = ["BASELINES", "SCALES", "check_scale", "group_advantages", "group_sizes", "passk_advantages",
           "reinforce_pp_advantages", "rloo_advantages", "scaled_advantages"]

SCALES = ("group", "batch", "none")  # TRL scale_rewards: the std advantages are divided by


def _check_group_index(group_index: torch.Tensor, num_groups: int | None) -> int:
    """Validate ``group_index``/``num_groups`` and return the number of groups G."""
    if not isinstance(group_index, torch.Tensor):
        raise TypeError(f"group_index must be a torch.Tensor, got {type(group_index).__name__}")
    if group_index.dim() != 1:
        raise ValueError(f"group_index must be 1-D (N,), got shape {tuple(group_index.shape)}")
    if group_index.dtype.is_floating_point or group_index.dtype.is_complex or group_index.dtype == torch.bool:
        raise ValueError(f"group_index must have an integer dtype, got {group_index.dtype}")
    if num_groups is not None and (isinstance(num_groups, bool) or not isinstance(num_groups, int)):
        raise ValueError(f"num_groups must be an int or None, got {num_groups!r}")
    if num_groups is not None and num_groups < 0:
        raise ValueError(f"num_groups must be >= 0, got {num_groups}")
    if group_index.numel() == 0:
        return 0 if num_groups is None else num_groups
    lo, hi = int(group_index.min()), int(group_index.max())
    if lo < 0:
        raise ValueError(f"group_index must be non-negative, got min {lo}")
    if num_groups is None:
        return hi + 1
    if hi >= num_groups:
        raise ValueError(f"group_index must be < num_groups={num_groups}, got max {hi}")
    return num_groups


def _check_inputs(rewards: torch.Tensor, group_index: torch.Tensor, num_groups: int | None, eps: float) -> int:
    """Validate an estimator's arguments (the ``Raises`` of :func:`group_advantages`) and return G."""
    if not isinstance(rewards, torch.Tensor):
        raise TypeError(f"rewards must be a torch.Tensor, got {type(rewards).__name__}")
    if rewards.dim() != 1:
        raise ValueError(f"rewards must be 1-D (N,), got shape {tuple(rewards.shape)}")
    if not rewards.dtype.is_floating_point:
        raise ValueError(f"rewards must have a floating dtype, got {rewards.dtype}")
    if group_index.shape != rewards.shape:
        raise ValueError(
            f"group_index shape {tuple(group_index.shape)} must match rewards shape {tuple(rewards.shape)}"
        )
    if not eps >= 0:  # also rejects NaN
        raise ValueError(f"eps must be >= 0, got {eps}")
    num_g = _check_group_index(group_index, num_groups)
    if not bool(torch.isfinite(rewards).all()):
        raise ValueError("rewards must be finite (found NaN or inf)")
    return num_g


def group_sizes(group_index: torch.Tensor, num_groups: int | None = None) -> torch.Tensor:
    """Number of responses in each group.

    Args:
        group_index: ``(N,)`` integer tensor of group ids in ``[0, G)``.
        num_groups: G; defaults to ``max(group_index) + 1`` (0 for an empty batch).

    Returns:
        ``(G,)`` LongTensor; groups without rows have size 0.
    """
    g = _check_group_index(group_index, num_groups)
    return torch.bincount(group_index.long(), minlength=g)


def group_advantages(
    rewards: torch.Tensor,
    group_index: torch.Tensor,
    num_groups: int | None = None,
    *,
    norm_by_std: bool = True,
    eps: float = 1e-6,
    unbiased_std: bool = False,
) -> torch.Tensor:
    """GRPO outcome advantages over ragged groups (paper Eq. 3).

    ``A_i = (r_i - mean_g) / (std_g + eps)`` if ``norm_by_std`` else ``r_i - mean_g``, where ``g`` is the
    group of row ``i``. Statistics are computed in float64 and the result is cast back to ``rewards.dtype``.

    Args:
        rewards: ``(N,)`` floating tensor of finite scalar rewards, one per response.
        group_index: ``(N,)`` integer tensor; ``group_index[i]`` is the group (prompt) of response ``i``.
        num_groups: G; defaults to ``max(group_index) + 1``. Ids with no rows (empty groups) are allowed.
        norm_by_std: divide by the group std (verl ``norm_adv_by_std_in_grpo``); Dr.GRPO-style if False.
        eps: added to the std in the denominator (paper's epsilon), must be >= 0.
        unbiased_std: Bessel-corrected std (verl, ``torch.std``) instead of the paper's population std.

    Returns:
        ``(N,)`` advantages, same dtype/device as ``rewards``. Exactly 0 for every row of a zero-variance
        group and for a group of one (also with ``unbiased_std``); never NaN for finite rewards (even eps=0).

    Raises:
        TypeError: if ``rewards`` or ``group_index`` is not a tensor.
        ValueError: on shape/dtype mismatch, negative or out-of-range ids, eps < 0, non-finite rewards.
    """
    num_g = _check_inputs(rewards, group_index, num_groups, eps)
    if rewards.numel() == 0:
        return rewards.clone()

    idx = group_index.long()
    r = rewards.detach().to(torch.float64)
    counts = torch.bincount(idx, minlength=num_g).to(torch.float64)

    # Shift each group by its minimum before summing (shifted-data variance): numerically better, and makes a
    # constant group's centred rewards *exactly* zero (a plain sum/n can round, e.g. 3 x 0.1).
    shift = torch.zeros(num_g, dtype=torch.float64, device=r.device)
    shift = shift.scatter_reduce(0, idx, r, reduce="amin", include_self=False)
    x = r - shift[idx]
    sums = torch.zeros(num_g, dtype=torch.float64, device=r.device).index_add_(0, idx, x)
    mean_x = sums / counts.clamp_min(1.0)
    centred = x - mean_x[idx]  # = r_i - mu_g
    if not norm_by_std:
        return centred.to(rewards.dtype)

    sq = torch.zeros(num_g, dtype=torch.float64, device=r.device).index_add_(0, idx, centred * centred)
    ddof = 1.0 if unbiased_std else 0.0
    # A group of one has centred == 0 exactly; clamping its (n - ddof) = 0 divisor to 1 keeps var at 0.
    var = sq / (counts - ddof).clamp_min(1.0)
    denom = var.sqrt()[idx] + eps
    # denom == 0 only when eps == 0 and the group has zero variance, where centred == 0: define A = 0.
    adv = torch.where(denom > 0, centred / torch.where(denom > 0, denom, 1.0), torch.zeros_like(centred))
    return adv.to(rewards.dtype)


def check_scale(scale_rewards: str, norm_adv_by_std: bool = True) -> None:
    """The range check of a loss's ``scale_rewards`` (and, where the loss has it, ``norm_adv_by_std``, its older
    spelling of ``none``: ``false`` with ``batch`` contradicts it)."""
    if scale_rewards not in SCALES:
        raise ValueError(f"scale_rewards must be one of {SCALES}, got {scale_rewards!r}")
    if not norm_adv_by_std and scale_rewards == "batch":
        raise ValueError("scale_rewards must not be 'batch' when norm_adv_by_std is false (no std division)")


def scaled_advantages(
    rewards: torch.Tensor,
    group_index: torch.Tensor,
    num_groups: int | None = None,
    *,
    scale: str = "group",
    eps: float = 1e-6,
    unbiased_std: bool = False,
) -> torch.Tensor:
    """Centred rewards ``r_i - mean_g`` over ragged groups, divided by the std that ``scale`` names (TRL
    ``scale_rewards``), plus ``eps``.

    ``"group"``: each group's own std; exactly ``group_advantages(..., norm_by_std=True)``. ``"none"``: no
    division; exactly ``group_advantages(..., norm_by_std=False)``. ``"batch"``: the std of all ``N`` rewards of
    the step (every group, population or Bessel-corrected as ``unbiased_std``), the same for every row. A row
    whose centred reward is 0 (a zero-variance group, a group of one) gets exactly 0 in every mode.
    """
    if scale not in SCALES:
        raise ValueError(f"scale must be one of {SCALES}, got {scale!r}")
    if scale != "batch":
        return group_advantages(rewards, group_index, num_groups, norm_by_std=scale == "group", eps=eps,
                                unbiased_std=unbiased_std)
    centred = group_advantages(rewards.detach().to(torch.float64), group_index, num_groups, norm_by_std=False,
                               eps=eps)  # checks every argument; float64, as the statistics
    if rewards.numel() == 0:
        return rewards.clone()
    r = rewards.detach().to(torch.float64)
    x = r - r.min()  # shifted data, as in group_advantages: a constant batch has variance exactly 0
    ddof = 1 if unbiased_std else 0
    var = (x - x.mean()).square().sum() / max(r.numel() - ddof, 1)
    denom = var.sqrt() + eps
    if not bool(denom > 0):  # eps == 0 and every reward equal: every centred reward is 0
        return torch.zeros_like(rewards)
    return (centred / denom).to(rewards.dtype)


def _centred64(rewards: torch.Tensor, group_index: torch.Tensor, num_groups: int | None) -> torch.Tensor:
    """``r_i - mean_g`` in float64 (every argument checked; exactly 0 in a zero-variance group or a group of one)."""
    return group_advantages(rewards.detach().to(torch.float64), group_index, num_groups, norm_by_std=False)


def rloo_advantages(rewards: torch.Tensor, group_index: torch.Tensor, num_groups: int | None = None) -> torch.Tensor:
    """RLOO's leave-one-out advantages over ragged groups (Ahmadian et al. 2024, arXiv 2402.14740; verl ``rloo``).

    ``A_i = r_i - mean_{j in g, j != i} r_j = n_g / (n_g - 1) (r_i - mean_g)`` for a group of ``n_g >= 2``; exactly 0
    for a group of one (no other response to be its baseline; verl leaves such a response its raw reward) and for a
    zero-variance group. float64 inside, cast back to ``rewards.dtype``.
    """
    centred = _centred64(rewards, group_index, num_groups)
    if rewards.numel() == 0:
        return rewards.clone()
    n = group_sizes(group_index, num_groups)[group_index.long()].to(torch.float64)
    factor = torch.where(n > 1, n / (n - 1).clamp_min(1.0), torch.zeros_like(n))
    return (centred * factor).to(rewards.dtype)


def _group_std(centred: torch.Tensor, idx: torch.Tensor, counts: torch.Tensor, unbiased_std: bool) -> torch.Tensor:
    """``(G,)`` std of each group from its float64 centred rewards (a group of one: 0)."""
    sq = torch.zeros(len(counts), dtype=torch.float64, device=centred.device).index_add_(0, idx, centred * centred)
    return (sq / (counts - (1.0 if unbiased_std else 0.0)).clamp_min(1.0)).sqrt()


def passk_advantages(rewards: torch.Tensor, group_index: torch.Tensor, num_groups: int | None = None, *,
                     norm_by_std: bool = True, eps: float = 1e-6, unbiased_std: bool = True) -> torch.Tensor:
    """Pass@k advantages over ragged groups, verl's ``grpo_passk`` (``compute_grpo_passk_outcome_advantage``, after
    Chen et al. 2025, arXiv 2503.19595): only the group's best response gets a non-zero advantage.

    ``A_i = (r_max - r_2nd) / (std_g + eps)`` for the one response of group g holding its maximum ``r_max`` (``r_2nd``:
    the second largest reward of the group, counted with multiplicity), 0 for every other response; without
    ``norm_by_std`` (verl ``norm_adv_by_std_in_grpo: false``) no division. std: verl's ``torch.std`` (Bessel) with
    ``unbiased_std`` (the default), the population std otherwise. A tied best is ``r_max - r_2nd = 0``: every response
    0, whichever verl's ``topk`` picks. A group of one: 0 (verl raises; gdro refuses a run that can give one,
    gdro.loss.advantage_estimators).
    """
    centred = _centred64(rewards, group_index, num_groups)  # checks every argument
    if not eps >= 0:
        raise ValueError(f"eps must be >= 0, got {eps}")
    if rewards.numel() == 0:
        return rewards.clone()
    idx, r = group_index.long(), rewards.detach().to(torch.float64)
    counts = group_sizes(group_index, num_groups).to(torch.float64)
    zeros = torch.zeros(len(counts), dtype=torch.float64, device=r.device)
    top = zeros.scatter_reduce(0, idx, r, reduce="amax", include_self=False)
    is_top = r == top[idx]
    n_top = torch.zeros_like(zeros).index_add_(0, idx, is_top.to(torch.float64))
    rest = torch.where(is_top, torch.full_like(r, -math.inf), r)
    second = torch.full_like(zeros, -math.inf).scatter_reduce(0, idx, rest, reduce="amax", include_self=True)
    gap = torch.where((counts > 1) & (n_top == 1), top - second, zeros)  # tied best or a group of one: 0
    adv = torch.where(is_top, gap[idx], torch.zeros_like(r))
    if norm_by_std:
        denom = _group_std(centred, idx, counts, unbiased_std)[idx] + eps  # > 0 wherever adv != 0 (two values)
        adv = torch.where(adv != 0, adv / torch.where(denom > 0, denom, 1.0), adv)
    return adv.to(rewards.dtype)


BASELINES = ("group", "none")  # REINFORCE++: subtract each prompt's group mean before whitening, or not


def reinforce_pp_advantages(rewards: torch.Tensor, group_index: torch.Tensor, num_groups: int | None = None, *,
                            baseline: str = "group", eps: float = 1e-6, unbiased_std: bool = True) -> torch.Tensor:
    """REINFORCE++ advantages (Hu et al. 2025, arXiv 2501.03262) of outcome rewards: whitened over the whole batch.

    ``x_i = r_i - mean_g`` (``baseline="group"``: verl's ``reinforce_plus_plus_baseline``) or ``x_i = r_i``
    (``"none"``: verl's ``reinforce_plus_plus`` with an outcome reward and γ = 1, the KL kept in the loss), then
    ``A_i = (x_i - mean_batch x) / (std_batch x + eps)`` over the step's N responses (Bessel-corrected as verl's
    ``masked_whiten`` with ``unbiased_std``). Group-centred rewards have batch mean 0 exactly (a group of one is
    centred to 0 here: verl gives it mean 0, i.e. ``x = r``), so with ``"group"`` the shift is not applied and a row
    with no signal keeps exactly 0. Differences from verl: each response weighs 1 in the batch statistics (verl
    whitens over valid *tokens*: the same when every response has one length), and ``eps`` is added to the std (verl:
    ``rsqrt(var + 1e-8)``).
    """
    if baseline not in BASELINES:
        raise ValueError(f"baseline must be one of {BASELINES}, got {baseline!r}")
    x = _centred64(rewards, group_index, num_groups)  # checks every argument
    if not eps >= 0:
        raise ValueError(f"eps must be >= 0, got {eps}")
    if rewards.numel() == 0:
        return rewards.clone()
    if baseline == "none":
        x = rewards.detach().to(torch.float64)
        x = x - x.min()  # shifted data: a constant batch is exactly 0 after centring
        x = x - x.mean()
    var = x.square().sum() / max(x.numel() - (1 if unbiased_std else 0), 1)
    denom = var.sqrt() + eps
    if not bool(denom > 0):  # eps == 0 and nothing to whiten: every x is 0
        return torch.zeros_like(rewards)
    return (x / denom).to(rewards.dtype)
