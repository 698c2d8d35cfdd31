"""Rollouts: run a policy in environments and record what happened.

- `PolicyOutput`: what a policy may return instead of a bare action: the action plus
  model-side data (generated tokens, behaviour-policy logprobs, stop reason, extra info).
- `Policy` / `AsyncPolicy`: `observation -> action | PolicyOutput`, sync or async.
- `Step`, `Trajectory`, `TrajectoryGroup`: the records. They serialize to JSON and back
  without loss (`to_json` / `from_json`; numpy values, tuples and non-string keys included).
- `rollout(env, policy)` / `arollout(env, policy)`: one episode. They never close `env`.
- `rollout_group(item, make_env, policy, num_rollouts=...)` / `arollout_group(...)`: several
  independent episodes of one item, each in a fresh environment that the function creates
  and closes. The async version runs them concurrently (`max_concurrency` bounds it).

Rolloutlib owns no model sampling: policies are user code (a Tinker sampler, an HTTP API,
a local model) that returns actions.
"""

from __future__ import annotations

import asyncio
import inspect
import json
from collections.abc import Awaitable, Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field, fields
from typing import Any, Generic, Protocol, TypeVar

import gymnasium as gym
import numpy as np
from pydantic import BaseModel, ConfigDict, ValidationError

from rolloutlib import _json
from rolloutlib._concurrency import is_async_callable, run_sync
from rolloutlib.core import AsyncEnv, as_async, as_sync
from rolloutlib.errors import (
    ArgumentError,
    ContractError,
    SerializationError,
    SpaceValueError,
    describe,
)
from rolloutlib.spaces import StructuredSpace

__all__ = [
    "AsyncPolicy",
    "Policy",
    "PolicyOutput",
    "Step",
    "Trajectory",
    "TrajectoryGroup",
    "arollout",
    "arollout_group",
    "rollout",
    "rollout_group",
]

ActT = TypeVar("ActT")
ObsT_contra = TypeVar("ObsT_contra", contravariant=True)
ActT_co = TypeVar("ActT_co", covariant=True)


@dataclass(slots=True)
class PolicyOutput(Generic[ActT]):
    """An action plus what the model knows about how it was produced.

    Attributes:
        action: The action passed to `env.step`.
        tokens: Generated token ids (recorded as `Step.policy_tokens`); a sequence or a
            numpy array, stored as a list.
        logprobs: Behaviour-policy log probabilities, one per generated token
            (`Step.policy_logprobs`), stored as a list.
        stop_reason: Why generation stopped, e.g. `"stop"` or `"length"`
            (`Step.policy_stop_reason`).
        info: Anything else the policy wants recorded (`Step.policy_info`).
    """

    action: ActT
    tokens: Sequence[int] | np.ndarray | None = None
    logprobs: Sequence[float] | np.ndarray | None = None
    stop_reason: str | None = None
    info: dict[str, Any] = field(default_factory=dict)

    def __post_init__(self) -> None:
        if self.tokens is not None and type(self.tokens) is not list:
            tolist = getattr(self.tokens, "tolist", None)
            self.tokens = tolist() if tolist is not None else list(self.tokens)
        if self.logprobs is not None and type(self.logprobs) is not list:
            tolist = getattr(self.logprobs, "tolist", None)
            self.logprobs = tolist() if tolist is not None else list(self.logprobs)
        if (
            self.tokens is not None
            and self.logprobs is not None
            and len(self.tokens) != len(self.logprobs)
        ):
            raise ArgumentError(
                "PolicyOutput.logprobs",
                self.logprobs,
                f"has {len(self.logprobs)} entries but tokens has {len(self.tokens)}",
            )
        if not isinstance(self.info, dict):
            raise ArgumentError("PolicyOutput.info", self.info, "expected a dict")


class Policy(Protocol[ObsT_contra, ActT_co]):
    """A synchronous policy: `observation -> action | PolicyOutput`."""

    def __call__(self, observation: ObsT_contra, /) -> ActT_co | PolicyOutput[Any]: ...


