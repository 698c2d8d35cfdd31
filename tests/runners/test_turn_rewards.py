"""Rewards per turn through a real runner, gateway and ledger: an observation's reward is
recorded with the turn whose reply it answers, and training credits each turn with its
reward-to-go (hand-computed below)."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from rollout.contracts import Message
from rollout.harness import End, Environment, Observation, RunContext, Task
from rollout.ledger import EpisodeSpec, Ledger
from rollout.runners.runner import Runner
from rollout.training.advantages import AdvantageConfig
from rollout.training.batch import group_segments
from tests.runners.test_runner_outcomes import serving

SPEC = "tests.runners.test_turn_rewards:two_steps"


class TwoSteps(Task):
    """Two replies: the first earns the episode's seed as a turn reward, the End adds 0.5."""

    def __init__(self, parameters: dict[str, object]) -> None:
        super().__init__(parameters)
        self.replies = 0

    async def start(self, run: RunContext) -> Observation:
        return Observation("first?")

    async def respond(self, run: RunContext, reply: Message) -> Observation:
        self.replies += 1
        if self.replies == 1:
            return Observation("second?", reward=float(run.seed))
        return End(reward=0.5)


two_steps = Environment(name="two-steps", task=TwoSteps, group_size=2, max_turns=4)


@pytest.fixture
async def gateway_url(ledger: Ledger, tmp_path: Path) -> AsyncIterator[str]:
    async with serving(ledger, tmp_path / "model") as url:
        yield url


async def test_turn_rewards_reach_the_ledger_and_each_turn_s_advantage(
    ledger: Ledger, gateway_url: str
) -> None:
    run = await ledger.create_run("turn-rewards", SPEC, {})
    await ledger.add_episodes(
        run.run_id, [EpisodeSpec(group_index=0, member=m, parameters={}, seed=m) for m in (0, 1)]
    )
    runner = Runner(ledger, gateway_url, run_id=run.run_id, idle_wait=0.1)
    try:
        await runner.run(asyncio.Event(), max_seats=2)
    finally:
        await runner.close()
    (group,) = await ledger.complete_groups(run.run_id, 1)
    ends = {e.seed: e.ends[0] for e in group.episodes}
    # Seed 0 earned 0 on turn 0 and 0.5 at its End (turn 1); seed 1 earned 1 and 0.5.
    assert [list(ends[s].turn_rewards or ()) for s in (0, 1)] == [[0.0, 0.5], [1.0, 0.5]]
    assert [ends[s].reward for s in (0, 1)] == [0.5, 1.5]
    assert all(len(e.turns) == 2 for e in group.episodes)
    # Rewards {0, 0.5, 1, 0.5}: mean 0.5. Seed 0's turn 0 gets -0.5 (its own, normalised, plus
    # the End's, which is the mean), turn 1 gets 0; seed 1's turn 0 gets +0.5.
    out = group_segments(group, AdvantageConfig(normalize_std=False))
    seats = {e.seed: s for e in group.episodes for s in out.seats if s.episode_id == e.episode_id}
    assert seats[0].turn_advantages == pytest.approx((-0.5, 0.0))
    assert seats[1].turn_advantages == pytest.approx((0.5, 0.0))
    for seed, sign in ((0, -1.0), (1, 1.0)):
        episode = next(e for e in group.episodes if e.seed == seed)
        [segment] = [s for s in out.segments if s.episode_id == episode.episode_id]
        first, second = sorted(episode.turns, key=lambda t: t.index)
        trained = [
            advantage
            for advantage, mask in zip(segment.token_advantages(), segment.loss_mask, strict=True)
            if mask
        ]
        n0 = len(first.completion_tokens)
        assert trained[:n0] == pytest.approx([sign * 0.5] * n0)
        assert trained[n0:] == pytest.approx([0.0] * len(second.completion_tokens))
