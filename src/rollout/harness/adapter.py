"""Train any rolloutlib environment whose actions are text or chat messages.

`rolloutlib_environment(make_env)` wraps a rolloutlib `Env`/`AsyncEnv` class or factory as a
platform `Environment`: `reset` gives the first observation, each model reply becomes one `step`
action (the reply's text, or an assistant chat message for chat-message action spaces), step
rewards add up, and a terminal step's `info["score"]` (a rolloutlib `Score`) becomes the reward.
"""

from __future__ import annotations

import inspect
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import gymnasium as gym
from rolloutlib import AsyncEnv, Env, as_async
from rolloutlib.graders import Score
from rolloutlib.spaces.messages import ChatSpace
from rolloutlib.spaces.text import TextSpace

from rollout.contracts import Message
from rollout.harness.core import End, Environment, Observation, RunContext, Task
from rollout.harness.errors import TaskError

EnvFactory = Callable[..., Any]


def is_rolloutlib_env_factory(value: object) -> bool:
    """True for rolloutlib/gymnasium Env classes (not platform objects)."""
    return inspect.isclass(value) and issubclass(value, (gym.Env, AsyncEnv))


def _action_kind(space: gym.Space[Any], env: object) -> str:
    """'text' or 'chat': how a model reply becomes this environment's action."""
    if isinstance(space, (gym.spaces.Text, TextSpace)):
        return "text"
    if isinstance(space, ChatSpace):
        return "chat"
    raise TaskError(
        f"{type(env).__name__}.action_space is {space!r}: only text spaces "
        f"(rolloutlib.spaces.text.text, gymnasium Text) and chat-message spaces "
        f"(rolloutlib.spaces.messages.chat) can be played by a language model"
    )


def _observation_messages(observation: Any) -> list[Message]:
    if isinstance(observation, str):
        return [Message.user(observation)]
    if isinstance(observation, Mapping) and "role" in observation:
        return [Message.model_validate(dict(observation))]
    if isinstance(observation, Sequence) and all(
        isinstance(item, Mapping) and "role" in item for item in observation
    ):
        return [Message.model_validate(dict(item)) for item in observation]
    return [Message.user(str(observation))]


def rolloutlib_environment(
    make_env: EnvFactory,
    *,
    name: str | None = None,
    parameters: Sequence[Mapping[str, Any]] = ({},),
    group_size: int = 8,
    max_turns: int = 32,
) -> Environment:
    """A platform `Environment` that plays `make_env(**parameters)` (or `make_env()`)."""

    takes_parameters = bool(inspect.signature(make_env).parameters)

    class RolloutlibTask(Task):
        def __init__(self, task_parameters: Mapping[str, Any]) -> None:
            super().__init__(task_parameters)
            env = make_env(**task_parameters) if takes_parameters else make_env()
            if not isinstance(env, (Env, gym.Env, AsyncEnv)):
                raise TaskError(f"{make_env!r} returned {type(env).__name__}, not an Env")
            self.action_kind = _action_kind(env.action_space, env)
            self.env = as_async(env)
            self.total_reward = 0.0
            self.seen: list[Message] = []

        async def start(self, run: RunContext) -> Observation:
            observation, _info = await self.env.reset(seed=run.seed)
            self.seen = _observation_messages(observation)
            return Observation(self.seen)

        async def respond(self, run: RunContext, reply: Message) -> Observation:
            action: Any = reply.text
            if self.action_kind == "chat":
                action = [{"role": "assistant", "content": reply.text}]
            observation, reward, terminated, truncated, info = await self.env.step(action)
            self.total_reward += float(reward)
            if terminated or truncated:
                score = Score.from_info(info, default=Score(self.total_reward))
                return End(reward=score, metrics={"truncated": float(bool(truncated))})
            messages = _observation_messages(observation)
            is_conversation = isinstance(observation, Sequence) and not isinstance(observation, str)
            if is_conversation and messages[: len(self.seen)] == self.seen:
                # Chat environments return the whole conversation: add only what is new.
                new = messages[len(self.seen) :]
                self.seen = messages
            else:
                new = messages
            return Observation([m for m in new if m.role != "assistant"])

        async def close(self, run: RunContext) -> None:
            await self.env.close()

    RolloutlibTask.__name__ = f"RolloutlibTask[{getattr(make_env, '__name__', 'env')}]"
    return Environment(
        name=name or getattr(make_env, "__name__", "rolloutlib-env"),
        task=RolloutlibTask,
        parameters=parameters,
        group_size=group_size,
        max_turns=max_turns,
    )
