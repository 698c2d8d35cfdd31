"""Importance weights and losses against hand-computed values."""

from __future__ import annotations

import math

import pytest
import torch
from pydantic import ValidationError

from rollout.runs.config import ImportanceConfig
from rollout.training.errors import TrainingError
from rollout.training.importance import importance_weights
from rollout.training.loss import LossConfig, policy_gradient_loss, supervised_loss

# Token ratios: exp(1) = 2.71828 (too high), 1, exp(-0.75) = 0.47237 (too low); the 4th is
# not trained.
LT = [[-1.0, -1.0, -1.0, -1.0]]
LS = [[-2.0, -1.0, -0.25, -3.0]]
MASK = [[True, True, True, False]]
E, R2 = math.e, math.exp(-0.75)


def run(config: ImportanceConfig):
    return importance_weights(torch.tensor(LT), torch.tensor(LS), torch.tensor(MASK), config)


def test_tis_truncates_at_the_cap() -> None:
    r = run(ImportanceConfig(mode="tis", cap=2.0))
    assert r.weights.tolist()[0] == pytest.approx([2.0, 1.0, R2, 0.0])
    assert r.mask.tolist() == MASK
    assert r.metrics["is/truncated_frac"] == pytest.approx(1 / 3)
    assert r.metrics["is/masked_frac"] == 0.0
    assert r.metrics["is/ratio_mean"] == pytest.approx((E + 1 + R2) / 3)
    assert r.metrics["is/ratio_max"] == pytest.approx(E)
    assert r.metrics["is/ratio_min"] == pytest.approx(R2)
    assert r.metrics["is/logp_abs_diff_mean"] == pytest.approx(1.75 / 3)
    assert r.metrics["is/kl_k3"] == pytest.approx(((E - 2) + 0 + (R2 - 1 + 0.75)) / 3)
    assert r.metrics["is/tokens"] == 3


def test_icepop_masks_tokens_outside_the_band() -> None:
    r = run(ImportanceConfig(mode="icepop", low=0.5, high=2.0))
    assert r.weights.tolist()[0] == [0.0, 1.0, 0.0, 0.0]
    assert r.mask.tolist() == [[False, True, False, False]]
    assert r.metrics["is/masked_frac"] == pytest.approx(2 / 3)
    assert r.metrics["is/truncated_frac"] == 0.0


def test_none_weighs_every_trained_token_one() -> None:
    r = run(ImportanceConfig(mode="none"))
    assert r.weights.tolist()[0] == [1.0, 1.0, 1.0, 0.0]
    assert r.metrics["is/ratio_mean"] == pytest.approx((E + 1 + R2) / 3)


def test_weights_carry_no_gradient_and_huge_ratios_stay_finite() -> None:
    lt = torch.tensor([[0.0, 0.0]], requires_grad=True)
    r = importance_weights(lt, torch.tensor([[-500.0, 0.0]]), torch.tensor([[True, True]]))
    assert not r.weights.requires_grad
    assert math.isfinite(r.metrics["is/ratio_mean"])
    assert r.weights.tolist()[0] == [2.0, 1.0]


def test_no_trained_tokens_reports_only_the_count() -> None:
    r = importance_weights(
        torch.zeros(1, 2), torch.zeros(1, 2), torch.zeros(1, 2, dtype=torch.bool)
    )
    assert r.metrics == {"is/tokens": 0.0}


def test_bad_inputs_are_rejected() -> None:
    with pytest.raises(ValidationError, match="mode"):
        ImportanceConfig(mode="trust")  # type: ignore[arg-type]
    with pytest.raises(ValidationError, match="low"):
        ImportanceConfig(low=1.5)
    with pytest.raises(ValidationError, match="high"):
        ImportanceConfig(high=0.5)
    with pytest.raises(ValidationError, match="cap"):
        ImportanceConfig(cap=0.0)
    with pytest.raises(TrainingError, match="equal shapes"):
        importance_weights(torch.zeros(1, 2), torch.zeros(1, 3), torch.zeros(1, 2).bool())
    with pytest.raises(TrainingError, match=r"LossConfig\.kind"):
        LossConfig(kind="dpo")  # type: ignore[arg-type]


