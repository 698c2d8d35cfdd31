"""Group-relative advantages against hand-computed values."""

from __future__ import annotations

import math

import pytest

from rollout.contracts import Turn
from rollout.ledger import EpisodeRecord, GroupRecord, SeatEnd
from rollout.training.advantages import (
    AdvantageConfig,
    group_advantages,
    seat_advantages,
    turn_advantages,
)
from rollout.training.batch import group_segments
from rollout.training.errors import TrainingError


def test_std_normalised_one_success_in_four() -> None:
    # mean 0.25; population std sqrt((0.75^2 + 3 * 0.25^2) / 4) = sqrt(0.1875) = 0.4330127
    adv = group_advantages([1.0, 0.0, 0.0, 0.0], epsilon=0.0)
    assert adv[0] == pytest.approx(0.75 / math.sqrt(0.1875))
    assert adv[0] == pytest.approx(1.7320508)
    assert adv[1:] == pytest.approx([-0.5773503] * 3)


def test_epsilon_is_added_to_the_std() -> None:
    adv = group_advantages([2.0, 0.0], epsilon=1.0)  # mean 1, std 1 -> / 2
    assert adv == pytest.approx([0.5, -0.5])


def test_without_normalisation_is_reward_minus_mean() -> None:
    assert group_advantages([3.0, 1.0, 2.0], normalize_std=False) == pytest.approx([1.0, -1.0, 0.0])


def test_zero_std_group_gives_exact_zeros() -> None:
    assert group_advantages([0.1, 0.1, 0.1]) == [0.0, 0.0, 0.0]
    assert group_advantages([1.0]) == [0.0]
    assert group_advantages([None, 0.7, None]) == [None, 0.0, None]
    assert group_advantages([None, None]) == [None, None]


def test_left_out_members_are_not_in_the_mean() -> None:
    assert group_advantages([1.0, None, 0.0], normalize_std=False) == [0.5, None, -0.5]


def test_non_finite_reward_is_rejected() -> None:
    with pytest.raises(TrainingError, match="finite"):
        group_advantages([1.0, math.nan])


def test_bad_config_is_rejected() -> None:
    with pytest.raises(TrainingError, match=r"AdvantageConfig\.failed"):
        AdvantageConfig(failed="drop")  # type: ignore[arg-type]
    with pytest.raises(TrainingError, match=r"AdvantageConfig\.epsilon"):
        AdvantageConfig(epsilon=-1.0)


def end(ep: str, agent: int, reward: float, status: str = "completed") -> SeatEnd:
    return SeatEnd(ep, agent, 0, status, reward, None, {}, None if status == "completed" else "x")


def episode(ep: str, member: int, ends: list[SeatEnd], turns: tuple[Turn, ...] = ()):
    return EpisodeRecord(
        episode_id=ep,
        run_id="run",
        group_index=7,
        member=member,
        parameters={},
        seed=member,
        agents=len(ends),
        kind="train",
        turns=turns,
        ends=tuple(ends),
    )


def two_agent_group() -> GroupRecord:
    # Agent 0 rewards 1, 0, 0.5 (the last failed); agent 1 rewards 10, 20, 30.
    return GroupRecord(
        run_id="run",
        group_index=7,
        episodes=(
            episode("a", 0, [end("a", 0, 1.0), end("a", 1, 10.0)]),
            episode("b", 1, [end("b", 1, 20.0), end("b", 0, 0.0)]),
            episode("c", 2, [end("c", 0, 0.5, status="failed"), end("c", 1, 30.0)]),
        ),
    )


def test_seats_are_compared_per_agent_and_failed_seats_excluded() -> None:
    config = AdvantageConfig(normalize_std=False, failed="exclude")
    seats = {(s.episode_id, s.agent): s for s in seat_advantages(two_agent_group(), config)}
    assert seats["a", 0].advantage == pytest.approx(0.5)
    assert seats["b", 0].advantage == pytest.approx(-0.5)
    assert seats["c", 0].advantage is None
    assert seats["c", 0].reward == 0.5  # as recorded
    assert [seats[e, 1].advantage for e in "abc"] == pytest.approx([-10.0, 0.0, 10.0])


