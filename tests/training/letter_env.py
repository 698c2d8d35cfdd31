"""A task a tiny model learns in a few RL steps: answer with the letter `E`.

The format warm-up teaches it to answer `E` or `O` at random (reward ~0.5); policy gradient
then has to find out which letter is rewarded. The end-to-end training test uses it, because it
checks the platform's learning machinery (sampling, recording, advantages, steps, serving new
weights) quickly and reliably; parity, the README's example, takes minutes.
"""

from __future__ import annotations

import random

from rollout.contracts import Message
from rollout.harness import End, Environment, Observation, RunContext, Task


class SayE(Task):
    async def start(self, run: RunContext) -> Observation:
        return Observation(str(self.parameters["number"]))

    async def respond(self, run: RunContext, reply: Message) -> Observation:
        return End(reward=1.0 if reply.text.strip() == "E" else 0.0)


def draw(rng: random.Random) -> dict[str, str]:
    return {"number": str(rng.randint(100, 99_999))}


def warmup(rng: random.Random) -> tuple[list[Message], str]:
    return [Message.user(draw(rng)["number"])], rng.choice("EO")


environment = Environment(
    name="say-e",
    task=SayE,
    parameters=draw,
    group_size=8,
    max_turns=1,
    system_prompt="even or odd?",
    sampling={"max_tokens": 4},
    warmup=warmup,
)
