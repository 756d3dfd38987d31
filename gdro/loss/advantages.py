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

``scaled_advantages`` adds TRL's ``scale_rewards`` (a loss's ``scale_rewards`` key): ``group`` divides by each
group's std (Eq. 3, ``group_advantages``), ``batch`` centres on each group's mean but divides by the std of
the whole step's rewards (PPO-Lite, arXiv 2508.08221), ``none`` only centres (Dr. GRPO).
"""

from __future__ import annotations

import torch

__all__ = ["SCALES", "check_scale", "group_advantages", "group_sizes", "scaled_advantages"]

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
    if rewards.numel() == 0:
        return rewards.clone()
    if not bool(torch.isfinite(rewards).all()):
        raise ValueError("rewards must be finite (found NaN or inf)")

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
