"""Rubrics say what to evaluate; graders say how.

- `Score`: an immutable, recursive grading record: a scalar `value`, named `components`
  (themselves `Score`s), optional `feedback` and `metadata`. `as_info()` / `Score.from_info()`
  carry it through an environment's `info` dict and back, exactly.
- `Criterion` and `Rubric`: criteria as data (id, description, weight) plus instructions.
- Criterion graders: any callable `(input, criterion) -> number | Score`, sync or async.
- `CompositeGrader`: grades every criterion of a rubric (one default grader, per-criterion
  overrides) and aggregates the results: `weighted_mean` (default), `weighted_sum`, `all_pass`,
  `asymmetric_mean`, or any callable `(scores, rubric) -> number | Score`. Its async path
  grades independent criteria concurrently.
- `LLMGrader`: a criterion grader backed by any model: `render` builds the prompt, `sample`
  (sync or async, user-owned) calls the model, `parse` turns the reply into a score.

Graders are independent of environment spaces: the `input` can be an action, a trajectory, a
group, a tool result or any application context.
"""

from __future__ import annotations

import asyncio
import inspect
import math
import numbers
import re
from collections.abc import Awaitable, Callable, Mapping
from types import MappingProxyType
from typing import Any, Protocol, overload, runtime_checkable

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator

from rolloutlib import _json
from rolloutlib._concurrency import is_async_callable, run_in_thread, run_sync
from rolloutlib.errors import ArgumentError, GradingError, describe

__all__ = [
    "Aggregation",
    "CompositeGrader",
    "Criterion",
    "CriterionGrader",
    "LLMGrader",
    "Rubric",
    "RubricGrader",
    "Score",
    "all_pass",
    "asymmetric_mean",
    "parse_score",
    "render_criterion_prompt",
    "weighted_mean",
    "weighted_sum",
]


class _Missing:
    def __repr__(self) -> str:
        return "<missing>"


_MISSING = _Missing()


def _check_value(value: Any, name: str) -> float:
    if not isinstance(value, numbers.Real):
        raise ArgumentError(name, value, f"expected a real number, got {type(value).__name__}")
    number = float(value)
    if not math.isfinite(number):
        raise ArgumentError(name, value, "must be finite")
    return number


