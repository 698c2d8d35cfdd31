"""From complete groups (ledger records) to training segments with advantages.

`group_segments(group)` scores every seat of the group per agent role
(`rollout.training.advantages`), then merges each trained seat's turns into segments
(`rollout.training.segments`) that carry each turn's advantage. The training loop batches the
segments of one or more groups into a `TrainBatch` for the provider. In a run with several
policies, `policy_group(group, agents)` is the part of a group one policy trains on: only the
seats of its agents, and only turns its own versions sampled.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Collection, Iterable, Sequence
from dataclasses import dataclass, field

from rollout.ledger import GroupRecord
from rollout.training.advantages import (
    AdvantageConfig,
    Roles,
    SeatAdvantage,
    agent_roles,
    seat_advantages,
)
from rollout.training.segments import Segment, build_segments


@dataclass(frozen=True)
class GroupSegments:
    """The segments of one group and the seat advantages they came from."""

    group_index: int
    segments: tuple[Segment, ...]
    seats: tuple[SeatAdvantage, ...] = field(default_factory=tuple)

    @property
    def mean_reward(self) -> float:
        rewards = [s.reward for s in self.seats if s.advantage is not None]
        return sum(rewards) / len(rewards) if rewards else 0.0


def group_segments(
    group: GroupRecord,
    config: AdvantageConfig | None = None,
    *,
    stop_token_ids: Iterable[int] = (),
    drop_zero_advantage: bool = False,
    roles: Roles = agent_roles,
) -> GroupSegments:
    """Segments of every trained seat of a complete group.

    Args:
        group: A complete group.
        config: How advantages are computed.
        stop_token_ids: Trained tokens after a stop token in one completion are masked.
        drop_zero_advantage: Leave out seats whose every turn's advantage is exactly 0 (they
            add no gradient to the policy-gradient loss, only tokens to its denominator).
        roles: The role of each agent index: seats are compared within their role.

    Returns:
        The segments (seats left out of training have none) and every seat's advantages.
    """
    seats = seat_advantages(group, config, roles=roles)
    stops = tuple(stop_token_ids)
    turns_by_seat: dict[tuple[str, int, int], list] = {}
    for episode in group.episodes:
        for turn in episode.turns:
            turns_by_seat.setdefault((turn.episode_id, turn.agent, turn.attempt), []).append(turn)
    segments: list[Segment] = []
    for seat in seats:
        if seat.advantage is None:
            continue
        if drop_zero_advantage and not any(seat.turn_advantages):
            continue
        turns = sorted(
            turns_by_seat.get((seat.episode_id, seat.agent, seat.attempt), []),
            key=lambda t: t.index,
        )
        segments.extend(
            build_segments(
                turns,
                seat.advantage,
                stop_token_ids=stops,
                turn_advantages=seat.turn_advantages,
            )
        )
    return GroupSegments(
        group_index=group.group_index, segments=tuple(segments), seats=tuple(seats)
    )


def policy_group(group: GroupRecord, agents: Collection[int]) -> GroupRecord:
    """The part of `group` its policy (`group.policy`) trains on: the seats (turns and ends) of
    `agents`, the agents that policy plays, and of those, the turns that policy sampled.

    A turn of one of its agents recorded with another policy (it cannot happen through the
    gateway, which samples each seat from its agent's policy) is left out: its logprobs are
    another model's, and training on them would correct against the wrong sampler.
    """
    episodes = tuple(
        dataclasses.replace(
            episode,
            turns=tuple(t for t in episode.turns if t.agent in agents and t.policy == group.policy),
            ends=tuple(e for e in episode.ends if e.agent in agents),
        )
        for episode in group.episodes
    )
    return dataclasses.replace(group, episodes=episodes)


def segments_of_groups(
    groups: Sequence[GroupRecord],
    config: AdvantageConfig | None = None,
    *,
    stop_token_ids: Iterable[int] = (),
    drop_zero_advantage: bool = False,
    roles: Roles = agent_roles,
) -> list[GroupSegments]:
    """`group_segments` for each group, in order."""
    stops = tuple(stop_token_ids)
    return [
        group_segments(
            g,
            config,
            stop_token_ids=stops,
            drop_zero_advantage=drop_zero_advantage,
            roles=roles,
        )
        for g in groups
    ]