class AsyncPolicy(Protocol[ObsT_contra, ActT_co]):
    """An async policy: `async observation -> action | PolicyOutput`."""

    def __call__(self, observation: ObsT_contra, /) -> Awaitable[ActT_co | PolicyOutput[Any]]: ...


def _eq_fields(a: Any, b: Any) -> bool:
    if type(a) is not type(b):
        return NotImplemented
    return all(_json.equivalent(getattr(a, f.name), getattr(b, f.name)) for f in fields(a))


@dataclass(slots=True, eq=False)
class Step:
    """One transition.

    Attributes:
        observation: What the policy saw (the observation the action answered).
        action: What the environment received.
        reward: The reward `step` returned.
        terminated: The episode reached a terminal state (Gymnasium's meaning).
        truncated: The episode was cut short (time limit, `max_steps`, ...).
        info: The environment's info dict (belongs to the environment).
        policy_info: Extra data from the policy (belongs to the policy).
        policy_tokens: Generated token ids, if the policy reported them.
        policy_logprobs: Behaviour-policy logprobs of those tokens.
        policy_stop_reason: Why generation stopped, if reported.
    """

    observation: Any
    action: Any
    reward: float
    terminated: bool
    truncated: bool
    info: dict[str, Any] = field(default_factory=dict)
    policy_info: dict[str, Any] = field(default_factory=dict)
    policy_tokens: list[int] | None = None
    policy_logprobs: list[float] | None = None
    policy_stop_reason: str | None = None

    __eq__ = _eq_fields  # type: ignore[assignment]
    __hash__ = None  # type: ignore[assignment]

    @property
    def done(self) -> bool:
        """`terminated or truncated`."""
        return self.terminated or self.truncated

    def to_dict(self) -> dict[str, Any]:
        """JSON-compatible data (see `Trajectory.to_json`)."""
        return {
            "observation": _json.encode(self.observation, "observation"),
            "action": _json.encode(self.action, "action"),
            "reward": _json.encode(self.reward, "reward"),
            "terminated": self.terminated,
            "truncated": self.truncated,
            "info": _json.encode(self.info, "info"),
            "policy_info": _json.encode(self.policy_info, "policy_info"),
            "policy_tokens": _json.encode(self.policy_tokens, "policy_tokens"),
            "policy_logprobs": _json.encode(self.policy_logprobs, "policy_logprobs"),
            "policy_stop_reason": self.policy_stop_reason,
        }

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> Step:
        """Inverse of `to_dict`."""
        wire = _validate(_StepWire, data, "Step")
        return cls(
            observation=_json.decode(wire.observation),
            action=_json.decode(wire.action),
            reward=_json.decode(wire.reward),
            terminated=wire.terminated,
            truncated=wire.truncated,
            info=_json.decode(wire.info),
            policy_info=_json.decode(wire.policy_info),
            policy_tokens=_json.decode(wire.policy_tokens),
            policy_logprobs=_json.decode(wire.policy_logprobs),
            policy_stop_reason=wire.policy_stop_reason,
        )


