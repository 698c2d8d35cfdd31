"""rolloutlib environments with text or chat actions are played by the platform unchanged."""

from __future__ import annotations

from typing import Any

import gymnasium as gym
import pytest
from rolloutlib import AsyncEnv, Env, spaces
from rolloutlib.graders import Score

from rollout.contracts import Message
from rollout.harness.adapter import rolloutlib_environment
from rollout.harness.check import check_environment
from rollout.harness.errors import TaskError
from rollout.harness.loading import as_environment


class GuessWord(Env):
    """Text actions; three tries to say the word; reward is a Score in info on the last step."""

    action_space = spaces.text.text(max_length=200)
    observation_space = spaces.text.text(max_length=200)

    def __init__(self, word: str = "seven") -> None:
        self.word = word
        self.tries = 0

    def reset(self, *, seed: int | None = None, options: dict[str, Any] | None = None):
        super().reset(seed=seed)
        self.tries = 0
        return f"Say the word {self.word!r}.", {}

    def step(self, action: str):
        self.tries += 1
        right = action.strip() == self.word
        done = right or self.tries >= 3
        info: dict[str, Any] = {}
        if done:
            info.update(Score(1.0 if right else 0.0, feedback=f"after {self.tries}").as_info())
        return "Try again.", 0.0, right, not right and self.tries >= 3, info


class ChatEcho(AsyncEnv):
    """Chat actions; returns the whole conversation; ends after two replies with reward 0.5."""

    action_space = spaces.messages.chat(min_length=1)
    observation_space = spaces.messages.chat(min_length=1)

    async def reset(self, *, seed: int | None = None, options: dict[str, Any] | None = None):
        await super().reset(seed=seed, options=options)
        self.history: list[dict[str, Any]] = [{"role": "user", "content": "Say hi."}]
        return list(self.history), {}

    async def step(self, action: list[dict[str, Any]]):
        self.history.extend(action)
        done = sum(1 for m in self.history if m["role"] == "assistant") >= 2
        self.history.append({"role": "user", "content": "Once more."})
        return list(self.history), 0.25, done, False, {}


class Replies:
    """A model that answers from a list and remembers what it was shown."""

    def __init__(self, *replies: str) -> None:
        self.replies = list(replies)
        self.seen: list[list[Message]] = []

    async def complete(self, messages: Any, tools: Any, sampling: Any) -> Message:
        self.seen.append(list(messages))
        return Message.assistant(self.replies.pop(0))


async def test_text_env_plays_to_its_score() -> None:
    environment = rolloutlib_environment(GuessWord, parameters=[{"word": "seven"}])
    model = Replies("six", "seven")
    report = await check_environment(environment, model.complete)
    assert report.ok, report.all_problems()
    result = report.seats[0].result
    assert result is not None and result.turns == 2 and result.reward == 1.0
    score = result.score_json()
    assert score is not None and score["value"] == 1.0 and score["feedback"] == "after 2"
    assert [m.text for m in model.seen[1]] == ["Say the word 'seven'.", "six", "Try again."]


async def test_truncated_text_env_scores_zero() -> None:
    environment = rolloutlib_environment(GuessWord)
    report = await check_environment(environment, Replies("a", "b", "c").complete)
    result = report.seats[0].result
    assert result is not None and result.reward == 0.0 and result.end.metrics["truncated"] == 1.0


async def test_chat_env_gets_assistant_messages_and_adds_only_new_ones() -> None:
    environment = as_environment(ChatEcho, "tests:ChatEcho")
    model = Replies("hi", "hi again")
    report = await check_environment(environment, model.complete)
    assert report.ok, report.all_problems()
    result = report.seats[0].result
    assert result is not None and result.reward == pytest.approx(0.5)
    assert [(m.role, m.text) for m in model.seen[1]] == [
        ("user", "Say hi."),
        ("assistant", "hi"),
        ("user", "Once more."),
    ]


def test_unsupported_action_space_is_named() -> None:
    class Discrete(Env):
        action_space = gym.spaces.Discrete(3)
        observation_space = gym.spaces.Discrete(3)

        def reset(self, *, seed=None, options=None):
            return 0, {}

        def step(self, action):
            return 0, 0.0, True, False, {}

    environment = rolloutlib_environment(Discrete)
    with pytest.raises(TaskError, match=r"Discrete.action_space is Discrete\(3\)"):
        environment.task({})
