"""A multi-agent gridworld: two agents share one grid, each walks to its own goal.

The grid lives in a sandbox (`server.py`, one small process per instance), so the agents of an
episode can be played by different runners, in different processes, and still see each other:
a teammate blocks the cell it stands on, and `say` messages show up in the others' next view.

Each turn an agent reads a short text view (`mate +1,0. goal 2:right 1:down.`: its teammate's
offset, and the directions toward its goal) and calls the `move` tool (up, down, left or right);
a reply that is only a direction word is the same move (the short form a tiny model learns
first). It ends when it reaches its goal or after `max_moves` moves, then waits for its
teammates. Each move is rewarded on its own turn (`Observation(reward=...)`, so training credits
a move with the rewards from it on, not with the whole episode's): `OWN_SHARE` times the share of
the start distance by which it brought the agent nearer its goal than it had been (a wrong move, a
blocked one or one back over ground already won earns 0; a reply that is no move costs
`INVALID_PENALTY` of a step's share), and the last turn also gets `1 - OWN_SHARE` when every agent
reached its goal: an agent that walks straight to its goal in a team that all arrive earns 1.
The episodes of a group play the same layout, so group-relative advantages compare moves.

Two environments share the world:

- `environment`: the `move` tool is offered (the chat template's tools block, ~400 characters
  of system prompt); goals 1-2 steps away, 3 moves each; for models that call tools. The
  cpu-text preset learns it at its default lag (`benchmarks/gridworld_lag.py`: on three seeds
  the moves toward the goal rose from chance, 0.37, to 0.83-0.85).
- `compact`: the smallest version, for tiny models: no tools block (a 30-token prompt),
  directions written as letters (`mate -1,0. goal 1r.`), the reply the tool's shortest form, a
  letter (`u`, `d`, `l`, `r`); goals next to their agents, one move each.
  `benchmarks/gridworld_learning.py` trains it on the cpu-text preset (one step of sampling
  lag included): on three seeds the moves toward the goal rose from chance to 1.0 in 300 steps:

    uv run rollout env check gridworld.environment:environment
    uv run rollout train gridworld.environment:environment --preset cpu-text
    uv run rollout train gridworld.environment:compact --preset cpu-text

- `pair`: `compact` with two roles whose goals differ: the `walker` (agent 0) is rewarded for a
  move toward its goal, the `avoider` (agent 1) for a move away from its own. Both read views of
  the same shape, so one shared policy cannot serve both; a run with a policy per role
  (`policies:`, docs/training.md) trains each its own way:

    uv run rollout train gridworld.environment:pair --preset cpu-tiny \\
        --set model.init.alphabet=null --set model.init.vocab_size=160 \\
        --set warmup_steps=30 --set warmup_learning_rate=0.003 --set group_size=8 \\
        --set groups_per_step=8 --set learning_rate=0.003 --set grad_clip=1.0 --set max_lag=0 \\
        --set 'policies={walker: {agents: [walker]}, avoider: {agents: [avoider]}}'
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
SHORT = {direction[0]: direction for direction in DIRECTIONS}
"""A direction's short form, its first letter: `u`, `d`, `l`, `r`."""
OWN_SHARE = 0.7
"""The part of the reward an agent earns by its own moves; the rest is the team's success."""
INVALID_PENALTY = 0.5
"""What a reply that is not a move costs (a wrong move costs nothing)."""

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

    def command(self, port: int, workdir: Path, host: str) -> Sequence[str]:
        return [sys.executable, "-S", str(SERVER), "--host", host, "--port", str(port)]

    async def reset(self, details: Mapping[str, Any], workdir: Path) -> dict[str, Any]:
        channel = await connect(details["host"], details["port"], "gridworld")
        try:
            await channel.request({"op": "reset"})
        finally:
            await channel.close()
        return dict(details)


