"""Computer environments for the computer tests (imported by runner processes by name)."""

from __future__ import annotations

import asyncio

import pytest

from rollout.contracts import Message
from rollout.harness import End, Observation, RunContext, Task
from rollout.sandboxes import SandboxedEnvironment, SandboxError
from rollout.sandboxes.computer import Computer, ComputerPool, Limits, Template
from rollout.sandboxes.computer.bubblewrap import check_host

MARKER = "used-by"


def require_computers() -> None:
    """Skip the test, saying why, on a host that cannot run computers (not root, no bwrap)."""
    try:
        check_host()
    except SandboxError as error:
        pytest.skip(str(error))


TEMPLATE = Template(files={"task.md": "Hold the computer.\n"}, git=True, limits=Limits(disk_mb=8))


class HoldingComputer(Task):
    """Marks the computer as used (a file and a commit). The first attempt then holds its seat
    until killed; a later attempt ends at once, rewarded 1 if it found the computer fresh (its
    template's files and history only: reset after the killed one)."""

    async def start(self, run: RunContext) -> Observation:
        async with Computer.of(run.sandbox) as computer:
            fresh = not await computer.exists(MARKER)
            history = await computer.run("git log --format=%s")
            fresh = fresh and history.stdout == "template\n"
            fresh = fresh and await computer.read_text("task.md") == TEMPLATE.files["task.md"]
            used = await computer.run(
                f"echo '{run.episode_id} attempt {run.attempt}' > {MARKER} && rm task.md "
                "&& git add -A && git commit -qm used"
            )
            assert used.ok, used.report()
        if run.attempt == 1 and self.parameters.get("hold"):
            await asyncio.Event().wait()
        return End(reward=1.0 if fresh else 0.0, metrics={"fresh": float(fresh)})

    async def respond(self, run: RunContext, reply: Message) -> Observation:
        return End(reward=0.0)


holding = SandboxedEnvironment(
    name="holding-computer",
    task=HoldingComputer,
    parameters=[{"hold": True}],
    agents=1,
    pool=ComputerPool(TEMPLATE, name="holding-computer", seats=1, max_instances=1),
)
