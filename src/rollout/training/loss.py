"""Per-token losses: the importance-weighted policy gradient and a supervised warm-up loss.

Normalisation: both losses are a **per-token mean over the whole batch**: the sum over every
trained token of every sequence, divided by the number of trained tokens (the loss mask before
any IcePop masking, so a masked token still counts in the denominator and masking never inflates
the other tokens' step size). Long sequences therefore weigh more than short ones, token for
token. When a step is split into several `forward_backward` calls (micro-batches), pass the
step's total token count as `num_tokens` so the accumulated gradient equals that of one batch.

Policy gradient, per trained token t of a sequence with advantage A:

    loss_t = -(w_t * A * logp_trainer_t)

where `w_t` is the importance weight (detached, see `rollout.training.importance`), so the
gradient is `-w_t * A * grad logp_t`: REINFORCE with a group-relative baseline, corrected for the
sampler/trainer mismatch.

The clipped objective (`importance.mode: clip`, PPO's surrogate with the sampler as the old
policy), per trained token with ratio `r_t = exp(logp_trainer_t - logp_sampler_t)`:

    loss_t = -min(r_t * A, clip(r_t, 1 - clip_low, 1 + clip_high) * A)

Its gradient is `-r_t * A * grad logp_t` while the ratio is inside the band or has moved the
wrong way, and 0 once the token's probability has already moved past the band in the direction
its advantage asks for: no token pushes the policy further than a trust region from the policy
that sampled it, however stale.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Literal

import torch

from rollout.runs.config import ImportanceConfig
from rollout.training.errors import TrainingError
from rollout.training.importance import ImportanceResult, importance_weights

_MAX_LOG_RATIO = 30.0
"""Log ratios are clamped here before exp (as in `rollout.training.importance`)."""

LossKind = Literal["policy_gradient", "supervised"]


@dataclass(frozen=True)
class LossConfig:
    """Which loss a training step takes.

    Attributes:
        kind: "policy_gradient" (RL) or "supervised" (cross-entropy on the trained tokens).
        importance: The importance correction for the policy gradient.
        entropy_coef: Weight of an entropy bonus: the loss minus `entropy_coef` times the mean
            policy entropy over the trained positions (same per-token normalisation). A small
            bonus keeps a policy from collapsing onto one answer before it has learned which.
    """

    kind: LossKind = "policy_gradient"
    importance: ImportanceConfig = field(default_factory=ImportanceConfig)
    entropy_coef: float = 0.0

    def __post_init__(self) -> None:
        if self.kind not in ("policy_gradient", "supervised"):
            raise TrainingError(
                f"LossConfig.kind must be 'policy_gradient' or 'supervised', got {self.kind!r}"
            )
        if not (self.entropy_coef >= 0 and self.entropy_coef < float("inf")):
            raise TrainingError(
                f"LossConfig.entropy_coef must be a finite number >= 0, got {self.entropy_coef!r}"
            )


@dataclass(frozen=True)
class LossOutput:
    """The scalar loss (with gradient), metrics, and the importance result (policy gradient)."""

    loss: torch.Tensor
    metrics: dict[str, float]
    importance: ImportanceResult | None = None


def _normalizer(loss_mask: torch.Tensor, num_tokens: float | None) -> float:
    n = float(loss_mask.sum().item()) if num_tokens is None else float(num_tokens)
    if num_tokens is not None and num_tokens <= 0:
        raise TrainingError(f"num_tokens must be > 0, got {num_tokens!r}")
    return max(n, 1.0)


def policy_gradient_loss(
    logp_trainer: torch.Tensor,
    logp_sampler: torch.Tensor,
    advantages: torch.Tensor,
    loss_mask: torch.Tensor,
    importance: ImportanceConfig | None = None,
    *,
    num_tokens: float | None = None,
) -> LossOutput:
    """The importance-weighted policy-gradient loss, a per-token mean.

    Args:
        logp_trainer: [B, T] trainer logprobs (with gradient).
        logp_sampler: [B, T] recorded sampler logprobs.
        advantages: [B] per-sequence or [B, T] per-token advantages.
        loss_mask: [B, T] bool: trained tokens.
        importance: The correction (default `tis`, cap 2).
        num_tokens: The denominator; default: trained tokens in this batch.

    Returns:
        The loss and metrics `loss`, `pg/advantage_mean`, `pg/tokens` and the `is/*` metrics.
    """
    mask = loss_mask.bool()
    if advantages.dim() == 1:
        advantages = advantages[:, None].expand_as(logp_trainer)
    if advantages.shape != logp_trainer.shape:
        raise TrainingError(
            f"advantages has shape {tuple(advantages.shape)}, expected [B] or "
            f"{tuple(logp_trainer.shape)}"
        )
    importance = importance or ImportanceConfig()
    result = importance_weights(logp_trainer, logp_sampler, mask, importance)
    advantages = advantages.to(logp_trainer.dtype)
    clip_metrics: dict[str, float] = {}
    if importance.mode == "clip":
        per_token, clip_metrics = _clipped(logp_trainer, logp_sampler, advantages, mask, importance)
    else:
        per_token = -(result.weights.to(logp_trainer.dtype) * advantages * logp_trainer)
    per_token = per_token.masked_fill(~result.mask, 0.0)
    loss = per_token.sum() / _normalizer(mask, num_tokens)
    n = int(mask.sum().item())
    metrics = {
        "loss": float(loss.detach().item()),
        "pg/tokens": float(n),
        "pg/advantage_mean": float(advantages[mask].mean().item()) if n else 0.0,
        **result.metrics,
        **clip_metrics,
    }
    return LossOutput(loss=loss, metrics=metrics, importance=result)


def _clipped(
    logp_trainer: torch.Tensor,
    logp_sampler: torch.Tensor,
    advantages: torch.Tensor,
    mask: torch.Tensor,
    importance: ImportanceConfig,
) -> tuple[torch.Tensor, dict[str, float]]:
    """Per-token clipped-objective losses and `is/clipped_frac` (tokens whose gradient the clip
    stopped: ratio past 1 + clip_high with A > 0, or below 1 - clip_low with A < 0)."""
    log_ratio = (logp_trainer - logp_sampler.to(logp_trainer.dtype)).masked_fill(~mask, 0.0)
    ratio = log_ratio.clamp(-_MAX_LOG_RATIO, _MAX_LOG_RATIO).exp()
    low, high = 1.0 - importance.clip_low, 1.0 + importance.clip_high
    unclipped = ratio * advantages
    clipped = ratio.clamp(low, high) * advantages
    per_token = -torch.minimum(unclipped, clipped)
    with torch.no_grad():
        stopped = mask & (clipped < unclipped)
        n = int(mask.sum().item())
        frac = float(stopped.sum().item()) / n if n else 0.0
    return per_token, {"is/clipped_frac": frac}


def supervised_loss(
    logp_trainer: torch.Tensor, loss_mask: torch.Tensor, *, num_tokens: float | None = None
) -> LossOutput:
    """Cross-entropy on the trained tokens (negative mean logprob), for format warm-up.

    Args:
        logp_trainer: [B, T] trainer logprobs (with gradient).
        loss_mask: [B, T] bool: the tokens to learn.
        num_tokens: The denominator; default: trained tokens in this batch.

    Returns:
        The loss and metrics `loss`, `sft/tokens`.
    """
    mask = loss_mask.bool()
    loss = -(logp_trainer.masked_fill(~mask, 0.0)).sum() / _normalizer(mask, num_tokens)
    return LossOutput(
        loss=loss,
        metrics={"loss": float(loss.detach().item()), "sft/tokens": float(mask.sum().item())},
    )
