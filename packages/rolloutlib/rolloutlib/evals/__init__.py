"""Evaluation: run a benchmark's environments and aggregate the scores they produce.

- `Benchmark`: a named `RLDataset` (items + environment factory + item ids).
- `Evaluation(score, truncated)`: what the user's `evaluate(environment)` callback returns.
- `run_benchmark(benchmark, evaluate)`: builds a fresh environment per item, calls
  `evaluate` on it, closes it, and aggregates (`BenchmarkResult.score` is the mean).
  `arun_benchmark` does the same concurrently with an async callback.

Benchmark runners never receive a grader or a rubric: scores come from the environments, so
training and evaluation share task semantics. Built-in GSM8K and AIME benchmarks live in
`rolloutlib.evals.benchmarks`.
"""

from __future__ import annotations

import asyncio
import inspect
import math
from collections.abc import Awaitable, Callable, Iterable, Mapping
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Any, Literal, TypeVar

from rolloutlib._concurrency import run_sync
from rolloutlib.core import AsyncEnv, as_async, as_sync
from rolloutlib.datasets import RLDataset
from rolloutlib.errors import ArgumentError, GradingError, describe
from rolloutlib.graders import Score

__all__ = [
    "Benchmark",
    "BenchmarkResult",
    "Evaluation",
    "ItemResult",
    "arun_benchmark",
    "run_benchmark",
]

ItemT = TypeVar("ItemT")


@dataclass(frozen=True, slots=True)
class Evaluation:
    """The outcome of evaluating one environment.

    Attributes:
        score: The score the environment produced (numbers are wrapped in a `Score`).
        truncated: Whether the episode was cut short.
        metadata: Free-form extra data.
    """

    score: Score
    truncated: bool = False
    metadata: Mapping[str, Any] = field(default_factory=dict)

    def __post_init__(self) -> None:
        object.__setattr__(self, "score", Score.coerce(self.score, name="Evaluation.score"))
        if not isinstance(self.truncated, bool):
            raise ArgumentError("Evaluation.truncated", self.truncated, "expected a bool")
        object.__setattr__(self, "metadata", MappingProxyType(dict(self.metadata)))


@dataclass(frozen=True, slots=True)
class ItemResult:
    """One item's outcome within a `BenchmarkResult`."""

    index: int
    item_id: str
    score: Score
    truncated: bool = False
    error: str | None = None


class Benchmark(RLDataset[ItemT]):
    """A named item collection with an environment factory.

    Args:
        name: The benchmark's name.
        items: The items.
        make_env: `item -> environment`.
        get_item_id: `item -> str` (default: the index).
        metadata: Read-only metadata.
    """

    def __init__(
        self,
        name: str,
        items: Iterable[ItemT],
        make_env: Callable[[ItemT], Any],
        get_item_id: Callable[[ItemT], str] | None = None,
        metadata: Mapping[str, Any] | None = None,
    ) -> None:
        if not isinstance(name, str) or not name:
            raise ArgumentError("name", name, "expected a non-empty str")
        super().__init__(items, make_env, get_item_id, metadata)
        self.name = name

    def _with_items(self, items: Any) -> Benchmark[ItemT]:
        return Benchmark(self.name, items, self.env_factory, self.get_item_id, self.metadata)

    def __repr__(self) -> str:
        return f"Benchmark({self.name!r}, {len(self)} items)"


@dataclass(frozen=True, slots=True)
class BenchmarkResult:
    """Aggregated outcome of `run_benchmark`.

    Attributes:
        name: The benchmark's name.
        items: Per-item results, in item order.
        score: The mean item score, with the counts in its metadata.
    """

    name: str
    items: tuple[ItemResult, ...]
    score: Score

    @property
    def value(self) -> float:
        """The mean item score."""
        return self.score.value

    @property
    def num_items(self) -> int:
        """How many items were evaluated."""
        return len(self.items)

    @property
    def num_truncated(self) -> int:
        """How many evaluations were truncated."""
        return sum(1 for r in self.items if r.truncated)

    @property
    def num_errors(self) -> int:
        """How many evaluations raised (only with `on_error="record"`)."""
        return sum(1 for r in self.items if r.error is not None)

    @property
    def scores(self) -> list[float]:
        """Each item's score value, in item order."""
        return [r.score.value for r in self.items]


def _as_evaluation(result: Any) -> Evaluation:
    if isinstance(result, Evaluation):
        return result
    try:
        return Evaluation(Score.coerce(result))
    except GradingError:
        raise GradingError(
            f"evaluate returned {describe(result)}; expected an Evaluation, a Score or a number"
        ) from None