def describe(view: Mapping[str, Any], *, short: bool = False) -> str:
    """The text an agent reads, e.g. `mate -1,0. goal 2:right 1:down.`

    Only the goal is given in direction words (the words to answer with), and last: its last
    word is always a move that brings the agent closer, right before the reply. Each word
    follows a colon, not a space, so that a byte-level BPE tokenizer writes it as the same token
    as the reply `down` (after a space it would be ` down`, another token: a tiny model would
    have to learn the mapping instead of copying the word). A teammate's offset is given as
    signed numbers (x to the right, y up), so it cannot be taken for a move. `short` writes each
    direction as its letter (the reply's short form).

    >>> describe({"goal": [2, -1], "mates": [[1, -1, 0]], "heard": [], "at_goal": False})
    'mate -1,0. goal 2:right 1:down.'
    >>> describe({"goal": [2, -1], "mates": [], "heard": [], "at_goal": False}, short=True)
    'goal 2r 1d.'
    >>> describe({"goal": [0, 0], "mates": [], "heard": ["agent 1: hi"], "at_goal": True})
    'heard agent 1: hi. at goal.'
    """
    parts = [f"heard {text}" for text in view["heard"]]
    for _agent, dx, dy in view["mates"]:
        parts.append(f"mate {_signed(dx)},{_signed(dy)}" if (dx, dy) != (0, 0) else "mate here")
    parts.append("at goal" if view["at_goal"] else "goal " + _offset(*view["goal"], short=short))
    return ". ".join(parts) + "."


def _signed(n: int) -> str:
    return f"{n:+d}" if n else "0"


def _offset(dx: int, dy: int, *, short: bool = False) -> str:
    words = []
    if dx:
        words.append((abs(dx), "right" if dx > 0 else "left"))
    if dy:
        words.append((abs(dy), "up" if dy > 0 else "down"))
    if short:
        return " ".join(f"{n}{word[0]}" for n, word in words) or "here"
    return " ".join(f"{n}:{word}" for n, word in words) or "here"


def distance(view: Mapping[str, Any]) -> int:
    """Steps from the agent to its goal in a view.

    >>> distance({"goal": [2, -1]})
    3
    """
    dx, dy = view["goal"]
    return abs(dx) + abs(dy)


def _direction(reply: Message) -> str | None:
    """The move a reply makes: a `move` call's direction, or a reply that is only a direction
    (a word or its letter).

    >>> _direction(Message.assistant("left")), _direction(Message.assistant("r"))
    ('left', 'right')
    >>> _direction(Message.assistant("I go left"))  # prose is not an action
    """
    calls: list[ToolCall] = [c for c in reply.tool_calls or [] if c.name == "move"]
    if not calls:
        text = reply.text.strip().lower()
        return text if text in DIRECTIONS else SHORT.get(text)
    direction = calls[0].parsed_arguments().get("direction")
    return direction if direction in DIRECTIONS else None


def move_reward(start: int, nearest: int, now: int, *, valid: bool = True) -> float:
    """What one move earns on its turn: `OWN_SHARE` times the share of the `start` distance by
    which it brought the agent nearer its goal than the `nearest` it had been; a reply that is no
    move costs `INVALID_PENALTY` of one step's share (so a wrong move, which earns 0, beats it).
    A seat's own rewards add up to at most `OWN_SHARE`, and walking away and back earns no more
    than walking straight.

    >>> move_reward(start=2, nearest=2, now=1)  # one of two steps toward the goal
    0.35
    >>> move_reward(start=2, nearest=1, now=2), move_reward(start=2, nearest=2, now=2)
    (0.0, 0.0)
    >>> move_reward(start=1, nearest=1, now=1, valid=False)
    -0.35
    """
    if not start:
        return 0.0
    if not valid:
        return -OWN_SHARE * INVALID_PENALTY / start
    return OWN_SHARE * max(nearest - now, 0) / start


def team_reward(team_reached: bool) -> float:
    """The team's part, on each agent's last turn: `1 - OWN_SHARE` when every agent arrived."""
    return (1.0 - OWN_SHARE) * float(team_reached)


