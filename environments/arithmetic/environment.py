"""Arithmetic: the model is asked a sum, difference or product and rewarded for the exact answer.

`environment` is what `rollout env check`, `rollout run` and `rollout train` load:

    uv run rollout env check arithmetic.environment:environment
"""

from __future__ import annotations

import random

from rollout.contracts import Message
from rollout.harness import End, Environment, Observation, RunContext, Task


class Arithmetic(Task):
    """Asks one question and rewards an exact answer."""

    def __init__(self, parameters: dict[str, str]) -> None:
        self.question, self.answer = parameters["question"], parameters["answer"]

    async def start(self, run: RunContext) -> Observation:
        return Observation(self.question)

    async def respond(self, run: RunContext, reply: Message) -> Observation:
        return End(reward=1.0 if reply.text.strip() == self.answer else 0.0)


def draw_problem(rng: random.Random) -> dict[str, str]:
    """A random problem with one- or two-digit operands."""
    a, b = rng.randint(0, 99), rng.randint(0, 99)
    op = rng.choice("+-*")
    value = {"+": a + b, "-": a - b, "*": a * b}[op]
    return {"question": f"What is {a} {op} {b}?", "answer": str(value)}


environment = Environment(
    name="arithmetic",
    task=Arithmetic,
    parameters=draw_problem,
    group_size=4,
    max_turns=1,
    sampling={"max_tokens": 16},
)
