"""Every code example of the rolloutlib 0.2.0 README (the spec), run as written.

Only the README's placeholders are filled in: `...` spaces, `execute_tool`, `model`,
`ExistingEnv`, `item`, `grader`, `make_env`, `problem_a/b`, `ProblemEnv`, `context`,
`exact_answer_grader`, `llm_criterion_grader` and `sample_answer`. Each test then checks that
the example does what the README's text says.
"""

from __future__ import annotations

import asyncio
import warnings
from dataclasses import dataclass
from typing import Any

import gymnasium as gym
import pytest
from gymnasium.utils.env_checker import check_env

# --- Environments -----------------------------------------------------------------------------


def test_sync_environment_example():
    import gymnasium as gym
    from rolloutlib import Env

    class EchoEnv(Env):
        action_space = gym.spaces.Discrete(10)
        observation_space = gym.spaces.Text(min_length=0, max_length=20)

        def reset(self, *, seed=None, options=None):
            super().reset(seed=seed)
            return "ready", {}

        def step(self, action):
            return str(action), float(action), True, False, {}

    env = EchoEnv()
    # "Synchronous environments are real gymnasium.Env instances"
    assert isinstance(env, gym.Env)
    assert env.reset(seed=0) == ("ready", {})
    assert env.step(7) == ("7", 7.0, True, False, {})
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        check_env(env, skip_render_check=True)
    assert [str(w.message) for w in caught] == []


async def execute_tool(action: dict[str, Any]) -> str:
    await asyncio.sleep(0)
    return f"results for {action['arguments']['query']}"


def test_async_environment_example():
    from rolloutlib import AsyncEnv, arollout, as_sync, spaces

    class ToolEnv(AsyncEnv):
        action_space = spaces.tools.call(
            {"search": gym.spaces.Dict({"query": spaces.text.text(min_length=1)})}
        )
        observation_space = spaces.messages.chat(min_length=1)

        async def reset(self, *, seed=None, options=None):
            await super().reset(seed=seed, options=options)
            observation = [{"role": "user", "content": "Find the weather."}]
            self.transcript = list(observation)
            return observation, {}

        async def step(self, action):
            result = await execute_tool(action)
            self.transcript.append({"role": "tool", "content": result})
            next_observation = list(self.transcript)
            reward, terminated, truncated = 1.0, True, False
            return next_observation, reward, terminated, truncated, {"result": result}

    async def main():
        env = ToolEnv()
        # "Async environments preserve the same value-level contract"
        observation, info = await env.reset(seed=1)
        assert observation in env.observation_space and info == {}
        action = {"name": "search", "arguments": {"query": "weather"}}
        assert action in env.action_space
        result = await env.step(action)
        assert len(result) == 5 and result[4] == {"result": "results for weather"}
        trajectory = await arollout(ToolEnv(), lambda obs: action, check_spaces=True)
        return trajectory

    trajectory = asyncio.run(main())
    assert trajectory.total_reward == 1.0
    assert trajectory.final_observation[-1] == {"role": "tool", "content": "results for weather"}
    # "Use as_async and as_sync when integrating ... the other calling convention"
    sync_env = as_sync(ToolEnv())
    assert isinstance(sync_env, gym.Env)
    assert sync_env.reset()[0][0]["role"] == "user"


# --- Grading wrapper ---------------------------------------------------------------------------


@dataclass
class Item:
    question: str
    answer: str
    rubric: Any


class ExistingEnv(gym.Env):
    """An environment written without grading: its reward is always 0."""

    observation_space = gym.spaces.Text(
        max_length=100, charset="abcdefghijklmnopqrstuvwxyz?+ 0123456789"
    )
    action_space = gym.spaces.Text(max_length=100)

    def __init__(self, item: Item) -> None:
        self.item = item

    def reset(self, *, seed=None, options=None):
        super().reset(seed=seed)
        self.state = {"turns": 0}
        return self.item.question, {}

    def step(self, action):
        self.state["turns"] += 1
        return "ok", 0.0, True, False, {"turns": self.state["turns"]}


def _grading_setup():
    from rolloutlib.graders import CompositeGrader, Criterion, Rubric, Score

    rubric = Rubric(criteria=(Criterion(id="correctness", description="Matches the answer."),))
    item = Item("what is 2+2?", "4", rubric)

    def check(context, criterion):
        item, state, action = context
        return Score(float(action.strip() == item.answer), feedback=f"turns={state['turns']}")

    grader = CompositeGrader(check)
    return item, grader


def test_grading_wrapper_example():
    from rolloutlib import GradingWrapper
    from rolloutlib.graders import Score

    item, grader = _grading_setup()

    environment = GradingWrapper(
        ExistingEnv(item),
        rubric=item.rubric,
        grader=grader,
        make_input=lambda env, action: (item, env.state, action),
    )

    environment.reset()
    _, reward, terminated, _, info = environment.step("4")
    # "replace the scalar reward with Score.value, and preserve the complete score"
    assert terminated and reward == 1.0
    score = Score.from_info(info)
    assert score.value == 1.0 and score.components["correctness"].feedback == "turns=1"
    assert info["turns"] == 1


