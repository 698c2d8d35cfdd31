"""Evaluation, run_benchmark, GSM8K / AIME answer extraction and dataset loading."""

from __future__ import annotations

import asyncio
import json
import sys
from decimal import Decimal
from pathlib import Path
from typing import Any

import pytest
from rolloutlib import ArgumentError, AsyncEnv, GradingError, MissingDependencyError, Score
from rolloutlib.evals import Benchmark, Evaluation, arun_benchmark, run_benchmark
from rolloutlib.evals.benchmarks import (
    AIMEEnv,
    GSM8KEnv,
    aime,
    extract_answer,
    extract_boxed,
    gsm8k,
    load_aime,
    load_gsm8k,
)
from rolloutlib.spaces.text import text


@pytest.fixture
def offline_hub(monkeypatch: pytest.MonkeyPatch) -> None:
    """Forbid Hugging Face Hub access for one test (the loaders must read local files only)."""
    import datasets.config
    import huggingface_hub.constants

    monkeypatch.setattr(huggingface_hub.constants, "HF_HUB_OFFLINE", True)
    monkeypatch.setattr(datasets.config, "HF_HUB_OFFLINE", True)
    monkeypatch.setattr(datasets.config, "HF_DATASETS_OFFLINE", True)


@pytest.mark.parametrize(
    ("response", "expected"),
    [
        ("#### 42", "42"),
        ("Reasoning <<6*7=42>>42\n#### 42", "42"),
        ("so #### 1,000", "1000"),
        ("The total is $1,000.", "1000"),
        ("I have 1,000,000 apples", "1000000"),
        (r"first \boxed{3} but finally \boxed{5}", "5"),
        (r"\boxed{\frac{1}{2}} no, \boxed{1{,}234}", "1234"),
        (r"answer: \boxed{\$18}", "18"),
        ("The answer is 17.", "17"),
        ("The answer is: -3", "-3"),
        ("The final answer is $-12.5$", "-12.5"),
        ("the answer is \u22124", "-4"),
        ("Answer: 007", "7"),
        ("it costs 3.50 dollars", "3.5"),
        ("she has 5 apples and then 8.", "8"),
        ("from 3-5 we get 2", "2"),
        ("about 50% of them", "50"),
        ("no numbers here", None),
        ("value .5", "0.5"),
    ],
)
def test_extract_answer(response: str, expected: str | None):
    result = extract_answer(response)
    assert result == (None if expected is None else Decimal(expected))


def test_extract_answer_never_reads_thousands_as_zeros():
    for reply in ["1,000", "$1,000", "#### 1,000", r"\boxed{1,000}", "The answer is 1,000."]:
        assert extract_answer(reply) == 1000, reply


def test_extract_boxed_balances_braces():
    assert extract_boxed(r"\boxed{\frac{a}{b}} and \boxed{x^{2}}") == "x^{2}"
    assert extract_boxed(r"\boxed{unclosed") is None
    assert extract_boxed("none") is None


def test_gsm8k_env_scores_with_feedback():
    env = GSM8KEnv({"question": "What is 6 times 7?", "answer": "6*7=42\n#### 42"})
    assert env.reset() == ("What is 6 times 7?", {})
    _, reward, terminated, truncated, info = env.step("6 times 7 is 42.0, so the answer is 42.")
    assert (reward, terminated, truncated) == (1.0, True, False)
    score = Score.from_info(info)
    assert score.metadata == {"expected": "42", "predicted": "42"}
    env.reset()
    _, reward, *_, info = env.step("#### 41")
    assert reward == 0.0 and Score.from_info(info).feedback == "incorrect: expected 42, got 41"
    env.reset()
    assert Score.from_info(env.step("no idea")[4]).feedback == "no answer found; expected 42"


def test_gsm8k_decimals_and_numeric_gold():
    env = GSM8KEnv({"question": "q", "answer": 2.5})
    env.reset()
    assert env.step("#### 2.50")[1] == 1.0
    with pytest.raises(ArgumentError, match=r"has no answer field"):
        GSM8KEnv({"question": "q"})
    with pytest.raises(ArgumentError, match=r"item.answer='none'"):
        GSM8KEnv({"question": "q", "answer": "none"})