def test_failed_seats_as_zero_reward() -> None:
    config = AdvantageConfig(normalize_std=False, failed="zero")
    seats = {(s.episode_id, s.agent): s for s in seat_advantages(two_agent_group(), config)}
    # Agent 0 rewards 1, 0, 0 (failed counted as 0): mean 1/3.
    assert seats["a", 0].advantage == pytest.approx(2 / 3)
    assert seats["b", 0].advantage == pytest.approx(-1 / 3)
    assert seats["c", 0].advantage == pytest.approx(-1 / 3)
    assert seats["c", 0].reward == 0.0


def test_group_segments_give_each_seat_its_advantage() -> None:
    def t(ep: str, agent: int, index: int, prompt: tuple[int, ...], completion: tuple[int, ...]):
        return Turn(ep, agent, 0, index, prompt, completion, (-0.5,) * len(completion), 0, "stop")

    turns_a = (
        t("a", 0, 1, (1, 2, 3, 4, 5), (6,)),
        t("a", 0, 0, (1, 2), (3, 4)),
        t("a", 1, 0, (9,), (8,)),
    )
    group = GroupRecord(
        run_id="run",
        group_index=3,
        episodes=(
            episode("a", 0, [end("a", 0, 1.0), end("a", 1, 0.0)], turns_a),
            episode("b", 1, [end("b", 0, 0.0), end("b", 1, 0.0)], (t("b", 0, 0, (1,), (2,)),)),
        ),
    )
    out = group_segments(group, AdvantageConfig(normalize_std=False))
    by_seat = {(s.episode_id, s.agent): s for s in out.segments}
    assert by_seat["a", 0].tokens == (1, 2, 3, 4, 5, 6)  # turns sorted by index, then merged
    assert by_seat["a", 0].advantage == pytest.approx(0.5)
    assert by_seat["b", 0].advantage == pytest.approx(-0.5)
    assert by_seat["a", 1].advantage == 0.0
    dropped = group_segments(group, AdvantageConfig(normalize_std=False), drop_zero_advantage=True)
    assert {(s.episode_id, s.agent) for s in dropped.segments} == {("a", 0), ("b", 0)}
    assert out.mean_reward == pytest.approx(0.25)


def test_turn_advantages_are_the_reward_to_go_of_normalised_rewards() -> None:
    # Seat a earned 0 on turn 0 and 1 at its end (turn 1); seat b 1 then 0. The rewards
    # {0, 1, 1, 0}: mean 0.5, std 0.5, so a's are normalised to -1 and 1, b's to 1 and -1.
    rewards = [{0: 0.0, 1: 1.0}, {0: 1.0, 1: 0.0}]
    full = turn_advantages(rewards, [2, 2], epsilon=0.0)
    assert full == [pytest.approx((0.0, 1.0)), pytest.approx((0.0, -1.0))]
    # Discount 0.5: turn 0 gets its own and half of turn 1's.
    half = turn_advantages(rewards, [2, 2], epsilon=0.0, discount=0.5)
    assert half == [pytest.approx((-0.5, 1.0)), pytest.approx((0.5, -1.0))]
    # Discount 0: each turn only its own.
    assert turn_advantages(rewards, [2, 2], epsilon=0.0, discount=0.0) == [
        pytest.approx((-1.0, 1.0)),
        pytest.approx((1.0, -1.0)),
    ]
    # A turn with no reward of its own gets the rewards after it; rewards are counted as
    # given: {1, 0.5, 0, 0.5}, mean 0.5 (no std normalisation).
    sparse = turn_advantages(
        [{0: 1.0, 2: 0.5}, {0: 0.0, 2: 0.5}], [3, 3], normalize_std=False, discount=0.5
    )
    assert sparse == [pytest.approx((0.5, 0.0, 0.0)), pytest.approx((-0.5, 0.0, 0.0))]
    # Equal rewards teach nothing.
    assert turn_advantages([{0: 1.0}, {1: 1.0}], [1, 2]) == [(0.0,), (0.0, 0.0)]
    with pytest.raises(TrainingError, match=r"AdvantageConfig\.discount"):
        AdvantageConfig(discount=1.5)


