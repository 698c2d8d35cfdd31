"""Score, Criterion, Rubric, CompositeGrader, aggregations and LLMGrader."""

from __future__ import annotations

import asyncio
import functools
import json
import math
import threading
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from rolloutlib import ArgumentError, GradingError
from rolloutlib.graders import (
    CompositeGrader,
    Criterion,
    LLMGrader,
    Rubric,
    Score,
    all_pass,
    asymmetric_mean,
    parse_score,
    weighted_mean,
    weighted_sum,
)

# --- Score -----------------------------------------------------------------------------------

json_leaves = (
    st.none()
    | st.booleans()
    | st.integers(-(2**53), 2**53)
    | st.floats(allow_nan=False, allow_infinity=False)
    | st.text(max_size=10)
)
json_values = st.recursive(
    json_leaves,
    lambda children: (
        st.lists(children, max_size=3) | st.dictionaries(st.text(max_size=5), children, max_size=3)
    ),
    max_leaves=8,
)
finite = st.floats(allow_nan=False, allow_infinity=False, width=64)
scores = st.recursive(
    st.builds(
        Score,
        finite,
        feedback=st.none() | st.text(max_size=20),
        metadata=st.dictionaries(st.text(max_size=5), json_values, max_size=3),
    ),
    lambda children: st.builds(
        Score,
        finite,
        st.dictionaries(st.text(min_size=1, max_size=8), children, max_size=3),
        feedback=st.none() | st.text(max_size=20),
        metadata=st.dictionaries(st.text(max_size=5), json_values, max_size=3),
    ),
    max_leaves=6,
)


@settings(max_examples=75, deadline=None)
@given(score=scores)
def test_score_info_round_trip_is_exact(score: Score):
    info: dict[str, Any] = {"other": 1}
    info.update(score.as_info())
    restored = Score.from_info(info)
    assert restored == score
    assert hash(restored) == hash(score)
    through_json = Score.from_info(json.loads(json.dumps(info)))
    assert through_json == score
    assert Score.from_info(score.as_info(key="grade"), key="grade") == score


def test_readme_score_example():
    score = Score(
        0.75,
        {
            "correctness": Score(1.0, feedback="Correct."),
            "format": Score(0.5, feedback="One required heading is missing."),
        },
    )
    info: dict[str, Any] = {}
    info.update(score.as_info())
    assert Score.from_info(info) == score
    assert score.components["format"].feedback == "One required heading is missing."
    assert float(score) == 0.75


def test_score_is_immutable_and_hashable():
    score = Score(1.0, {"a": 0.5}, metadata={"k": [1, 2]})
    with pytest.raises(AttributeError, match=r"immutable"):
        score.value = 2.0  # type: ignore[misc]
    with pytest.raises(TypeError):
        score.components["b"] = Score(0.0)  # type: ignore[index]
    with pytest.raises(TypeError):
        score.metadata["k"] = 3  # type: ignore[index]
    assert {score: "x"}[Score(1.0, {"a": Score(0.5)}, metadata={"k": [1, 2]})] == "x"
    assert Score(1.0) != Score(1.0, feedback="f")
    assert Score(1.0) != Score(1.0, {"a": 1.0})
    assert Score(1) == Score(1.0)


def test_score_rejects_bad_values_naming_them():
    with pytest.raises(ArgumentError, match=r"Score.value=nan: must be finite"):
        Score(math.nan)
    with pytest.raises(ArgumentError, match=r"Score.value='high'"):
        Score("high")  # type: ignore[arg-type]
    with pytest.raises(GradingError, match=r"Score.components\['a'\]"):
        Score(1.0, {"a": "bad"})  # type: ignore[dict-item]
    with pytest.raises(ArgumentError, match=r"Score.feedback=3"):
        Score(1.0, feedback=3)  # type: ignore[arg-type]


def test_from_info_default_and_errors():
    assert Score.from_info({}, default=Score(0.5)) == Score(0.5)
    assert Score.from_info({}, default=None) is None
    with pytest.raises(GradingError, match=r"info has no 'score' entry"):
        Score.from_info({"x": 1})
    with pytest.raises(GradingError, match=r"not a score record"):
        Score.from_info({"score": {"value": "high"}})
    with pytest.raises(GradingError, match=r"info\['score'\]: expected a score record"):
        Score.from_info({"score": 3})
    stored = Score(0.1)
    assert Score.from_info({"score": stored}) is stored


# --- Criterion and Rubric ---------------------------------------------------------------------