@pytest.mark.parametrize(
    ("answer", "response", "reward"),
    [
        ("004", r"\boxed{4}", 1.0),
        (4, r"\boxed{004}", 1.0),
        ("033", "The answer is 33", 1.0),
        ("999", r"\boxed{999}", 1.0),
        ("0", r"\boxed{0}", 1.0),
        ("500", r"\boxed{1000}", 0.0),  # out of range is never correct
        ("5", r"\boxed{5.5}", 0.0),
        ("5", r"\boxed{5.0}", 1.0),
    ],
)
def test_aime_answers(answer: Any, response: str, reward: float):
    env = AIMEEnv({"problem": "p", "answer": answer})
    env.reset()
    assert env.step(response)[1] == reward


def test_aime_accepts_capitalized_fields_and_rejects_bad_gold():
    env = AIMEEnv({"ID": "2024-I-1", "Problem": "Find x.", "Answer": 204})
    assert env.reset()[0] == "Find x."
    with pytest.raises(ArgumentError, match=r"AIME answers are integers in 0..999"):
        AIMEEnv({"problem": "p", "answer": "1234"})


def sample_answer(observation: str) -> str:
    """A stand-in model: it knows a few facts."""
    return {"What is 6 times 7?": "6*7 = 42. #### 42", "What is 2+2?": "I think 5."}.get(
        observation, "?"
    )


def test_run_benchmark_aggregates_environment_scores():
    benchmark = gsm8k(
        [
            {"question": "What is 6 times 7?", "answer": "#### 42"},
            {"question": "What is 2+2?", "answer": "#### 4"},
        ]
    )
    made: list[Any] = []

    def evaluate(environment):
        made.append(environment)
        observation, _ = environment.reset()
        response = sample_answer(observation)
        _, reward, _, truncated, info = environment.step(response)
        return Evaluation(score=Score.from_info(info, default=Score(reward)), truncated=truncated)

    result = run_benchmark(benchmark, evaluate)
    assert result.name == "gsm8k"
    assert result.score.value == 0.5 and result.value == 0.5
    assert result.scores == [1.0, 0.0]
    assert [r.item_id for r in result.items] == ["0", "1"]
    assert result.num_items == 2 and result.num_truncated == 0 and result.num_errors == 0
    assert result.score.metadata["num_items"] == 2
    assert made[0] is not made[1]  # a fresh environment per item
    assert result.items[1].score.metadata == {"expected": "4", "predicted": "5"}


def test_run_benchmark_options_and_errors():
    benchmark = gsm8k([{"id": f"q{i}", "question": "q", "answer": "#### 1"} for i in range(3)])

    def flaky(environment):
        environment.reset()
        if environment.item["id"] == "q1":
            raise TimeoutError("model timed out")
        return Evaluation(Score(1.0), truncated=True)

    result = run_benchmark(benchmark, flaky, on_error="record")
    assert result.scores == [1.0, 0.0, 1.0] and result.num_errors == 1
    assert result.items[1].error == "TimeoutError: model timed out"
    assert result.num_truncated == 2 and [r.item_id for r in result.items] == ["q0", "q1", "q2"]
    with pytest.raises(TimeoutError) as caught:
        run_benchmark(benchmark, flaky)
    assert "while evaluating item 'q1' of gsm8k" in caught.value.__notes__
    assert run_benchmark(benchmark, lambda env: 0.25, limit=2).scores == [0.25, 0.25]
    with pytest.raises(GradingError, match=r"evaluate returned 'ok'"):
        run_benchmark(benchmark, lambda env: "ok")  # pyright: ignore[reportArgumentType]
    with pytest.raises(ArgumentError, match=r"benchmark=.*has no items"):
        run_benchmark(gsm8k([]), lambda env: 1.0)
    with pytest.raises(ArgumentError, match=r"Evaluation.truncated='no'"):
        Evaluation(Score(1.0), truncated="no")  # type: ignore[arg-type]


