"""Group-relative advantages, per turn from the rewards that follow it.

A group is several episodes of the same task (same parameters, different seeds). Its seats are
compared per agent role (`Environment.roles`; by default each agent index is a role of its own):
the seats of one role over the group's episodes form one comparison group.

Every reward a seat earned sits on a turn: an observation's reward on the turn whose reply it
answers (`Observation(reward=...)`), the `End`'s on the seat's last turn. For one role of one
group, with R the rewards of all its seats (each seat contributes the rewards it was given; a
seat with only an `End` contributes one), mean mu and population std sigma:

    normalised reward   r~ = (r - mu) / (sigma + epsilon)     (r - mu without normalize_std)
    advantage of turn k of a seat   A_k = sum over the seat's rewards r_j at turns j >= k
                                          of discount^(j - k) * r~_j

that is, each turn's advantage is the discounted reward-to-go of the seat's normalised rewards
(the process-supervision form of group-relative advantages, Shao et al. 2024, DeepSeekMath
section 4.1.3). Every trained token of turn k gets A_k. With only `End` rewards and discount 1
every turn of a seat gets (R - mean) / (std + epsilon): group-relative advantages of whole
episodes. A role whose rewards are all equal teaches nothing: every advantage is exactly zero.

Failed seats (the environment or the agent crashed) are either left out of the group
(`failed="exclude"`: no advantage, not trained on, not in the statistics) or counted as one
reward 0 on their last turn (`failed="zero"`: trained on, pushing the policy away from what led
to the failure).

>>> group_advantages([1.0, 0.0, 1.0, 0.0])  # std 0.5: divided by 0.5 + epsilon
[0.999998000004, -0.999998000004, 0.999998000004, -0.999998000004]
>>> group_advantages([1.0, 0.0, 1.0, 0.0], epsilon=0.0)
[1.0, -1.0, 1.0, -1.0]
>>> group_advantages([1.0, 0.0, None], normalize_std=False)
[0.5, -0.5, None]

Per turn: seat a earned 1 on turn 0 and 1 at its end (turn 1), seat b 0 and 0; R = {1, 1, 0, 0},
mean 0.5, no std normalisation: a's turns get 0.5 + 0.5 = 1.0 and 0.5, b's -1.0 and -0.5.

>>> turn_advantages([{0: 1.0, 1: 1.0}, {0: 0.0, 1: 0.0}], [2, 2], normalize_std=False)
[(1.0, 0.5), (-1.0, -0.5)]
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Literal

from rollout.ledger import GroupRecord, SeatEnd
from rollout.training.errors import TrainingError

FailedSeats = Literal["exclude", "zero"]
Roles = Callable[[int], str]
"""The role of an agent index (seats of one role are compared with each other)."""


def agent_roles(agent: int) -> str:
    """The default roles: each agent index is a role of its own."""
    return f"agent{agent}"


@dataclass(frozen=True)
class AdvantageConfig:
    """How advantages are computed.

    Attributes:
        normalize_std: Divide by the group's reward std (plus `epsilon`).
        epsilon: Added to the std before dividing.
        failed: What a failed seat counts as: "exclude" (left out) or "zero" (reward 0).
        discount: How much a reward counts toward each earlier turn's advantage, per turn
            (1: every later reward counts in full; 0: a turn gets only its own reward's).
    """

    normalize_std: bool = True
    epsilon: float = 1e-6
    failed: FailedSeats = "exclude"
    discount: float = 1.0

    def __post_init__(self) -> None:
        if self.epsilon < 0:
            raise TrainingError(f"AdvantageConfig.epsilon must be >= 0, got {self.epsilon!r}")
        if self.failed not in ("exclude", "zero"):
            raise TrainingError(
                f"AdvantageConfig.failed must be 'exclude' or 'zero', got {self.failed!r}"
            )
        if not 0.0 <= self.discount <= 1.0:
            raise TrainingError(
                f"AdvantageConfig.discount must be in [0, 1], got {self.discount!r}"
            )


def _statistics(
    rewards: Sequence[float], *, normalize_std: bool, epsilon: float
) -> tuple[float, float] | None:
    """(mean, scale) of finite rewards; None when they are all equal (nothing to learn)."""
    for r in rewards:
        if not math.isfinite(r):
            raise TrainingError(f"reward must be finite, got {r!r}")
    if not rewards or all(r == rewards[0] for r in rewards):
        return None
    mean = sum(rewards) / len(rewards)
    scale = 1.0
    if normalize_std:
        scale = math.sqrt(sum((r - mean) ** 2 for r in rewards) / len(rewards)) + epsilon
    return mean, scale


def group_advantages(
    rewards: Sequence[float | None], *, normalize_std: bool = True, epsilon: float = 1e-6
) -> list[float | None]:
    """Advantages of one group's members, one reward each; `None` members are left out and get
    `None`.

    Args:
        rewards: One reward per member, or None for a member left out.
        normalize_std: Divide by the population std of the included rewards plus `epsilon`.
        epsilon: Keeps the division finite for near-constant groups.

    Returns:
        One advantage per member (None where the reward was None). All zeros when the included
        rewards are all equal (or only one member is included).
    """
    kept = [float(r) for r in rewards if r is not None]
    stats = _statistics(kept, normalize_std=normalize_std, epsilon=epsilon)
    if stats is None:
        return [None if r is None else 0.0 for r in rewards]
    mean, scale = stats
    return [None if r is None else (float(r) - mean) / scale for r in rewards]


def turn_advantages(
    rewards: Sequence[Mapping[int, float]],
    turns: Sequence[int],
    *,
    normalize_std: bool = True,
    epsilon: float = 1e-6,
    discount: float = 1.0,
) -> list[tuple[float, ...]]:
    """Per-turn advantages of one comparison group's seats (see the module docstring).

    Args:
        rewards: Per seat, its rewards by turn index (the `End`'s on the last turn).
        turns: Per seat, its number of turns (advantages are given for turns 0..n-1; a reward
            on a turn at or past n counts in the statistics and toward every turn).
        normalize_std: Divide by the population std of all the rewards plus `epsilon`.
        epsilon: Keeps the division finite for near-constant groups.
        discount: Weight of a reward j - k turns after turn k in turn k's advantage, per turn.

    Returns:
        Per seat, one advantage per turn. All zeros when every reward is equal.
    """
    flat = [float(r) for seat in rewards for r in seat.values()]
    stats = _statistics(flat, normalize_std=normalize_std, epsilon=epsilon)
    out: list[tuple[float, ...]] = []
    for seat, n in zip(rewards, turns, strict=True):
        if stats is None:
            out.append((0.0,) * n)
            continue
        mean, scale = stats
        normalised = {k: (float(r) - mean) / scale for k, r in seat.items()}
        advantages = []
        for k in range(n):
            later = [(j, value) for j, value in normalised.items() if j >= k]
            advantages.append(sum(value * discount ** (j - k) for j, value in later))
        out.append(tuple(advantages))
    return out


@dataclass(frozen=True)
class SeatAdvantage:
    """The advantages of one seat of one episode of a group (None: left out of training).

    Attributes:
        advantage: Its first turn's advantage (every turn's, when only its `End` has a reward
            and the discount is 1).
        turn_advantages: One advantage per turn index (empty for a seat left out).
    """

    episode_id: str
    agent: int
    attempt: int
    status: str
    reward: float
    advantage: float | None
    role: str = ""
    turn_advantages: tuple[float, ...] = ()


def _seat_rewards(end: SeatEnd, turns: int, counted_as_zero: bool) -> dict[int, float]:
    """The rewards of one seat of `turns` turns (>= 1) by turn index."""
    last = turns - 1
    if counted_as_zero:
        return {last: 0.0}
    if end.turn_rewards is None:
        return {last: float(end.reward)}
    out: dict[int, float] = {}
    for index, reward in enumerate(end.turn_rewards):
        if reward is not None:
            key = min(index, last)  # more rewards than recorded turns: the rest on the last
            out[key] = out.get(key, 0.0) + float(reward)
    return out or {last: 0.0}


def seat_advantages(
    group: GroupRecord, config: AdvantageConfig | None = None, *, roles: Roles = agent_roles
) -> list[SeatAdvantage]:
    """Per-turn advantages for every seat of a complete group, compared per agent role.

    Args:
        group: A complete group from the ledger.
        config: How to compute them (defaults: std-normalised, failed seats excluded,
            discount 1).
        roles: The role of each agent index (default: each agent its own).

    Returns:
        One entry per seat end, in episode then agent order.
    """
    config = config or AdvantageConfig()
    ends = [
        end for episode in group.episodes for end in sorted(episode.ends, key=lambda e: e.agent)
    ]
    turns: dict[tuple[str, int, int], int] = {}
    for episode in group.episodes:
        for turn in episode.turns:
            key = (turn.episode_id, turn.agent, turn.attempt)
            turns[key] = max(turns.get(key, 0), turn.index + 1)
    by_role: dict[str, list[int]] = {}
    for i, end in enumerate(ends):
        by_role.setdefault(roles(end.agent), []).append(i)
    out: list[SeatAdvantage | None] = [None] * len(ends)
    for role, members in by_role.items():
        counted = [i for i in members if ends[i].status == "completed" or config.failed == "zero"]
        # A seat with no recorded turn (it ended at `start`) still has a first turn's advantage.
        counts = [
            max(turns.get((ends[i].episode_id, ends[i].agent, ends[i].attempt), 0), 1)
            for i in counted
        ]
        rewards = [
            _seat_rewards(ends[i], n, ends[i].status != "completed")
            for i, n in zip(counted, counts, strict=True)
        ]
        advantages = turn_advantages(
            rewards,
            counts,
            normalize_std=config.normalize_std,
            epsilon=config.epsilon,
            discount=config.discount,
        )
        per_seat = dict(zip(counted, zip(rewards, advantages, strict=True), strict=True))
        for i in members:
            end = ends[i]
            if i in per_seat:
                seat_rewards, seat_turns = per_seat[i]
                reward = sum(seat_rewards.values())
                first = seat_turns[0]
            else:
                reward, seat_turns, first = end.reward, (), None
            out[i] = SeatAdvantage(
                episode_id=end.episode_id,
                agent=end.agent,
                attempt=end.attempt,
                status=end.status,
                reward=reward,
                advantage=first,
                role=role,
                turn_advantages=seat_turns,
            )
    return [s for s in out if s is not None]
