"""A broken environment found in seconds: start one task before any role starts.

`rollout train` calls `start_problem` before it builds the model or starts a process: a Task
whose constructor or `start()` raises would otherwise fail every episode only after the model is
loaded and warmed up. The check needs no model: the first model call ends it. Environments it
cannot judge pass: sandboxed ones (starting a world is the runner's job), tasks that call the
model themselves and find no gateway here (a connection error), and slow starts (a timeout).

Example:
    >>> import asyncio
    >>> from rollout.harness import Environment, Observation, Task
    >>> class Broken(Task):
    ...     async def start(self, run):
    ...         raise RuntimeError("no data file")
    ...     async def respond(self, run, reply):
    ...         return Observation("")
    >>> broken = Environment(name="broken", task=Broken, parameters=lambda rng: {})
    >>> asyncio.run(start_problem(broken))
    'Broken.start raised RuntimeError: no data file'
"""

from __future__ import annotations

import asyncio
from collections.abc import Mapping, Sequence
from typing import Any

from rollout.contracts import Message, ToolSpec
from rollout.errors import RolloutError
from rollout.harness.core import Environment, RunContext
from rollout.harness.errors import TaskError
from rollout.harness.play import make_task, play_seat

UNREACHABLE_GATEWAY = "http://127.0.0.1:9/v1"
"""A gateway address nothing answers at (port 9, discard): agent programs get a connection error."""


class _AskedTheModel(RolloutError):
    """A signal, not an error: start() went well and the task asked the model."""


async def _no_model(
    messages: Sequence[Message], tools: Sequence[ToolSpec], sampling: Mapping[str, Any]
) -> Message:
    raise _AskedTheModel


def _connection_failed(error: BaseException) -> bool:
    """Whether a connection error is among the causes of `error` (no gateway here)."""
    seen: set[int] = set()
    current: BaseException | None = error
    while current is not None and id(current) not in seen:
        seen.add(id(current))
        if isinstance(current, OSError) or "connect" in type(current).__name__.lower():
            return True
        current = current.__cause__ or current.__context__
    return False


async def start_problem(
    environment: Environment, seed: int = 0, seconds: float = 10.0
) -> str | None:
    """The error of one task's constructor or `start()` (its first line), or None if it started.

    Raises nothing: problems it cannot judge are None (see the module docstring).
    """
    if getattr(environment, "sandbox", None) is not None:
        return None
    context = RunContext(
        run_id="preflight",
        episode_id="preflight",
        agent=0,
        seed=seed,
        agents=environment.agents,
        gateway_url=UNREACHABLE_GATEWAY,
        api_key="preflight",
    )
    try:
        parameters = environment.draw_parameters(0, seed)
        task = make_task(environment, parameters)
        await asyncio.wait_for(play_seat(environment, task, context, _no_model), seconds)
    except (_AskedTheModel, TimeoutError):
        return None
    except TaskError as error:
        if _connection_failed(error):
            return None
        return str(error).strip().splitlines()[0]
    except Exception as error:  # drawing parameters: `rollout env check` reports it in full
        return f"drawing parameters raised {type(error).__name__}: {error}"
    return None
