"""Grading wrappers: turn an existing environment's episodes into graded rewards.

`GradingWrapper(env, rubric=..., grader=..., make_input=...)` grades steps with a rubric
grader. By default it grades the step that ends the episode (terminated or truncated),
replaces that step's reward with `Score.value` and stores the full score in `info["score"]`
(the `Score.as_info` form, so `Score.from_info(info)` recovers it). `AsyncGradingWrapper` is
the same for async environments and awaits async graders.

Grading that determines reward belongs inside `step`; these wrappers put it there for
environments that were written without it.
"""

from __future__ import annotations

import inspect
from collections.abc import Callable
from typing import Any, Literal, SupportsFloat, cast

import gymnasium as gym

from rolloutlib._concurrency import run_sync
from rolloutlib.core import (
    AsyncEnv,
    _AsyncFromSync,
    _serialize_sync,
    _without_lock,
    as_async,
    as_sync,
)
from rolloutlib.errors import ArgumentError, GradingError, describe
from rolloutlib.graders import Rubric, Score

__all__ = ["AsyncGradingWrapper", "GradeOn", "GradingWrapper"]

GradeOn = Literal["end", "terminated", "always"] | Callable[[bool, bool], bool]
"""When to grade: `"end"` (terminated or truncated, the default), `"terminated"`,
`"always"` (every step) or a callable `(terminated, truncated) -> bool`."""

_GRADE_ON: dict[str, Callable[[bool, bool], bool]] = {
    "end": lambda terminated, truncated: terminated or truncated,
    "terminated": lambda terminated, truncated: terminated,
    "always": lambda terminated, truncated: True,
}


def _grade_predicate(grade_on: Any) -> Callable[[bool, bool], bool]:
    if callable(grade_on):
        return cast(Callable[[bool, bool], bool], grade_on)
    if isinstance(grade_on, str) and grade_on in _GRADE_ON:
        return _GRADE_ON[grade_on]
    raise ArgumentError("grade_on", grade_on, f"expected one of {sorted(_GRADE_ON)} or a callable")


def _check(rubric: Any, grader: Any, make_input: Any) -> None:
    if not isinstance(rubric, Rubric):
        raise ArgumentError("rubric", rubric, "expected a rolloutlib.graders.Rubric")
    if not (callable(grader) or callable(getattr(grader, "score", None))):
        raise ArgumentError(
            "grader", grader, "expected an object with score(input, rubric) or a callable"
        )
    if make_input is not None and not callable(make_input):
        raise ArgumentError("make_input", make_input, "expected a callable (env, action) -> input")


def _to_score(result: Any, grader: Any) -> Score:
    try:
        return Score.coerce(result)
    except GradingError:
        raise GradingError(
            f"grader {grader!r} returned {describe(result)}; expected a Score or a number"
        ) from None


def _graded(
    result: tuple[Any, SupportsFloat, bool, bool, dict[str, Any]], score: Score, key: str
) -> tuple[Any, float, bool, bool, dict[str, Any]]:
    observation, _, terminated, truncated, info = result
    info = {**info, **score.as_info(key)}
    return observation, score.value, terminated, truncated, info


