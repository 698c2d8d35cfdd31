"""rolloutlib speed: rollout() overhead and arollout_group concurrency.

Run: `uv run python benchmarks/rolloutlib_bench.py` (add `--json` for machine-readable output).

1. `rollout()` against a raw Gymnasium loop on a no-op environment (goal: at most 10% more
   time per step). The raw loop records each transition as a tuple, the least any recorder
   does; a loop that records nothing is shown for reference, and so is the raw loop building a
   `Step` per transition with no checks (the floor for any recorder of `Step` records: the
   difference splits `rollout()`'s overhead into the record itself and its checks). Both a
   plain `gymnasium.Env` and a `rolloutlib.Env` (whose calls are serialized by a lock) are
   measured, each against the raw loop on the same environment. The added nanoseconds per
   step are also reported, and a third environment that does a few microseconds of work per
   step shows the overhead at a more realistic step cost. Times are CPU time of the benchmark
   thread (robust to other load).
2. `arollout_group` of 64 environments that each sleep 10 ms per step (goal: about 10 ms per
   step for the whole group, not 64 x 10 ms = 640 ms). Measured for async environments
   (`asyncio.sleep`) and for blocking sync environments (`time.sleep`) run through
   `as_async` worker threads.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import platform
import sys
import time
from collections.abc import Callable
from typing import Any

import gymnasium as gym
from rolloutlib import AsyncEnv, Env, Step, arollout_group, rollout

EPISODE_STEPS = 2_000
REPEATS = 15
WORK_ITERATIONS = 200
GROUP_SIZE = 64
GROUP_STEPS = 10
STEP_DELAY_S = 0.010


class NoOpGymEnv(gym.Env[Any, Any]):
    """A plain Gymnasium environment that does nothing for `horizon` steps."""

    observation_space = gym.spaces.Discrete(1)
    action_space = gym.spaces.Discrete(1)

    def __init__(self, horizon: int) -> None:
        self.horizon = horizon
        self.t = 0

    def reset(self, *, seed: int | None = None, options: dict[str, Any] | None = None):
        self.t = 0
        return 0, {}

    def step(self, action: int) -> tuple[int, float, bool, bool, dict[str, Any]]:
        self.t += 1
        return 0, 0.0, False, self.t >= self.horizon, {}


class NoOpEnv(Env[Any, Any]):
    """The same environment as a `rolloutlib.Env` (calls serialized per instance)."""

    observation_space = gym.spaces.Discrete(1)
    action_space = gym.spaces.Discrete(1)

    def __init__(self, horizon: int) -> None:
        self.horizon = horizon
        self.t = 0

    def reset(self, *, seed: int | None = None, options: dict[str, Any] | None = None):
        self.t = 0
        return 0, {}

    def step(self, action: int):
        self.t += 1
        return 0, 0.0, False, self.t >= self.horizon, {}


class LightWorkEnv(NoOpGymEnv):
    """A plain Gymnasium environment whose step does a few microseconds of Python work."""

    def step(self, action: int) -> tuple[int, float, bool, bool, dict[str, Any]]:
        self.t += 1
        checksum = 0
        for i in range(WORK_ITERATIONS):
            checksum ^= i * 31
        return checksum & 0, 0.0, False, self.t >= self.horizon, {"checksum": checksum}


def policy(observation: int) -> int:
    return 0


def raw_loop_recording(env: gym.Env[Any, Any], policy: Callable[[Any], Any]) -> list[Any]:
    """The baseline: a hand-written Gymnasium loop that keeps every transition."""
    observation, _ = env.reset()
    transitions = []
    while True:
        action = policy(observation)
        next_observation, reward, terminated, truncated, info = env.step(action)
        transitions.append((observation, action, reward, terminated, truncated, info))
        observation = next_observation
        if terminated or truncated:
            return transitions


def raw_loop_steps(env: gym.Env[Any, Any], policy: Callable[[Any], Any]) -> list[Step]:
    """The floor for any recorder of `Step` records: the raw loop building a `Step` per
    transition, with no checks at all. `rollout()` minus this is its validation cost."""
    observation, _ = env.reset()
    steps = []
    while True:
        action = policy(observation)
        next_observation, reward, terminated, truncated, info = env.step(action)
        steps.append(Step(observation, action, reward, terminated, truncated, info))  # type: ignore[arg-type]
        observation = next_observation
        if terminated or truncated:
            return steps


def raw_loop_bare(env: gym.Env[Any, Any], policy: Callable[[Any], Any]) -> int:
    """For reference: the same loop, recording nothing."""
    env.reset()
    observation, steps = 0, 0
    while True:
        observation, _, terminated, truncated, _ = env.step(policy(observation))
        steps += 1
        if terminated or truncated:
            return steps


def ns_per_step(runs: dict[str, Callable[[], Any]], steps: int) -> dict[str, float]:
    """Best-of-REPEATS time per step for each run, in nanoseconds.

    Measured in CPU time of this thread (`time.thread_time_ns`), so time the CPU spends on
    other processes of a shared machine is not counted. The runs are interleaved within each
    repeat so that remaining disturbances affect them alike, and the minimum (the least
    disturbed repeat) is kept.
    """
    for run in runs.values():
        run()  # warm up
    best = dict.fromkeys(runs, float("inf"))
    for _ in range(REPEATS):
        for name, run in runs.items():
            started = time.thread_time_ns()
            run()
            best[name] = min(best[name], time.thread_time_ns() - started)
    return {name: total / steps for name, total in best.items()}


def bench_rollout_overhead() -> list[dict[str, Any]]:
    rows = []
    cases: list[tuple[str, Callable[[int], gym.Env[Any, Any]]]] = [
        ("gymnasium.Env", NoOpGymEnv),
        ("rolloutlib.Env", NoOpEnv),
        ("gymnasium.Env, light work", LightWorkEnv),
    ]
    for label, make in cases:
        env = make(EPISODE_STEPS)
        trajectory = rollout(env, policy)
        assert len(trajectory) == EPISODE_STEPS and trajectory.truncated
        timings = ns_per_step(
            {
                "bare": lambda env=env: raw_loop_bare(env, policy),
                "raw": lambda env=env: raw_loop_recording(env, policy),
                "raw_steps": lambda env=env: raw_loop_steps(env, policy),
                "rollout": lambda env=env: rollout(env, policy),
            },
            EPISODE_STEPS,
        )
        bare, raw, ours = timings["bare"], timings["raw"], timings["rollout"]
        raw_steps = timings["raw_steps"]
        rows.append(
            {
                "env": label,
                "raw_loop_bare_ns_per_step": round(bare, 1),
                "raw_loop_ns_per_step": round(raw, 1),
                "raw_loop_steps_ns_per_step": round(raw_steps, 1),
                "rollout_ns_per_step": round(ours, 1),
                "added_ns_per_step": round(ours - raw, 1),
                "step_record_ns": round(raw_steps - raw, 1),
                "checks_ns": round(ours - raw_steps, 1),
                "ratio": round(ours / raw, 3),
                "overhead_pct": round((ours / raw - 1) * 100, 1),
                "goal_met": ours / raw <= 1.10,
            }
        )
    return rows


class SleepyAsyncEnv(AsyncEnv[Any, Any]):
    observation_space = gym.spaces.Discrete(GROUP_STEPS + 1)
    action_space = gym.spaces.Discrete(1)

    async def reset(self, *, seed: int | None = None, options: dict[str, Any] | None = None):
        self.t = 0
        return 0, {}

    async def step(self, action: int):
        await asyncio.sleep(STEP_DELAY_S)
        self.t += 1
        return self.t, 1.0, self.t >= GROUP_STEPS, False, {}


class SleepySyncEnv(Env[Any, Any]):
    observation_space = gym.spaces.Discrete(GROUP_STEPS + 1)
    action_space = gym.spaces.Discrete(1)

    def reset(self, *, seed: int | None = None, options: dict[str, Any] | None = None):
        self.t = 0
        return 0, {}

    def step(self, action: int):
        time.sleep(STEP_DELAY_S)  # a blocking call: runs on an as_async worker thread
        self.t += 1
        return self.t, 1.0, self.t >= GROUP_STEPS, False, {}


def bench_group(label: str, make_env: Callable[[Any], Any]) -> dict[str, Any]:
    async def run() -> float:
        started = time.perf_counter()
        group = await arollout_group(None, make_env, policy, num_rollouts=GROUP_SIZE)
        elapsed = time.perf_counter() - started
        assert group.rewards == [float(GROUP_STEPS)] * GROUP_SIZE
        return elapsed

    asyncio.run(run())  # warm up (thread pool, imports)
    elapsed = min(asyncio.run(run()) for _ in range(3))
    per_step_ms = elapsed / GROUP_STEPS * 1000
    sequential_ms = GROUP_SIZE * STEP_DELAY_S * 1000
    return {
        "envs": label,
        "group_size": GROUP_SIZE,
        "steps_per_episode": GROUP_STEPS,
        "step_delay_ms": STEP_DELAY_S * 1000,
        "wall_s": round(elapsed, 4),
        "ms_per_step": round(per_step_ms, 2),
        "sequential_ms_per_step": sequential_ms,
        "speedup_vs_sequential": round(sequential_ms / per_step_ms, 1),
    }


def machine() -> dict[str, Any]:
    return {
        "python": platform.python_version(),
        "platform": platform.platform(),
        "processor": platform.processor() or platform.machine(),
        "cpu_count": os.cpu_count(),
        "gymnasium": gym.__version__,
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--json", action="store_true", help="print the results as JSON")
    args = parser.parse_args(argv)

    results = {
        "machine": machine(),
        "rollout_overhead": bench_rollout_overhead(),
        "arollout_group": [
            bench_group("async (asyncio.sleep)", lambda item: SleepyAsyncEnv()),
            bench_group("sync via as_async (time.sleep)", lambda item: SleepySyncEnv()),
        ],
    }
    if args.json:
        print(json.dumps(results, indent=2))
        return 0

    m = results["machine"]
    print(f"machine: {m['platform']}, {m['cpu_count']} CPUs, Python {m['python']}")
    print()
    print(f"rollout() vs a raw Gymnasium loop, no-op env, {EPISODE_STEPS}-step episodes")
    print(
        f"{'env':<26}{'bare loop':>12}{'raw loop':>12}{'raw+Step':>12}{'rollout()':>12}"
        f"{'added':>10}{'=Step':>9}{'+checks':>10}{'ratio':>8}  goal <=1.10"
    )
    for row in results["rollout_overhead"]:
        print(
            f"{row['env']:<26}{row['raw_loop_bare_ns_per_step']:>9.0f} ns"
            f"{row['raw_loop_ns_per_step']:>9.0f} ns{row['raw_loop_steps_ns_per_step']:>9.0f} ns"
            f"{row['rollout_ns_per_step']:>9.0f} ns{row['added_ns_per_step']:>7.0f} ns"
            f"{row['step_record_ns']:>6.0f} ns{row['checks_ns']:>7.0f} ns{row['ratio']:>8.2f}  "
            f"{'met' if row['goal_met'] else 'NOT met'}"
        )
    print(
        "raw+Step: the raw loop building a Step per transition and checking nothing (the floor "
        "for\nany recorder of Step records); added = Step record (=Step) + rollout()'s checks."
    )
    print()
    print(
        f"arollout_group: {GROUP_SIZE} envs x {GROUP_STEPS} steps, "
        f"{STEP_DELAY_S * 1000:.0f} ms sleep per step (goal ~10 ms/step, not 640)"
    )
    print(f"{'envs':<34}{'wall':>9}{'per step':>11}{'sequential':>12}{'speedup':>9}")
    for row in results["arollout_group"]:
        print(
            f"{row['envs']:<34}{row['wall_s']:>7.3f} s{row['ms_per_step']:>8.1f} ms"
            f"{row['sequential_ms_per_step']:>9.0f} ms{row['speedup_vs_sequential']:>8.1f}x"
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