@dataclass(slots=True, eq=False)
class Trajectory:
    """One episode: its steps, the final observation and the reset info.

    Attributes:
        steps: The transitions, in order.
        final_observation: The observation returned by the last `step` (or by `reset`
            if there were no steps).
        reset_info: The info dict `reset` returned.
        metadata: Free-form data attached by the caller.
    """

    steps: list[Step] = field(default_factory=list)
    final_observation: Any = None
    reset_info: dict[str, Any] = field(default_factory=dict)
    metadata: dict[str, Any] = field(default_factory=dict)

    __eq__ = _eq_fields  # type: ignore[assignment]
    __hash__ = None  # type: ignore[assignment]

    def __len__(self) -> int:
        return len(self.steps)

    def __iter__(self) -> Iterator[Step]:
        return iter(self.steps)

    @property
    def total_reward(self) -> float:
        """Sum of the step rewards."""
        return float(sum(step.reward for step in self.steps))

    @property
    def rewards(self) -> list[float]:
        """The step rewards, in order."""
        return [step.reward for step in self.steps]

    @property
    def observations(self) -> list[Any]:
        """The observation of every step, then the final observation."""
        return [step.observation for step in self.steps] + [self.final_observation]

    @property
    def actions(self) -> list[Any]:
        """The actions, in order."""
        return [step.action for step in self.steps]

    @property
    def terminated(self) -> bool:
        """Whether the last step terminated the episode."""
        return bool(self.steps) and self.steps[-1].terminated

    @property
    def truncated(self) -> bool:
        """Whether the last step truncated the episode."""
        return bool(self.steps) and self.steps[-1].truncated

    def to_dict(self) -> dict[str, Any]:
        """JSON-compatible data."""
        return {
            "steps": [step.to_dict() for step in self.steps],
            "final_observation": _json.encode(self.final_observation, "final_observation"),
            "reset_info": _json.encode(self.reset_info, "reset_info"),
            "metadata": _json.encode(self.metadata, "metadata"),
        }

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> Trajectory:
        """Inverse of `to_dict`."""
        wire = _validate(_TrajectoryWire, data, "Trajectory")
        return cls(
            steps=[Step.from_dict(step) for step in wire.steps],
            final_observation=_json.decode(wire.final_observation),
            reset_info=_json.decode(wire.reset_info),
            metadata=_json.decode(wire.metadata),
        )

    def to_json(self, **dumps_kwargs: Any) -> str:
        """Serialize to a JSON string (lossless: `Trajectory.from_json(t.to_json()) == t`)."""
        return json.dumps(self.to_dict(), allow_nan=False, **dumps_kwargs)

    @classmethod
    def from_json(cls, text: str | bytes) -> Trajectory:
        """Parse `to_json` output."""
        return cls.from_dict(_loads(text, "Trajectory"))


@dataclass(slots=True, eq=False)
class TrajectoryGroup:
    """Independent episodes of one item (for group-relative advantages).

    Attributes:
        trajectories: The episodes.
        item_id: Which item they belong to.
        metadata: Free-form data attached by the caller.
    """

    trajectories: list[Trajectory] = field(default_factory=list)
    item_id: str | None = None
    metadata: dict[str, Any] = field(default_factory=dict)

    __eq__ = _eq_fields  # type: ignore[assignment]
    __hash__ = None  # type: ignore[assignment]

    def __len__(self) -> int:
        return len(self.trajectories)

    def __iter__(self) -> Iterator[Trajectory]:
        return iter(self.trajectories)

    @property
    def rewards(self) -> list[float]:
        """Each trajectory's total reward (what a group-relative algorithm consumes)."""
        return [trajectory.total_reward for trajectory in self.trajectories]

    def to_dict(self) -> dict[str, Any]:
        """JSON-compatible data."""
        return {
            "item_id": self.item_id,
            "trajectories": [t.to_dict() for t in self.trajectories],
            "metadata": _json.encode(self.metadata, "metadata"),
        }

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> TrajectoryGroup:
        """Inverse of `to_dict`."""
        wire = _validate(_GroupWire, data, "TrajectoryGroup")
        return cls(
            trajectories=[Trajectory.from_dict(t) for t in wire.trajectories],
            item_id=wire.item_id,
            metadata=_json.decode(wire.metadata),
        )

    def to_json(self, **dumps_kwargs: Any) -> str:
        """Serialize to a JSON string (lossless)."""
        return json.dumps(self.to_dict(), allow_nan=False, **dumps_kwargs)

    @classmethod
    def from_json(cls, text: str | bytes) -> TrajectoryGroup:
        """Parse `to_json` output."""
        return cls.from_dict(_loads(text, "TrajectoryGroup"))


class _Wire(BaseModel):
    model_config = ConfigDict(extra="forbid", strict=True)


class _StepWire(_Wire):
    observation: Any
    action: Any
    reward: Any
    terminated: bool
    truncated: bool
    info: Any
    policy_info: Any
    policy_tokens: list[int] | None
    policy_logprobs: list[float | dict[str, str]] | None
    policy_stop_reason: str | None