def test_async_grading_wrapper_follows_the_same_contract():
    from rolloutlib import AsyncGradingWrapper, arollout
    from rolloutlib.graders import Score

    item, grader = _grading_setup()
    environment = AsyncGradingWrapper(
        ExistingEnv(item),
        rubric=item.rubric,
        grader=grader,
        make_input=lambda env, action: (item, env.state, action),
    )
    trajectory = asyncio.run(arollout(environment, lambda obs: "5"))
    assert trajectory.total_reward == 0.0
    assert Score.from_info(trajectory.steps[-1].info).components["correctness"].value == 0.0


# --- Spaces ------------------------------------------------------------------------------------


def test_spaces_example():
    import gymnasium as gym
    from rolloutlib import spaces

    token_sequence = spaces.tokens.sequence(vocab_size=128_000)
    chat = spaces.messages.chat(min_length=1)
    tool_call = spaces.tools.call(
        {"search": gym.spaces.Dict({"query": spaces.text.text(min_length=1, max_length=1_000)})}
    )
    tool_calls = spaces.tools.calls({"search": gym.spaces.Dict({"query": spaces.text.text()})})

    # "Structured values are ordinary dictionaries and lists."
    assert [1, 127_999] in token_sequence and [128_000] not in token_sequence
    assert [{"role": "user", "content": "Hello"}] in chat and [] not in chat
    call = {"name": "search", "arguments": {"query": "rolloutlib"}}
    assert call in tool_call and [call, call] in tool_calls
    # "TextSpace accepts all Unicode strings that satisfy its length constraints."
    assert {"name": "search", "arguments": {"query": "日本語 🚀"}} in tool_call
    # "Its sample_alphabet only controls random sampling."
    narrow = spaces.text.text(min_length=1, sample_alphabet="xy", seed=0)
    assert set(narrow.sample()) <= {"x", "y"} and "ü" in narrow
    # "Rolloutlib accepts every Gymnasium space"
    assert all(
        isinstance(s, gym.spaces.Space) for s in (token_sequence, chat, tool_call, tool_calls)
    )


# --- Rollouts ----------------------------------------------------------------------------------


class TinyModel:
    """Stands in for `model`: 'generates' the answer 4 with fixed tokens and logprobs."""

    def __init__(self) -> None:
        self.logprobs = [-0.25, -0.5]

    def generate(self, observation: str) -> tuple[list[int], str]:
        return [52, 13], "4"


model = TinyModel()


def test_rollout_example():
    from rolloutlib import GradingWrapper, PolicyOutput, rollout

    item, grader = _grading_setup()
    environment = GradingWrapper(
        ExistingEnv(item),
        rubric=item.rubric,
        grader=grader,
        make_input=lambda env, action: (item, env.state, action),
    )

    def policy(observation):
        tokens, text = model.generate(observation)
        return PolicyOutput(
            action=text,
            tokens=tokens,
            logprobs=model.logprobs,
        )

    trajectory = rollout(environment, policy)

    step = trajectory.steps[0]
    assert step.action == "4" and step.reward == 1.0
    assert step.policy_tokens == [52, 13] and step.policy_logprobs == [-0.25, -0.5]
    assert step.terminated and not step.truncated
    # "rollout does not close its environment": it can be reset and used again.
    assert environment.reset()[0] == item.question


def test_rollout_group_example():
    from rolloutlib import PolicyOutput
    from rolloutlib.rollouts import rollout_group

    item, grader = _grading_setup()
    closed: list[bool] = []

    class ClosingEnv(ExistingEnv):
        def close(self):
            closed.append(True)

    def make_env(item):
        return ClosingEnv(item)

    answers = iter(["4", "5", "4", "4", "3", "4", "4", "4"])

    def policy(observation):
        return PolicyOutput(action=next(answers), tokens=[1], logprobs=[0.0])

    from rolloutlib import GradingWrapper

    def make_graded_env(item):
        env = make_env(item)
        return GradingWrapper(
            env, rubric=item.rubric, grader=grader, make_input=lambda e, a: (item, e.state, a)
        )

    group = rollout_group(
        item,
        make_graded_env,
        policy,
        num_rollouts=8,
        item_id="problem-17",
    )

    assert len(group.trajectories) == 8  # independent episodes for one item
    assert group.rewards == [1.0, 0.0, 1.0, 1.0, 0.0, 1.0, 1.0, 1.0]  # scalar scores
    assert group.item_id == "problem-17"
    assert closed == [True] * 8  # "rollout_group owns and closes the fresh environments"


# --- Datasets ----------------------------------------------------------------------------------


@dataclass(frozen=True)
class Problem:
    id: str
    question: str
    answer: str


problem_a = Problem("a", "1+1?", "2")
problem_b = Problem("b", "2+3?", "5")


