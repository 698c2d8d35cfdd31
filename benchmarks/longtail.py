"""A parity environment with long-tailed episode lengths, for the sync-vs-async benchmark.

Each episode asks a run of parity questions; how many is drawn from a heavy-tailed (Pareto)
distribution capped at 16, and each answer takes 300 ms of environment time (a tool call, a
game tick): episodes are long in wall time but cheap in CPU, as agent episodes usually are.
The reward is the fraction answered right. Most episodes are short; a few are very long, which
is what makes synchronous training wait.
"""

from __future__ import annotations

import asyncio
import random

from rollout.contracts import Message
from rollout.harness import End, Environment, Observation, RunContext, Task

ENVIRONMENT_SECONDS = 0.3
MAX_QUESTIONS = 16


def draw(rng: random.Random) -> dict[str, object]:
    questions = min(MAX_QUESTIONS, int(rng.paretovariate(1.1)))
    return {"numbers": [str(rng.randint(100, 99_999)) for _ in range(questions)]}


class LongParity(Task):
    def __init__(self, parameters: dict[str, object]) -> None:
        super().__init__(parameters)
        self.numbers = [str(n) for n in parameters["numbers"]]  # type: ignore[union-attr]
        self.right = 0
        self.asked = 0

    async def start(self, run: RunContext) -> Observation:
        return Observation(self.numbers[0])

    async def respond(self, run: RunContext, reply: Message) -> Observation:
        await asyncio.sleep(ENVIRONMENT_SECONDS)
        expected = "E" if int(self.numbers[self.asked]) % 2 == 0 else "O"
        self.right += reply.text.strip() == expected
        self.asked += 1
        if self.asked == len(self.numbers):
            return End(reward=self.right / self.asked, metrics={"questions": float(self.asked)})
        return Observation(self.numbers[self.asked])


def warmup(rng: random.Random) -> tuple[list[Message], str]:
    return [Message.user(str(rng.randint(100, 99_999)))], rng.choice("EO")


environment = Environment(
    name="longtail-parity",
    task=LongParity,
    parameters=draw,
    group_size=4,
    max_turns=MAX_QUESTIONS,
    system_prompt="even or odd?",
    sampling={"max_tokens": 4},
    warmup=warmup,
)
