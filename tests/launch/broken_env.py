"""Environments whose Task raises: in `start()` (`environment`) or in `respond()`
(`broken_grader`); every episode fails."""

from __future__ import annotations

from parity.environment import draw_number, format_example

from rollout.contracts import Message
from rollout.harness import Environment, Observation, RunContext, Task


class Broken(Task):
    async def start(self, run: RunContext) -> Observation:
        raise RuntimeError("the broken task cannot start")

    async def respond(self, run: RunContext, reply: Message) -> Observation:  # pragma: no cover
        raise AssertionError("never reached")


class BrokenGrader(Task):
    async def start(self, run: RunContext) -> Observation:
        return Observation(self.parameters["number"])

    async def respond(self, run: RunContext, reply: Message) -> Observation:
        raise RuntimeError("the broken task cannot grade")


def _parity_shaped(name: str, task: type[Task]) -> Environment:
    """`task` with parity's numbers, group size, sampling and warm-up."""
    return Environment(
        name=name,
        task=task,
        parameters=draw_number,
        group_size=8,
        max_turns=1,
        sampling={"max_tokens": 4, "temperature": 1.0},
        warmup=format_example,
    )


environment = _parity_shaped("broken", Broken)
broken_grader = _parity_shaped("broken-grader", BrokenGrader)
"""Starts well, but its `respond()` raises: every episode fails at its first reply."""
