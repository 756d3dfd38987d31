"""The options every loss of gdro shares with TRL 1.16's ``GRPOTrainer`` (``loss.<key>`` for any ``loss=``), each
off by default, where it leaves the loss bit for bit what it was before them (issue #51):

* ``use_bias_correction_kl`` (TRL ``use_bias_correction_kl``; DeepSeek-V3.2, arXiv 2512.02556): the per-token KL
  to π_ref times the importance ratio ``rho`` (the token ratio; GSPO's and LUSPO's sequence ratio, broadcast), so
  that its gradient is the unbiased reverse-KL gradient. ``rho`` keeps its gradient: even on-policy (rho = 1 in
  value) it adds ``kl_t grad logp_t``; with k3 (``low_var_kl``) the KL gradient becomes ``(logp_t - ref_t) grad
  logp_t``, k1's score-function estimator, in place of k3's ``(1 - pi_ref/pi) grad logp_t``.
  gdro's default is **false** (TRL's is true): the KL of gdro's GRPO is the paper's and verl's (``kl_loss_type:
  low_var_kl``, no correction), which the official runs used; a default of true would change the gradient of every
  run with ``loss.beta_kl > 0`` (gdro's default 0.001), on-policy included, and so every result recorded so far.
  Set ``loss.use_bias_correction_kl=true`` for TRL's default (docs/losses-vs-trl.md).
* ``off_policy_mask_threshold`` (TRL ``off_policy_mask_threshold``; DeepSeek-V3.2's off-policy sequence masking,
  Eq. 9): a response with ``A < 0`` whose mean token KL ``mean_t(old_logp_t - logp_t)`` (π_old against π_θ, over
  its valid tokens) exceeds the threshold is dropped from the PG term (not from the KL term). None: off. It acts
  only off-policy: in a one-optimiser-step update π_old = π_θ and nothing is dropped. TRL measures the drift from
  the inference engine's log-probs when it has them (vLLM); gdro from π_old's (the trainer's), always.
* ``top_entropy_quantile`` (TRL ``top_entropy_quantile``; "Beyond the 80/20 rule", arXiv 2506.01939): only the
  valid tokens whose policy entropy is at or above the ``1 - q`` quantile of the micro-batch's valid tokens'
  entropies keep their PG term (the KL term keeps every token); 1: off, 0: only the highest-entropy token(s).
  The quantile is taken, as TRL takes it, over each micro-batch's tokens (TRL: each of its micro-batches, gathered
  over processes; gdro: each micro-batch of each process), so unlike gdro's other options the loss then depends on
  how ``optim.micro_batch_size`` cuts a mini-batch, as TRL's does on ``per_device_train_batch_size``. The update
  hands the loss the entropies it records from the forward (``LossInputs.entropy``) and forwards the rows with
  A = 0 too (``optim.skip_zero_adv`` is off for it), whose tokens count in the quantile as in TRL's.

TRL applies the two masks to the per-token PG loss, then its vLLM importance weight, then adds ``beta`` times the
(corrected) KL; gdro does the same: :meth:`LossOptions.gate` and :meth:`LossOptions.kl_weight` are what a loss
hands ``grpo_loss`` / ``TRLLoss.reduce`` (``gate=``, ``kl_weight=``).
"""

from __future__ import annotations

import math
from dataclasses import KW_ONLY, dataclass

import torch

__all__ = ["LossOptions", "high_entropy_mask", "off_policy_mask"]


def off_policy_mask(adv: torch.Tensor, logp: torch.Tensor, old_logp: torch.Tensor, mask: torch.Tensor,
                    threshold: float) -> torch.Tensor:
    """``(B, 1)`` 1 to keep, 0 to drop (TRL ``get_off_policy_mask``): keep a response if ``A >= 0`` or its mean
    ``old_logp - logp`` over its valid tokens (0 for none) is at most ``threshold``; detached."""
    with torch.no_grad():
        kl = torch.nan_to_num(old_logp - logp.detach(), nan=0.0)
        m = mask.to(logp.dtype)
        seq_kl = (kl * m).sum(dim=1, keepdim=True) / m.sum(dim=1, keepdim=True).clamp(min=1.0)
        keep = (adv.unsqueeze(-1) >= 0) | (seq_kl <= threshold)
        return keep.to(logp.dtype)