class GradingWrapper(gym.Wrapper[Any, Any, Any, Any]):
    """Grade a synchronous environment's steps with a rubric.

    Args:
        env: The environment (a `gymnasium.Env`; an `AsyncEnv` is adapted with `as_sync`).
        rubric: What to grade.
        grader: An object with `score(input, rubric)` (e.g. `CompositeGrader`) or a callable
            `(input, rubric) -> Score | number` (async graders are run to completion).
        make_input: `(env, action) -> grader input`, called with the wrapped environment and
            the action of the graded step (default: the action itself).
        grade_on: Which steps to grade (see `GradeOn`).
        score_key: The `info` entry that receives the score.

    Steps that are not graded pass through unchanged. Calls on one wrapper are serialized,
    like those of a `rolloutlib.Env`.
    """

    def __init__(
        self,
        env: gym.Env[Any, Any] | AsyncEnv[Any, Any],
        *,
        rubric: Rubric,
        grader: Any,
        make_input: Callable[[Any, Any], Any] | None = None,
        grade_on: GradeOn = "end",
        score_key: str = "score",
    ) -> None:
        _check(rubric, grader, make_input)
        super().__init__(as_sync(env))
        self.rubric = rubric
        self.grader = grader
        self.make_input = make_input
        self.should_grade = _grade_predicate(grade_on)
        self.score_key = score_key

    def grade(self, action: Any) -> Score:
        """Grade `action` now (what `step` does on graded steps)."""
        subject = self.make_input(self.env, action) if self.make_input else action
        score_fn = getattr(self.grader, "score", None)
        result = (
            score_fn(subject, self.rubric)
            if callable(score_fn)
            else self.grader(subject, self.rubric)
        )
        if inspect.isawaitable(result):
            result = run_sync(result)
        return _to_score(result, self.grader)

    @_serialize_sync
    def reset(
        self, *, seed: int | None = None, options: dict[str, Any] | None = None
    ) -> tuple[Any, dict[str, Any]]:
        return self.env.reset(seed=seed, options=options)

    @_serialize_sync
    def step(self, action: Any) -> tuple[Any, SupportsFloat, bool, bool, dict[str, Any]]:
        result = self.env.step(action)
        if self.should_grade(bool(result[2]), bool(result[3])):
            return _graded(result, self.grade(action), self.score_key)
        return result

    @_serialize_sync
    def close(self) -> None:
        self.env.close()

    def __getstate__(self) -> dict[str, Any]:
        return _without_lock(self.__dict__)


class AsyncGradingWrapper(AsyncEnv[Any, Any]):
    """`GradingWrapper` for async environments; awaits async graders.

    Args:
        env: The environment (an `AsyncEnv`; a `gymnasium.Env` is adapted with `as_async`).
        rubric: What to grade.
        grader: An object with `ascore(input, rubric)` or `score(input, rubric)`, or a
            callable `(input, rubric)` returning a `Score`, a number or an awaitable of one.
        make_input: `(env, action) -> grader input`, called with the environment as given.
        grade_on: Which steps to grade (see `GradeOn`).
        score_key: The `info` entry that receives the score.
    """

    def __init__(
        self,
        env: AsyncEnv[Any, Any] | gym.Env[Any, Any],
        *,
        rubric: Rubric,
        grader: Any,
        make_input: Callable[[Any, Any], Any] | None = None,
        grade_on: GradeOn = "end",
        score_key: str = "score",
    ) -> None:
        _check(rubric, grader, make_input)
        self.inner = env
        self.env = as_async(env)
        self.action_space = self.env.action_space
        self.observation_space = self.env.observation_space
        self.render_mode = self.env.render_mode
        self.spec = self.env.spec
        self.rubric = rubric
        self.grader = grader
        self.make_input = make_input
        self.should_grade = _grade_predicate(grade_on)
        self.score_key = score_key

    async def grade(self, action: Any) -> Score:
        """Grade `action` now (what `step` does on graded steps)."""
        subject = self.make_input(self.inner, action) if self.make_input else action
        ascore = getattr(self.grader, "ascore", None)
        score_fn = getattr(self.grader, "score", None)
        if callable(ascore):
            result = ascore(subject, self.rubric)
        elif callable(score_fn):
            result = score_fn(subject, self.rubric)
        else:
            result = self.grader(subject, self.rubric)
        if inspect.isawaitable(result):
            result = await result
        return _to_score(result, self.grader)

    async def reset(
        self, *, seed: int | None = None, options: dict[str, Any] | None = None
    ) -> tuple[Any, dict[str, Any]]:
        return await self.env.reset(seed=seed, options=options)

    async def step(self, action: Any) -> tuple[Any, SupportsFloat, bool, bool, dict[str, Any]]:
        result = await self.env.step(action)
        if self.should_grade(bool(result[2]), bool(result[3])):
            return _graded(result, await self.grade(action), self.score_key)
        return result

    async def render(self) -> Any:
        return await self.env.render()

    async def close(self) -> None:
        await self.env.close()

    @property
    def np_random(self) -> Any:
        return self.env.np_random

    @np_random.setter
    def np_random(self, value: Any) -> None:
        self.env.np_random = value

    @property
    def unwrapped(self) -> Any:
        return self.inner.unwrapped if isinstance(self.env, _AsyncFromSync) else self.env.unwrapped

    def __repr__(self) -> str:
        return f"<AsyncGradingWrapper{self.env!r}>"
