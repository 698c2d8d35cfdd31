"""A fixture environment: an `anthropic` SDK agent that calls the gateway itself.

Its Task asks the model one sum through `AsyncAnthropic`, pointed at the seat's gateway with the
seat's key (the SDK takes the gateway's root: `RunContext.gateway_url` minus `/v1`), and grades
the reply's last number. Played by `rollout run` and `rollout train` in
tests/gateway/test_anthropic_agent_runs.py.
"""

from __future__ import annotations

import random
import re
from typing import Any

import anthropic

from rollout.contracts import Message
from rollout.harness import End, Environment, Observation, RunContext, Task


class AnthropicSumAgent(Task):
    """One `messages.create` call through the gateway; reward 1.0 for the right sum."""

    async def start(self, run: RunContext) -> Observation:
        if run.gateway_url is None or run.api_key is None:
            raise RuntimeError("anthropic_agent calls the model itself and needs the gateway")
        question = f"What is {self.parameters['a']} + {self.parameters['b']}?"
        client = anthropic.AsyncAnthropic(
            base_url=run.gateway_url.removesuffix("/v1"), api_key=run.api_key, max_retries=0
        )
        try:
            reply = await client.messages.create(
                model="policy",
                max_tokens=16,
                messages=[{"role": "user", "content": question}],
            )
        finally:
            await client.close()
        text = "".join(block.text for block in reply.content if block.type == "text")
        numbers = re.findall(r"-?\d+", text)
        correct = bool(numbers) and int(numbers[-1]) == self.parameters["a"] + self.parameters["b"]
        return End(
            reward=1.0 if correct else 0.0,
            messages=[Message.user(question), Message.assistant(text)],
        )


def draw_sum(rng: random.Random) -> dict[str, Any]:
    return {"a": rng.randint(1, 9), "b": rng.randint(1, 9)}


environment = Environment(
    name="anthropic_agent",
    task=AnthropicSumAgent,
    parameters=draw_sum,
    group_size=2,
    max_turns=1,
    needs_gateway=True,
)
