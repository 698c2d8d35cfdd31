"""Group-relative advantages.

A group is several episodes of the same task (same parameters, different seeds). Each seat's
advantage is its reward minus the mean reward of the same seat (agent index) over the group's
episodes, optionally divided by their standard deviation (population std, plus `epsilon`). A
group whose rewards are all equal teaches nothing: every advantage is exactly zero.

Failed seats (the environment or the agent crashed) are either left out of the group
(`failed="exclude"`: no advantage, not trained on, not in the mean) or counted as reward 0
(`failed="zero"`: trained on, pushing the policy away from what led to the failure).

>>> group_advantages([1.0, 0.0, 1.0, 0.0])  # std 0.5: divided by 0.5 + epsilon
[0.999998000004, -0.999998000004, 0.999998000004, -0.999998000004]
>>> group_advantages([1.0, 0.0, 1.0, 0.0], epsilon=0.0)
[1.0, -1.0, 1.0, -1.0]
>>> group_advantages([1.0, 0.0, None], normalize_std=False)
[0.5, -0.5, None]
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Literal

from rollout.ledger import GroupRecord
from rollout.training.errors import TrainingError

FailedSeats = Literal["exclude", "zero"]


@dataclass(frozen=True)
class AdvantageConfig:
    """How advantages are computed.

    Attributes:
        normalize_std: Divide by the group's reward std (plus `epsilon`).
        epsilon: Added to the std before dividing.
        failed: What a failed seat counts as: "exclude" (left out) or "zero" (reward 0).
    """

    normalize_std: bool = True
    epsilon: float = 1e-6
    failed: FailedSeats = "exclude"

    def __post_init__(self) -> None:
        if self.epsilon < 0:
            raise TrainingError(f"AdvantageConfig.epsilon must be >= 0, got {self.epsilon!r}")
        if self.failed not in ("exclude", "zero"):
            raise TrainingError(
                f"AdvantageConfig.failed must be 'exclude' or 'zero', got {self.failed!r}"
            )


def group_advantages(
    rewards: Sequence[float | None], *, normalize_std: bool = True, epsilon: float = 1e-6
) -> list[float | None]:
    """Advantages of one group's members; `None` members are left out and get `None`.

    Args:
        rewards: One reward per member, or None for a member left out.
        normalize_std: Divide by the population std of the included rewards plus `epsilon`.
        epsilon: Keeps the division finite for near-constant groups.

    Returns:
        One advantage per member (None where the reward was None). All zeros when the included
        rewards are all equal (or only one member is included).
    """
    kept = [float(r) for r in rewards if r is not None]
    for r in kept:
        if not math.isfinite(r):
            raise TrainingError(f"reward must be finite, got {r!r}")
    if not kept:
        return [None for _ in rewards]
    if all(r == kept[0] for r in kept):
        return [None if r is None else 0.0 for r in rewards]
    mean = sum(kept) / len(kept)
    scale = 1.0
    if normalize_std:
        std = math.sqrt(sum((r - mean) ** 2 for r in kept) / len(kept))
        scale = std + epsilon
    return [None if r is None else (float(r) - mean) / scale for r in rewards]


@dataclass(frozen=True)
class SeatAdvantage:
    """The advantage of one seat of one episode of a group (None: left out of training)."""

    episode_id: str
    agent: int
    attempt: int
    status: str
    reward: float
    advantage: float | None


def seat_advantages(
    group: GroupRecord, config: AdvantageConfig | None = None
) -> list[SeatAdvantage]:
    """Advantages for every seat of a complete group, grouped per agent index.

    Agent `a` of each episode is compared with agent `a` of the group's other episodes (seats of
    a multi-agent episode may play different roles with different reward scales).

    Args:
        group: A complete group from the ledger.
        config: How to compute them (defaults: std-normalised, failed seats excluded).

    Returns:
        One entry per seat end, in episode then agent order.
    """
    config = config or AdvantageConfig()
    ends = [
        end for episode in group.episodes for end in sorted(episode.ends, key=lambda e: e.agent)
    ]
    by_agent: dict[int, list[int]] = {}
    for i, end in enumerate(ends):
        by_agent.setdefault(end.agent, []).append(i)
    out: list[SeatAdvantage | None] = [None] * len(ends)
    for members in by_agent.values():
        rewards: list[float | None] = []
        for i in members:
            end = ends[i]
            if end.status == "completed":
                rewards.append(end.reward)
            elif config.failed == "zero":
                rewards.append(0.0)
            else:
                rewards.append(None)
        advantages = group_advantages(
            rewards, normalize_std=config.normalize_std, epsilon=config.epsilon
        )
        for i, reward, advantage in zip(members, rewards, advantages, strict=True):
            end = ends[i]
            out[i] = SeatAdvantage(
                episode_id=end.episode_id,
                agent=end.agent,
                attempt=end.attempt,
                status=end.status,
                reward=end.reward if reward is None else reward,
                advantage=advantage,
            )
    return [s for s in out if s is not None]
