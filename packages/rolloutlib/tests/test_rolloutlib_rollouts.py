"""rollout / arollout / groups, PolicyOutput, and lossless JSON of the records."""

from __future__ import annotations

import asyncio
import json
from typing import Any

import gymnasium as gym
import numpy as np
import pytest
from rolloutlib import (
    ArgumentError,
    AsyncEnv,
    ContractError,
    Env,
    PolicyOutput,
    SerializationError,
    SpaceValueError,
    Step,
    Trajectory,
    TrajectoryGroup,
    arollout,
    arollout_group,
    rollout,
    rollout_group,
    spaces,
)


class Countdown(Env[str, str]):
    """Observation 'n left'; reward 1 for each action 'go'; terminates after `n` steps."""

    observation_space = spaces.text.text()
    action_space = spaces.text.text(max_length=4)

    def __init__(self, n: int = 3) -> None:
        self.n = n
        self.closed = 0

    def reset(self, *, seed=None, options=None):
        super().reset(seed=seed)
        self.left = (options or {}).get("n", self.n)
        return f"{self.left} left", {"seed": seed}

    def step(self, action):
        self.left -= 1
        reward = 1.0 if action == "go" else 0.0
        return f"{self.left} left", reward, self.left == 0, False, {"left": self.left}

    def close(self):
        self.closed += 1


class AsyncSleeper(AsyncEnv[Any, Any]):
    observation_space = gym.spaces.Discrete(10)
    action_space = gym.spaces.Discrete(2)

    def __init__(self, steps: int = 2, delay: float = 0.0) -> None:
        self.steps, self.delay, self.closed = steps, delay, 0

    async def reset(self, *, seed=None, options=None):
        await super().reset(seed=seed, options=options)
        self.t = 0
        return 0, {}

    async def step(self, action):
        await asyncio.sleep(self.delay)
        self.t += 1
        return self.t, float(action), self.t >= self.steps, False, {}

    async def close(self):
        self.closed += 1


def test_rollout_records_steps_and_leaves_env_open():
    env = Countdown(3)
    trajectory = rollout(env, lambda obs: "go", seed=4)
    assert env.closed == 0
    assert len(trajectory) == 3 and trajectory.terminated and not trajectory.truncated
    assert trajectory.total_reward == 3.0 and trajectory.rewards == [1.0, 1.0, 1.0]
    first = trajectory.steps[0]
    assert first == Step("3 left", "go", 1.0, False, False, {"left": 2})
    assert trajectory.observations == ["3 left", "2 left", "1 left", "0 left"]
    assert trajectory.final_observation == "0 left"
    assert trajectory.reset_info == {"seed": 4}
    assert trajectory.steps[-1].terminated and trajectory.steps[-1].done


def test_policy_output_fields_are_recorded():
    def policy(observation: str) -> PolicyOutput[str]:
        return PolicyOutput(
            action="go",
            tokens=np.array([5, 6]),
            logprobs=[-0.1, -0.2],
            stop_reason="stop",
            info={"model": "tiny"},
        )

    step = rollout(Countdown(1), policy).steps[0]
    assert step.action == "go"
    assert step.policy_tokens == [5, 6]
    assert all(type(t) is int for t in step.policy_tokens or [])
    assert step.policy_logprobs == [-0.1, -0.2]
    assert step.policy_stop_reason == "stop"
    assert step.policy_info == {"model": "tiny"}
    assert step.info == {"left": 0}  # the environment's info stays separate
    with pytest.raises(
        ArgumentError, match=r"PolicyOutput.logprobs=.*has 1 entries but tokens has 2"
    ):
        PolicyOutput(action="x", tokens=[1, 2], logprobs=[0.0])


def test_max_steps_truncates_like_time_limit():
    trajectory = rollout(Countdown(10), lambda obs: "wait", max_steps=2)
    assert len(trajectory) == 2
    assert trajectory.truncated and not trajectory.terminated
    with pytest.raises(ArgumentError, match=r"max_steps=0"):
        rollout(Countdown(), lambda obs: "go", max_steps=0)


def test_rollout_accepts_async_env_and_async_policy():
    async def policy(observation: int) -> PolicyOutput[int]:
        await asyncio.sleep(0)
        return PolicyOutput(1, tokens=[1], logprobs=[0.0])

    env = AsyncSleeper(steps=2)
    trajectory = rollout(env, policy)
    assert trajectory.rewards == [1.0, 1.0] and trajectory.steps[1].policy_tokens == [1]
    assert env.closed == 0


