"""The environment's time limits, enforced by `play_seat` in-process (the runner's tests play
them against the ledger): a Task call past `turn_timeout_s`, or a seat past
`episode_timeout_s` (model calls included), is cut short with a `TaskError` naming the limit, and
the Task is still closed, even when its `close` hangs too."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Mapping, Sequence
from typing import Any

import pytest

from rollout.contracts import Message, ToolSpec
from rollout.harness import End, Environment, Observation, RunContext, Task
from rollout.harness.errors import TaskError
from rollout.harness.play import make_task, play_seat

RUN = RunContext(run_id="r", episode_id="e", agent=0, seed=1)


async def slow_model(
    messages: Sequence[Message], tools: Sequence[ToolSpec], sampling: Mapping[str, Any]
) -> Message:
    """A model that takes 0.1 s per reply (the model's time counts for the episode only)."""
    await asyncio.sleep(0.1)
    return Message.assistant("ok")


class HangsInRespond(Task):
    closed = 0

    async def start(self, run: RunContext) -> Observation:
        return Observation("Say anything.")

    async def respond(self, run: RunContext, reply: Message) -> Observation:
        await asyncio.Event().wait()  # never set
        return End(reward=1.0)

    async def close(self, run: RunContext) -> None:
        type(self).closed += 1
        await asyncio.Event().wait()  # close hangs too: bounded by the turn timeout


class Chatty(Task):
    """Never ends by itself: each respond is quick, the seat as a whole is not."""

    async def start(self, run: RunContext) -> Observation:
        return Observation("Keep talking.")

    async def respond(self, run: RunContext, reply: Message) -> Observation:
        return Observation("More.")


async def _play(environment: Environment) -> tuple[str, float]:
    began = time.monotonic()
    with pytest.raises(TaskError) as caught:
        await play_seat(environment, make_task(environment, {}), RUN, slow_model)
    return str(caught.value), time.monotonic() - began


async def test_a_respond_past_the_turn_timeout_fails_the_seat_and_the_task_is_closed() -> None:
    environment = Environment(name="hangs", task=HangsInRespond, turn_timeout_s=0.2)
    HangsInRespond.closed = 0
    error, took = await _play(environment)
    assert error == (
        "HangsInRespond.respond: turn timed out after 0.2 s (Environment turn_timeout_s)"
    )
    assert HangsInRespond.closed == 1
    assert took < 2.0  # 0.1 model + 0.2 respond + 0.2 close, with room for a loaded machine


async def test_the_episode_timeout_counts_model_calls_and_stops_a_seat_of_quick_turns() -> None:
    environment = Environment(
        name="chatty", task=Chatty, max_turns=1000, turn_timeout_s=0.2, episode_timeout_s=0.5
    )
    error, took = await _play(environment)
    assert error == "episode timed out after 0.5 s (Environment episode_timeout_s)"
    assert 0.5 <= took < 2.5


async def test_no_limit_when_none_and_generous_defaults() -> None:
    default = Environment(name="chatty", task=Chatty)
    assert (default.turn_timeout_s, default.episode_timeout_s) == (600.0, None)
    environment = Environment(
        name="chatty", task=Chatty, max_turns=3, turn_timeout_s=None, episode_timeout_s=None
    )
    result = await play_seat(environment, make_task(environment, {}), RUN, slow_model)
    assert result.truncated and result.turns == 3


async def test_a_model_calls_own_timeout_error_is_not_taken_for_the_episodes() -> None:
    async def timing_out_model(*_: Any) -> Message:
        raise TimeoutError("the model call timed out")

    environment = Environment(name="chatty", task=Chatty, episode_timeout_s=30)
    with pytest.raises(TimeoutError, match="the model call timed out"):
        await play_seat(environment, make_task(environment, {}), RUN, timing_out_model)
