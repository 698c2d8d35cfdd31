"""Env, AsyncEnv, as_async / as_sync and per-instance serialization."""

from __future__ import annotations

import asyncio
import copy
import pickle
import threading
import time
import warnings
from typing import Any

import gymnasium as gym
import pytest
from gymnasium.utils.env_checker import check_env
from rolloutlib import (
    ArgumentError,
    AsyncEnv,
    AsyncSingleTurnEnv,
    Env,
    EnvStateError,
    Score,
    SingleTurnEnv,
    as_async,
    as_sync,
    spaces,
)
from rolloutlib.errors import RolloutlibError


class Reverse(Env[str, str]):
    """A text environment: the observation is a word; the action should be it reversed."""

    observation_space = spaces.text.text(min_length=1, max_length=8)
    action_space = spaces.text.text(min_length=0, max_length=8, sample_alphabet="abc")

    def reset(self, *, seed: int | None = None, options: dict[str, Any] | None = None):
        super().reset(seed=seed)
        letters = self.np_random.choice(list("abc"), size=4)
        self.word = "".join(letters)
        return self.word, {"length": len(self.word)}

    def step(self, action: str):
        reward = float(action == self.word[::-1])
        return self.word[::-1] + "!", reward, True, False, {"expected": self.word[::-1]}


class AsyncCounter(AsyncEnv[Any, Any]):
    """Counts steps; remembers the loop it was reset on (to check loop consistency)."""

    observation_space = gym.spaces.Discrete(100)
    action_space = gym.spaces.Discrete(2)

    def __init__(self, horizon: int = 3) -> None:
        self.horizon = horizon
        self.closed = 0
        self.loop: asyncio.AbstractEventLoop | None = None

    async def reset(self, *, seed=None, options=None):
        await super().reset(seed=seed, options=options)
        self.loop = asyncio.get_running_loop()
        self.n = 0
        return self.n, {}

    async def step(self, action):
        assert asyncio.get_running_loop() is self.loop, "stepped on another event loop"
        await asyncio.sleep(0)
        self.n += 1
        return self.n, float(action), self.n >= self.horizon, False, {"n": self.n}

    async def close(self):
        self.closed += 1


def test_env_is_a_gymnasium_env_and_passes_check_env():
    env = Reverse()
    assert isinstance(env, gym.Env)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        check_env(env, skip_render_check=True)
    assert [str(w.message) for w in caught] == []


def test_env_values_follow_gymnasium_contract():
    env = Reverse()
    obs, info = env.reset(seed=3)
    assert obs in env.observation_space and info == {"length": 4}
    obs2, _ = env.reset(seed=3)
    assert obs == obs2  # seeded reset is deterministic
    result = env.step(obs[::-1])
    assert result == (obs[::-1] + "!", 1.0, True, False, {"expected": obs[::-1]})


def test_as_sync_of_async_env_passes_check_env():
    class AsyncReverse(AsyncEnv[str, str]):
        observation_space = spaces.text.text(min_length=1, max_length=8)
        action_space = spaces.text.text(max_length=8)

        async def reset(self, *, seed=None, options=None):
            await super().reset(seed=seed, options=options)
            self.word = "".join(self.np_random.choice(list("xyz"), size=3))
            return self.word, {}

        async def step(self, action):
            return self.word, float(action == self.word[::-1]), True, False, {}

    env = as_sync(AsyncReverse())
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        check_env(env, skip_render_check=True)
    assert [str(w.message) for w in caught] == []


def test_async_env_value_contract():
    async def main():
        env = AsyncCounter()
        assert await env.reset(seed=1) == (0, {})
        assert await env.step(1) == (1, 1.0, False, False, {"n": 1})
        assert env.np_random_seed == 1
        async with env:
            pass
        assert env.closed == 1

    asyncio.run(main())


def test_async_env_reset_seeds_like_gymnasium():
    async def draws(seed: int) -> list[int]:
        env = AsyncCounter()
        await env.reset(seed=seed)
        return env.np_random.integers(0, 1000, size=5).tolist()

    assert asyncio.run(draws(7)) == asyncio.run(draws(7))
    assert asyncio.run(draws(7)) != asyncio.run(draws(8))


def test_wrong_method_kinds_are_rejected_at_class_definition():
    with pytest.raises(TypeError, match=r"Bad.step is `async def`"):

        class Bad(Env):
            async def step(self, action):  # pyright: ignore[reportIncompatibleMethodOverride]
                return None  # pragma: no cover

    with pytest.raises(TypeError, match=r"BadAsync.step must be `async def`"):

        class BadAsync(AsyncEnv):
            def step(self, action):  # type: ignore[override]  # pragma: no cover
                return None


def test_as_sync_and_as_async_round_trip_to_the_same_object():
    sync_env = Reverse()
    async_env = AsyncCounter()
    assert as_sync(sync_env) is sync_env
    assert as_async(async_env) is async_env
    assert as_sync(as_async(sync_env)) is sync_env
    assert as_async(as_sync(async_env)) is async_env
    with pytest.raises(ArgumentError, match=r"env=.*expected a gymnasium.Env"):
        as_sync("not an env")
    with pytest.raises(RolloutlibError):
        as_async(42)