def test_datasets_example():
    from rolloutlib import SingleTurnEnv, spaces
    from rolloutlib.graders import Score

    class ProblemEnv(SingleTurnEnv):
        observation_space = spaces.text.text()
        action_space = spaces.text.text()

        def __init__(self, problem: Problem) -> None:
            self.problem = problem

        def observe(self):
            return self.problem.question

        def evaluate(self, action):
            return Score(float(action == self.problem.answer))

    from rolloutlib.datasets import Dataset, RLDataset

    items = Dataset([problem_a, problem_b], metadata={"split": "train"})
    rl_items = RLDataset(
        [problem_a, problem_b],
        make_env=lambda problem: ProblemEnv(problem),
        get_item_id=lambda problem: problem.id,
    )

    assert list(items) == [problem_a, problem_b] and items.metadata == {"split": "train"}
    assert [rl_items.item_id(i) for i in range(len(rl_items))] == ["a", "b"]
    env = rl_items.make_env(1)
    assert env.reset()[0] == "2+3?"
    assert env.step("5")[1] == 1.0


# --- Graders -----------------------------------------------------------------------------------


def exact_answer_grader(context, criterion):
    from rolloutlib.graders import Score

    return Score(float(context["answer"] == context["expected"]), feedback="exact match check")


def fake_llm(prompt: str) -> str:
    """Stands in for a model API: half credit on format, full credit on anything else."""
    if "The requested format is followed." in prompt:
        return "A heading is missing.\nSCORE: 0.5"
    return "SCORE: 1"


def test_graders_example():
    from rolloutlib.graders import CompositeGrader, Criterion, LLMGrader, Rubric, Score

    llm_criterion_grader = LLMGrader(sample=fake_llm)
    context = {"answer": "42", "expected": "42"}

    rubric = Rubric(
        criteria=(
            Criterion(
                id="correctness",
                description="The answer is correct.",
                weight=1.0,
            ),
            Criterion(
                id="format",
                description="The requested format is followed.",
                weight=0.2,
            ),
        ),
        instructions="Grade only the submitted answer.",
    )

    grader = CompositeGrader(
        llm_criterion_grader,
        overrides={"correctness": exact_answer_grader},
    )

    score = grader.score(context, rubric)

    async def main():
        return await grader.ascore(context, rubric)

    score = asyncio.run(main())
    reward = score.value

    # The LLM saw the format criterion; the override graded correctness exactly.
    assert score.components["correctness"] == Score(1.0, feedback="exact match check")
    assert score.components["format"].value == 0.5
    assert score.components["format"].feedback == "A heading is missing.\nSCORE: 0.5"
    # "combines them with a weighted mean by default"
    assert reward == pytest.approx((1.0 * 1.0 + 0.2 * 0.5) / 1.2)
    assert grader.score(context, rubric) == score


def test_score_example():
    from rolloutlib.graders import Score

    info: dict[str, Any] = {"turn": 3}

    score = Score(
        0.75,
        {
            "correctness": Score(1.0, feedback="Correct."),
            "format": Score(0.5, feedback="One required heading is missing."),
        },
    )
    info.update(score.as_info())
    assert Score.from_info(info) == score

    assert info["turn"] == 3
    assert Score.from_info(info).components["format"].feedback == (
        "One required heading is missing."
    )


def test_llm_grader_accepts_sync_or_async_sampling():
    from rolloutlib.graders import Criterion, LLMGrader

    async def async_sample(prompt: str) -> str:
        await asyncio.sleep(0)
        return "SCORE: 1"

    criterion = Criterion(id="c", description="anything")
    for sample in (lambda prompt: "SCORE: 1", async_sample):
        grader = LLMGrader(sample=sample)
        assert grader("x", criterion).value == 1.0
        assert asyncio.run(grader.agrade("x", criterion)).value == 1.0
    custom = LLMGrader(
        sample=lambda prompt: "0.25" if prompt == "anything: x" else "1",
        render=lambda x, c: f"{c.description}: {x}",
        parse=float,
    )
    assert custom("x", criterion).value == 0.25


# --- Evaluation --------------------------------------------------------------------------------


def sample_answer(observation: str) -> str:
    return "6 * 7 = 42, so the answer is 42." if "6 times 7" in observation else "I don't know."


def test_evaluation_example(capsys: pytest.CaptureFixture[str]):
    from rolloutlib.evals import Evaluation, run_benchmark
    from rolloutlib.evals.benchmarks import gsm8k
    from rolloutlib.graders import Score

    benchmark = gsm8k([{"question": "What is 6 times 7?", "answer": "#### 42"}])

    def evaluate(environment):
        observation, _ = environment.reset()
        response = sample_answer(observation)  # user-owned model code
        _, reward, _, truncated, info = environment.step(response)
        return Evaluation(
            score=Score.from_info(info, default=Score(reward)),
            truncated=truncated,
        )

    result = run_benchmark(benchmark, evaluate)
    print(result.score)

    assert result.score.value == 1.0
    assert capsys.readouterr().out.startswith("Score(1.0")