RUBRIC = Rubric(
    criteria=(
        Criterion(id="correctness", description="The answer is correct.", weight=1.0),
        Criterion(id="format", description="The requested format is followed.", weight=0.2),
    ),
    instructions="Grade only the submitted answer.",
)


def test_rubric_validation_names_fields():
    with pytest.raises(ArgumentError, match=r"Criterion.weight=-1"):
        Criterion(id="a", weight=-1)
    with pytest.raises(ArgumentError, match=r"Criterion.id=''"):
        Criterion(id="")
    with pytest.raises(ArgumentError, match=r"duplicate criterion id 'a'"):
        Rubric(criteria=(Criterion(id="a"), Criterion(id="a")))
    with pytest.raises(ArgumentError, match=r"Rubric.criteria"):
        Rubric(criteria=())
    assert RUBRIC.ids == ("correctness", "format")
    assert RUBRIC.criterion("format").weight == 0.2
    with pytest.raises(ArgumentError, match=r"criterion_id='nope'"):
        RUBRIC.criterion("nope")
    assert Rubric.model_validate_json(RUBRIC.model_dump_json()) == RUBRIC


# --- Aggregations ----------------------------------------------------------------------------

TWO = Rubric(criteria=(Criterion(id="a"), Criterion(id="b")))
HALF = {"a": Score(1.0), "b": Score(0.0)}


def test_aggregations():
    assert weighted_mean(HALF, TWO) == 0.5
    assert weighted_sum(HALF, TWO) == 1.0
    assert all_pass(HALF, TWO) == 0.0
    assert all_pass({"a": Score(1.0), "b": Score(1.0)}, TWO) == 1.0
    assert functools.partial(all_pass, threshold=0.0)(HALF, TWO) == 1.0
    # Failures weigh more: one pass and one fail gives 1/3 rather than 1/2.
    assert asymmetric_mean(HALF, TWO) == pytest.approx(1 / 3)
    assert asymmetric_mean(HALF, TWO, failure_weight=1.0) == pytest.approx(0.5)
    assert asymmetric_mean({"a": Score(1.0), "b": Score(1.0)}, TWO) == 1.0
    weighted = Rubric(criteria=(Criterion(id="a", weight=3.0), Criterion(id="b", weight=1.0)))
    assert weighted_mean(HALF, weighted) == 0.75
    zero = Rubric(criteria=(Criterion(id="a", weight=0.0),))
    with pytest.raises(GradingError, match=r"all criterion weights are 0"):
        weighted_mean({"a": Score(1.0)}, zero)


# --- CompositeGrader -------------------------------------------------------------------------


def exact_answer_grader(context: dict[str, str], criterion: Criterion) -> Score:
    correct = context["answer"] == context["expected"]
    return Score(float(correct), feedback="exact match" if correct else "mismatch")


def format_grader(context: dict[str, str], criterion: Criterion) -> float:
    return 1.0 if context["answer"].endswith(".") else 0.0


def test_composite_grader_default_overrides_and_weighted_mean():
    grader = CompositeGrader(format_grader, overrides={"correctness": exact_answer_grader})
    context = {"answer": "42", "expected": "42"}
    score = grader.score(context, RUBRIC)
    assert score.value == pytest.approx((1.0 * 1.0 + 0.2 * 0.0) / 1.2)
    assert list(score.components) == ["correctness", "format"]
    assert score.components["correctness"].feedback == "exact match"
    assert score.components["format"] == Score(0.0)


def test_composite_grader_custom_aggregation_and_errors():
    def minimum(scores, rubric):
        return Score(min(s.value for s in scores.values()), feedback="min")

    grader = CompositeGrader(lambda x, c: 0.25 if c.id == "a" else 0.75, aggregate=minimum)
    score = grader.score(None, TWO)
    assert score.value == 0.25 and score.feedback == "min"
    assert set(score.components) == {"a", "b"}

    with pytest.raises(GradingError, match=r"no grader for criterion 'b'"):
        CompositeGrader(overrides={"a": lambda x, c: 1.0}).score(None, TWO)
    with pytest.raises(GradingError, match=r"grader for criterion 'a' returned 'yes'"):
        CompositeGrader(lambda x, c: "yes").score(None, TWO)  # pyright: ignore[reportArgumentType]
    with pytest.raises(GradingError, match=r"overrides name criteria \['zzz'\]"):
        CompositeGrader(lambda x, c: 1.0, overrides={"zzz": lambda x, c: 1.0}).score(None, TWO)
    with pytest.raises(ArgumentError, match=r"rubric="):
        CompositeGrader(lambda x, c: 1.0).score(None, "not a rubric")  # type: ignore[arg-type]

    def boom(x, c):
        raise RuntimeError("model down")

    with pytest.raises(RuntimeError, match=r"model down") as caught:
        CompositeGrader(boom).score(None, TWO)
    assert "while grading criterion 'a'" in caught.value.__notes__