def test_only_end_rewards_give_every_turn_the_episode_advantage() -> None:
    # Three-turn seats whose End carries 1, 0, 0, 0: every turn gets (R - 0.25) / 0.433.
    advantages = turn_advantages([{2: 1.0}, {2: 0.0}, {2: 0.0}, {2: 0.0}], [3] * 4, epsilon=0.0)
    assert advantages[0] == pytest.approx((1.7320508,) * 3)
    assert advantages[1] == pytest.approx((-0.5773503,) * 3)
    # With a discount the earlier turns get less of it.
    discounted = turn_advantages([{2: 1.0}, {2: 0.0}], [3, 3], normalize_std=False, discount=0.5)
    assert discounted[0] == pytest.approx((0.125, 0.25, 0.5))


def seat_with_turns(
    ep: str, agent: int, rewards: list[float | None], reward: float | None = None
) -> tuple[SeatEnd, tuple[Turn, ...]]:
    """A completed seat with one turn per entry of `rewards` (its recorded turn rewards)."""
    # Turn i's prompt is the one before plus its reply (4) and an observation (5).
    turns = tuple(
        Turn(ep, agent, 0, i, (1, *(4, 5) * i), (4,), (-0.1,), 0, "stop")
        for i in range(len(rewards))
    )
    total = sum(r for r in rewards if r is not None) if reward is None else reward
    end = SeatEnd(ep, agent, 0, "completed", total, None, {}, None, turn_rewards=rewards)
    return end, turns


def test_recorded_turn_rewards_give_per_turn_advantages_and_per_token_segments() -> None:
    a_end, a_turns = seat_with_turns("a", 0, [1.0, None, 0.5])
    b_end, b_turns = seat_with_turns("b", 0, [0.0, None, 0.5])
    group = GroupRecord(
        run_id="run",
        group_index=1,
        episodes=(episode("a", 0, [a_end], a_turns), episode("b", 1, [b_end], b_turns)),
    )
    config = AdvantageConfig(normalize_std=False)
    seats = {s.episode_id: s for s in seat_advantages(group, config)}
    # Rewards {1, 0.5, 0, 0.5}: mean 0.5; a's normalised 0.5 (turn 0) and 0 (turn 2).
    assert seats["a"].turn_advantages == pytest.approx((0.5, 0.0, 0.0))
    assert seats["b"].turn_advantages == pytest.approx((-0.5, 0.0, 0.0))
    assert seats["a"].advantage == pytest.approx(0.5)
    assert seats["a"].reward == pytest.approx(1.5)
    out = group_segments(group, config, drop_zero_advantage=True)
    [segment] = [s for s in out.segments if s.episode_id == "a"]
    # One segment of the three turns; each sampled token (4) carries its turn's advantage.
    assert segment.tokens == (1, 4, 5, 4, 5, 4)
    assert segment.loss_mask == (False, True, False, True, False, True)
    assert segment.advantages == pytest.approx((0.0, 0.5, 0.0, 0.0, 0.0, 0.0))


def test_roles_pool_agents_and_team_or_own_rewards_both_compare() -> None:
    def group(rewards: list[tuple[float, float]]) -> GroupRecord:
        return GroupRecord(
            run_id="run",
            group_index=0,
            episodes=tuple(
                episode(f"e{m}", m, [end(f"e{m}", 0, r0), end(f"e{m}", 1, r1)])
                for m, (r0, r1) in enumerate(rewards)
            ),
        )

    config = AdvantageConfig(normalize_std=False)

    def advantages(g: GroupRecord, roles=None) -> list[float | None]:
        kwargs = {} if roles is None else {"roles": roles}
        return [s.advantage for s in seat_advantages(g, config, **kwargs)]

    builders = lambda agent: "builder"  # noqa: E731 - both agents play one part
    # A team reward (both agents of an episode share it): per agent or pooled, the same.
    team = group([(1.0, 1.0), (0.0, 0.0)])
    assert advantages(team) == pytest.approx([0.5, 0.5, -0.5, -0.5])
    assert advantages(team, builders) == pytest.approx([0.5, 0.5, -0.5, -0.5])
    # Per-agent rewards: agent 1 never scores. Per agent it is compared with itself only (0);
    # pooled into one role it is compared with agent 0 too.
    own = group([(1.0, 0.0), (0.0, 0.0)])
    assert advantages(own) == pytest.approx([0.5, 0.0, -0.5, 0.0])
    assert advantages(own, builders) == pytest.approx([0.75, -0.25, -0.25, -0.25])
    assert {s.role for s in seat_advantages(own, config, roles=builders)} == {"builder"}