def test_run_benchmark_closes_envs_and_adapts_async_envs():
    closed: list[int] = []

    class Quiz(AsyncEnv[str, str]):
        observation_space = text()
        action_space = text()

        def __init__(self, item: int) -> None:
            self.item = item

        async def reset(self, *, seed=None, options=None):
            return str(self.item), {}

        async def step(self, action):
            return "", float(action == str(self.item)), True, False, {}

        async def close(self):
            closed.append(self.item)

    benchmark = Benchmark("quiz", [1, 2, 3], Quiz)

    def evaluate(env):
        obs, _ = env.reset()
        return env.step(obs)[1]

    assert run_benchmark(benchmark, evaluate).value == 1.0
    assert closed == [1, 2, 3]

    async def aevaluate(env):
        await env.reset()
        return (await env.step("1"))[1]

    closed.clear()
    result = asyncio.run(arun_benchmark(benchmark, aevaluate, max_concurrency=2))
    assert result.scores == [1.0, 0.0, 0.0] and sorted(closed) == [1, 2, 3]


# --- loading -------------------------------------------------------------------------------


GSM8K_ROWS = [
    {"question": "Natalia sold 48 clips ... How many?", "answer": "48/2 = 24\n48+24 = 72\n#### 72"},
    {"question": "Weng earns $12 an hour ...", "answer": "12/60 = 0.2\n0.2*50 = 10\n#### 10"},
    {"question": "Big number?", "answer": "#### 1,200"},
]


def _write_jsonl(path: Path, rows: list[dict[str, Any]]) -> Path:
    path.write_text("".join(json.dumps(row) + "\n" for row in rows))
    return path


def test_load_gsm8k_from_local_jsonl(tmp_path: Path, offline_hub: None):
    path = _write_jsonl(tmp_path / "test.jsonl", GSM8K_ROWS)
    benchmark = load_gsm8k("test", data_files=str(path), cache_dir=str(tmp_path / "cache"))
    assert len(benchmark) == 3 and benchmark.name == "gsm8k/test"
    answers = {"Natalia": "#### 72", "Weng": "The answer is $10.", "Big": r"\boxed{1,200}"}

    def evaluate(env):
        obs, _ = env.reset()
        reply = next(v for k, v in answers.items() if obs.startswith(k))
        return env.step(reply)[1]

    assert run_benchmark(benchmark, evaluate).scores == [1.0, 1.0, 1.0]
    limited = load_gsm8k("test", data_files=str(path), limit=1, cache_dir=str(tmp_path / "cache"))
    assert len(limited) == 1


def test_load_aime_from_local_parquet_with_split_mapping(tmp_path: Path, offline_hub: None):
    import pyarrow as pa
    import pyarrow.parquet as pq

    table = pa.table(
        {
            "ID": ["2024-I-1", "2024-I-2"],
            "Problem": ["Find the remainder.", "Find n."],
            "Solution": ["...", "..."],
            "Answer": [4, 25],
        }
    )
    pq.write_table(table, tmp_path / "aime.parquet")
    benchmark = load_aime(
        name="Maxwell-Jia/AIME_2024",
        data_files={"train": str(tmp_path / "aime.parquet")},
        cache_dir=str(tmp_path / "cache"),
    )
    assert [benchmark.item_id(i) for i in range(2)] == ["2024-I-1", "2024-I-2"]

    def evaluate(env):
        env.reset()
        return env.step(r"so \boxed{004}")[1]

    assert run_benchmark(benchmark, evaluate).scores == [1.0, 0.0]


def test_load_errors(tmp_path: Path, monkeypatch: pytest.MonkeyPatch):
    with pytest.raises(ArgumentError, match=r"unknown file type"):
        load_gsm8k(data_files=str(tmp_path / "x.txt"))
    with pytest.raises(ArgumentError, match=r"split='test': not among the data_files splits"):
        load_gsm8k("test", data_files={"train": str(tmp_path / "a.jsonl")})
    monkeypatch.setitem(sys.modules, "datasets", None)
    with pytest.raises(MissingDependencyError, match=r"rolloutlib\[benchmarks\]"):
        load_gsm8k(data_files=str(tmp_path / "a.jsonl"))


def test_aime_benchmark_names_items_by_id():
    benchmark = aime([{"id": 60, "problem": "p", "answer": "7"}], name="aime-2024")
    assert benchmark.name == "aime-2024" and benchmark.item_id(0) == "60"
