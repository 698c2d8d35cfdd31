"""Environments: `Env`, `AsyncEnv`, the `as_async` / `as_sync` adapters and single-turn bases.

- `Env` is a real `gymnasium.Env`. Subclasses write `reset` and `step` exactly as in Gymnasium.
- `AsyncEnv` has the same value contract with `async def` methods: `await env.reset()` returns
  `(observation, info)` and `await env.step(action)` returns
  `(observation, reward, terminated, truncated, info)`.
- `as_async(env)` / `as_sync(env)` convert between the two calling conventions (and undo each
  other).
- `SingleTurnEnv` / `AsyncSingleTurnEnv`: one observation, one action, graded by `evaluate`,
  which may return a `Score`.

Calls on one environment instance are serialized: `reset`, `step`, `render` and `close` of a
subclass are wrapped so that two threads (for `Env`) or two tasks (for `AsyncEnv`) never run
them at the same time on the same instance. Concurrency belongs across independent instances.
"""

from __future__ import annotations

import contextlib
import functools
import inspect
import threading
from collections.abc import Callable
from typing import Any, ClassVar, Generic, SupportsFloat, TypeVar

import gymnasium as gym
import numpy as np
from gymnasium.envs.registration import EnvSpec
from gymnasium.utils import seeding

from rolloutlib._concurrency import InstanceLock, run_in_thread, run_sync
from rolloutlib.errors import ArgumentError, EnvStateError, describe
from rolloutlib.graders import Score

__all__ = [
    "AsyncEnv",
    "AsyncSingleTurnEnv",
    "Env",
    "SingleTurnEnv",
    "StepResult",
    "as_async",
    "as_sync",
]

ObsType = TypeVar("ObsType")
ActType = TypeVar("ActType")

StepResult = tuple[Any, SupportsFloat, bool, bool, dict[str, Any]]
"""What `step` returns: `(observation, reward, terminated, truncated, info)`."""

_SERIALIZED_METHODS = ("reset", "step", "render", "close")
_LOCK_ATTR = "_rolloutlib_lock"


def _instance_rlock(env: Any) -> Any:
    return env.__dict__.setdefault(_LOCK_ATTR, threading.RLock())


def _takes_one_argument(fn: Callable[..., Any]) -> bool:
    try:
        params = list(inspect.signature(fn).parameters.values())
    except (TypeError, ValueError):
        return False
    return len(params) == 2 and all(
        p.kind is inspect.Parameter.POSITIONAL_OR_KEYWORD and p.default is inspect.Parameter.empty
        for p in params
    )


def _serialize_sync(fn: Callable[..., Any]) -> Callable[..., Any]:
    # `step(self, action)` is the hot path of every rollout: give it a wrapper without
    # *args/**kwargs packing, and use acquire/release (cheaper than `with`).
    if _takes_one_argument(fn):

        @functools.wraps(fn)
        def serialized_one(self: Any, arg: Any) -> Any:
            try:
                lock = self._rolloutlib_lock
            except AttributeError:
                lock = _instance_rlock(self)
            lock.acquire()
            try:
                return fn(self, arg)
            finally:
                lock.release()

        serialized_one._rolloutlib_serialized = True  # type: ignore[attr-defined]
        return serialized_one

    @functools.wraps(fn)
    def serialized(self: Any, *args: Any, **kwargs: Any) -> Any:
        try:
            lock = self._rolloutlib_lock
        except AttributeError:
            lock = _instance_rlock(self)
        lock.acquire()
        try:
            return fn(self, *args, **kwargs)
        finally:
            lock.release()

    serialized._rolloutlib_serialized = True  # type: ignore[attr-defined]
    return serialized


def _serialize_async(fn: Callable[..., Any]) -> Callable[..., Any]:
    @functools.wraps(fn)
    async def serialized(self: Any, *args: Any, **kwargs: Any) -> Any:
        state = self.__dict__
        lock = state.get(_LOCK_ATTR)
        if lock is None:
            lock = state.setdefault(_LOCK_ATTR, InstanceLock())
        if lock.held_here():  # `await super().step(...)` inside a serialized step
            return await fn(self, *args, **kwargs)
        token = await lock.acquire()
        try:
            return await fn(self, *args, **kwargs)
        finally:
            lock.release(token)

    serialized._rolloutlib_serialized = True  # type: ignore[attr-defined]
    return serialized


def _without_lock(state: dict[str, Any]) -> dict[str, Any]:
    state = dict(state)
    state.pop(_LOCK_ATTR, None)
    return state


