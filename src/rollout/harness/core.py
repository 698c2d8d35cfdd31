"""Task, Observation, End, RunContext and Environment (see `rollout.harness`)."""

from __future__ import annotations

import logging
import math
import random
from abc import ABC, abstractmethod
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from rolloutlib.graders import Score

from rollout.contracts import Message, ToolSpec
from rollout.harness.errors import InvalidEnvironment
from rollout.harness.seeds import agent_seed, parameters_seed

Parameters = Mapping[str, Any]


class Observation:
    """What the agent sees next: messages to append and, optionally, the tools it may call and
    the reward its last reply earned.

    `Observation("What is 2+2?")` adds one user message. `tools=None` keeps the tools offered
    so far; `tools=[]` withdraws them. `reward` (a finite number, None: none) is the reward of
    the reply this observation answers, recorded with that turn; a seat's reward is the sum of
    its turns' rewards and its `End`'s, and training credits each turn with the rewards from it
    on (its reward-to-go, `rollout.training.advantages`). Only an observation returned by
    `respond` can carry one: `start` answers no reply.
    """

    __slots__ = ("messages", "reward", "tools")

    def __init__(
        self,
        messages: str | Message | Sequence[Message] = (),
        *,
        tools: Sequence[ToolSpec] | None = None,
        reward: float | None = None,
    ) -> None:
        if isinstance(messages, str):
            self.messages: tuple[Message, ...] = (Message.user(messages),)
        elif isinstance(messages, Message):
            self.messages = (messages,)
        else:
            self.messages = tuple(messages)
        self.tools: tuple[ToolSpec, ...] | None = None if tools is None else tuple(tools)
        self.reward: float | Score | None = reward

    def __repr__(self) -> str:
        extra = "" if self.reward is None else f", reward={self.reward!r}"
        return f"Observation(messages={list(self.messages)!r}, tools={self.tools!r}{extra})"


class End(Observation):
    """The seat is done: its reward (a float or a rolloutlib `Score`) and metrics.

    The reward is that of the last reply (added to any reward the seat's turns earned before:
    see `Observation`). An `End` may also carry final messages (for the transcript); they are
    never sampled from.
    """

    __slots__ = ("metrics",)

    def __init__(
        self,
        reward: float | Score = 0.0,
        metrics: Mapping[str, float] | None = None,
        messages: str | Message | Sequence[Message] = (),
    ) -> None:
        super().__init__(messages)
        # An End always has a reward: narrower than an Observation's optional one.
        self.reward: float | Score = reward  # pyright: ignore[reportIncompatibleVariableOverride]
        self.metrics: dict[str, float] = dict(metrics or {})

    @property
    def value(self) -> float:
        """The scalar reward."""
        return self.reward.value if isinstance(self.reward, Score) else float(self.reward)

    def __repr__(self) -> str:
        return f"End(reward={self.reward!r}, metrics={self.metrics!r})"


@dataclass(frozen=True)
class RunContext:
    """Who and where one agent seat is. Passed to every `Task` call."""

    run_id: str
    episode_id: str
    agent: int
    seed: int
    attempt: int = 1
    agents: int = 1
    gateway_url: str | None = None
    """Base URL of the gateway (`.../v1`) for agent programs that call the model themselves."""
    api_key: str | None = None
    """This seat's gateway key: every call made with it is recorded as a turn of this seat."""
    sandbox: Mapping[str, Any] = field(default_factory=dict)
    logger: logging.Logger = field(default_factory=lambda: logging.getLogger("rollout.task"))

    @property
    def random(self) -> random.Random:
        """A random generator seeded by the episode's seed and this agent."""
        return random.Random(agent_seed(self.seed, self.agent))


class Task(ABC):
    """One agent seat's side of an episode. Subclass it and implement `start` and `respond`."""

    def __init__(self, parameters: Parameters) -> None:
        self.parameters = parameters

    @abstractmethod
    async def start(self, run: RunContext) -> Observation:
        """Return the first observation (usually the prompt)."""

    async def respond(self, run: RunContext, reply: Message) -> Observation:
        """Answer the model's reply with the next observation, or an `End`."""
        raise NotImplementedError(f"{type(self).__name__}.respond is not implemented")

    async def close(self, run: RunContext) -> None:  # noqa: B027 - optional hook
        """Release what the task holds. Called once per seat, also after errors."""


ParameterSource = Sequence[Parameters] | Callable[[random.Random], Parameters]
WarmupExample = Callable[[random.Random], tuple[Sequence[Message], str]]