def high_entropy_mask(entropy: torch.Tensor, mask: torch.Tensor, quantile: float) -> torch.Tensor:
    """``(B, T)`` bool: the valid tokens whose entropy is at least the ``1 - quantile`` quantile of the valid tokens'
    entropies (TRL ``get_high_entropy_mask`` on one process: ``torch.quantile`` of the float32 values); all False
    without a valid token."""
    with torch.no_grad():
        valid = mask != 0
        local = entropy.detach()[valid].float()
        if local.numel() == 0:
            return torch.zeros_like(valid)
        threshold = torch.quantile(local, 1 - quantile)
        return ((entropy.detach() * mask.float()) >= threshold) & valid


@dataclass(frozen=True)
class LossOptions:
    """The options a loss shares with TRL's trainer (keyword-only; each loss's ``__post_init__`` calls
    :meth:`check_options`). See the module docstring.

    use_bias_correction_kl: the KL to π_ref times the (differentiable) importance ratio (TRL's default: true;
        gdro's: false, today's KL gradient; docs/losses-vs-trl.md).
    off_policy_mask_threshold: drop from the PG term a response with A < 0 whose mean KL(π_old || π_θ) exceeds it
        (> 0; None: off).
    top_entropy_quantile: the share of a micro-batch's valid tokens, by entropy, that keep their PG term (in
        [0, 1]; 1: all, off).
    """

    _: KW_ONLY
    use_bias_correction_kl: bool = False
    off_policy_mask_threshold: float | None = None
    top_entropy_quantile: float = 1.0

    def check_options(self) -> None:
        """Each bad value refused in one line naming its key."""
        if not isinstance(self.use_bias_correction_kl, bool):
            raise TypeError(f"use_bias_correction_kl must be true or false, got {self.use_bias_correction_kl!r}")
        t = self.off_policy_mask_threshold
        if t is not None and (isinstance(t, bool) or not (t > 0.0 and math.isfinite(t))):
            raise ValueError(f"off_policy_mask_threshold must be > 0 or None, got {t}")
        q = self.top_entropy_quantile
        if isinstance(q, bool) or not (0.0 <= q <= 1.0):
            raise ValueError(f"top_entropy_quantile must be in [0, 1], got {q}")

    @property
    def needs_entropy(self) -> bool:
        """Whether the loss reads ``LossInputs.entropy`` (``top_entropy_quantile < 1``)."""
        return self.top_entropy_quantile < 1.0

    def gate(self, batch) -> torch.Tensor | None:
        """The detached 0/1 factor of the per-token PG loss, ``(B, T)`` or ``(B, 1)``: the off-policy sequence mask
        times the high-entropy mask; None when both are off (the loss is then exactly what it was without them)."""
        out = None
        if self.off_policy_mask_threshold is not None:
            out = off_policy_mask(batch.adv, batch.logp, batch.old_logp, batch.mask, self.off_policy_mask_threshold)
        if self.needs_entropy:
            if batch.entropy is None:
                raise ValueError(f"top_entropy_quantile={self.top_entropy_quantile} needs the tokens' entropies "
                                 "(LossInputs.entropy), and none were given")
            keep = high_entropy_mask(batch.entropy, batch.mask, self.top_entropy_quantile).to(batch.logp.dtype)
            out = keep if out is None else out * keep
        return out

    def token_kl_weight(self, batch) -> torch.Tensor | None:
        """:meth:`kl_weight` of the token ratios ``exp(logp - old_logp)`` (log-ratio clamped to [-20, 20], as
        gdro's losses clamp it), computed only when the correction is on."""
        if not self.use_bias_correction_kl:
            return None
        return self.kl_weight(torch.exp((batch.logp - batch.old_logp).clamp(-20.0, 20.0)))

    def kl_weight(self, ratio: torch.Tensor) -> torch.Tensor | None:
        """The factor of the per-token KL: the importance ratio ``ratio`` (with its gradient) when
        ``use_bias_correction_kl``, else None."""
        return ratio if self.use_bias_correction_kl else None
