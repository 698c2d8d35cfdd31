"""Faulty environments under a real runner and a real ledger: each fault ends its seat `failed`
with one clear error, recorded once and shown by `rollout episodes show`.

The faults: a Task that hangs (past `turn_timeout_s` or `episode_timeout_s`), a non-finite reward
(from the Task or its grader's `Score`), and a Task that prints megabytes and raises with a
megabyte message (nothing of it is held in memory or stored unbounded). A group with a failed seat
is trained without that seat (`AdvantageConfig.failed="exclude"`, the trainer's default).
"""

from __future__ import annotations

import asyncio
import contextlib
import io
import json
import sys
import tracemalloc
from collections.abc import AsyncIterator
from pathlib import Path

import pytest
from rolloutlib.graders import Score

from rollout.contracts import Message
from rollout.harness import End, Environment, Observation, RunContext, Task
from rollout.harness.errors import MAX_ERROR_CHARS
from rollout.ledger import EpisodeSpec, Ledger
from rollout.runners.runner import Runner
from rollout.training.advantages import AdvantageConfig
from rollout.training.batch import group_segments
from tests.cli_helpers import rollout
from tests.runners.test_runner_outcomes import serving

SPEC = "tests.runners.test_faulty_environments"
NOWHERE = "http://127.0.0.1:9/v1"
"""A gateway address for seats that never call the model."""


class HangsInStart(Task):
    async def start(self, run: RunContext) -> Observation:
        await asyncio.sleep(3600)
        return Observation("never")


class NanReward(Task):
    async def start(self, run: RunContext) -> Observation:
        return End(reward=float("nan"))


class GraderInf(Task):
    """A grader that scores inf: rolloutlib's `Score` refuses it inside the Task."""

    async def start(self, run: RunContext) -> Observation:
        return End(reward=Score(value=float("inf")))


MEGABYTE = "x" * (1 << 20)


class Floods(Task):
    """Prints 20 MB (stdout and stderr), then raises with a 1 MB message."""

    async def start(self, run: RunContext) -> Observation:
        for _ in range(10):
            print(MEGABYTE)
            print(MEGABYTE, file=sys.stderr)
        raise ValueError(MEGABYTE)


class Raises(Task):
    async def start(self, run: RunContext) -> Observation:
        raise ValueError("cannot parse [/] [bold]the task[/bold]")


class FailsOnSeedTwo(Task):
    """Asks the model once; the episode with seed 2 raises, the others score their seed."""

    async def start(self, run: RunContext) -> Observation:
        return Observation("hello")

    async def respond(self, run: RunContext, reply: Message) -> Observation:
        if run.seed == 2:
            raise RuntimeError("the environment crashed on seed 2")
        return End(reward=float(run.seed))


hangs_in_start = Environment(name="hangs", task=HangsInStart, group_size=1, turn_timeout_s=0.3)
hangs_whole_episode = Environment(
    name="hangs-episode",
    task=HangsInStart,
    group_size=1,
    turn_timeout_s=None,
    episode_timeout_s=0.3,
)
nan_reward = Environment(name="nan-reward", task=NanReward, group_size=1)
grader_inf = Environment(name="grader-inf", task=GraderInf, group_size=1)
floods = Environment(name="floods", task=Floods, group_size=1)
raises = Environment(name="raises", task=Raises, group_size=1)
fails_on_seed_two = Environment(name="fails-on-seed-two", task=FailsOnSeedTwo, group_size=3)


async def _run(ledger: Ledger, environment: str, seeds: tuple[int, ...] = (1,)) -> str:
    run = await ledger.create_run(f"run-{environment}", f"{SPEC}:{environment}", {})
    episodes = [
        EpisodeSpec(group_index=0, member=member, parameters={}, seed=seed)
        for member, seed in enumerate(seeds)
    ]
    await ledger.add_episodes(run.run_id, episodes)
    return run.run_id


async def _play_one(ledger: Ledger, environment: str) -> str:
    """Claim and play the run's one seat; the episode's recorded error (it must have failed)."""
    run_id = await _run(ledger, environment)
    runner = Runner(ledger, NOWHERE, run_id=run_id, lease_seconds=5)
    try:
        claim = await ledger.claim_seat(runner.runner_id, run_id=run_id, lease_seconds=5)
        assert claim is not None
        assert await runner.play(claim) is None  # failed: no exception escapes
    finally:
        await runner.close()
    (end,) = (await ledger.episode(claim.episode_id)).ends
    assert (end.status, end.reward, end.attempt) == ("failed", 0.0, 1)
    assert end.error is not None
    assert await ledger.claim_seat("another-runner", run_id=run_id) is None  # ended once
    return end.error