def test_check_spaces_names_space_and_value():
    with pytest.raises(SpaceValueError, match=r"'toolong' is not an element of TextSpace.*action"):
        rollout(Countdown(), lambda obs: "toolong", check_spaces=True)
    assert len(rollout(Countdown(), lambda obs: "go", check_spaces=True)) == 3


def test_broken_step_result_is_a_contract_error():
    class FourTuple(Env[Any, Any]):
        observation_space = gym.spaces.Discrete(2)
        action_space = gym.spaces.Discrete(2)

        def reset(self, *, seed=None, options=None):
            return 0, {}

        def step(self, action):  # pyright: ignore[reportIncompatibleMethodOverride]
            return 0, 0.0, True, {}

    with pytest.raises(ContractError, match=r"expected \(observation, reward, terminated"):
        rollout(FourTuple(), lambda obs: 0)


def test_reset_without_values_is_a_contract_error():
    class Forgetful(AsyncEnv[Any, Any]):
        observation_space = gym.spaces.Discrete(2)
        action_space = gym.spaces.Discrete(2)

        async def reset(self, *, seed=None, options=None):  # pyright: ignore[reportIncompatibleMethodOverride]
            await super().reset(seed=seed, options=options)  # ...and forgets to return

    with pytest.raises(ContractError, match=r"reset returned None; expected \(observation, info\)"):
        asyncio.run(arollout(Forgetful(), lambda obs: 0))
    with pytest.raises(ContractError, match="reset returned None"):
        rollout(Forgetful(), lambda obs: 0)


def test_rollout_with_plain_gymnasium_env():
    env = gym.make("CartPole-v1")
    trajectory = rollout(env, lambda obs: int(obs[2] > 0), seed=0)
    assert trajectory.terminated or trajectory.truncated
    assert isinstance(trajectory.steps[0].observation, np.ndarray)
    restored = Trajectory.from_json(trajectory.to_json())
    assert restored == trajectory
    assert restored.steps[0].observation.dtype == np.float32
    env.close()


def test_arollout_with_sync_and_async_envs_and_policies():
    async def apolicy(obs: Any) -> int:
        return 1

    async def main():
        t1 = await arollout(AsyncSleeper(3), apolicy)
        t2 = await arollout(AsyncSleeper(3), lambda obs: 0)
        env = Countdown(2)
        t3 = await arollout(env, lambda obs: "go")
        return t1, t2, t3, env

    t1, t2, t3, env = asyncio.run(main())
    assert t1.rewards == [1.0] * 3 and t2.rewards == [0.0] * 3
    assert t3.total_reward == 2.0 and env.closed == 0


def test_rollout_group_owns_and_closes_its_envs():
    made: list[Countdown] = []

    def make_env(item: dict[str, int]) -> Countdown:
        env = Countdown(item["n"])
        made.append(env)
        return env

    group = rollout_group({"n": 2}, make_env, lambda obs: "go", num_rollouts=4, item_id="p-1")
    assert isinstance(group, TrajectoryGroup)
    assert len(group.trajectories) == 4 and group.item_id == "p-1"
    assert group.rewards == [2.0] * 4
    assert [env.closed for env in made] == [1] * 4


def test_rollout_group_closes_env_when_the_episode_fails():
    made: list[Countdown] = []

    def make_env(item: Any) -> Countdown:
        made.append(Countdown())
        return made[-1]

    def policy(obs: str) -> str:
        raise RuntimeError("policy crashed")

    with pytest.raises(RuntimeError, match=r"policy crashed"):
        rollout_group(None, make_env, policy, num_rollouts=3)
    assert [env.closed for env in made] == [1]
    with pytest.raises(ArgumentError, match=r"num_rollouts=0"):
        rollout_group(None, make_env, policy, num_rollouts=0)


def test_arollout_group_is_concurrent_and_bounded():
    live = 0
    peak = 0
    made: list[AsyncSleeper] = []

    class Tracked(AsyncSleeper):
        async def reset(self, *, seed=None, options=None):
            nonlocal live, peak
            live += 1
            peak = max(peak, live)
            return await super().reset(seed=seed, options=options)

        async def close(self):
            nonlocal live
            live -= 1
            await super().close()

    def make_env(item: int) -> AsyncSleeper:
        made.append(Tracked(steps=item, delay=0.01))
        return made[-1]

    group = asyncio.run(
        arollout_group(3, make_env, lambda obs: 1, num_rollouts=8, max_concurrency=3, item_id="x")
    )
    assert group.rewards == [3.0] * 8 and group.item_id == "x"
    assert peak == 3
    assert [env.closed for env in made] == [1] * 8

    made.clear()
    peak = 0
    asyncio.run(arollout_group(1, make_env, lambda obs: 1, num_rollouts=6))
    assert peak == 6  # unbounded: all episodes run at once