class Env(gym.Env[ObsType, ActType]):
    """A Gymnasium environment whose calls on one instance are serialized.

    Write `reset` and `step` as for any `gymnasium.Env`; `reset` should call
    `super().reset(seed=seed)` so that `self.np_random` is seeded.

    Example:
        >>> import gymnasium as gym
        >>> class Echo(Env):
        ...     action_space = gym.spaces.Discrete(3)
        ...     observation_space = gym.spaces.Text(max_length=4)
        ...     def reset(self, *, seed=None, options=None):
        ...         super().reset(seed=seed)
        ...         return "go", {}
        ...     def step(self, action):
        ...         return str(action), float(action), True, False, {}
        >>> env = Echo()
        >>> env.reset(seed=0)
        ('go', {})
        >>> env.step(2)
        ('2', 2.0, True, False, {})
    """

    def __init_subclass__(cls, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        for name in _SERIALIZED_METHODS:
            fn = cls.__dict__.get(name)
            if not inspect.isfunction(fn) or getattr(fn, "_rolloutlib_serialized", False):
                continue
            if inspect.iscoroutinefunction(fn):
                raise TypeError(
                    f"{cls.__qualname__}.{name} is `async def`; an Env's methods are "
                    "synchronous. Subclass rolloutlib.AsyncEnv for async environments."
                )
            setattr(cls, name, _serialize_sync(fn))

    def __getstate__(self) -> dict[str, Any]:
        return _without_lock(self.__dict__)


class AsyncEnv(Generic[ObsType, ActType]):
    """An environment with `async def reset/step/close`, and Gymnasium's value contract.

    Subclasses set `action_space` and `observation_space` (any `gymnasium.spaces.Space`) and
    implement `step`; `reset` should `await super().reset(seed=seed, options=options)` so that
    `self.np_random` is seeded exactly as in Gymnasium.

    Example:
        >>> import asyncio, gymnasium as gym
        >>> class Count(AsyncEnv):
        ...     action_space = gym.spaces.Discrete(2)
        ...     observation_space = gym.spaces.Discrete(10)
        ...     async def reset(self, *, seed=None, options=None):
        ...         await super().reset(seed=seed, options=options)
        ...         self.n = 0
        ...         return self.n, {}
        ...     async def step(self, action):
        ...         self.n += 1
        ...         return self.n, 1.0, self.n == 3, False, {}
        >>> async def main():
        ...     env = Count()
        ...     await env.reset(seed=1)
        ...     return await env.step(0)
        >>> asyncio.run(main())
        (1, 1.0, False, False, {})
    """

    metadata: ClassVar[dict[str, Any]] = {"render_modes": []}
    render_mode: str | None = None
    spec: EnvSpec | None = None
    action_space: gym.spaces.Space[ActType]
    observation_space: gym.spaces.Space[ObsType]
    _np_random: np.random.Generator | None = None
    _np_random_seed: int | None = None

    def __init_subclass__(cls, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        for name in _SERIALIZED_METHODS:
            fn = cls.__dict__.get(name)
            if not inspect.isfunction(fn) or getattr(fn, "_rolloutlib_serialized", False):
                continue
            if not inspect.iscoroutinefunction(fn):
                raise TypeError(
                    f"{cls.__qualname__}.{name} must be `async def` in an AsyncEnv; "
                    "subclass rolloutlib.Env for synchronous environments."
                )
            setattr(cls, name, _serialize_async(fn))

    async def reset(
        self, *, seed: int | None = None, options: dict[str, Any] | None = None
    ) -> tuple[ObsType, dict[str, Any]]:  # pyright: ignore[reportReturnType]
        """Start a new episode; seeds `np_random` when `seed` is given (or on first use).

        Subclasses return `(observation, info)`.
        """
        if seed is not None:
            self._np_random, self._np_random_seed = seeding.np_random(seed)

    async def step(
        self, action: ActType
    ) -> tuple[ObsType, SupportsFloat, bool, bool, dict[str, Any]]:
        """Apply `action`; return `(observation, reward, terminated, truncated, info)`."""
        raise NotImplementedError(f"{type(self).__qualname__} does not implement step")

    async def render(self) -> Any:
        """Render the environment (nothing by default)."""
        return None

    async def close(self) -> None:
        """Release resources. Calling it twice must be allowed."""
        return None

    @property
    def np_random(self) -> np.random.Generator:
        """The environment's random generator (seeded by `reset(seed=...)`)."""
        if self._np_random is None:
            self._np_random, self._np_random_seed = seeding.np_random()
        return self._np_random

    @np_random.setter
    def np_random(self, value: np.random.Generator) -> None:
        self._np_random = value
        self._np_random_seed = -1

    @property
    def np_random_seed(self) -> int:
        """The seed of `np_random` (-1 when the generator was assigned directly)."""
        if self._np_random_seed is None:
            self._np_random, self._np_random_seed = seeding.np_random()
        return self._np_random_seed

    @property
    def unwrapped(self) -> AsyncEnv[ObsType, ActType]:
        """The base environment (itself; adapters and wrappers return the wrapped one)."""
        return self

    async def __aenter__(self) -> AsyncEnv[ObsType, ActType]:
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        await self.close()

    def __getstate__(self) -> dict[str, Any]:
        return _without_lock(self.__dict__)

    def __repr__(self) -> str:
        return f"<{type(self).__name__} instance>"


def _copy_env_attributes(source: Any, target: Any) -> None:
    # Spaces are read once: adapters are thin views, and spaces do not change after __init__.
    for name in ("action_space", "observation_space", "metadata", "render_mode", "spec"):
        with contextlib.suppress(AttributeError):  # e.g. an env that defines no spaces
            setattr(target, name, getattr(source, name))


class _AsyncFromSync(AsyncEnv[ObsType, ActType]):
    """An `AsyncEnv` view of a synchronous Gymnasium environment (made by `as_async`)."""

    def __init__(self, env: gym.Env[ObsType, ActType], *, threaded: bool) -> None:
        self.env = env
        self.threaded = threaded
        _copy_env_attributes(env, self)

    async def _call(self, fn: Callable[..., Any], *args: Any, **kwargs: Any) -> Any:
        if self.threaded:
            return await run_in_thread(fn, *args, **kwargs)
        return fn(*args, **kwargs)

    async def reset(
        self, *, seed: int | None = None, options: dict[str, Any] | None = None
    ) -> tuple[ObsType, dict[str, Any]]:
        return await self._call(self.env.reset, seed=seed, options=options)

    async def step(
        self, action: ActType
    ) -> tuple[ObsType, SupportsFloat, bool, bool, dict[str, Any]]:
        return await self._call(self.env.step, action)

    async def render(self) -> Any:
        return await self._call(self.env.render)

    async def close(self) -> None:
        await self._call(self.env.close)

    @property
    def np_random(self) -> np.random.Generator:
        return self.env.np_random

    @np_random.setter
    def np_random(self, value: np.random.Generator) -> None:
        self.env.np_random = value

    @property
    def unwrapped(self) -> Any:
        return self.env.unwrapped

    def __repr__(self) -> str:
        return f"as_async({self.env!r})"


class _SyncFromAsync(Env[ObsType, ActType]):
    """A `gymnasium.Env` view of an `AsyncEnv` (made by `as_sync`).

    Each call runs the coroutine on rolloutlib's background event loop, so it works from plain
    code, from worker threads and from inside a running loop.
    """

    def __init__(self, env: AsyncEnv[ObsType, ActType]) -> None:
        self.async_env = env
        _copy_env_attributes(env, self)

    def _sync_rng(self) -> None:
        # Share the generator object so `np_random` draws made by the async env are visible.
        self._np_random = self.async_env._np_random
        self._np_random_seed = self.async_env._np_random_seed

    def reset(
        self, *, seed: int | None = None, options: dict[str, Any] | None = None
    ) -> tuple[ObsType, dict[str, Any]]:
        result = run_sync(self.async_env.reset(seed=seed, options=options))
        self._sync_rng()
        return result

    def step(self, action: ActType) -> tuple[ObsType, SupportsFloat, bool, bool, dict[str, Any]]:
        return run_sync(self.async_env.step(action))

    def render(self) -> Any:
        return run_sync(self.async_env.render())

    def close(self) -> None:
        run_sync(self.async_env.close())

    def __repr__(self) -> str:
        return f"as_sync({self.async_env!r})"

    def __str__(self) -> str:
        return repr(self)


def as_async(env: Any, *, threaded: bool = True) -> AsyncEnv[Any, Any]:
    """Return an `AsyncEnv` view of `env`.

    Args:
        env: A `gymnasium.Env` (returned wrapped), an `AsyncEnv` (returned unchanged) or an
            `as_sync` adapter (the original async environment is returned).
        threaded: Run the synchronous methods on a worker thread (the default) so a blocking
            environment does not stall the event loop. `False` calls them inline, which is
            faster for environments that never block.

    Raises:
        ArgumentError: `env` is neither a Gymnasium nor an async environment.
    """
    if isinstance(env, AsyncEnv):
        return env
    if isinstance(env, _SyncFromAsync):
        return env.async_env
    if isinstance(env, gym.Env):
        return _AsyncFromSync(env, threaded=threaded)
    raise ArgumentError(
        "env", env, f"expected a gymnasium.Env or rolloutlib.AsyncEnv, got {type(env).__name__}"
    )


def as_sync(env: Any) -> gym.Env[Any, Any]:
    """Return a synchronous `gymnasium.Env` view of `env`.

    Args:
        env: An `AsyncEnv` (returned wrapped), a `gymnasium.Env` (returned unchanged) or an
            `as_async` adapter (the original environment is returned).

    Raises:
        ArgumentError: `env` is neither a Gymnasium nor an async environment.
    """
    if isinstance(env, _AsyncFromSync):
        return env.env
    if isinstance(env, gym.Env):
        return env
    if isinstance(env, AsyncEnv):
        return _SyncFromAsync(env)
    raise ArgumentError(
        "env", env, f"expected a gymnasium.Env or rolloutlib.AsyncEnv, got {type(env).__name__}"
    )


def _single_turn_result(env: Any, observation: Any, graded: Any) -> StepResult:
    try:
        score = Score.coerce(graded)
    except (TypeError, ValueError) as exc:
        raise type(exc)(
            f"{type(env).__qualname__}.evaluate returned {describe(graded)}: {exc}"
        ) from None
    return observation, score.value, True, False, score.as_info()


class SingleTurnEnv(Env[ObsType, ActType]):
    """One observation, one action, one grade.

    Subclasses implement `observe()` (the prompt) and `evaluate(action)`, which returns a
    `Score` (or a number). `step` returns the score's value as the reward, `terminated=True`,
    and the full score in `info["score"]` (see `Score.as_info`).

    Example:
        >>> from rolloutlib.spaces import text
        >>> class Capital(SingleTurnEnv):
        ...     observation_space = text.text()
        ...     action_space = text.text()
        ...     def observe(self):
        ...         return "Capital of France?"
        ...     def evaluate(self, action):
        ...         return Score(float(action.strip() == "Paris"), feedback="exact match")
        >>> env = Capital()
        >>> env.reset()
        ('Capital of France?', {})
        >>> _, reward, terminated, truncated, info = env.step("Paris")
        >>> reward, terminated, Score.from_info(info).feedback
        (1.0, True, 'exact match')
    """

    _episode_state: str = "new"

    def observe(self) -> ObsType:
        """The single observation of the episode."""
        raise NotImplementedError(f"{type(self).__qualname__} does not implement observe")

    def evaluate(self, action: ActType) -> Score | float:
        """Grade `action`; return a `Score` or a number."""
        raise NotImplementedError(f"{type(self).__qualname__} does not implement evaluate")

    def reset(
        self, *, seed: int | None = None, options: dict[str, Any] | None = None
    ) -> tuple[ObsType, dict[str, Any]]:
        super().reset(seed=seed, options=options)
        self._episode_state = "running"
        return self.observe(), {}

    def step(self, action: ActType) -> tuple[ObsType, SupportsFloat, bool, bool, dict[str, Any]]:
        _check_single_turn_state(self)
        self._episode_state = "done"
        return _single_turn_result(self, self.observe(), self.evaluate(action))


class AsyncSingleTurnEnv(AsyncEnv[ObsType, ActType]):
    """`SingleTurnEnv` for async code: `evaluate` may be `async def` (or synchronous)."""

    _episode_state: str = "new"

    def observe(self) -> ObsType:
        """The single observation of the episode."""
        raise NotImplementedError(f"{type(self).__qualname__} does not implement observe")

    async def evaluate(self, action: ActType) -> Score | float:
        """Grade `action`; return a `Score` or a number."""
        raise NotImplementedError(f"{type(self).__qualname__} does not implement evaluate")

    async def reset(
        self, *, seed: int | None = None, options: dict[str, Any] | None = None
    ) -> tuple[ObsType, dict[str, Any]]:
        await super().reset(seed=seed, options=options)
        self._episode_state = "running"
        return self.observe(), {}

    async def step(
        self, action: ActType
    ) -> tuple[ObsType, SupportsFloat, bool, bool, dict[str, Any]]:
        _check_single_turn_state(self)
        self._episode_state = "done"
        graded: Any = self.evaluate(action)
        if inspect.isawaitable(graded):
            graded = await graded
        return _single_turn_result(self, self.observe(), graded)


def _check_single_turn_state(env: Any) -> None:
    if env._episode_state == "new":
        raise EnvStateError(f"{type(env).__qualname__}.step called before reset")
    if env._episode_state == "done":
        raise EnvStateError(
            f"{type(env).__qualname__}.step called after the episode ended; call reset first"
        )