def pg(config: ImportanceConfig, advantages: torch.Tensor, num_tokens: float | None = None):
    logp = torch.tensor(LT, requires_grad=True)
    out = policy_gradient_loss(
        logp, torch.tensor(LS), advantages, torch.tensor(MASK), config, num_tokens=num_tokens
    )
    out.loss.backward()
    assert logp.grad is not None
    return out, logp.grad.tolist()[0]


def test_policy_gradient_loss_with_tis() -> None:
    out, grad = pg(ImportanceConfig(mode="tis", cap=2.0), torch.tensor([2.0]))
    # -(2*2*-1 + 1*2*-1 + R2*2*-1) / 3 trained tokens
    assert out.loss.item() == pytest.approx((4 + 2 + 2 * R2) / 3)
    assert grad == pytest.approx([-4 / 3, -2 / 3, -2 * R2 / 3, 0.0])
    assert out.metrics["loss"] == pytest.approx(out.loss.item())
    assert out.metrics["pg/advantage_mean"] == pytest.approx(2.0)
    assert out.metrics["is/truncated_frac"] == pytest.approx(1 / 3)


def test_icepop_masked_tokens_still_count_in_the_denominator() -> None:
    out, grad = pg(ImportanceConfig(mode="icepop"), torch.tensor([2.0]))
    assert out.loss.item() == pytest.approx(2 / 3)
    assert grad == pytest.approx([0.0, -2 / 3, 0.0, 0.0])


def test_clipped_objective_stops_tokens_past_the_band_in_their_advantage_direction() -> None:
    # Ratios e (past 1 + 0.2), 1 and R2 = 0.47 (past 1 - 0.2), the 4th untrained.
    clip = ImportanceConfig(mode="clip", clip_low=0.2, clip_high=0.2)
    out, grad = pg(clip, torch.tensor([2.0]))  # A > 0: the first token is clipped
    # loss = -(1.2 * 2 + 1 * 2 + R2 * 2) / 3; gradient -r * A / 3 where unclipped, else 0.
    assert out.loss.item() == pytest.approx(-(2.4 + 2 + 2 * R2) / 3)
    assert grad == pytest.approx([0.0, -2 / 3, -2 * R2 / 3, 0.0])
    assert out.metrics["is/clipped_frac"] == pytest.approx(1 / 3)
    out, grad = pg(clip, torch.tensor([-2.0]))  # A < 0: the third token is clipped
    assert out.loss.item() == pytest.approx((2 * E + 2 + 2 * 0.8) / 3)
    assert grad == pytest.approx([2 * E / 3, 2 / 3, 0.0, 0.0])
    assert out.metrics["is/clipped_frac"] == pytest.approx(1 / 3)
    # On-policy (ratio 1 everywhere) it is the plain policy gradient.
    on_policy = torch.tensor(LT, requires_grad=True)
    same = policy_gradient_loss(
        on_policy, torch.tensor(LT), torch.tensor([1.5]), torch.tensor(MASK), clip
    )
    same.loss.backward()
    assert on_policy.grad is not None
    assert on_policy.grad.tolist()[0] == pytest.approx([-0.5, -0.5, -0.5, 0.0])
    with pytest.raises(ValidationError, match="clip_low"):
        ImportanceConfig(mode="clip", clip_low=1.0)


def test_num_tokens_sets_the_denominator_and_per_token_advantages_work() -> None:
    per_token = torch.tensor([[1.0, -1.0, 0.0, 5.0]])
    out, grad = pg(ImportanceConfig(mode="none"), per_token, num_tokens=6)
    assert out.loss.item() == pytest.approx((1 - 1 + 0) / 6)
    assert grad == pytest.approx([-1 / 6, 1 / 6, 0.0, 0.0])
    with pytest.raises(TrainingError, match="advantages has shape"):
        pg(ImportanceConfig(), torch.zeros(1, 3))


def test_supervised_loss_is_mean_negative_logprob_of_trained_tokens() -> None:
    logp = torch.tensor([[0.0, -1.0, -2.0, -3.0]], requires_grad=True)
    out = supervised_loss(logp, torch.tensor([[False, True, True, False]]))
    assert out.loss.item() == pytest.approx(1.5)
    out.loss.backward()
    assert logp.grad is not None
    assert logp.grad.tolist()[0] == pytest.approx([0.0, -0.5, -0.5, 0.0])
    assert out.metrics["sft/tokens"] == 2
