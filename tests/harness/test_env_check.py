"""`rollout env check` reports each contract problem by name, with the task's own traceback."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from rollout.contracts import Message
from rollout.harness import End, Environment, Observation, RunContext, Task
from rollout.harness.check import check_environment
from rollout.harness.errors import EnvironmentLoadError
from rollout.harness.loading import load_environment
from rollout.inference.direct import DirectModel
from rollout.inference.factory import load_model


@pytest.fixture(scope="module")
def scripted() -> DirectModel:
    renderer, backend = load_model("scripted")
    return DirectModel(renderer, backend)


async def check(spec: str, model: DirectModel) -> list[str]:
    report = await check_environment(load_environment(spec), model.complete)
    return report.all_problems()


async def test_arithmetic_passes(scripted: DirectModel) -> None:
    report = await check_environment(
        load_environment("arithmetic.environment:environment"), scripted.complete
    )
    assert report.ok, report.all_problems()
    assert report.seats[0].result is not None
    assert report.seats[0].result.reward == 1.0  # the scripted model does arithmetic
    assert report.seats[0].result.turns == 1


@pytest.mark.parametrize(
    ("name", "expected"),
    [
        ("no_start", "NoStart does not define start()"),
        ("start_returns_text", "StartReturnsText.start must return an Observation or End, got str"),
        ("respond_raises", "RespondRaises.respond raised ValueError: cannot grade"),
        ("not_finite", "reward is nan, not finite"),
        ("sync_start", "SyncStart.start must be `async def`"),
        ("parameters_fail", "drawing parameters raised KeyError"),
        (
            "parameters_not_a_mapping",
            "drawing parameters: Environment 'parameters-not-a-mapping': parameters(rng) must be "
            "a mapping of parameters, got 1",
        ),
        ("reward_in_start", "RewardInStart.start returned an Observation with reward=1.0"),
        (
            "turn_reward_not_finite",
            "TurnRewardNotFinite.respond returned an Observation with reward=inf: reward is not "
            "finite",
        ),
    ],
)
async def test_broken_environments_are_reported_by_name(
    name: str, expected: str, scripted: DirectModel
) -> None:
    problems = await check(f"tests.harness.broken_envs:{name}", scripted)
    assert len(problems) == 1, problems
    assert expected in problems[0]


async def test_exception_report_carries_the_tasks_traceback(scripted: DirectModel) -> None:
    report = await check_environment(
        load_environment("tests.harness.broken_envs:respond_raises"), scripted.complete
    )
    (seat,) = report.seats
    assert seat.traceback is not None
    assert "broken_envs.py" in seat.traceback
    assert 'raise ValueError(f"cannot grade {reply.text!r}")' in seat.traceback


async def test_episode_that_never_ends_is_truncated(scripted: DirectModel) -> None:
    report = await check_environment(
        load_environment("tests.harness.broken_envs:never_ends"), scripted.complete
    )
    assert report.ok
    result = report.seats[0].result
    assert result is not None and result.truncated and result.turns == 3 and result.reward == 0.0


@pytest.mark.parametrize(
    ("spec", "expected"),
    [
        ("no-colon", "must look like MODULE:ATTR"),
        ("no_such_module_xyz:env", "cannot import module 'no_such_module_xyz'"),
        ("tests.harness.broken_envs:missing", "has no attribute 'missing'"),
        ("tests.harness.broken_envs:not_an_environment", "is int, not a rollout Environment"),
    ],
)
def test_load_errors_name_the_problem(spec: str, expected: str) -> None:
    with pytest.raises(EnvironmentLoadError, match=expected):
        load_environment(spec)


class Steps(Task):
    """Three replies: rewards 0.5 on the first, none on the second, 0.25 on the third (the
    End's), and an End that adds 1."""

    def __init__(self, parameters: dict[str, object]) -> None:
        super().__init__(parameters)
        self.replies = 0

    async def start(self, run: RunContext) -> Observation:
        return Observation("What is 1 + 1?")

    async def respond(self, run: RunContext, reply: Message) -> Observation:
        self.replies += 1
        if self.replies == 1:
            return Observation("Again?", reward=0.5)
        if self.replies == 2:
            return Observation("Once more?")
        return End(reward=1.0)


async def test_observation_rewards_are_kept_by_turn(scripted: DirectModel) -> None:
    report = await check_environment(Environment(name="steps", task=Steps), scripted.complete)
    assert report.ok, report.all_problems()
    result = report.seats[0].result
    assert result is not None and result.turns == 3
    assert result.turn_rewards == {0: 0.5}
    assert result.rewards_by_turn() == [0.5, None, 1.0]
    assert result.reward == 1.5  # the seat's reward: its turns' and its End's


def test_a_module_at_the_project_root_is_found_from_any_folder_of_the_project(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    project = tmp_path / "my-project"
    (project / ".rollout").mkdir(parents=True)  # the project's state folder marks its root
    (project / "docs").mkdir()
    (project / "rootlevel_env_mod.py").write_text("from parity.environment import environment\n")
    monkeypatch.setattr(sys, "path", list(sys.path))
    monkeypatch.chdir(project / "docs")
    monkeypatch.delenv("ROLLOUT_STATE_DIR", raising=False)
    assert load_environment("rootlevel_env_mod:environment").name == "parity"

    monkeypatch.chdir(tmp_path)  # outside the project: not found; the error says where it looked
    with pytest.raises(EnvironmentLoadError, match=r"looked in .* run from the folder that holds"):
        load_environment("elsewhere_env_mod:environment")