def _play_sync(env: gym.Env) -> list[Any]:
    obs, _ = env.reset(seed=0)
    out = [obs]
    done = False
    while not done:
        obs, reward, terminated, truncated, _ = env.step(1)
        out.append((obs, reward))
        done = terminated or truncated
    return out


EXPECTED_COUNTER = [0, (1, 1.0), (2, 1.0), (3, 1.0)]


def test_as_sync_from_plain_code():
    env = as_sync(AsyncCounter())
    assert _play_sync(env) == EXPECTED_COUNTER
    env.close()
    assert env.async_env.closed == 1  # type: ignore[attr-defined]


def test_as_sync_from_a_running_loops_worker_thread():
    env = as_sync(AsyncCounter())

    async def main():
        return await asyncio.to_thread(_play_sync, env)

    assert asyncio.run(main()) == EXPECTED_COUNTER


def test_as_sync_from_a_thread_while_the_main_thread_runs_a_loop():
    env = as_sync(AsyncCounter())
    results: list[Any] = []

    async def main():
        finished = asyncio.Event()
        loop = asyncio.get_running_loop()

        def worker():
            results.append(_play_sync(env))
            loop.call_soon_threadsafe(finished.set)

        thread = threading.Thread(target=worker)
        thread.start()
        # The main loop keeps running (and could serve other tasks) while the thread steps.
        ticks = 0
        while not finished.is_set():
            await asyncio.sleep(0.001)
            ticks += 1
        thread.join()
        return ticks

    assert asyncio.run(main()) >= 1
    assert results == [EXPECTED_COUNTER]


def test_as_sync_from_inside_a_coroutine():
    env = as_sync(AsyncCounter())

    async def main():
        return _play_sync(env)  # blocking call from the loop thread still completes

    assert asyncio.run(main()) == EXPECTED_COUNTER


def test_as_sync_nested_inside_an_async_env_running_on_the_bridge():
    inner = as_sync(AsyncCounter())

    class Outer(AsyncEnv[Any, Any]):
        observation_space = gym.spaces.Discrete(100)
        action_space = gym.spaces.Discrete(2)

        async def reset(self, *, seed=None, options=None):
            return inner.reset(seed=seed)

        async def step(self, action):
            return inner.step(action)

    assert _play_sync(as_sync(Outer())) == EXPECTED_COUNTER


def test_as_async_of_sync_env_in_threads_and_inline():
    async def play(env: AsyncEnv) -> list[Any]:
        obs, _ = await env.reset(seed=5)
        result = await env.step(obs[::-1])
        await env.close()
        return [obs, result[1]]

    for threaded in (True, False):
        env = as_async(Reverse(), threaded=threaded)
        obs, reward = asyncio.run(play(env))
        assert reward == 1.0 and obs in env.observation_space
        assert env.np_random is env.unwrapped.np_random


def test_sync_calls_on_one_instance_never_interleave():
    inside = threading.Event()
    other_entered = threading.Event()
    overlaps: list[bool] = []
    order: list[str] = []

    class Slow(Env):
        observation_space = gym.spaces.Discrete(2)
        action_space = gym.spaces.Discrete(2)

        def reset(self, *, seed=None, options=None):
            super().reset(seed=seed)
            return 0, {}

        def step(self, action):
            if inside.is_set():
                other_entered.set()
            inside.set()
            order.append(f"enter {action}")
            if action == 0:
                # Give the other thread every chance to enter; serialization must stop it.
                overlaps.append(other_entered.wait(timeout=0.1))
            order.append(f"exit {action}")
            inside.clear()
            return 0, 0.0, False, False, {}

    env = Slow()
    env.reset()
    first = threading.Thread(target=env.step, args=(0,))
    first.start()
    while not inside.is_set():
        time.sleep(0.001)
    second = threading.Thread(target=env.step, args=(1,))
    second.start()
    first.join()
    second.join()
    assert overlaps == [False]
    assert order == ["enter 0", "exit 0", "enter 1", "exit 1"]


def test_async_calls_on_one_instance_never_interleave():
    async def main():
        entered = asyncio.Event()
        second_entered = asyncio.Event()
        order: list[str] = []
        overlaps: list[bool] = []

        class Slow(AsyncEnv[Any, Any]):
            observation_space = gym.spaces.Discrete(2)
            action_space = gym.spaces.Discrete(2)

            async def step(self, action):
                if entered.is_set():
                    second_entered.set()
                entered.set()
                order.append(f"enter {action}")
                if action == 0:
                    try:
                        await asyncio.wait_for(second_entered.wait(), 0.05)
                        overlaps.append(True)
                    except TimeoutError:
                        overlaps.append(False)
                order.append(f"exit {action}")
                entered.clear()
                return 0, 0.0, False, False, {}

        env = Slow()
        await asyncio.gather(env.step(0), env.step(1))
        assert overlaps == [False]
        assert order == ["enter 0", "exit 0", "enter 1", "exit 1"]

    asyncio.run(main())