class _TrajectoryWire(_Wire):
    steps: list[dict[str, Any]]
    final_observation: Any
    reset_info: Any
    metadata: Any


class _GroupWire(_Wire):
    item_id: str | None
    trajectories: list[dict[str, Any]]
    metadata: Any


def _validate(model: type[BaseModel], data: Any, what: str) -> Any:
    try:
        return model.model_validate(data)
    except ValidationError as exc:
        err = exc.errors()[0]
        where = ".".join(str(p) for p in err["loc"])
        raise SerializationError(
            f"not a {what} record: {where}: {err['msg']} (got {describe(err.get('input'))})"
        ) from None


def _loads(text: str | bytes, what: str) -> Any:
    try:
        return json.loads(text)
    except json.JSONDecodeError as exc:
        raise SerializationError(f"{what}.from_json: invalid JSON: {exc}") from None


# ---------------------------------------------------------------------------------------------
# Running episodes


def _check_in_space(space: Any, value: Any, what: str) -> None:
    if isinstance(space, StructuredSpace):
        try:
            space.validate(value)
        except SpaceValueError as exc:
            raise SpaceValueError(space, value, f"{what}: {exc.reason}") from None
    elif isinstance(space, gym.spaces.Space) and not space.contains(value):
        raise SpaceValueError(space, value, f"{what} is not contained in the space")


def _unpack_reset(result: Any, env: Any) -> tuple[Any, dict[str, Any]]:
    try:
        observation, info = result
    except (TypeError, ValueError):
        raise ContractError(
            f"{env!r}.reset returned {describe(result)}; expected (observation, info)"
        ) from None
    return observation, info


def _unpack_step(result: Any, env: Any) -> tuple[Any, float, bool, bool, dict[str, Any]]:
    try:
        observation, reward, terminated, truncated, info = result
        return observation, float(reward), bool(terminated), bool(truncated), info
    except (TypeError, ValueError):
        raise ContractError(
            f"{env!r}.step returned {describe(result)}; expected "
            "(observation, reward, terminated, truncated, info) with a numeric reward"
        ) from None


_PLAIN_TYPES: set[type] = {int, float, str, bool, bytes, list, dict, tuple, type(None), np.ndarray}
"""Action types known not to be awaitable or `PolicyOutput` (grows as rollouts see types)."""


def _is_awaitable(value: Any) -> bool:
    kind = type(value)
    if kind in _PLAIN_TYPES:
        return False
    if inspect.isawaitable(value):
        return True
    if not issubclass(kind, PolicyOutput):
        _PLAIN_TYPES.add(kind)
    return False


def _policy_fields(out: PolicyOutput[Any]) -> tuple[Any, dict[str, Any], Any, Any, str | None]:
    # tokens/logprobs are lists after PolicyOutput.__post_init__.
    return out.action, out.info, out.tokens, out.logprobs, out.stop_reason


def _check_max_steps(max_steps: int | None) -> None:
    if max_steps is not None and (not isinstance(max_steps, int) or max_steps < 1):
        raise ArgumentError("max_steps", max_steps, "expected a positive int or None")


