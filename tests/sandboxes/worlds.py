"""Sandboxed environments for the sandbox tests (imported by runner processes by name)."""

from __future__ import annotations

import asyncio
import sys
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from rollout.contracts import Message
from rollout.harness import End, Observation, RunContext, Task
from rollout.sandboxes import ProcessPool, SandboxedEnvironment

MARKER = "used-by"


@dataclass(frozen=True)
class Seat:
    """A seat as `SandboxSeats` reads it (run, episode, agent, attempt, the episode's agents)."""

    run_id: str = "run"
    episode_id: str = "e1"
    agent: int = 0
    attempt: int = 1
    agents: int = 1


class FolderServer(ProcessPool):
    """An instance is a static HTTP server over its folder: the folder is the world's state."""

    name = "folder"
    seats = 2
    max_instances = 1
    startup_timeout = 20.0

    def command(self, port: int, workdir: Path, host: str) -> Sequence[str]:
        return [sys.executable, "-m", "http.server", str(port), "--bind", host]


class Holding(Task):
    """Marks the world as used. The first attempt then holds its seat until killed; a later
    attempt ends at once, rewarded 1 if it found the world fresh (reset after the killed one)."""

    async def start(self, run: RunContext) -> Observation:
        marker = Path(run.sandbox["workdir"]) / MARKER
        fresh = not marker.exists()
        marker.write_text(f"{run.episode_id} attempt {run.attempt}\n")
        if run.attempt == 1 and self.parameters.get("hold"):
            await asyncio.Event().wait()
        return End(reward=1.0 if fresh else 0.0, metrics={"fresh": float(fresh)})

    async def respond(self, run: RunContext, reply: Message) -> Observation:
        return End(reward=0.0)


holding = SandboxedEnvironment(
    name="holding", task=Holding, parameters=[{"hold": True}], agents=1, pool=FolderServer()
)
