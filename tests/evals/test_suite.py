"""Suites: parsing with errors that name the field, resolution, content hashes, statistics."""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest

from rollout.errors import RolloutError
from rollout.evals.errors import SuiteError
from rollout.evals.stats import estimate, t95, wilson
from rollout.evals.suite import ResolvedSuite, Suite, load_suite, parse_suite, resolve

HERE = Path(__file__).parent


def _suite(**changes: object) -> dict[str, object]:
    data: dict[str, object] = {
        "name": "s",
        "version": 1,
        "environments": [{"environment": "arithmetic.environment:environment", "episodes": 4}],
    }
    data.update(changes)
    return data


def test_a_suite_resolves_every_episode_and_round_trips_through_its_definition() -> None:
    suite = resolve(parse_suite(_suite(), source="test"))
    assert suite.version == "1"  # YAML integers are versions too
    assert suite.episodes == 4
    (member,) = suite.members
    assert member.name == "arithmetic" and member.agents == 1 and member.kind == "environment"
    assert all("question" in p for p in member.parameters)
    again = ResolvedSuite.from_definition(json.loads(json.dumps(suite.definition())))
    assert again == suite and again.content_hash == suite.content_hash


def test_content_hash_changes_with_any_episode_but_not_with_the_version() -> None:
    base = resolve(parse_suite(_suite(), source="t"))
    bumped = resolve(parse_suite(_suite(version=2), source="t"))
    assert bumped.content_hash == base.content_hash
    more = resolve(
        parse_suite(
            _suite(
                environments=[{"environment": "arithmetic.environment:environment", "episodes": 5}]
            ),
            source="t",
        )
    )
    other_seed = resolve(
        parse_suite(
            _suite(
                environments=[
                    {"environment": "arithmetic.environment:environment", "episodes": 4, "seed": 1}
                ]
            ),
            source="t",
        )
    )
    greedy_cap = resolve(parse_suite(_suite(sampling={"max_tokens": 8}), source="t"))
    hashes = {
        base.content_hash,
        more.content_hash,
        other_seed.content_hash,
        greedy_cap.content_hash,
    }
    assert len(hashes) == 4


@pytest.mark.parametrize(
    ("changes", "named"),
    [
        ({"name": "no spaces allowed"}, "name"),
        ({"environments": []}, "environments"),
        ({"sampling": {"temperature": 0.7}}, "needs a fixed seed"),
        ({"environments": [{"episodes": 3}]}, "exactly one of `environment`"),
        ({"environments": [{"benchmark": "gsm8k"}]}, "needs `items`"),
        ({"environments": [{"benchmark": "mmlu", "items": []}]}, "environments.0.benchmark"),
        ({"surprise": 1}, "surprise"),
    ],
)
def test_a_bad_suite_is_one_error_naming_the_field(changes: dict[str, object], named: str) -> None:
    with pytest.raises(SuiteError, match="invalid suite") as caught:
        parse_suite(_suite(**changes), source="here.yaml")
    assert named in str(caught.value) and "here.yaml" in str(caught.value)


def test_resolution_errors_name_the_environment() -> None:
    with pytest.raises(SuiteError, match=r"environments\[0\].*no_such_module"):
        resolve(
            parse_suite(_suite(environments=[{"environment": "no_such_module:env"}]), source="t")
        )
    twice = [{"environment": "arithmetic.environment:environment", "episodes": 1}] * 2
    with pytest.raises(SuiteError, match="more than once"):
        resolve(parse_suite(_suite(environments=twice), source="t"))
    bad_item = [{"benchmark": "aime", "items": [{"problem": "p", "answer": "1000"}]}]
    with pytest.raises(SuiteError, match=r"items\[0\].*0..999"):
        resolve(parse_suite(_suite(environments=bad_item), source="t"))


def test_suites_load_from_files_names_and_python_objects(tmp_path: Path) -> None:
    builtin = resolve("math-sample")  # evals/math-sample.yaml, items from evals/data/
    assert [m.name for m in builtin.members] == ["arithmetic", "gsm8k-sample", "aime-sample"]
    assert [m.kind for m in builtin.members] == ["environment", "benchmark", "benchmark"]
    assert len(builtin.members[1].parameters) == 8
    by_path = resolve(str(HERE / "slow.yaml"))
    assert by_path.name == "slow" and by_path.members[0].source == "tests.evals.envs:slow"
    assert load_suite("tests.evals.test_suite:PYTHON_SUITE")[0] is PYTHON_SUITE
    assert resolve("tests.evals.test_suite:PYTHON_SUITE").members[0].agents == 2
    with pytest.raises(SuiteError, match=r"not found.*parity"):
        load_suite("no-such-suite")
    (tmp_path / "broken.yaml").write_text("name: [unclosed")
    with pytest.raises(SuiteError, match="not valid YAML"):
        load_suite(str(tmp_path / "broken.yaml"))


PYTHON_SUITE = Suite.model_validate(
    {
        "name": "pairs",
        "version": "a",
        "environments": [{"environment": "tests.evals.envs:pair", "episodes": 2}],
    }
)


def test_member_of_maps_an_episode_to_its_environment() -> None:
    suite = resolve("math-sample")
    assert suite.member_of(0)[0] == 0 and suite.member_of(15)[0] == 0
    assert suite.member_of(16) == (1, suite.members[1])
    assert suite.member_of(25)[0] == 2
    with pytest.raises(SuiteError, match="26 episodes"):
        suite.member_of(26)


def test_wilson_for_pass_fail_and_t_for_anything_else() -> None:
    all_right = estimate([1.0] * 20)
    assert all_right.method == "wilson" and all_right.high == 1.0 and 0.8 < all_right.low < 0.85
    assert wilson(0, 1)[0] == 0.0 and wilson(1, 1)[1] == 1.0
    spread = estimate([0.2, 0.4, 0.6, 0.8])
    half = t95(3) * math.sqrt(((0.3**2 + 0.1**2) * 2 / 3) / 4)
    assert spread.method == "t" and spread.low == pytest.approx(0.5 - half)
    assert estimate([0.3]).method == "single"
    # More episodes, narrower intervals.
    assert (estimate([1, 0] * 50).high - estimate([1, 0] * 50).low) < (
        estimate([1, 0] * 5).high - estimate([1, 0] * 5).low
    )
    with pytest.raises(RolloutError, match="zero episodes"):
        estimate([])
    with pytest.raises(RolloutError, match=r"values\[1\]"):
        estimate([1.0, float("nan")])