class Score:
    """An immutable, recursive grading record.

    Args:
        value: The scalar score (a finite real number; the reward when used as one).
        components: Named sub-scores (`Score`s, or numbers that become `Score`s).
        feedback: Optional human-readable explanation.
        metadata: Optional extra data (for example the extracted answer).

    Example:
        >>> score = Score(0.75, {"correct": Score(1.0, feedback="Right.")})
        >>> score.components["correct"].feedback
        'Right.'
        >>> info = score.as_info()
        >>> Score.from_info(info) == score
        True
        >>> float(score)
        0.75
    """

    __slots__ = ("_components", "_feedback", "_hash", "_metadata", "_value")

    _value: float
    _components: Mapping[str, Score]
    _feedback: str | None
    _metadata: Mapping[str, Any]
    _hash: int | None

    def __init__(
        self,
        value: float,
        components: Mapping[str, Score | float] | None = None,
        *,
        feedback: str | None = None,
        metadata: Mapping[str, Any] | None = None,
    ) -> None:
        set_ = object.__setattr__
        set_(self, "_value", _check_value(value, "Score.value"))
        parts: dict[str, Score] = {}
        if components is not None:
            if not isinstance(components, Mapping):
                raise ArgumentError(
                    "Score.components", components, "expected a mapping of name to Score"
                )
            for name, part in components.items():
                if not isinstance(name, str):
                    raise ArgumentError("Score.components", name, "component names must be str")
                parts[name] = Score.coerce(part, name=f"Score.components[{name!r}]")
        set_(self, "_components", MappingProxyType(parts))
        if feedback is not None and not isinstance(feedback, str):
            raise ArgumentError("Score.feedback", feedback, "expected a str or None")
        set_(self, "_feedback", feedback)
        if metadata is not None and not isinstance(metadata, Mapping):
            raise ArgumentError("Score.metadata", metadata, "expected a mapping")
        set_(self, "_metadata", MappingProxyType(dict(metadata or {})))
        set_(self, "_hash", None)

    @property
    def value(self) -> float:
        """The scalar score."""
        return self._value

    @property
    def components(self) -> Mapping[str, Score]:
        """Named sub-scores (read-only)."""
        return self._components

    @property
    def feedback(self) -> str | None:
        """Human-readable explanation, if any."""
        return self._feedback

    @property
    def metadata(self) -> Mapping[str, Any]:
        """Extra data (read-only mapping)."""
        return self._metadata

    @classmethod
    def coerce(cls, value: Any, *, name: str = "score") -> Score:
        """Return `value` as a `Score`: a `Score` unchanged, a number (or bool) wrapped.

        Raises:
            GradingError: `value` is neither a `Score` nor a finite real number.
        """
        if isinstance(value, Score):
            return value
        if isinstance(value, numbers.Real):
            number = float(value)
            if math.isfinite(number):
                return cls(number)
        raise GradingError(f"{name}: expected a Score or a finite number, got {describe(value)}")

    def to_dict(self) -> dict[str, Any]:
        """Plain-data form: `{"value", "components", "feedback", "metadata"}`."""
        return {
            "value": self._value,
            "components": {name: part.to_dict() for name, part in self._components.items()},
            "feedback": self._feedback,
            "metadata": dict(self._metadata),
        }

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> Score:
        """Inverse of `to_dict` (validated).

        Raises:
            GradingError: `data` is not a score record.
        """
        try:
            wire = _ScoreWire.model_validate(data)
        except ValidationError as exc:
            raise GradingError(f"not a score record: {describe(data)}\n{exc}") from exc
        return wire.to_score()

    def as_info(self, key: str = "score") -> dict[str, Any]:
        """`{key: self.to_dict()}`, ready for `info.update(...)`."""
        return {key: self.to_dict()}

    @overload
    @classmethod
    def from_info(cls, info: Mapping[str, Any], *, key: str = "score") -> Score: ...

    @overload
    @classmethod
    def from_info(cls, info: Mapping[str, Any], default: Score, *, key: str = "score") -> Score: ...

    @overload
    @classmethod
    def from_info(
        cls, info: Mapping[str, Any], default: None, *, key: str = "score"
    ) -> Score | None: ...

    @classmethod
    def from_info(
        cls, info: Mapping[str, Any], default: Any = _MISSING, *, key: str = "score"
    ) -> Score | None:
        """Read the score that `as_info` stored in `info[key]`.

        Args:
            info: An environment's info dict.
            default: Returned when `info` has no `key` entry; without it that is an error.
            key: The entry to read.

        Raises:
            GradingError: `info[key]` is missing (and no default) or is not a score record.
        """
        if not isinstance(info, Mapping):
            raise GradingError(f"info: expected a mapping, got {describe(info)}")
        if key not in info:
            if default is _MISSING:
                raise GradingError(
                    f"info has no {key!r} entry (keys: {sorted(map(str, info))}); "
                    "pass default=... to allow that"
                )
            return default
        stored = info[key]
        if isinstance(stored, Score):
            return stored
        if isinstance(stored, Mapping):
            return cls.from_dict(stored)
        raise GradingError(f"info[{key!r}]: expected a score record, got {describe(stored)}")

    def __setattr__(self, name: str, value: Any) -> None:
        raise AttributeError(f"Score is immutable; cannot set {name!r}")

    def __delattr__(self, name: str) -> None:
        raise AttributeError(f"Score is immutable; cannot delete {name!r}")

    def __float__(self) -> float:
        return self._value

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, Score):
            return NotImplemented
        return (
            self._value == other._value
            and self._feedback == other._feedback
            and dict(self._components) == dict(other._components)
            and _json.equivalent(dict(self._metadata), dict(other._metadata))
        )

    def __hash__(self) -> int:
        # Metadata may hold unhashable values, so it is left out (equal scores still hash
        # equally, which is all hashing requires).
        if self._hash is None:
            parts = frozenset((name, hash(part)) for name, part in self._components.items())
            object.__setattr__(self, "_hash", hash((self._value, self._feedback, parts)))
        assert self._hash is not None
        return self._hash

    def __reduce__(self) -> tuple[Any, ...]:
        return (
            _rebuild_score,
            (self._value, dict(self._components), self._feedback, dict(self._metadata)),
        )

    def __repr__(self) -> str:
        args = [repr(self._value)]
        if self._components:
            args.append(repr(dict(self._components)))
        if self._feedback is not None:
            args.append(f"feedback={self._feedback!r}")
        if self._metadata:
            args.append(f"metadata={dict(self._metadata)!r}")
        return f"Score({', '.join(args)})"