def rollout(
    env: gym.Env[Any, Any] | AsyncEnv[Any, Any],
    policy: Policy[Any, Any] | AsyncPolicy[Any, Any],
    *,
    max_steps: int | None = None,
    seed: int | None = None,
    options: dict[str, Any] | None = None,
    check_spaces: bool = False,
) -> Trajectory:
    """Run one episode of `policy` in `env` and record it.

    `env` is reset, stepped until `terminated` or `truncated` (or `max_steps`), and left
    open: the caller owns it. An `AsyncEnv` or an async policy also works (through the sync
    bridge).

    Args:
        env: The environment (a `gymnasium.Env`, or an `AsyncEnv`).
        policy: `observation -> action | PolicyOutput` (sync or async).
        max_steps: Stop after this many steps; the last step is then marked `truncated`, as
            Gymnasium's `TimeLimit` does.
        seed: Passed to `env.reset`.
        options: Passed to `env.reset`.
        check_spaces: Check every action (and observation) against the env's spaces and
            raise `SpaceValueError` naming the space and the value.

    Returns:
        The `Trajectory`.

    Example:
        >>> import gymnasium as gym
        >>> env = gym.make("CartPole-v1")
        >>> trajectory = rollout(env, lambda obs: 0, seed=0)
        >>> trajectory.terminated, len(trajectory) > 0
        (True, True)
    """
    _check_max_steps(max_steps)
    if isinstance(env, AsyncEnv):
        env = as_sync(env)
    observation, reset_info = _unpack_reset(env.reset(seed=seed, options=options), env)
    step_env = env.step
    if check_spaces:
        _check_in_space(env.observation_space, observation, "reset observation")
    async_policy = is_async_callable(policy)
    limit = max_steps or 0
    plain = _PLAIN_TYPES
    steps: list[Step] = []
    append = steps.append
    # The loop is the hot path: keep per-step work to type checks, one Step and an append.
    while True:
        out: Any = policy(observation)
        if type(out) in plain and not async_policy:
            action, policy_info, tokens, logprobs, stop_reason = out, {}, None, None, None
        else:
            if async_policy or _is_awaitable(out):
                out = run_sync(out)
            if isinstance(out, PolicyOutput):
                action, policy_info, tokens, logprobs, stop_reason = _policy_fields(out)
            else:
                action, policy_info, tokens, logprobs, stop_reason = out, {}, None, None, None
        if check_spaces:
            _check_in_space(env.action_space, action, "action")
        result = step_env(action)
        try:
            next_observation, reward, terminated, truncated, info = result
            if type(reward) is not float:
                reward = float(reward)
        except (TypeError, ValueError):
            next_observation, reward, terminated, truncated, info = _unpack_step(result, env)
        if type(terminated) is not bool:
            terminated = bool(terminated)
        if type(truncated) is not bool:
            truncated = bool(truncated)
        append(
            Step(
                observation,
                action,
                reward,
                terminated,
                truncated,
                info,
                policy_info,
                tokens,
                logprobs,
                stop_reason,
            )
        )
        observation = next_observation
        if check_spaces:
            _check_in_space(env.observation_space, observation, "step observation")
        if terminated or truncated:
            break
        if limit and len(steps) >= limit:
            steps[-1].truncated = True
            break
    return Trajectory(steps, observation, reset_info)


async def arollout(
    env: AsyncEnv[Any, Any] | gym.Env[Any, Any],
    policy: AsyncPolicy[Any, Any] | Policy[Any, Any],
    *,
    max_steps: int | None = None,
    seed: int | None = None,
    options: dict[str, Any] | None = None,
    check_spaces: bool = False,
) -> Trajectory:
    """Async `rollout`: awaits the environment and (if async) the policy.

    A synchronous `gymnasium.Env` runs on worker threads (`as_async`). A synchronous policy is
    called inline on the event loop; make a blocking policy async. The environment is not
    closed.
    """
    _check_max_steps(max_steps)
    aenv = as_async(env)
    observation, reset_info = _unpack_reset(await aenv.reset(seed=seed, options=options), env)
    if check_spaces:
        _check_in_space(aenv.observation_space, observation, "reset observation")
    async_policy = is_async_callable(policy)
    steps: list[Step] = []
    while True:
        out: Any = policy(observation)
        if async_policy or inspect.isawaitable(out):
            out = await out
        if isinstance(out, PolicyOutput):
            action, policy_info, tokens, logprobs, stop_reason = _policy_fields(out)
        else:
            action, policy_info, tokens, logprobs, stop_reason = out, {}, None, None, None
        if check_spaces:
            _check_in_space(aenv.action_space, action, "action")
        next_observation, reward, terminated, truncated, info = _unpack_step(
            await aenv.step(action), env
        )
        step = Step(
            observation,
            action,
            reward,
            terminated,
            truncated,
            info,
            policy_info,
            tokens,
            logprobs,
            stop_reason,
        )
        steps.append(step)
        observation = next_observation
        if check_spaces:
            _check_in_space(aenv.observation_space, observation, "step observation")
        if terminated or truncated:
            break
        if max_steps is not None and len(steps) >= max_steps:
            step.truncated = True
            break
    return Trajectory(steps, observation, reset_info)