def _barrier_graders() -> tuple[Any, Any, list[str]]:
    """Two async graders that can only finish if they run at the same time."""
    events: list[str] = []
    started: dict[str, asyncio.Event] = {}

    def make(name: str, other: str):
        async def grade(context: Any, criterion: Criterion) -> float:
            started.setdefault(name, asyncio.Event()).set()
            events.append(f"start {name}")
            other_started = started.setdefault(other, asyncio.Event())
            await asyncio.wait_for(other_started.wait(), timeout=2)
            await asyncio.sleep(0.1)  # the "100 ms" model call
            events.append(f"end {name}")
            return 1.0

        return grade

    return make("a", "b"), make("b", "a"), events


def test_async_criteria_are_graded_concurrently():
    grade_a, grade_b, events = _barrier_graders()
    grader = CompositeGrader(overrides={"a": grade_a, "b": grade_b})

    score = asyncio.run(grader.ascore(None, TWO))
    assert score.value == 1.0
    # Each grader waits until the other has started, so sequential grading would time out;
    # both starting before either ends shows the two 100 ms calls overlapped (~100 ms total).
    # Which of the two equal sleeps ends first is up to the event loop.
    assert events[:2] == ["start a", "start b"]
    assert sorted(events[2:]) == ["end a", "end b"]


def test_sync_score_also_runs_async_criteria_concurrently():
    grade_a, grade_b, events = _barrier_graders()
    score = CompositeGrader(overrides={"a": grade_a, "b": grade_b}).score(None, TWO)
    assert score.value == 1.0 and events[:2] == ["start a", "start b"]


def test_sync_score_with_async_graders_from_inside_a_loop_thread():
    grade_a, grade_b, _ = _barrier_graders()
    grader = CompositeGrader(overrides={"a": grade_a, "b": grade_b})

    async def main():
        return await asyncio.to_thread(grader.score, None, TWO)

    assert asyncio.run(main()).value == 1.0


# --- LLMGrader -------------------------------------------------------------------------------


def test_llm_grader_with_sync_sample_and_custom_render_parse():
    prompts: list[str] = []

    def sample(prompt: str) -> str:
        prompts.append(prompt)
        return "GOOD" if "42" in prompt else "BAD"

    grader = LLMGrader(
        sample=sample,
        render=lambda context, criterion: f"{criterion.description} | {context}",
        parse=lambda completion: Score(1.0 if completion == "GOOD" else 0.0, feedback=completion),
    )
    score = CompositeGrader(grader).score("42", RUBRIC)
    assert score.value == 1.0
    # The criteria are graded concurrently (sync samplers in threads): any order.
    assert sorted(prompts) == [
        "The answer is correct. | 42",
        "The requested format is followed. | 42",
    ]
    assert score.components["format"].feedback == "GOOD"


def test_llm_grader_with_async_sample_runs_concurrently():
    in_flight = 0
    peak = 0

    async def sample(prompt: str) -> str:
        nonlocal in_flight, peak
        in_flight += 1
        peak = max(peak, in_flight)
        await asyncio.sleep(0.02)
        in_flight -= 1
        return "Reasoning...\nSCORE: 0.5"

    grader = LLMGrader(sample=sample)
    assert asyncio.run(grader.ascore("answer", TWO)).value == 0.5
    assert peak == 2
    assert grader.score("answer", TWO).value == 0.5  # sync path runs the async sampler too
    assert grader("x", Criterion(id="c")).value == 0.5


def test_llm_grader_sync_sample_in_async_path_uses_threads():
    barrier = threading.Barrier(2, timeout=2)

    def sample(prompt: str) -> str:
        barrier.wait()  # both criteria must be in flight at once
        return "yes"

    assert asyncio.run(LLMGrader(sample=sample).ascore("x", TWO)).value == 1.0


def test_default_parse_score():
    assert parse_score("fine\nSCORE: 0.8").value == 0.8
    assert parse_score("score = 1").value == 1.0
    assert parse_score("Verdict: PASS").value == 1.0
    assert parse_score("no").value == 0.0
    with pytest.raises(GradingError, match=r"outside"):
        parse_score("SCORE: 7")
    with pytest.raises(GradingError, match=r"no `SCORE: x` line"):
        parse_score("I cannot decide")
    with pytest.raises(ArgumentError, match=r"sample=None"):
        LLMGrader(sample=None)  # type: ignore[arg-type]
