"""Parity of a number: the model answers `E` (even) or `O` (odd).

A fresh tiny model cannot answer at all; after a short format-only warm-up and 88-237
RL steps (36-67 s on a 2-core CPU) it answers right 90% of the time, which makes it
the example `rollout train` uses:

    uv run rollout train parity.environment:environment --preset cpu-tiny
"""

from __future__ import annotations

import random

from rollout.contracts import Message
from rollout.harness import End, Environment, Observation, RunContext, Task


class Parity(Task):
    """Shows a number; reward 1 for the right parity letter, 0 otherwise."""

    def __init__(self, parameters: dict[str, str]) -> None:
        super().__init__(parameters)
        self.number = parameters["number"]

    async def start(self, run: RunContext) -> Observation:
        return Observation(self.number)

    async def respond(self, run: RunContext, reply: Message) -> Observation:
        expected = "E" if int(self.number) % 2 == 0 else "O"
        return End(reward=1.0 if reply.text.strip() == expected else 0.0)


def draw_number(rng: random.Random) -> dict[str, str]:
    digits = rng.randint(3, 8)
    return {"number": str(rng.randint(10 ** (digits - 1), 10**digits - 1))}


def format_example(rng: random.Random) -> tuple[list[Message], str]:
    """A prompt and an answer of the right shape whose content is random (no task information)."""
    return [Message.user(draw_number(rng)["number"])], rng.choice("EO")


environment = Environment(
    name="parity",
    task=Parity,
    parameters=draw_number,
    group_size=8,
    max_turns=1,
    # No system prompt: the tiny model reads only the number (its alphabet has no letters).
    sampling={"max_tokens": 4, "temperature": 1.0},
    warmup=format_example,
)
