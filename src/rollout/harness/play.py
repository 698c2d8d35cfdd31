"""Play one agent seat of one episode: Task <-> model, turn by turn.

`play_seat` is shared by the runner (which samples through the gateway with the seat's key) and
by `rollout env check` (which samples from the scripted model directly). It enforces the Task
contract and reports violations by name, and the environment's time limits: each Task call
within `Environment.turn_timeout_s`, the whole seat within `Environment.episode_timeout_s`. A
Task past either is cancelled (and closed) and the seat fails with a `TaskError` ("turn timed
out after N s"). A Task that blocks the event loop (a busy loop, `time.sleep`) cannot be cut
short this way.
"""

from __future__ import annotations

import asyncio
import math
import time
import traceback
from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from rolloutlib.graders import Score

from rollout.contracts import Message, ToolSpec
from rollout.harness.core import End, Environment, Observation, RunContext, Task
from rollout.harness.errors import TaskError

Complete = Callable[[Sequence[Message], Sequence[ToolSpec], Mapping[str, Any]], Awaitable[Message]]
"""Samples the assistant's next message for a conversation, tools and sampling settings."""


@dataclass
class SeatResult:
    """How one seat ended: its `End`, the conversation, how many model turns it took, and the
    rewards its observations carried (`turn_rewards`: turn index -> reward, the `End`'s not
    included)."""

    end: End
    messages: list[Message]
    turns: int
    truncated: bool = False
    seconds: float = 0.0
    notes: list[str] = field(default_factory=list)
    turn_rewards: dict[int, float] = field(default_factory=dict)

    @property
    def reward(self) -> float:
        """The seat's reward: its turns' rewards plus its `End`'s."""
        return sum(self.turn_rewards.values()) + self.end.value

    def rewards_by_turn(self) -> list[float | None] | None:
        """Each turn's reward (None where its observation carried none), the `End`'s added to
        the last turn's; None when no observation carried one (the `End` holds every reward).

        >>> SeatResult(End(1.0), [], turns=3, turn_rewards={0: 0.5}).rewards_by_turn()
        [0.5, None, 1.0]
        >>> SeatResult(End(1.0), [], turns=3).rewards_by_turn() is None
        True
        """
        if not self.turn_rewards or self.turns == 0:
            return None
        rewards = [self.turn_rewards.get(index) for index in range(self.turns)]
        rewards[-1] = (rewards[-1] or 0.0) + self.end.value
        return rewards

    def score_json(self) -> dict[str, Any] | None:
        reward = self.end.reward
        return reward.as_info()["score"] if isinstance(reward, Score) else None


def _task_name(task: Task) -> str:
    return type(task).__name__


def _check_observation(task: Task, method: str, value: object) -> Observation:
    if not isinstance(value, Observation):
        raise TaskError(
            f"{_task_name(task)}.{method} must return an Observation or End, "
            f"got {type(value).__name__}: {value!r:.200}"
        )
    for index, message in enumerate(value.messages):
        if not isinstance(message, Message):
            raise TaskError(
                f"{_task_name(task)}.{method} returned an Observation whose messages[{index}] "
                f"is {type(message).__name__}, not a Message"
            )
    if not isinstance(value, End) and value.reward is not None:
        reward = value.reward
        if method == "start":
            raise TaskError(
                f"{_task_name(task)}.start returned an Observation with reward={reward!r}: a "
                f"reward answers a reply, and start answers none (give it with the first "
                f"respond, or in the End)"
            )
        if isinstance(reward, bool) or not isinstance(reward, (int, float)):
            raise TaskError(
                f"{_task_name(task)}.{method} returned an Observation with reward={reward!r}: "
                f"reward must be a number or None"
            )
        if not math.isfinite(reward):
            raise TaskError(
                f"{_task_name(task)}.{method} returned an Observation with reward={reward!r}: "
                f"reward is not finite"
            )
    if isinstance(value, End):
        reward = value.reward
        if isinstance(reward, bool) or not isinstance(reward, (int, float, Score)):
            raise TaskError(
                f"{_task_name(task)}.{method} returned End(reward={reward!r}): reward must be a "
                f"number or a rolloutlib Score"
            )
        if not math.isfinite(value.value):
            raise TaskError(
                f"{_task_name(task)}.{method} returned End(reward={value.value!r}): reward is "
                f"{value.value!r}, not finite"
            )
        for key, metric in value.metrics.items():
            if not isinstance(metric, (int, float)) or not math.isfinite(float(metric)):
                raise TaskError(
                    f"{_task_name(task)}.{method} returned End with metric {key!r}={metric!r}: "
                    f"metrics must be finite numbers"
                )
    return value