class CountingSink(io.TextIOBase):
    """A text stream that keeps nothing, only counts what was written to it."""

    def __init__(self) -> None:
        super().__init__()
        self.written = 0

    def writable(self) -> bool:
        return True

    def write(self, text: str) -> int:
        self.written += len(text)
        return len(text)


@pytest.mark.parametrize(
    ("environment", "first_line"),
    [
        ("hangs_in_start", "HangsInStart.start: turn timed out after 0.3 s"),
        ("hangs_whole_episode", "episode timed out after 0.3 s"),
        ("nan_reward", "NanReward.start returned End(reward=nan): reward is nan, not finite"),
        ("grader_inf", "GraderInf.start raised ArgumentError: Score.value=inf: must be finite"),
    ],
)
async def test_a_faulty_task_ends_its_seat_failed_with_one_clear_line(
    ledger: Ledger, environment: str, first_line: str
) -> None:
    error = await _play_one(ledger, environment)
    assert error.splitlines()[0].startswith(first_line)


async def test_a_task_printing_megabytes_fills_neither_memory_nor_the_ledger(
    ledger: Ledger,
) -> None:
    sink = CountingSink()
    tracemalloc.start()
    try:
        # What the task prints goes to the runner's own stdout/stderr (here: a counter).
        with contextlib.redirect_stdout(sink), contextlib.redirect_stderr(sink):
            error = await _play_one(ledger, "floods")
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert sink.written >= 20 * (1 << 20)
    assert error.startswith("Floods.start raised ValueError: xxx")
    assert "characters left out" in error
    assert len(error) < 3 * MAX_ERROR_CHARS  # message and traceback, each capped
    # 20 MB printed and a 1 MB message: the peak holds the message once or twice, not the output.
    assert peak < 8 * (1 << 20), f"peak {peak / (1 << 20):.1f} MiB"


@pytest.fixture
async def gateway_url(ledger: Ledger, tmp_path: Path) -> AsyncIterator[str]:
    async with serving(ledger, tmp_path / "model") as url:
        yield url


async def test_a_group_with_a_failed_seat_is_trained_without_it(
    ledger: Ledger, gateway_url: str
) -> None:
    run_id = await _run(ledger, "fails_on_seed_two", seeds=(0, 1, 2))
    runner = Runner(ledger, gateway_url, run_id=run_id, idle_wait=0.1)
    try:
        await runner.run(asyncio.Event(), max_seats=3)
    finally:
        await runner.close()
    (group,) = await ledger.complete_groups(run_id, 1)  # a failed seat counts as ended
    assert AdvantageConfig().failed == "exclude"  # the trainer's rule (training.loop)
    segments = group_segments(group, AdvantageConfig(normalize_std=False))
    by_seed = {e.seed: e.episode_id for e in group.episodes}
    seats = {s.episode_id: s for s in segments.seats}
    failed = seats[by_seed[2]]
    assert failed.status == "failed" and failed.advantage is None  # left out
    # The others are compared with each other only: rewards 0 and 1, mean 0.5.
    assert [seats[by_seed[seed]].advantage for seed in (0, 1)] == [-0.5, 0.5]
    trained = {segment.episode_id for segment in segments.segments}
    assert trained == {by_seed[0], by_seed[1]}


def test_episodes_show_prints_one_line_per_failed_seat(
    database_url: str,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    async def failed_episode() -> str:
        async with await Ledger.connect(database_url) as ledger:
            run_id = await _run(ledger, "raises")
            runner = Runner(ledger, NOWHERE, run_id=run_id)
            try:
                claim = await ledger.claim_seat(runner.runner_id, run_id=run_id)
                assert claim is not None
                await runner.play(claim)
            finally:
                await runner.close()
            return claim.episode_id

    episode_id = asyncio.run(failed_episode())
    monkeypatch.setenv("ROLLOUT_DATABASE_URL", database_url)
    monkeypatch.setenv("COLUMNS", "300")
    code, out, _ = rollout(capsys, "episodes", "show", episode_id)
    assert code == 0
    lines = out.splitlines()
    (seat,) = [i for i, line in enumerate(lines) if "agent 0 (attempt 1): failed" in line]
    error = "Raises.start raised ValueError: cannot parse [/] [bold]the task[/bold]"
    assert lines[seat + 1].strip() == f"{error}  (traceback: --json)"  # as written, one line
    assert "Traceback" not in out
    code, out, _ = rollout(capsys, "episodes", "show", episode_id, "--json")
    (end,) = json.loads(out)["ends"]
    assert end["error"].startswith(error) and "Traceback (most recent call last)" in end["error"]
