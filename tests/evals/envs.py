"""Environments for the eval tests: a slow one (so a kill lands mid-suite), two-agent ones, and
one that rewards about half of a random model's replies."""

from __future__ import annotations

import asyncio

from rollout.contracts import Message
from rollout.harness import End, Environment, Observation, RunContext, Task


class SlowSum(Task):
    """Asks a sum; answers slowly, so that a suite of these takes a few seconds."""

    async def start(self, run: RunContext) -> Observation:
        await asyncio.sleep(0.15)
        return Observation(f"What is {self.parameters['a']} + {self.parameters['b']}?")

    async def respond(self, run: RunContext, reply: Message) -> Observation:
        await asyncio.sleep(0.15)
        expected = str(int(self.parameters["a"]) + int(self.parameters["b"]))
        return End(reward=1.0 if reply.text.strip() == expected else 0.0)


class Pair(Task):
    """Two agents; agent 0 is asked a sum it can answer, agent 1 a question it cannot."""

    async def start(self, run: RunContext) -> Observation:
        return Observation("What is 2 + 3?" if run.agent == 0 else "Name a colour.")

    async def respond(self, run: RunContext, reply: Message) -> Observation:
        return End(reward=1.0 if reply.text.strip() == "5" else 0.0)


class Roles(Task):
    """Two agents whatever they reply: agent 0's seat ends with reward 1.0, agent 1's with 0.25,
    so a score that mixes the two agents' seats shows."""

    async def start(self, run: RunContext) -> Observation:
        return Observation(f"Say something ({self.parameters['n']}).")

    async def respond(self, run: RunContext, reply: Message) -> Observation:
        return End(reward=1.0 if run.agent == 0 else 0.25)


class FirstCharacter(Task):
    """Rewards a reply whose first character has an even code: about half of a random model's
    replies, so two engines sampling the same model score alike within their intervals."""

    async def start(self, run: RunContext) -> Observation:
        return Observation(f"Say something ({self.parameters['n']}).")

    async def respond(self, run: RunContext, reply: Message) -> Observation:
        text = reply.text
        return End(reward=1.0 if text and ord(text[0]) % 2 == 0 else 0.0)


slow = Environment(
    name="slow-sum",
    task=SlowSum,
    parameters=lambda rng: {"a": rng.randint(1, 50), "b": rng.randint(1, 50)},
    max_turns=1,
)
pair = Environment(name="pair", task=Pair, agents=2, max_turns=1)
roles = Environment(
    name="roles",
    task=Roles,
    agents=2,
    parameters=lambda rng: {"n": rng.randint(1, 1000)},
    max_turns=1,
)
trio = Environment(name="trio", task=Roles, agents=3, max_turns=1)
first_character = Environment(
    name="first-character",
    task=FirstCharacter,
    parameters=lambda rng: {"n": rng.randint(1, 1000)},
    max_turns=1,
)