def _rebuild_score(
    value: float, components: dict[str, Score], feedback: str | None, metadata: dict[str, Any]
) -> Score:
    return Score(value, components, feedback=feedback, metadata=metadata)


class _ScoreWire(BaseModel):
    model_config = ConfigDict(extra="forbid")

    value: float = Field(strict=True, allow_inf_nan=False)
    components: dict[str, _ScoreWire] = Field(default_factory=dict)
    feedback: str | None = None
    metadata: dict[str, Any] = Field(default_factory=dict)

    def to_score(self) -> Score:
        return Score(
            self.value,
            {name: part.to_score() for name, part in self.components.items()},
            feedback=self.feedback,
            metadata=self.metadata,
        )


_json.register(Score, "$score", Score.to_dict, Score.from_dict)


def _validation_to_argument_error(owner: str, exc: ValidationError) -> ArgumentError:
    errors = exc.errors()
    first = errors[0]
    field = ".".join(str(part) for part in first["loc"]) or "value"
    if len(errors) == 1:
        reason = first["msg"]
    else:
        reason = "; ".join(
            f"{'.'.join(str(p) for p in err['loc']) or 'value'}: {err['msg']}" for err in errors
        )
    return ArgumentError(f"{owner}.{field}", first.get("input"), reason)


class _Record(BaseModel):
    """Frozen pydantic record whose validation errors are `ArgumentError`s."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    def __init__(self, **data: Any) -> None:
        try:
            super().__init__(**data)
        except ValidationError as exc:
            raise _validation_to_argument_error(type(self).__name__, exc) from None


class Criterion(_Record):
    """One thing a rubric evaluates.

    Attributes:
        id: Unique name within its rubric (also the component name in the resulting `Score`).
        description: What the criterion checks (shown to LLM graders).
        weight: Relative importance (finite, >= 0).
        metadata: Extra data for graders (reference answers, thresholds, ...).
    """

    id: str = Field(min_length=1)
    description: str = ""
    weight: float = Field(default=1.0, ge=0.0, allow_inf_nan=False)
    metadata: dict[str, Any] = Field(default_factory=dict)


class Rubric(_Record):
    """A set of criteria plus grading instructions.

    Example:
        >>> rubric = Rubric(criteria=(Criterion(id="a", weight=2.0), Criterion(id="b")))
        >>> rubric.ids, rubric.weights
        (('a', 'b'), {'a': 2.0, 'b': 1.0})
    """

    criteria: tuple[Criterion, ...] = Field(min_length=1)
    instructions: str = ""
    metadata: dict[str, Any] = Field(default_factory=dict)

    @field_validator("criteria")
    @classmethod
    def _unique_ids(cls, criteria: tuple[Criterion, ...]) -> tuple[Criterion, ...]:
        seen: set[str] = set()
        for criterion in criteria:
            if criterion.id in seen:
                raise ValueError(f"duplicate criterion id {criterion.id!r}")
            seen.add(criterion.id)
        return criteria

    @property
    def ids(self) -> tuple[str, ...]:
        """Criterion ids, in order."""
        return tuple(c.id for c in self.criteria)

    @property
    def weights(self) -> dict[str, float]:
        """Criterion id -> weight."""
        return {c.id: c.weight for c in self.criteria}

    def criterion(self, criterion_id: str) -> Criterion:
        """The criterion named `criterion_id`.

        Raises:
            ArgumentError: No such criterion.
        """
        for criterion in self.criteria:
            if criterion.id == criterion_id:
                return criterion
        raise ArgumentError("criterion_id", criterion_id, f"not in rubric ids {list(self.ids)}")


CriterionGrader = Callable[[Any, Criterion], "float | Score | Awaitable[float | Score]"]
"""`(input, criterion) -> number | Score`, or an async function returning one."""

Aggregation = Callable[[Mapping[str, Score], Rubric], "float | Score"]
"""`(scores by criterion id, rubric) -> number | Score`."""


@runtime_checkable
class RubricGrader(Protocol):
    """Anything with `score(input, rubric) -> Score` (such as `CompositeGrader`)."""

    def score(self, input: Any, rubric: Rubric) -> Score: ...


def _weighted(scores: Mapping[str, Score], rubric: Rubric) -> list[tuple[float, float]]:
    missing = [c.id for c in rubric.criteria if c.id not in scores]
    if missing:
        raise GradingError(f"no score for criteria {missing}")
    return [(c.weight, scores[c.id].value) for c in rubric.criteria]


def weighted_mean(scores: Mapping[str, Score], rubric: Rubric) -> float:
    """Sum of weight * value divided by the sum of weights (the default aggregation).

    Raises:
        GradingError: Every weight is 0.
    """
    pairs = _weighted(scores, rubric)
    total = sum(w for w, _ in pairs)
    if total == 0:
        raise GradingError(f"weighted_mean: all criterion weights are 0 ({rubric.weights})")
    return sum(w * v for w, v in pairs) / total


def weighted_sum(scores: Mapping[str, Score], rubric: Rubric) -> float:
    """Sum of weight * value."""
    return sum(w * v for w, v in _weighted(scores, rubric))


def all_pass(scores: Mapping[str, Score], rubric: Rubric, *, threshold: float = 1.0) -> float:
    """1.0 when every criterion with a positive weight scores at least `threshold`, else 0.0.

    Use `functools.partial(all_pass, threshold=0.5)` for another threshold.
    """
    pairs = _weighted(scores, rubric)
    return 1.0 if all(v >= threshold for w, v in pairs if w > 0) else 0.0


def asymmetric_mean(
    scores: Mapping[str, Score], rubric: Rubric, *, failure_weight: float = 2.0
) -> float:
    """A weighted mean in which failures weigh more than successes.

    Each criterion's weight is scaled by `1 + (failure_weight - 1) * (1 - value)` (value
    clipped to [0, 1]): a criterion scoring 0 counts `failure_weight` times as much as one
    scoring 1. With two equal criteria scoring 1 and 0 the result is 1/3 rather than 1/2, so
    one failed requirement pulls the reward down more than one met requirement lifts it. With
    `failure_weight=1` it equals `weighted_mean`.

    Raises:
        GradingError: Every weight is 0, or `failure_weight` < 1.
    """
    if not failure_weight >= 1:
        raise GradingError(f"asymmetric_mean: failure_weight={failure_weight!r} must be >= 1")
    total = 0.0
    weighted = 0.0
    for weight, value in _weighted(scores, rubric):
        shortfall = 1.0 - min(1.0, max(0.0, value))
        effective = weight * (1.0 + (failure_weight - 1.0) * shortfall)
        total += effective
        weighted += effective * value
    if total == 0:
        raise GradingError(f"asymmetric_mean: all criterion weights are 0 ({rubric.weights})")
    return weighted / total


def _as_score(result: Any, criterion: Criterion) -> Score:
    if isinstance(result, Score):
        return result
    try:
        return Score.coerce(result, name=f"grader for criterion {criterion.id!r}")
    except GradingError:
        raise GradingError(
            f"grader for criterion {criterion.id!r} returned {describe(result)}; "
            "expected a number or a Score"
        ) from None


class CompositeGrader:
    """Grades each criterion of a rubric with a criterion grader, then aggregates.

    Args:
        default: The criterion grader for criteria without an override (may be `None` when
            every criterion has an override).
        overrides: Criterion id -> criterion grader.
        aggregate: Combines the per-criterion scores: `weighted_mean` (default),
            `weighted_sum`, `all_pass`, `asymmetric_mean` or any callable
            `(scores, rubric) -> number | Score`.

    The result is a `Score` whose value is the aggregate and whose components are the
    criterion scores, keyed by criterion id, in rubric order.

    Example:
        >>> rubric = Rubric(criteria=(Criterion(id="short"), Criterion(id="polite")))
        >>> grader = CompositeGrader(
        ...     lambda text, c: 1.0,
        ...     overrides={"short": lambda text, c: float(len(text) < 10)},
        ... )
        >>> grader.score("thank you!", rubric).value
        0.5
    """

    def __init__(
        self,
        default: CriterionGrader | None = None,
        overrides: Mapping[str, CriterionGrader] | None = None,
        aggregate: Aggregation = weighted_mean,
    ) -> None:
        if default is not None and not callable(default):
            raise ArgumentError("default", default, "expected a criterion grader (a callable)")
        overrides = dict(overrides or {})
        for criterion_id, grader in overrides.items():
            if not callable(grader):
                raise ArgumentError(f"overrides[{criterion_id!r}]", grader, "not callable")
        if not callable(aggregate):
            raise ArgumentError("aggregate", aggregate, "expected a callable")
        self.default = default
        self.overrides = overrides
        self.aggregate = aggregate

    def grader_for(self, criterion: Criterion) -> CriterionGrader:
        """The criterion grader used for `criterion`.

        Raises:
            GradingError: Neither an override nor a default grader exists.
        """
        grader = self.overrides.get(criterion.id, self.default)
        if grader is None:
            raise GradingError(
                f"no grader for criterion {criterion.id!r}: give CompositeGrader a default "
                "or an override for it"
            )
        return grader

    def _check_rubric(self, rubric: Any) -> Rubric:
        if not isinstance(rubric, Rubric):
            raise ArgumentError("rubric", rubric, "expected a rolloutlib.graders.Rubric")
        unknown = set(self.overrides) - set(rubric.ids)
        if unknown:
            raise GradingError(
                f"overrides name criteria {sorted(unknown)} that are not in the rubric "
                f"(ids {list(rubric.ids)})"
            )
        return rubric

    def _combine(self, scores: dict[str, Score], rubric: Rubric) -> Score:
        combined = self.aggregate(scores, rubric)
        if isinstance(combined, Score):
            if combined.components:
                return combined
            return Score(
                combined.value, scores, feedback=combined.feedback, metadata=combined.metadata
            )
        try:
            value = _check_value(combined, "aggregate result")
        except ArgumentError as exc:
            raise GradingError(
                f"aggregate {getattr(self.aggregate, '__name__', self.aggregate)!r} returned "
                f"{describe(combined)}; expected a finite number or a Score"
            ) from exc
        return Score(value, scores)

    def _start(
        self, input: Any, rubric: Rubric
    ) -> tuple[dict[str, Score], dict[str, Awaitable[Any]]]:
        scores: dict[str, Score] = {}
        pending: dict[str, Awaitable[Any]] = {}
        try:
            for criterion in rubric.criteria:
                grader = self.grader_for(criterion)
                agrade = getattr(grader, "agrade", None)
                result = _call_grader(agrade or grader, input, criterion)
                if inspect.isawaitable(result):
                    pending[criterion.id] = result
                else:
                    scores[criterion.id] = _as_score(result, criterion)
        except BaseException:
            for awaitable in pending.values():  # never started: avoid "never awaited" noise
                if inspect.iscoroutine(awaitable):
                    awaitable.close()
            raise
        return scores, pending

    def score(self, input: Any, rubric: Rubric) -> Score:
        """Grade `input` against `rubric`.

        Async criterion graders (and graders with an `agrade` method, such as `LLMGrader`)
        still run concurrently, on rolloutlib's background event loop.
        """
        rubric = self._check_rubric(rubric)
        scores, pending = self._start(input, rubric)
        if pending:
            scores.update(run_sync(_gather_named(pending, rubric)))
        return self._combine({c.id: scores[c.id] for c in rubric.criteria}, rubric)

    async def ascore(self, input: Any, rubric: Rubric) -> Score:
        """Grade `input` against `rubric`, grading independent criteria concurrently.

        Async criterion graders (and graders with an `agrade` method, such as `LLMGrader`)
        run concurrently; plain synchronous graders are called inline, so a sync grader that
        blocks should be made async.
        """
        rubric = self._check_rubric(rubric)
        scores, pending = self._start(input, rubric)
        if pending:
            scores.update(await _gather_named(pending, rubric))
        return self._combine({c.id: scores[c.id] for c in rubric.criteria}, rubric)

    __call__ = score


def _call_grader(grader: CriterionGrader, input: Any, criterion: Criterion) -> Any:
    try:
        return grader(input, criterion)
    except Exception as exc:
        exc.add_note(f"while grading criterion {criterion.id!r}")
        raise


async def _gather_named(pending: dict[str, Awaitable[Any]], rubric: Rubric) -> dict[str, Score]:
    names = list(pending)
    results = await asyncio.gather(*(pending[n] for n in names))
    return {
        name: _as_score(result, rubric.criterion(name))
        for name, result in zip(names, results, strict=True)
    }


_SCORE_LINE = re.compile(r"score\s*[:=]\s*(-?\d+(?:\.\d+)?)", re.IGNORECASE)
_NUMBER = re.compile(r"(?<![\w.])-?\d+(?:\.\d+)?(?![\w.])")
_VERDICT = re.compile(r"\b(yes|no|pass|fail|passed|failed|true|false)\b", re.IGNORECASE)


def render_criterion_prompt(input: Any, criterion: Criterion) -> str:
    """The default `LLMGrader` prompt: the criterion, the submission, the reply format."""
    return (
        "You are grading a submission against one criterion.\n\n"
        f"Criterion ({criterion.id}): {criterion.description or criterion.id}\n\n"
        f"Submission:\n{input}\n\n"
        "Explain briefly, then end with a line `SCORE: <number between 0 and 1>`."
    )


def parse_score(completion: Any) -> Score:
    """The default `LLMGrader` parser.

    Reads the last `SCORE: x` line (x in [0, 1]); failing that, the last yes/no or pass/fail
    verdict. The whole reply becomes the score's feedback.

    Raises:
        GradingError: No score can be found, or it is outside [0, 1].

    Example:
        >>> parse_score("Looks right.\\nSCORE: 0.8").value
        0.8
        >>> parse_score("Verdict: FAIL").value
        0.0
    """
    text = completion if isinstance(completion, str) else str(completion)
    matches = _SCORE_LINE.findall(text)
    if matches:
        value = float(matches[-1])
        if not 0.0 <= value <= 1.0:
            raise GradingError(f"score {value} in reply {describe(text)} is outside [0, 1]")
        return Score(value, feedback=text.strip())
    verdicts = _VERDICT.findall(text)
    if verdicts:
        passed = verdicts[-1].lower() in {"yes", "pass", "passed", "true"}
        return Score(1.0 if passed else 0.0, feedback=text.strip())
    raise GradingError(f"no `SCORE: x` line or yes/no verdict in reply {describe(text)}")


class LLMGrader:
    """A criterion grader backed by a model the caller provides.

    Args:
        sample: `prompt -> completion`, synchronous or `async def` (wrap Tinker, a hosted API
            or local inference here).
        render: `(input, criterion) -> prompt` (default: `render_criterion_prompt`).
        parse: `completion -> number | Score` (default: `parse_score`).

    Use it wherever a criterion grader goes (for example as `CompositeGrader`'s default);
    `score(input, rubric)` / `ascore` grade a whole rubric with it directly.

    Example:
        >>> grader = LLMGrader(sample=lambda prompt: "Fine.\\nSCORE: 1")
        >>> grader("4", Criterion(id="correct", description="Equals 2 + 2.")).value
        1.0
    """

    def __init__(
        self,
        sample: Callable[[Any], Any],
        render: Callable[[Any, Criterion], Any] = render_criterion_prompt,
        parse: Callable[[Any], float | Score] = parse_score,
        *,
        aggregate: Aggregation = weighted_mean,
    ) -> None:
        for name, fn in (("sample", sample), ("render", render), ("parse", parse)):
            if not callable(fn):
                raise ArgumentError(name, fn, "expected a callable")
        self.sample = sample
        self.render = render
        self.parse = parse
        self.aggregate = aggregate
        self._sample_is_async = is_async_callable(sample)

    def _finish(self, completion: Any, criterion: Criterion) -> Score:
        return _as_score(self.parse(completion), criterion)

    def __call__(self, input: Any, criterion: Criterion) -> Score:
        """Grade one criterion synchronously (an async `sample` runs on the sync bridge)."""
        completion = self.sample(self.render(input, criterion))
        if inspect.isawaitable(completion):
            completion = run_sync(completion)
        return self._finish(completion, criterion)

    async def agrade(self, input: Any, criterion: Criterion) -> Score:
        """Grade one criterion asynchronously (a sync `sample` runs on a worker thread)."""
        prompt = self.render(input, criterion)
        if self._sample_is_async:
            completion = await self.sample(prompt)
        else:
            completion = await run_in_thread(self.sample, prompt)
            if inspect.isawaitable(completion):
                completion = await completion
        return self._finish(completion, criterion)

    def score(self, input: Any, rubric: Rubric) -> Score:
        """Grade every criterion of `rubric` with this grader and aggregate."""
        return CompositeGrader(self, aggregate=self.aggregate).score(input, rubric)

    async def ascore(self, input: Any, rubric: Rubric) -> Score:
        """Async `score`: criteria are graded concurrently."""
        return await CompositeGrader(self, aggregate=self.aggregate).ascore(input, rubric)
