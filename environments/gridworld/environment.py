"""A multi-agent gridworld: two agents share one grid, each walks to its own goal.

The grid lives in a sandbox (`server.py`, one small process per instance), so the agents of an
episode can be played by different runners, in different processes, and still see each other:
a teammate blocks the cell it stands on, and `say` messages show up in the others' next view.

Each turn an agent reads a short text view (`goal 2 right 1 down. mate 1 left.`) and calls the
`move` tool (up, down, left or right); a reply that is only a direction word is the same move
(the short form a tiny model learns first). It ends when it reaches its goal or after `max_turns`
moves, then waits for its teammates; its reward is half its own progress (the share of the
start distance it covered) and half the team's (1 when every agent reached its goal). The
view names the right direction words, so a tiny model can learn the task in a few minutes:

    uv run rollout env check gridworld.environment:environment
    uv run rollout train gridworld.environment:environment --preset cpu-tiny \\
        --set model.init.alphabet=null --set model.init.vocab_size=160
"""

from __future__ import annotations

import json
import random
import sys
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from rollout.contracts import Message, ToolCall, ToolSpec
from rollout.harness import End, Observation, RunContext, Task
from rollout.rendering.hf import to_hf_tool
from rollout.sandboxes import JsonLines, ProcessPool, SandboxedEnvironment, connect

SERVER = Path(__file__).resolve().parent / "server.py"
DIRECTIONS = ("up", "down", "left", "right")

MOVE = ToolSpec(
    name="move",
    description="Move one cell.",
    parameters={
        "type": "object",
        "properties": {"direction": {"type": "string", "enum": list(DIRECTIONS)}},
        "required": ["direction"],
    },
)


class GridPool(ProcessPool):
    """Instances are `server.py` processes; a reset forgets the world (no restart)."""

    name = "gridworld"
    seats = 4
    max_instances = 32
    startup_timeout = 60.0

    def command(self, port: int, workdir: Path) -> Sequence[str]:
        return [sys.executable, "-S", str(SERVER), "--port", str(port)]

    async def reset(self, details: Mapping[str, Any], workdir: Path) -> dict[str, Any]:
        channel = await connect(details["host"], details["port"], "gridworld")
        try:
            await channel.request({"op": "reset"})
        finally:
            await channel.close()
        return dict(details)


def describe(view: Mapping[str, Any]) -> str:
    """The text an agent reads, e.g. `goal 2 right 1 down. mate 1 left.`

    >>> describe({"goal": [2, -1], "mates": [[1, -1, 0]], "heard": [], "at_goal": False})
    'goal 2 right 1 down. mate 1 left.'
    >>> describe({"goal": [0, 0], "mates": [], "heard": ["agent 1: hi"], "at_goal": True})
    'at goal. heard agent 1: hi.'
    """
    parts = ["at goal" if view["at_goal"] else "goal " + _offset(*view["goal"])]
    for _agent, dx, dy in view["mates"]:
        parts.append("mate " + (_offset(dx, dy) if (dx, dy) != (0, 0) else "here"))
    parts.extend(f"heard {text}" for text in view["heard"])
    return ". ".join(parts) + "."


def _offset(dx: int, dy: int) -> str:
    words = []
    if dx:
        words.append(f"{abs(dx)} {'right' if dx > 0 else 'left'}")
    if dy:
        words.append(f"{abs(dy)} {'up' if dy > 0 else 'down'}")
    return " ".join(words) or "here"


def _direction(reply: Message) -> str | None:
    """The move a reply makes: a `move` call's direction, or a reply that is only a direction.

    >>> _direction(Message.assistant("left"))
    'left'
    >>> _direction(Message.assistant("I go left"))  # prose is not an action
    """
    calls: list[ToolCall] = [c for c in reply.tool_calls or [] if c.name == "move"]
    if not calls:
        text = reply.text.strip().lower()
        return text if text in DIRECTIONS else None
    direction = calls[0].parsed_arguments().get("direction")
    return direction if direction in DIRECTIONS else None


