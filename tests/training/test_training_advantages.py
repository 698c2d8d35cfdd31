"""Group-relative advantages against hand-computed values."""

from __future__ import annotations

import math

import pytest

from rollout.contracts import Turn
from rollout.ledger import EpisodeRecord, GroupRecord, SeatEnd
from rollout.training.advantages import AdvantageConfig, group_advantages, seat_advantages
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