def _check_group_args(make_env: Any, num_rollouts: Any, item_id: Any) -> None:
    if not callable(make_env):
        raise ArgumentError("make_env", make_env, "expected a callable item -> environment")
    if not isinstance(num_rollouts, int) or isinstance(num_rollouts, bool) or num_rollouts < 1:
        raise ArgumentError("num_rollouts", num_rollouts, "expected a positive int")
    if item_id is not None and not isinstance(item_id, str):
        raise ArgumentError("item_id", item_id, "expected a str or None")


def _close_sync(env: Any) -> None:
    if isinstance(env, AsyncEnv):
        run_sync(env.close())
    else:
        env.close()


def rollout_group(
    item: Any,
    make_env: Callable[[Any], Any],
    policy: Policy[Any, Any] | AsyncPolicy[Any, Any],
    num_rollouts: int = 1,
    *,
    item_id: str | None = None,
    max_steps: int | None = None,
    seed: int | None = None,
    metadata: Mapping[str, Any] | None = None,
) -> TrajectoryGroup:
    """Run `num_rollouts` independent episodes of `item`, each in a fresh environment.

    The function owns the environments it creates with `make_env(item)`: each one is closed
    after its episode, also when the episode raises.

    Args:
        item: The work item (a problem, a task description, ...).
        make_env: `item -> environment` (a `gymnasium.Env` or an `AsyncEnv`).
        policy: The policy (sync or async).
        num_rollouts: How many episodes.
        item_id: Recorded as `TrajectoryGroup.item_id`.
        max_steps: Per-episode step limit (see `rollout`).
        seed: If given, episode `i` resets with `seed + i`.
        metadata: Recorded as `TrajectoryGroup.metadata`.
    """
    _check_group_args(make_env, num_rollouts, item_id)
    trajectories: list[Trajectory] = []
    for index in range(num_rollouts):
        env = make_env(item)
        try:
            trajectories.append(
                rollout(
                    env,
                    policy,
                    max_steps=max_steps,
                    seed=None if seed is None else seed + index,
                )
            )
        finally:
            _close_sync(env)
    return TrajectoryGroup(trajectories, item_id, dict(metadata or {}))


async def arollout_group(
    item: Any,
    make_env: Callable[[Any], Any],
    policy: AsyncPolicy[Any, Any] | Policy[Any, Any],
    num_rollouts: int = 1,
    *,
    item_id: str | None = None,
    max_concurrency: int | None = None,
    max_steps: int | None = None,
    seed: int | None = None,
    metadata: Mapping[str, Any] | None = None,
) -> TrajectoryGroup:
    """Async `rollout_group`: the episodes run concurrently.

    At most `max_concurrency` episodes (and so environments) are alive at once (`None`: all
    of them). `make_env` may be sync or async and may return a `gymnasium.Env` (stepped on
    worker threads) or an `AsyncEnv`. Every environment is closed after its episode. If an
    episode fails, the others are cancelled, their environments closed, and the first error
    is raised.
    """
    _check_group_args(make_env, num_rollouts, item_id)
    if max_concurrency is not None and (
        not isinstance(max_concurrency, int) or max_concurrency < 1
    ):
        raise ArgumentError("max_concurrency", max_concurrency, "expected a positive int or None")
    limit = asyncio.Semaphore(max_concurrency or num_rollouts)

    async def one(index: int) -> Trajectory:
        async with limit:
            made = make_env(item)
            if inspect.isawaitable(made):
                made = await made
            env = as_async(made)
            try:
                return await arollout(
                    env,
                    policy,
                    max_steps=max_steps,
                    seed=None if seed is None else seed + index,
                )
            finally:
                await asyncio.shield(env.close())

    tasks = [asyncio.ensure_future(one(i)) for i in range(num_rollouts)]
    try:
        trajectories = await asyncio.gather(*tasks)
    except BaseException:
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
        raise
    return TrajectoryGroup(list(trajectories), item_id, dict(metadata or {}))