class Walk(Task):
    """One agent: move to the goal through the shared grid."""

    def __init__(self, parameters: Mapping[str, Any]) -> None:
        super().__init__(parameters)
        self.size = int(parameters.get("size", 4))
        self.max_moves = int(parameters.get("max_moves", 4))
        self.team_wait = float(parameters.get("team_wait", 30.0))
        self.channel: JsonLines | None = None
        self.moves = 0
        self.invalid = 0

    async def _request(self, run: RunContext, op: str, **fields: Any) -> dict[str, Any]:
        if self.channel is None:
            sandbox = run.sandbox
            self.channel = await connect(sandbox["host"], sandbox["port"], "gridworld")
        message = {"op": op, "epoch": run.sandbox.get("epoch", 0), "agent": run.agent, **fields}
        return await self.channel.request(message, timeout=self.team_wait + 30)

    async def start(self, run: RunContext) -> Observation:
        view = await self._request(run, "join", agents=run.agents, seed=run.seed, size=self.size)
        return Observation(describe(view), tools=[MOVE])

    async def respond(self, run: RunContext, reply: Message) -> Observation:
        direction = _direction(reply)
        self.moves += 1
        if direction is None:
            self.invalid += 1
            view = await self._request(run, "look")
            text = "call move with up, down, left or right. " + describe(view)
        else:
            view = await self._request(run, "move", direction=direction)
            text = (
                describe(view)
                if view["result"] == "moved"
                else f"{view['result']}. " + describe(view)
            )
        if view["at_goal"] or self.moves >= self.max_moves:
            return await self._end(run)
        if direction and reply.tool_calls:
            return Observation(Message.tool(text, tool_call_id=_call_id(reply)))
        return Observation(text)

    async def _end(self, run: RunContext) -> End:
        await self._request(run, "finish")
        outcome = await self._request(run, "wait_all", timeout=self.team_wait)
        start = outcome["start_distance"][run.agent]
        own = (start - outcome["distance"][run.agent]) / start if start else 1.0
        team = 1.0 if all(outcome["reached"]) else 0.0
        return End(
            reward=0.5 * max(own, 0.0) + 0.5 * team,
            metrics={
                "own_progress": own,
                "team_reached": team,
                "moves": float(self.moves),
                "invalid": float(self.invalid),
            },
        )

    async def close(self, run: RunContext) -> None:
        if self.channel is not None:
            await self.channel.close()


def _call_id(reply: Message) -> str:
    calls = reply.tool_calls or []
    return calls[0].id if calls else "move"


def draw(rng: random.Random) -> dict[str, Any]:
    """A layout seed is the episode's; the parameters only size the world."""
    return {"size": 4, "max_moves": 4}


# The tools block of the system prompt as the tiny models' chat template writes it (Hermes
# style), so that warm-up prompts look like the episode's.
TOOLS_SYSTEM = (
    "# Tools\n\nYou may call one or more functions to assist with the user query.\n\n"
    "You are provided with function signatures within <tools></tools> XML tags:\n<tools>\n"
    + json.dumps(to_hf_tool(MOVE), ensure_ascii=False)
    + "\n</tools>\n\nFor each function call, return a json object with function name and "
    "arguments within <tool_call></tool_call> XML tags:\n<tool_call>\n"
    '{"name": <function-name>, "arguments": <args-json-object>}\n</tool_call>'
)


def format_example(rng: random.Random) -> tuple[list[Message], str]:
    """A view and a move of the right shape in a random direction (no task information).

    The reply is the short form of the action (a direction word), which a tiny model learns in
    a few warm-up steps; larger models call the `move` tool.
    """
    dx, dy = rng.randint(-3, 3), rng.randint(-3, 3)
    view = {"goal": [dx, dy], "mates": [[1, rng.randint(-2, 2), 1]], "heard": [], "at_goal": False}
    messages = [Message.system(TOOLS_SYSTEM), Message.user(describe(view))]
    return messages, rng.choice(DIRECTIONS)


environment = SandboxedEnvironment(
    name="gridworld",
    task=Walk,
    parameters=draw,
    agents=2,
    group_size=8,
    max_turns=6,
    pool=GridPool(),
    sampling={"max_tokens": 40, "temperature": 1.0},
    warmup=format_example,
)