def _summarize(name: str, results: list[ItemResult]) -> BenchmarkResult:
    values = [r.score.value for r in results]
    mean = math.fsum(values) / len(values)
    truncated = sum(1 for r in results if r.truncated)
    errors = sum(1 for r in results if r.error is not None)
    score = Score(
        mean,
        metadata={"num_items": len(results), "num_truncated": truncated, "num_errors": errors},
    )
    return BenchmarkResult(name, tuple(results), score)


def _check_benchmark(benchmark: Any, evaluate: Any, on_error: Any, limit: Any) -> int:
    if not isinstance(benchmark, RLDataset):
        raise ArgumentError("benchmark", benchmark, "expected a rolloutlib.evals.Benchmark")
    if not callable(evaluate):
        raise ArgumentError("evaluate", evaluate, "expected a callable environment -> Evaluation")
    if on_error not in ("raise", "record"):
        raise ArgumentError("on_error", on_error, 'expected "raise" or "record"')
    if limit is not None and (not isinstance(limit, int) or limit < 1):
        raise ArgumentError("limit", limit, "expected a positive int or None")
    count = len(benchmark) if limit is None else min(limit, len(benchmark))
    if count == 0:
        raise ArgumentError("benchmark", benchmark, "has no items")
    return count


def _benchmark_name(benchmark: Any) -> str:
    return getattr(benchmark, "name", type(benchmark).__name__)


def _error_result(index: int, item_id: str, exc: BaseException) -> ItemResult:
    message = f"{type(exc).__name__}: {exc}"
    return ItemResult(index, item_id, Score(0.0, feedback=message), False, message)


def run_benchmark(
    benchmark: RLDataset[Any],
    evaluate: Callable[[Any], Evaluation | Score | float],
    *,
    limit: int | None = None,
    on_error: Literal["raise", "record"] = "raise",
) -> BenchmarkResult:
    """Evaluate every item of `benchmark` in a fresh environment and aggregate.

    Args:
        benchmark: The benchmark (any `RLDataset`).
        evaluate: `environment -> Evaluation` (a `Score` or a number is also accepted). The
            environment is synchronous (an `AsyncEnv` is adapted with `as_sync`); it is closed
            after the call.
        limit: Evaluate only the first `limit` items.
        on_error: `"raise"` (default) stops at the first error; `"record"` scores the item 0
            and records the error.

    Returns:
        A `BenchmarkResult` whose `score` is the mean item score.
    """
    count = _check_benchmark(benchmark, evaluate, on_error, limit)
    results: list[ItemResult] = []
    for index in range(count):
        item_id = benchmark.item_id(index)
        made = benchmark.make_env(index)
        env = as_sync(made)
        try:
            outcome = evaluate(env)
            if inspect.isawaitable(outcome):
                outcome = run_sync(outcome)
            evaluation = _as_evaluation(outcome)
        except Exception as exc:
            if on_error == "raise":
                exc.add_note(f"while evaluating item {item_id!r} of {_benchmark_name(benchmark)}")
                raise
            results.append(_error_result(index, item_id, exc))
            continue
        finally:
            if isinstance(made, AsyncEnv):
                run_sync(made.close())
            else:
                env.close()
        results.append(ItemResult(index, item_id, evaluation.score, evaluation.truncated))
    return _summarize(_benchmark_name(benchmark), results)


async def arun_benchmark(
    benchmark: RLDataset[Any],
    evaluate: Callable[[AsyncEnv[Any, Any]], Awaitable[Evaluation | Score | float]],
    *,
    limit: int | None = None,
    on_error: Literal["raise", "record"] = "raise",
    max_concurrency: int | None = 8,
) -> BenchmarkResult:
    """Async `run_benchmark`: `evaluate` receives an `AsyncEnv`; items run concurrently.

    At most `max_concurrency` items are evaluated at once (`None`: no limit).
    """
    count = _check_benchmark(benchmark, evaluate, on_error, limit)
    if max_concurrency is not None and (
        not isinstance(max_concurrency, int) or max_concurrency < 1
    ):
        raise ArgumentError("max_concurrency", max_concurrency, "expected a positive int or None")
    gate = asyncio.Semaphore(max_concurrency or count)

    async def one(index: int) -> ItemResult:
        item_id = benchmark.item_id(index)
        async with gate:
            env = as_async(benchmark.make_env(index))
            try:
                outcome = evaluate(env)
                if inspect.isawaitable(outcome):
                    outcome = await outcome
                evaluation = _as_evaluation(outcome)
            except Exception as exc:
                if on_error == "raise":
                    exc.add_note(
                        f"while evaluating item {item_id!r} of {_benchmark_name(benchmark)}"
                    )
                    raise
                return _error_result(index, item_id, exc)
            finally:
                await env.close()
        return ItemResult(index, item_id, evaluation.score, evaluation.truncated)

    results = await asyncio.gather(*(one(i) for i in range(count)))
    return _summarize(_benchmark_name(benchmark), list(results))
