"""A broken environment found in seconds: play one seat before any role starts.

`rollout train` calls `preflight` before it builds the model or starts a process: a Task whose
constructor, `start()` or `respond()` raises would otherwise fail every episode only after the
model is loaded and warmed up (and a run stops itself only once most of its episodes failed).
The check needs no model: each model call gets `PREFLIGHT_REPLY`, a reply an untrained model
could give, for up to `PREFLIGHT_TURNS` turns. Environments it cannot judge pass: sandboxed
ones (starting a world is the runner's job), tasks that call the model themselves and find no
gateway here (a connection error), and slow ones (a timeout).

Example:
    >>> import asyncio
    >>> from rollout.harness import End, Environment, Observation, Task
    >>> class Broken(Task):
    ...     async def start(self, run):
    ...         return Observation("Name a colour.")
    ...     async def respond(self, run, reply):
    ...         raise RuntimeError("no grader")
    >>> broken = Environment(name="broken", task=Broken, parameters=lambda rng: {})
    >>> asyncio.run(preflight(broken))
    'Broken.respond raised RuntimeError: no grader'
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
PREFLIGHT_REPLY = "ok"
"""What each model call of the preflight answers."""
PREFLIGHT_TURNS = 3
"""Model calls the preflight answers; the next one ends it (the task works so far)."""


class _Enough(RolloutError):
    """A signal, not an error: the task played `PREFLIGHT_TURNS` turns without raising."""


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


async def preflight(
    environment: Environment,
    seed: int = 0,
    seconds: float = 10.0,
    seen: list[Message] | None = None,
) -> str | None:
    """Play one seat of `environment` against `PREFLIGHT_REPLY`: the first line of the task's
    error (its constructor, `start()` or `respond()`), or None if it played.

    `seen`, when given, receives the conversation of each model call (the system prompt and
    the task's observations): the text the run's model will have to read.

    Raises nothing: problems it cannot judge are None (see the module docstring).
    """

    async def reply(
        messages: Sequence[Message], tools: Sequence[ToolSpec], sampling: Mapping[str, Any]
    ) -> Message:
        if seen is not None:
            seen.extend(m for m in messages if m not in seen)
        if sum(m.role == "assistant" for m in messages) >= PREFLIGHT_TURNS:
            raise _Enough
        return Message(role="assistant", content=PREFLIGHT_REPLY)

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
        await asyncio.wait_for(play_seat(environment, task, context, reply), seconds)
    except (_Enough, TimeoutError):
        return None
    except TaskError as error:
        if _connection_failed(error):
            return None
        return str(error).strip().splitlines()[0]
    except Exception as error:  # drawing parameters: `rollout env check` reports it in full
        return f"drawing parameters raised {type(error).__name__}: {error}"
    return None
