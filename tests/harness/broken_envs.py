"""Environments that break the Task contract in one specific way each (for `env check` tests)."""

from __future__ import annotations

from typing import Any

from rollout.contracts import Message
from rollout.harness import End, Environment, Observation, RunContext, Task


class NoStart(Task):
    async def respond(self, run: RunContext, reply: Message) -> Observation:
        return End(reward=1.0)


class StartReturnsText(Task):
    async def start(self, run: RunContext) -> Observation:
        return "What is 1 + 1?"  # type: ignore[return-value]  # the mistake under test


class RespondRaises(Task):
    async def start(self, run: RunContext) -> Observation:
        return Observation("What is 1 + 1?")

    async def respond(self, run: RunContext, reply: Message) -> Observation:
        raise ValueError(f"cannot grade {reply.text!r}")


class NotFiniteReward(Task):
    async def start(self, run: RunContext) -> Observation:
        return Observation("What is 1 + 1?")

    async def respond(self, run: RunContext, reply: Message) -> Observation:
        return End(reward=float("nan"))


class SyncStart(Task):
    def start(self, run: RunContext) -> Observation:  # type: ignore[override]  # under test
        return Observation("What is 1 + 1?")


class NeverEnds(Task):
    async def start(self, run: RunContext) -> Observation:
        return Observation("Say anything.")

    async def respond(self, run: RunContext, reply: Message) -> Observation:
        return Observation("Again.")


def bad_parameters(rng: Any) -> dict[str, str]:
    raise KeyError("no such dataset split")


no_start = Environment(name="no-start", task=NoStart)
start_returns_text = Environment(name="start-returns-text", task=StartReturnsText)
respond_raises = Environment(name="respond-raises", task=RespondRaises)
not_finite = Environment(name="not-finite", task=NotFiniteReward)
sync_start = Environment(name="sync-start", task=SyncStart)
never_ends = Environment(name="never-ends", task=NeverEnds, max_turns=3)
parameters_fail = Environment(name="parameters-fail", task=RespondRaises, parameters=bad_parameters)
parameters_not_a_mapping = Environment(
    name="parameters-not-a-mapping",
    task=RespondRaises,
    parameters=lambda rng: rng.randint(1, 1),  # type: ignore[arg-type]  # the mistake under test
)
not_an_environment = 42


class RewardInStart(Task):
    async def start(self, run: RunContext) -> Observation:
        return Observation("What is 1 + 1?", reward=1.0)


class TurnRewardNotFinite(Task):
    async def start(self, run: RunContext) -> Observation:
        return Observation("What is 1 + 1?")

    async def respond(self, run: RunContext, reply: Message) -> Observation:
        return Observation("Again?", reward=float("inf"))


reward_in_start = Environment(name="reward-in-start", task=RewardInStart)
turn_reward_not_finite = Environment(name="turn-reward-not-finite", task=TurnRewardNotFinite)


class TwoAgentsAdd(Task):
    """Two agents each asked 1 + 1; reward 1 for the answer 2."""

    async def start(self, run: RunContext) -> Observation:
        return Observation("What is 1 + 1? Answer with the number only.")

    async def respond(self, run: RunContext, reply: Message) -> Observation:
        return End(reward=float(reply.text.strip() == "2"), metrics={"answered": 1.0})


demonstration_earns_nothing = Environment(
    name="demonstration-earns-nothing",
    task=TwoAgentsAdd,
    agents=2,
    demonstration=lambda prompt: "3",  # the broken demonstration under test
)
demonstration_earns = Environment(
    name="demonstration-earns", task=TwoAgentsAdd, agents=2, demonstration=lambda prompt: "2"
)