class Walk(Task):
    """One agent: move to the goal through the shared grid.

    Parameters: `size` (grid side), `reach` (goals are 1 to `reach` steps from the start),
    `max_moves`, `layout` (the seed of the world, shared by the episodes of a group; default the
    episode's seed), `tools` (offer the `move` tool in the prompt), `team_wait` (seconds).
    """

    def __init__(self, parameters: Mapping[str, Any]) -> None:
        super().__init__(parameters)
        self.size = int(parameters.get("size", 3))
        self.reach = int(parameters.get("reach", 2))
        self.max_moves = int(parameters.get("max_moves", 3))
        self.layout = parameters.get("layout")
        self.tools = bool(parameters.get("tools", True))
        self.short = bool(parameters.get("short", False))
        self.team_wait = float(parameters.get("team_wait", 30.0))
        self.channel: JsonLines | None = None
        self.moves = 0
        self.closer = 0
        self.invalid = 0
        self.distance = 0
        self.start_distance = 0
        self.nearest = 0

    async def _request(self, run: RunContext, op: str, **fields: Any) -> dict[str, Any]:
        if self.channel is None:
            sandbox = run.sandbox
            self.channel = await connect(sandbox["host"], sandbox["port"], "gridworld")
        message = {"op": op, "epoch": run.sandbox.get("epoch", 0), "agent": run.agent, **fields}
        return await self.channel.request(message, timeout=self.team_wait + 30)

    async def start(self, run: RunContext) -> Observation:
        seed = run.seed if self.layout is None else int(self.layout)
        view = await self._request(
            run, "join", agents=run.agents, seed=seed, size=self.size, reach=self.reach
        )
        self.distance = self.start_distance = self.nearest = distance(view)
        return Observation(self._describe(view), tools=[MOVE] if self.tools else None)

    def _describe(self, view: Mapping[str, Any]) -> str:
        return describe(view, short=self.short)

    async def respond(self, run: RunContext, reply: Message) -> Observation:
        direction = _direction(reply)
        self.moves += 1
        if direction is None:
            self.invalid += 1
            view = await self._request(run, "look")
            text = "call move with up, down, left or right. " + self._describe(view)
        else:
            view = await self._request(run, "move", direction=direction)
            text = (
                self._describe(view)
                if view["result"] == "moved"
                else f"{view['result']}. " + self._describe(view)
            )
        now = distance(view)
        earned = self.move_reward(now, valid=direction is not None)
        self.closer += now < self.distance
        self.distance = now
        self.nearest = min(self.nearest, now)
        if view["at_goal"] or self.moves >= self.max_moves:
            return await self._end(run, earned)
        if direction and reply.tool_calls:
            message = Message.tool(text, tool_call_id=_call_id(reply))
            return Observation(message, reward=earned)
        return Observation(text, reward=earned)

    def move_reward(self, now: int, *, valid: bool) -> float:
        """What the move that left the agent `now` steps from its goal earns."""
        return move_reward(self.start_distance, self.nearest, now, valid=valid)

    async def _end(self, run: RunContext, earned: float) -> End:
        await self._request(run, "finish")
        outcome = await self._request(run, "wait_all", timeout=self.team_wait)
        start = outcome["start_distance"][run.agent]
        progress = (start - outcome["distance"][run.agent]) / start if start else 1.0
        team = all(outcome["reached"])
        return End(
            reward=earned + team_reward(team),
            metrics={
                "own_progress": progress,
                "closer_moves": self.closer / self.moves if self.moves else 0.0,
                "reached": float(outcome["reached"][run.agent]),
                "team_reached": float(team),
                "moves": float(self.moves),
                "invalid": float(self.invalid),
            },
        )

    async def close(self, run: RunContext) -> None:
        if self.channel is not None:
            await self.channel.close()