@dataclass(frozen=True)
class Environment:
    """A named, versioned Task with where its parameters come from.

    `parameters` is a sequence of parameter mappings (cycled through) or a function of a seeded
    `random.Random` that draws one. Each group plays `group_size` episodes with the same
    parameters; each episode has `agents` seats, one `Task` each.
    """

    name: str
    task: type[Task]
    parameters: ParameterSource = ({},)
    version: str = "1"
    agents: int = 1
    group_size: int = 8
    max_turns: int = 32
    system_prompt: str | None = None
    sampling: Mapping[str, Any] = field(default_factory=dict)
    """Default sampling settings for this environment (max_tokens, temperature, ...)."""
    warmup: WarmupExample | None = None
    """Format-only warm-up: draws (conversation, reply of the right shape with random content).

    `rollout train` can take a few supervised steps on these before RL so that a tiny random model
    answers in the right format; the replies must carry no task information.
    """
    scripted_reply: Callable[[str], str | None] | None = None
    """What the scripted model answers here (prompt text -> reply, None: its default answer)."""
    demonstration: Callable[[str], str | None] | None = None
    """A scripted player that plays the task well (prompt text -> reply, as `scripted_reply`).

    `rollout env check` with the scripted model plays it for every agent and fails (exit 2, one
    line per agent) when an agent's reward is not above 0: an environment whose reward reads its
    world (minecraft_team's counts the blocks placed) thereby shows that the world changed.
    Without one, the check can show only that the contract holds, and says so."""
    needs_gateway: bool = False
    """The Task calls the model itself (`RunContext.gateway_url`): env check serves a gateway."""
    turn_timeout_s: float | None = 600.0
    """The most seconds one Task call (`start`, one `respond`, `close`) may take; None: no limit.

    Past it the seat ends `failed` with "turn timed out after N s". A Task that calls the model
    itself (`needs_gateway`) plays its whole conversation inside `start`: raise this for it.
    """
    episode_timeout_s: float | None = None
    """The most seconds one seat may take from `start` to its `End`, model calls included; None:
    no limit. Past it the seat ends `failed` with "episode timed out after N s"."""
    roles: Sequence[str] | None = None
    """Each agent's role, one name per agent (None: each agent is a role of its own, `agent0`,
    `agent1`, ...). Training compares a seat with the seats of its role across the group's
    episodes: agents that play the same part (four builders) share one role and are compared
    with each other; agents with different parts or reward scales get different roles."""

    def __post_init__(self) -> None:
        name = self.name if isinstance(self.name, str) else repr(self.name)
        if not isinstance(self.name, str) or not self.name:
            raise InvalidEnvironment(name, "name", self.name, "must be a non-empty string")
        if not isinstance(self.task, type) or not issubclass(self.task, Task):
            raise InvalidEnvironment(name, "task", self.task, "must be a Task subclass")
        if not callable(self.parameters):
            if isinstance(self.parameters, Mapping):
                raise InvalidEnvironment(
                    name, "parameters", self.parameters, "must be a sequence, not one mapping"
                )
            # Any indexable sized collection: a list, a tuple, a Hugging Face dataset.
            indexable = hasattr(self.parameters, "__getitem__") and hasattr(
                self.parameters, "__len__"
            )
            if not indexable or isinstance(self.parameters, str | bytes):
                raise InvalidEnvironment(
                    name,
                    "parameters",
                    self.parameters,
                    "must be a sequence of parameter mappings or a function of a random.Random",
                )
            if len(self.parameters) == 0:
                raise InvalidEnvironment(name, "parameters", self.parameters, "must not be empty")
        if not isinstance(self.version, str) or not self.version:
            raise InvalidEnvironment(name, "version", self.version, "must be a non-empty string")
        for field_name in ("agents", "group_size", "max_turns"):
            value = getattr(self, field_name)
            if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                raise InvalidEnvironment(name, field_name, value, "must be an integer >= 1")
        if self.system_prompt is not None and not isinstance(self.system_prompt, str):
            raise InvalidEnvironment(
                name, "system_prompt", self.system_prompt, "must be a string or None"
            )
        if not isinstance(self.sampling, Mapping):
            raise InvalidEnvironment(name, "sampling", self.sampling, "must be a mapping")
        for field_name in ("warmup", "scripted_reply", "demonstration"):
            value = getattr(self, field_name)
            if value is not None and not callable(value):
                raise InvalidEnvironment(name, field_name, value, "must be a function or None")
        if not isinstance(self.needs_gateway, bool):
            raise InvalidEnvironment(name, "needs_gateway", self.needs_gateway, "must be a bool")
        if self.roles is not None:
            roles = self.roles
            if (
                isinstance(roles, str)
                or not isinstance(roles, Sequence)
                or len(roles) != self.agents
                or not all(isinstance(r, str) and r for r in roles)
            ):
                raise InvalidEnvironment(
                    name,
                    "roles",
                    roles,
                    f"must be None or {self.agents} non-empty role names, one per agent",
                )
        for field_name in ("turn_timeout_s", "episode_timeout_s"):
            value = getattr(self, field_name)
            if value is None:
                continue
            number = isinstance(value, int | float) and not isinstance(value, bool)
            if not (number and math.isfinite(value) and value > 0):
                raise InvalidEnvironment(
                    name, field_name, value, "must be a number of seconds > 0 or None"
                )

    def role(self, agent: int) -> str:
        """The role of agent index `agent` (`roles`, or `agent<N>` by default)."""
        if self.roles is None or not 0 <= agent < len(self.roles):
            return f"agent{agent}"
        return self.roles[agent]

    def draw_parameters(self, group_index: int, seed: int) -> dict[str, Any]:
        """The parameters of group `group_index` (deterministic given the run's seed).

        Raises:
            InvalidEnvironment: the source produced something other than a mapping. (An
                exception raised by a parameter function itself propagates unchanged.)
        """
        if callable(self.parameters):
            drawn = self.parameters(random.Random(parameters_seed(seed, group_index)))
            where = "parameters(rng)"
        else:
            index = group_index % len(self.parameters)
            drawn = self.parameters[index]
            where = f"parameters[{index}]"
        if not isinstance(drawn, Mapping):
            raise InvalidEnvironment(self.name, where, drawn, "must be a mapping of parameters")
        return dict(drawn)
