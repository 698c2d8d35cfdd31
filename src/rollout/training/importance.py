"""Per-token importance weights that correct for sampling with an older or different policy.

Every trained token was sampled by some checkpoint (maybe several steps old) on some inference
engine (whose numerics differ from the trainer's). Its recorded sampler logprob and the trainer's
logprob give the per-token ratio `exp(logp_trainer - logp_sampler)`. Modes:

- `tis` (truncated importance sampling): weight = min(ratio, cap), detached. Unbiased up to the
  truncation, bounded variance.
- `icepop`: weight 1 inside the band [low, high], and the token is masked out (weight 0)
  outside it: tokens the two policies disagree on too much teach nothing.
- `clip`: the PPO-style clipped objective (`rollout.training.loss`): the ratio itself weighs
  each token, with gradient, clipped to [1 - clip_low, 1 + clip_high] where clipping lowers
  the objective; here the weight is the ratio (for the metrics) and no token is masked.
- `none`: weight 1 (plain on-policy policy gradient); the ratio is still measured.

Weights never carry gradient; the policy gradient flows through `logp_trainer` in the loss.

>>> import torch
>>> lt = torch.tensor([[0.0, -1.0, -1.0]]); ls = torch.tensor([[0.0, -2.0, -0.5]])
>>> m = torch.tensor([[False, True, True]])
>>> r = importance_weights(lt, ls, m, ImportanceConfig(mode="tis", cap=2.0))
>>> [round(x, 4) for x in r.weights[0].tolist()]
[0.0, 2.0, 0.6065]
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from rollout.runs.config import ImportanceConfig
from rollout.training.errors import TrainingError

_MAX_LOG_RATIO = 30.0
"""Log ratios are clamped here before exp so a wild token cannot overflow the metrics."""


@dataclass(frozen=True)
class ImportanceResult:
    """Weights (detached, 0 off the mask), the mask after IS masking, and metrics.

    Metrics (over the tokens of the input loss mask): `is/ratio_mean`, `is/ratio_min`,
    `is/ratio_max`, `is/logp_abs_diff_mean` (mean |logp_trainer - logp_sampler|),
    `is/kl_k3` (estimate of KL(sampler || trainer): mean of r - 1 - log r), `is/truncated_frac`
    (tis: ratio > cap), `is/masked_frac` (icepop: ratio outside the band), `is/tokens`.
    With no trained tokens only `is/tokens` (0) is reported.
    """

    weights: torch.Tensor
    mask: torch.Tensor
    metrics: dict[str, float]


def importance_weights(
    logp_trainer: torch.Tensor,
    logp_sampler: torch.Tensor,
    loss_mask: torch.Tensor,
    config: ImportanceConfig | None = None,
) -> ImportanceResult:
    """Per-token importance weights.

    Args:
        logp_trainer: Trainer logprobs of the tokens, any shape (gradient is ignored).
        logp_sampler: Sampler logprobs of the same tokens, same shape.
        loss_mask: Bool tensor, same shape: which tokens are trained on.
        config: The correction (default: `tis` with cap 2).

    Returns:
        The weights, the mask to train on and metrics.
    """
    config = config or ImportanceConfig()
    if logp_trainer.shape != logp_sampler.shape or logp_trainer.shape != loss_mask.shape:
        raise TrainingError(
            "importance_weights needs equal shapes, got logp_trainer "
            f"{tuple(logp_trainer.shape)}, logp_sampler {tuple(logp_sampler.shape)}, "
            f"loss_mask {tuple(loss_mask.shape)}"
        )
    mask = loss_mask.bool()
    with torch.no_grad():
        diff = (logp_trainer.detach().float() - logp_sampler.float()).masked_fill(~mask, 0.0)
        log_ratio = diff.clamp(-_MAX_LOG_RATIO, _MAX_LOG_RATIO)
        ratio = log_ratio.exp()
        if config.mode == "tis":
            truncated = mask & (ratio > config.cap)
            weights = ratio.clamp(max=config.cap)
            out_mask = mask
            masked = torch.zeros_like(mask)
        elif config.mode == "icepop":
            masked = mask & ((ratio < config.low) | (ratio > config.high))
            out_mask = mask & ~masked
            weights = torch.ones_like(ratio)
            truncated = torch.zeros_like(mask)
        elif config.mode == "clip":
            weights = ratio
            out_mask = mask
            truncated = torch.zeros_like(mask)
            masked = torch.zeros_like(mask)
        else:
            weights = torch.ones_like(ratio)
            out_mask = mask
            truncated = torch.zeros_like(mask)
            masked = torch.zeros_like(mask)
        weights = weights.masked_fill(~out_mask, 0.0)
        n = int(mask.sum().item())
        metrics: dict[str, float] = {"is/tokens": float(n)}
        if n:
            r = ratio[mask]
            metrics.update(
                {
                    "is/ratio_mean": float(r.mean().item()),
                    "is/ratio_min": float(r.min().item()),
                    "is/ratio_max": float(r.max().item()),
                    "is/logp_abs_diff_mean": float(diff[mask].abs().mean().item()),
                    "is/kl_k3": float((r - 1 - log_ratio[mask]).mean().item()),
                    "is/truncated_frac": float(truncated.sum().item()) / n,
                    "is/masked_frac": float(masked.sum().item()) / n,
                }
            )
    return ImportanceResult(weights=weights, mask=out_mask, metrics=metrics)