def test_async_serialization_across_event_loops():
    """A sync adapter (bridge loop) and the caller's loop share one instance safely."""
    active = 0
    peak = 0

    class Tracked(AsyncEnv[Any, Any]):
        observation_space = gym.spaces.Discrete(2)
        action_space = gym.spaces.Discrete(2)

        async def step(self, action):
            nonlocal active, peak
            active += 1
            peak = max(peak, active)
            await asyncio.sleep(0.002)
            active -= 1
            return 0, 0.0, False, False, {}

    env = Tracked()
    sync_view = as_sync(env)

    async def main():
        thread_steps = asyncio.to_thread(lambda: [sync_view.step(1) for _ in range(5)])
        loop_steps = asyncio.gather(*(env.step(0) for _ in range(5)))
        await asyncio.gather(thread_steps, loop_steps)

    asyncio.run(main())
    assert peak == 1


def test_reentrant_super_calls_do_not_deadlock():
    class Base(AsyncEnv[Any, Any]):
        observation_space = gym.spaces.Discrete(5)
        action_space = gym.spaces.Discrete(5)

        async def step(self, action):
            return action, 1.0, True, False, {"base": True}

    class Child(Base):
        async def step(self, action):
            obs, reward, terminated, truncated, info = await super().step(action)
            return obs, reward * 2, terminated, truncated, {**info, "child": True}

    class SyncBase(Env):
        observation_space = gym.spaces.Discrete(5)
        action_space = gym.spaces.Discrete(5)

        def step(self, action):
            return action, 1.0, True, False, {}

    class SyncChild(SyncBase):
        def step(self, action):
            return super().step(action)

    result = asyncio.run(asyncio.wait_for(Child().step(3), 1))
    assert result == (3, 2.0, True, False, {"base": True, "child": True})
    assert SyncChild().step(2) == (2, 1.0, True, False, {})


def test_cancelled_waiter_does_not_leak_the_lock():
    class Slow(AsyncEnv[Any, Any]):
        observation_space = gym.spaces.Discrete(2)
        action_space = gym.spaces.Discrete(2)

        async def step(self, action):
            await asyncio.sleep(0.01)
            return action, 0.0, False, False, {}

    async def main():
        env = Slow()
        first = asyncio.ensure_future(env.step(0))
        await asyncio.sleep(0)
        waiting = asyncio.ensure_future(env.step(1))
        await asyncio.sleep(0)
        waiting.cancel()
        await first
        # If the cancelled waiter kept the lock this would time out.
        return await asyncio.wait_for(env.step(1), 1)

    assert asyncio.run(main())[0] == 1


def test_envs_pickle_and_deepcopy_after_use():
    env = Reverse()
    env.reset(seed=1)
    env.step("x")
    clone = copy.deepcopy(env)
    assert clone.word == env.word
    assert clone.step(env.word[::-1])[1] == 1.0
    restored = pickle.loads(pickle.dumps(env))
    assert restored.word == env.word

    async def used() -> AsyncCounter:
        async_env = AsyncCounter()
        await async_env.reset(seed=2)
        await async_env.step(1)
        async_env.loop = None  # loops do not pickle; the env's own state does
        return async_env

    async_env = asyncio.run(used())
    assert pickle.loads(pickle.dumps(async_env)).n == 1
    assert copy.deepcopy(async_env).n == 1


class Capital(SingleTurnEnv[str, str]):
    observation_space = spaces.text.text()
    action_space = spaces.text.text()

    def observe(self) -> str:
        return "Capital of France?"

    def evaluate(self, action: str) -> Score:
        correct = action.strip() == "Paris"
        return Score(float(correct), {"exact": float(correct)}, feedback="checked")


def test_single_turn_env_returns_score_from_evaluate():
    env = Capital()
    with pytest.raises(EnvStateError, match=r"before reset"):
        env.step("Paris")
    assert env.reset() == ("Capital of France?", {})
    _, reward, terminated, truncated, info = env.step("Paris")
    assert (reward, terminated, truncated) == (1.0, True, False)
    assert Score.from_info(info) == Score(1.0, {"exact": 1.0}, feedback="checked")
    with pytest.raises(EnvStateError, match=r"after the episode ended"):
        env.step("Paris")
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        check_env(Capital(), skip_render_check=True)
    assert [str(w.message) for w in caught] == []


def test_async_single_turn_env_awaits_evaluate():
    class Judge(AsyncSingleTurnEnv[str, str]):
        observation_space = spaces.text.text()
        action_space = spaces.text.text()

        def observe(self) -> str:
            return "Say yes"

        async def evaluate(self, action: str) -> float:
            await asyncio.sleep(0)
            return 1.0 if action == "yes" else 0.0

    async def main():
        env = Judge()
        await env.reset()
        return await env.step("yes")

    _, reward, terminated, _, info = asyncio.run(main())
    assert reward == 1.0 and terminated and Score.from_info(info) == Score(1.0)


def test_single_turn_env_rejects_non_score_grades():
    class Broken(Capital):
        def evaluate(self, action: str) -> Any:
            return "great"

    env = Broken()
    env.reset()
    with pytest.raises(RolloutlibError, match=r"Broken.evaluate returned 'great'"):
        env.step("Paris")
