"""The gridworld: its world's layout, its per-move and team rewards, and whole episodes played
against a real grid server process by a scripted policy (two agents sharing one world)."""

from __future__ import annotations

import asyncio
import random
from collections.abc import Mapping, Sequence
from typing import Any

import pytest
from gridworld.environment import (
    DIRECTIONS,
    INVALID_PENALTY,
    OWN_SHARE,
    SHORT,
    Draw,
    compact,
    compact_example,
    describe,
    environment,
    format_example,
    move_reward,
    team_reward,
)
from gridworld.server import World

from rollout.contracts import Message, ToolSpec
from rollout.harness.check import check_environment


def test_goals_are_within_reach_and_free() -> None:
    for seed in range(200):
        world = World(epoch=1, agents=2, seed=seed, size=3, reach=2)
        assert len(set(world.positions)) == 2
        for agent in range(2):
            assert 1 <= world.distance(agent) <= 2
            assert world.goals[agent] not in world.positions
        assert world.goals[0] != world.goals[1]


def test_a_crowded_grid_still_finds_a_goal() -> None:
    # 2x2 with two agents and reach 1: some starts have both neighbours taken; the goal is then
    # further away rather than missing.
    distances = {
        World(epoch=1, agents=2, seed=seed, size=2, reach=1).distance(a)
        for seed in range(50)
        for a in range(2)
    }
    assert 1 in distances and distances <= {1, 2}


def test_a_teammate_blocks_its_cell() -> None:
    world = World(epoch=1, agents=2, seed=0, size=3)
    world.positions = [(0, 0), (1, 0)]
    assert world.move(0, "right") == "blocked by a teammate"
    assert world.move(0, "left") == "blocked by the wall"
    assert world.move(0, "up") == "moved" and world.positions[0] == (0, 1)


def test_view_names_goal_directions_only_and_last() -> None:
    text = describe({"goal": [-1, 2], "mates": [[1, 1, -1]], "heard": [], "at_goal": False})
    assert text == "mate +1,-1. goal 1:left 2:up."
    # The teammate's offset uses no direction word: the only words to answer with are the goal's,
    # and the last one is always a move toward it.
    assert [w for w in DIRECTIONS if w in text.split("goal")[0]] == []


def test_each_move_earns_its_share_of_the_way_on_its_turn() -> None:
    # Straight to a goal two steps away: half the own share per step, the team's on the last.
    straight = [move_reward(2, 2, 1), move_reward(2, 1, 0)]
    assert straight == [pytest.approx(OWN_SHARE / 2)] * 2
    assert sum(straight) + team_reward(True) == pytest.approx(1.0)
    # Away and back earns no more than straight: the way back wins no new ground.
    away_and_back = [move_reward(1, 1, 2), move_reward(1, 1, 1), move_reward(1, 1, 0)]
    assert away_and_back == [0.0, 0.0, pytest.approx(OWN_SHARE)]
    # A reply that is no move costs; a wrong move costs nothing.
    assert move_reward(1, 1, 1, valid=False) == pytest.approx(-OWN_SHARE * INVALID_PENALTY)
    assert move_reward(1, 1, 2) == 0.0
    assert team_reward(False) == 0.0


def test_a_group_shares_one_layout() -> None:
    draw = Draw(tools=False)
    first, second = draw(random.Random(1)), draw(random.Random(1))
    assert first == second and first["tools"] is False
    assert draw(random.Random(2))["layout"] != first["layout"]


@pytest.mark.parametrize(
    ("example", "replies"), [(format_example, DIRECTIONS), (compact_example, tuple(SHORT))]
)
def test_warmup_examples_carry_no_task_information(example: Any, replies: Any) -> None:
    rng = random.Random(0)
    assert {example(rng)[1] for _ in range(400)} == set(replies)
    messages, _ = example(random.Random(3))
    assert messages[-1].role == "user" and " goal " in f" {messages[-1].text}"
    assert (messages[0].role == "system") == (example is format_example)


def test_compact_views_write_directions_as_letters() -> None:
    view = {"goal": [-1, 2], "mates": [[1, 1, 0]], "heard": [], "at_goal": False}
    assert describe(view, short=True) == "mate +1,0. goal 1l 2u."


def _toward_goal(messages: Sequence[Message]) -> str:
    """The view's last word (a direction toward the goal, or its letter in the short form)."""
    last = messages[-1].text.rstrip(".").split()[-1].lstrip("0123456789:")
    assert last in DIRECTIONS or last in SHORT, messages[-1].text
    return last


async def _play(env: Any, policy: Any, seeds: range) -> list[tuple[float, Mapping[str, float]]]:
    async def complete(
        messages: Sequence[Message], tools: Sequence[ToolSpec], settings: Mapping[str, Any]
    ) -> Message:
        return Message.assistant(policy(messages))

    results = []
    for seed in seeds:
        report = await check_environment(env, complete, seed=seed)
        assert not report.problems, report.problems
        for seat in report.seats:
            assert seat.result is not None, seat.problem
            results.append((seat.result.reward, seat.result.end.metrics))
    return results


@pytest.mark.slow
def test_goal_seeking_agents_earn_more_than_a_fixed_move() -> None:
    seeds = range(4)
    good = asyncio.run(_play(compact, _toward_goal, seeds))
    fixed = asyncio.run(_play(compact, lambda messages: "up", seeds))
    assert len(good) == len(fixed) == 2 * len(seeds)
    # Moving toward the goal is a closer move unless the teammate stands in the way.
    assert sum(m["closer_moves"] for _, m in good) / len(good) >= 0.75
    assert sum(r for r, _ in good) / len(good) > sum(r for r, _ in fixed) / len(fixed) + 0.3


@pytest.mark.slow
def test_prose_is_penalised() -> None:
    results = asyncio.run(_play(compact, lambda messages: "I go up", range(1)))
    assert results and all(r < 0 and m["invalid"] == m["moves"] >= 1 for r, m in results)


@pytest.mark.slow
def test_tools_environment_offers_move_and_accepts_a_word() -> None:
    seen: list[Sequence[ToolSpec]] = []

    async def complete(
        messages: Sequence[Message], tools: Sequence[ToolSpec], settings: Mapping[str, Any]
    ) -> Message:
        seen.append(tools)
        return Message.assistant(_toward_goal(messages))

    report = asyncio.run(check_environment(environment, complete, seed=5))
    assert not report.problems
    assert seen and all([t.name for t in tools] == ["move"] for tools in seen)
    assert all(seat.result is not None and seat.result.reward > 0 for seat in report.seats)
    # Each move's reward is on its own turn: the seat two steps from its goal earned half its
    # own share on each move, the team's part on the last; the one a step away, all on its `End`.
    rewards = [seat.result.rewards_by_turn() for seat in report.seats if seat.result is not None]
    half = OWN_SHARE / 2
    assert rewards == [None, [pytest.approx(half), pytest.approx(half + team_reward(True))]]