def _seconds(value: float) -> str:
    return f"{value:g} s"


async def _call_task(
    task: Task, method: str, *args: Any, turn_limit: float | None = None
) -> Observation:
    """`task.method(*args)`, checked, within `turn_limit` seconds."""
    scope = asyncio.timeout(turn_limit)
    try:
        async with scope:
            value = await _await_task(task, method, *args)
    except TimeoutError:
        if not scope.expired():  # not ours (the Task's own errors are TaskErrors by now)
            raise
        raise TaskError(
            f"{_task_name(task)}.{method}: turn timed out after {_seconds(turn_limit or 0)} "
            f"(Environment turn_timeout_s)"
        ) from None
    return _check_observation(task, method, value)


async def _await_task(task: Task, method: str, *args: Any) -> object:
    function = getattr(task, method, None)
    if function is None:
        raise TaskError(f"{_task_name(task)} has no {method}() method")
    try:
        result = function(*args)
        if not hasattr(result, "__await__"):
            raise TaskError(
                f"{_task_name(task)}.{method} must be `async def` (returned "
                f"{type(result).__name__} instead of an awaitable)"
            )
        value = await result
    except TaskError:
        raise
    except NotImplementedError as error:
        raise TaskError(f"{_task_name(task)}.{method} is not implemented: {error}") from error
    except Exception as error:
        raise TaskError(
            f"{_task_name(task)}.{method} raised {type(error).__name__}: {error}",
            traceback=traceback.format_exc(),
        ) from error
    return value


def make_task(environment: Environment, parameters: Mapping[str, Any]) -> Task:
    """Instantiate the environment's Task, reporting constructor errors as TaskError."""
    try:
        return environment.task(parameters)
    except Exception as error:
        raise TaskError(
            f"{environment.task.__name__}({dict(parameters)!r:.200}) raised "
            f"{type(error).__name__}: {error}",
            traceback=traceback.format_exc(),
        ) from error


async def play_seat(
    environment: Environment,
    task: Task,
    run: RunContext,
    complete: Complete,
    sampling: Mapping[str, Any] | None = None,
) -> SeatResult:
    """Play one seat to its End (or to `environment.max_turns` model turns: reward 0, truncated).

    Raises:
        TaskError: the Task broke its contract, raised, or passed a time limit.
    """
    began = time.monotonic()
    limit = environment.episode_timeout_s
    scope = asyncio.timeout(limit)
    try:
        async with scope:
            return await _play(environment, task, run, complete, sampling, began)
    except TimeoutError:
        if not scope.expired():  # a model call's own timeout: not the episode's
            raise
        raise TaskError(
            f"episode timed out after {_seconds(limit or 0)} (Environment episode_timeout_s)"
        ) from None
    finally:
        try:
            async with asyncio.timeout(environment.turn_timeout_s):
                await task.close(run)
        except Exception as error:  # a failing close must not hide the episode's outcome
            run.logger.warning("%s.close raised %r", _task_name(task), error)


async def _play(
    environment: Environment,
    task: Task,
    run: RunContext,
    complete: Complete,
    sampling: Mapping[str, Any] | None,
    began: float,
) -> SeatResult:
    messages: list[Message] = []
    if environment.system_prompt:
        messages.append(Message.system(environment.system_prompt))
    tools: tuple[ToolSpec, ...] = ()
    settings = {**environment.sampling, **(sampling or {})}
    turns = 0
    turn_rewards: dict[int, float] = {}
    turn_limit = environment.turn_timeout_s
    observation = await _call_task(task, "start", run, turn_limit=turn_limit)
    while True:
        messages.extend(observation.messages)
        if isinstance(observation, End):
            return SeatResult(
                observation,
                messages,
                turns,
                seconds=time.monotonic() - began,
                turn_rewards=turn_rewards,
            )
        if observation.reward is not None:  # the reward of the reply it answers
            turn_rewards[turns - 1] = float(observation.reward)
        if observation.tools is not None:
            tools = observation.tools
        if turns >= environment.max_turns:
            end = End(reward=0.0, metrics={"truncated": 1.0})
            return SeatResult(
                end,
                messages,
                turns,
                truncated=True,
                seconds=time.monotonic() - began,
                turn_rewards=turn_rewards,
            )
        reply = await complete(messages, tools, settings)
        turns += 1
        messages.append(reply)
        observation = await _call_task(task, "respond", run, reply, turn_limit=turn_limit)