class Pair(Walk):
    """`Walk` for two roles whose goals differ: agent 0 (the walker) earns a move that brings it
    closer to its goal, agent 1 (the avoider) a move that takes it farther from its own. Each
    move earns on its turn: 1 for a good move, 0 for another, -`INVALID_PENALTY` for a reply that
    is no move; there is no team part.
    """

    away = False

    async def start(self, run: RunContext) -> Observation:
        self.away = run.agent == 1
        return await super().start(run)

    async def respond(self, run: RunContext, reply: Message) -> Observation:
        before = self.distance
        closer = self.closer
        observation = await super().respond(run, reply)
        if self.away:  # count moves that went farther instead of closer
            self.closer = closer + (self.distance > before)
        return observation

    def move_reward(self, now: int, *, valid: bool) -> float:
        if not valid:
            return -INVALID_PENALTY
        return float(now > self.distance if self.away else now < self.distance)

    async def _end(self, run: RunContext, earned: float) -> End:
        end = await super()._end(run, earned)
        return End(reward=earned, metrics=end.metrics)


def _call_id(reply: Message) -> str:
    calls = reply.tool_calls or []
    return calls[0].id if calls else "move"


class Draw:
    """A group's parameters: one layout seed (every episode of the group plays it) and sizes."""

    def __init__(self, **fixed: Any) -> None:
        self.fixed = fixed

    def __call__(self, rng: random.Random) -> dict[str, Any]:
        return {"size": 3, "reach": 2, "max_moves": 3, **self.fixed, "layout": rng.randrange(2**31)}


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


def _random_view(rng: random.Random, *, short: bool) -> str:
    goal = [0, 0]
    while goal == [0, 0]:
        goal = [rng.randint(-2, 2), rng.randint(-2, 2)]
    mate = [1, rng.randint(-2, 2), rng.randint(-2, 2)]
    return describe({"goal": goal, "mates": [mate], "heard": [], "at_goal": False}, short=short)


def _format_example(rng: random.Random, *, tools: bool, short: bool) -> tuple[list[Message], str]:
    """Views and moves of the right shape in random directions (no task information): a first
    turn, or a later one after random earlier moves.

    The reply is the short form of the action (a direction word, or its letter), which a tiny
    model learns in a few warm-up steps; larger models call the `move` tool.
    """
    replies = tuple(SHORT) if short else DIRECTIONS
    messages = [Message.system(TOOLS_SYSTEM)] if tools else []
    for _ in range(rng.randint(0, 2)):
        messages.append(Message.user(_random_view(rng, short=short)))
        messages.append(Message.assistant(rng.choice(replies)))
    messages.append(Message.user(_random_view(rng, short=short)))
    return messages, rng.choice(replies)


def format_example(rng: random.Random) -> tuple[list[Message], str]:
    """A warm-up example for `environment` (the tools block; direction words)."""
    return _format_example(rng, tools=True, short=False)


def compact_example(rng: random.Random) -> tuple[list[Message], str]:
    """A warm-up example for `compact` (no tools block; direction letters)."""
    return _format_example(rng, tools=False, short=True)


environment = SandboxedEnvironment(
    name="gridworld",
    task=Walk,
    parameters=Draw(),
    agents=2,
    group_size=8,
    max_turns=6,
    pool=GridPool(),
    sampling={"max_tokens": 40, "temperature": 1.0},
    warmup=format_example,
)

compact = SandboxedEnvironment(
    name="gridworld-compact",
    task=Walk,
    # Goals next to their agent and one move each: one right answer for both agents (neither's
    # seats are easier than the other's) and the reward is that move's (a tiny model learns it).
    parameters=Draw(tools=False, short=True, reach=1, max_moves=1),
    agents=2,
    group_size=8,
    max_turns=6,
    pool=GridPool(),
    sampling={"max_tokens": 4, "temperature": 1.0},
    warmup=compact_example,
)

pair = SandboxedEnvironment(
    name="gridworld-pair",
    task=Pair,
    parameters=Draw(tools=False, short=True, reach=1, max_moves=1),
    agents=2,
    roles=["walker", "avoider"],
    group_size=8,
    max_turns=6,
    pool=GridPool(),
    sampling={"max_tokens": 4, "temperature": 1.0},
    warmup=compact_example,
)
