"""GradingWrapper and AsyncGradingWrapper."""

from __future__ import annotations

import asyncio
from typing import Any

import gymnasium as gym
import pytest
from rolloutlib import (
    ArgumentError,
    AsyncEnv,
    AsyncGradingWrapper,
    Env,
    GradingError,
    GradingWrapper,
    arollout,
    rollout,
    spaces,
)
from rolloutlib.graders import CompositeGrader, Criterion, Rubric, Score

RUBRIC = Rubric(
    criteria=(Criterion(id="correct", weight=1.0), Criterion(id="polite", weight=1.0)),
)


class Chat(Env[str, str]):
    """Two turns; the state records what was said. Its own reward is always 0.5."""

    observation_space = spaces.text.text()
    action_space = spaces.text.text()

    def __init__(self, turns: int = 2) -> None:
        self.turns = turns

    def reset(self, *, seed=None, options=None):
        super().reset(seed=seed)
        self.state: list[str] = []
        return "hello", {"turn": 0}

    def step(self, action: str) -> tuple[str, float, bool, bool, dict[str, Any]]:
        self.state.append(action)
        done = len(self.state) >= self.turns
        return f"turn {len(self.state)}", 0.5, done, False, {"turn": len(self.state)}


def correct(context: tuple[Any, list[str], str], criterion: Criterion) -> Score:
    item, state, action = context
    return Score(float(action == item["answer"]), feedback=f"after {len(state)} turns")


def polite(context: tuple[Any, list[str], str], criterion: Criterion) -> float:
    return 1.0 if "please" in context[2] else 0.0


GRADER = CompositeGrader(polite, overrides={"correct": correct})


def test_grades_the_final_step_and_keeps_the_full_score():
    item = {"answer": "42 please"}
    env = GradingWrapper(
        Chat(),
        rubric=RUBRIC,
        grader=GRADER,
        make_input=lambda env, action: (item, env.state, action),
    )
    trajectory = rollout(env, lambda obs: "42 please")
    first, last = trajectory.steps
    assert first.reward == 0.5 and "score" not in first.info  # not graded: passed through
    assert last.reward == 1.0
    score = Score.from_info(last.info)
    assert score.components["correct"].feedback == "after 2 turns"
    assert last.info["turn"] == 2  # the environment's own info is kept


def test_grade_on_options():
    env = GradingWrapper(
        Chat(3),
        rubric=RUBRIC,
        grader=GRADER,
        grade_on="always",
        make_input=lambda env, action: ({"answer": "x"}, env.state, action),
    )
    trajectory = rollout(env, lambda obs: "x")
    assert [s.reward for s in trajectory.steps] == [0.5, 0.5, 0.5]
    assert all("score" in s.info for s in trajectory.steps)

    class Truncating(Chat):
        def step(self, action):
            obs, reward, _, _, info = super().step(action)
            return obs, reward, False, True, info

    graded = GradingWrapper(Truncating(1), rubric=RUBRIC, grader=lambda x, r: 0.25)
    assert rollout(graded, lambda obs: "x").steps[-1].reward == 0.25  # truncated counts as end
    only_terminal = GradingWrapper(
        Truncating(1), rubric=RUBRIC, grader=lambda x, r: 0.25, grade_on="terminated"
    )
    assert rollout(only_terminal, lambda obs: "x").steps[-1].reward == 0.5
    with pytest.raises(ArgumentError, match=r"grade_on='sometimes'"):
        GradingWrapper(Chat(), rubric=RUBRIC, grader=GRADER, grade_on="sometimes")  # type: ignore[arg-type]


def test_wrapper_validates_arguments_and_grader_results():
    with pytest.raises(ArgumentError, match=r"rubric=None"):
        GradingWrapper(Chat(), rubric=None, grader=GRADER)  # type: ignore[arg-type]
    with pytest.raises(ArgumentError, match=r"grader=3"):
        GradingWrapper(Chat(1), rubric=RUBRIC, grader=3)
    env = GradingWrapper(Chat(1), rubric=RUBRIC, grader=lambda x, r: "great", score_key="grade")
    env.reset()
    with pytest.raises(GradingError, match=r"returned 'great'"):
        env.step("x")


def test_wrapper_is_a_gymnasium_wrapper_with_async_grader():
    async def grader(subject: str, rubric: Rubric) -> Score:
        await asyncio.sleep(0)
        return Score(0.9, feedback=subject)

    env = GradingWrapper(Chat(1), rubric=RUBRIC, grader=grader, score_key="grade")
    assert isinstance(env, gym.Wrapper) and env.unwrapped is env.env
    env.reset(seed=1)
    _, reward, terminated, _, info = env.step("hi")
    assert reward == 0.9 and terminated
    assert Score.from_info(info, key="grade") == Score(0.9, feedback="hi")


class AsyncChat(AsyncEnv[str, str]):
    observation_space = spaces.text.text()
    action_space = spaces.text.text()

    async def reset(self, *, seed=None, options=None):
        await super().reset(seed=seed, options=options)
        self.state: list[str] = []
        return "hello", {}

    async def step(self, action):
        self.state.append(action)
        return "bye", 0.0, True, False, {"said": action}


def test_async_wrapper_awaits_ascore():
    env = AsyncGradingWrapper(
        AsyncChat(),
        rubric=RUBRIC,
        grader=GRADER,
        make_input=lambda env, action: ({"answer": "ok please"}, env.state, action),
    )
    trajectory = asyncio.run(arollout(env, lambda obs: "ok please"))
    step = trajectory.steps[0]
    assert step.reward == 1.0 and step.info["said"] == "ok please"
    assert Score.from_info(step.info).components["polite"] == Score(1.0)


def test_async_wrapper_over_sync_env_passes_original_env_to_make_input():
    seen: list[Any] = []
    inner = Chat(1)

    def make_input(env: Any, action: str) -> str:
        seen.append(env)
        return action

    env = AsyncGradingWrapper(inner, rubric=RUBRIC, grader=lambda x, r: 1.0, make_input=make_input)
    trajectory = asyncio.run(arollout(env, lambda obs: "x"))
    assert trajectory.total_reward == 1.0 and seen == [inner]
    assert env.unwrapped is inner