def test_arollout_group_cancels_and_closes_on_failure():
    made: list[AsyncSleeper] = []

    class Failing(AsyncSleeper):
        async def step(self, action):
            if self.t == 2 and self is made[1]:
                raise ValueError("env 1 broke")
            return await super().step(action)

    def make_env(item: Any) -> AsyncSleeper:
        made.append(Failing(steps=50, delay=0.005))
        return made[-1]

    with pytest.raises(ValueError, match=r"env 1 broke"):
        asyncio.run(arollout_group(None, make_env, lambda obs: 0, num_rollouts=4))
    assert [env.closed for env in made] == [1, 1, 1, 1]


def test_arollout_group_with_sync_envs_and_async_factory():
    async def make_env(item: int) -> Countdown:
        return Countdown(item)

    group = asyncio.run(arollout_group(2, make_env, lambda obs: "go", num_rollouts=3, seed=10))
    assert group.rewards == [2.0] * 3
    assert [t.reset_info["seed"] for t in group.trajectories] == [10, 11, 12]


# --- serialization ---------------------------------------------------------------------------


def _tricky_trajectory() -> Trajectory:
    step = Step(
        observation={"pixels": np.arange(6, dtype=np.uint8).reshape(2, 3), "t": (1, "a")},
        action=np.int64(3),
        reward=0.5,
        terminated=False,
        truncated=True,
        info={
            "nan": float("nan"),
            "inf": float("-inf"),
            "f32": np.float32(1.5),
            "nested": [np.array([1.0, np.nan]), {"$weird": 1}, {1: "int key"}],
            "bytes": b"\x00\x01",
            "set": {1, 2},
            "bool": np.bool_(True),
            "empty": np.zeros((0, 2)),
            "text": np.array(["ab", "c"]),
        },
        policy_info={"temperature": 0.7},
        policy_tokens=[1, 2, 3],
        policy_logprobs=[-0.5, float("-inf"), 0.0],
        policy_stop_reason="length",
    )
    return Trajectory(
        [step], final_observation=np.array([[1.5]], dtype=np.float16), metadata={"k": 1}
    )


def test_trajectory_json_round_trip_is_lossless():
    trajectory = _tricky_trajectory()
    text = trajectory.to_json()
    json.loads(text)  # strict JSON: no NaN/Infinity tokens
    assert "NaN" not in text and "Infinity" not in text
    restored = Trajectory.from_json(text)
    assert restored == trajectory
    info = restored.steps[0].info
    assert info["f32"].dtype == np.float32 and isinstance(info["bool"], np.bool_)
    assert info["nested"][2] == {1: "int key"} and info["nested"][1] == {"$weird": 1}
    assert restored.steps[0].observation["t"] == (1, "a")
    assert restored.final_observation.dtype == np.float16


def test_group_json_round_trip_and_equality_is_strict():
    group = TrajectoryGroup([_tricky_trajectory(), Trajectory()], item_id="i", metadata={"n": 2})
    assert TrajectoryGroup.from_json(group.to_json()) == group
    other = TrajectoryGroup.from_json(group.to_json())
    other.trajectories[0].steps[0].info["f32"] = np.float64(1.5)
    assert other != group  # dtype differences count


def test_serialization_errors_name_the_field():
    bad = Trajectory([Step(object(), 1, 0.0, True, False)])
    with pytest.raises(SerializationError, match=r"observation: cannot encode <object"):
        bad.to_json()
    with pytest.raises(SerializationError, match=r"not a Trajectory record: steps"):
        Trajectory.from_dict(
            {"steps": "nope", "final_observation": None, "reset_info": {}, "metadata": {}}
        )
    with pytest.raises(SerializationError, match=r"invalid JSON"):
        Trajectory.from_json("{")
    with pytest.raises(SerializationError, match=r"not a Step record: terminated"):
        Step.from_dict({**Step(1, 1, 0.0, True, False).to_dict(), "terminated": "yes"})
