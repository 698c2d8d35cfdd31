"""Four bots share one Minecraft world and build a marked structure together.

Each episode claims one Minecraft server (a sandbox instance of `MinecraftPool`); each of the
four agents, possibly played by a different runner process, joins it as a mineflayer bot named
`agent<N>` and acts through tools: `look`, `move_to`, `dig`, `place`, `say` and `inventory`.
Gold blocks mark the structure's spots on the ground, one per agent, and every agent is given
cobblestone. An agent's turn ends with a reply that calls no tool (or after `max_turns`); it then
waits for the team, and the reward comes from the world itself, read from the server: the share
of marked spots with cobblestone on them (the team's reward), or only its own spot (`reward:
own`), or half of each (`reward: mixed`). The bots talk through the world: `say` is Minecraft
chat, which the others hear in their next `look`.

    uv run rollout env check minecraft_team.environment:environment

`builder_script` is a scripted player that builds its spot: the environment's demonstration,
which `rollout env check` plays with the scripted model (each bot must place its block: its
reward, read from the world, is then above 0).

`compact` is the same world and bots for a tiny model: each bot reads a one-line view and
answers with one letter (`b` build, `w` wait, `d` dig, `s` say), which its bot carries out; the
team's reward is the share of spots built, less 0.5 for a bot whose reply is no letter. The
`minecraft-cpu-tiny` preset trains it:

    uv run rollout train minecraft_team.environment:compact --preset minecraft-cpu-tiny
"""

from __future__ import annotations

import asyncio
import json
import random
import re
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from minecraft_team.world import Bot, MinecraftPool, control
from rollout.contracts import Message, ToolSpec
from rollout.harness import End, Observation, RunContext, Task
from rollout.sandboxes import JsonLines, SandboxedEnvironment

GROUND = 4
"""The superflat world's grass level: bots stand at y=5, blocks are placed at y=5."""
BLOCK = "cobblestone"
MARKER = "gold_block"


def _xyz(name: str, description: str, block: bool = False) -> ToolSpec:
    properties: dict[str, Any] = {axis: {"type": "integer"} for axis in "xyz"}
    if block:
        properties["block"] = {"type": "string", "description": "e.g. cobblestone"}
    return ToolSpec(
        name=name,
        description=description,
        parameters={"type": "object", "properties": properties, "required": list(properties)},
    )


TOOLS = [
    ToolSpec(name="look", description="Your position, the other players, chat you heard."),
    _xyz("move_to", "Walk next to a position."),
    _xyz("dig", "Break the block at a position (within reach)."),
    _xyz("place", "Place a block from your inventory at a position, on the block below it.", True),
    ToolSpec(
        name="say",
        description="Chat to the team.",
        parameters={
            "type": "object",
            "properties": {"text": {"type": "string"}},
            "required": ["text"],
        },
    ),
    ToolSpec(name="inventory", description="The items you carry."),
]


def spots(seed: int, count: int) -> list[tuple[int, int, int]]:
    """The structure's spots: a row of `count` cells near the world's centre, from the seed.

    >>> spots(1, 4) == spots(1, 4) and len(set(spots(1, 4))) == 4
    True
    """
    rng = random.Random(seed)
    x0, z0 = rng.randint(4, 12), rng.randint(4, 12)
    along_x = rng.random() < 0.5
    return [
        (x0 + 2 * i, GROUND + 1, z0) if along_x else (x0, GROUND + 1, z0 + 2 * i)
        for i in range(count)
    ]


class TeamBuild(Task):
    """One agent of the team: a bot in the shared world."""

    def __init__(self, parameters: Mapping[str, Any]) -> None:
        super().__init__(parameters)
        self.reward_mode = str(parameters.get("reward", "team"))
        if self.reward_mode not in ("team", "own", "mixed"):
            raise ValueError(f"reward must be team, own or mixed, got {self.reward_mode!r}")
        self.team_wait = float(parameters.get("team_wait", 120.0))
        self.server: JsonLines | None = None
        self.bot: Bot | None = None
        self.actions: list[dict[str, Any]] = []

    async def start(self, run: RunContext) -> Observation:
        sandbox = run.sandbox
        self.server = await control(sandbox)
        targets = spots(run.seed, run.agents)
        await self.server.request(
            {
                "op": "setup",
                "epoch": sandbox.get("epoch", 1),
                "gives": [[f"agent{a}", BLOCK, 4] for a in range(run.agents)],
                "blocks": [[x, y - 1, z, MARKER] for x, y, z in targets],
            }
        )
        log = Path(sandbox.get("workdir", ".")) / f"bot-agent{run.agent}.log"
        self.bot = await Bot.join(sandbox, f"agent{run.agent}", self.server, log)
        x, y, z = targets[run.agent]
        marked = "; ".join(f"{tx} {ty} {tz}" for tx, ty, tz in targets)
        text = (
            f"You are agent{run.agent}, one of {run.agents} bots in a flat Minecraft world. "
            f"Team goal: put {BLOCK} on every marked spot ({MARKER} below it): {marked}. "
            f"Your spot: {x} {y} {z}. Use the tools; reply without a tool call when you are done."
        )
        return Observation(text, tools=TOOLS)

    async def respond(self, run: RunContext, reply: Message) -> Observation:
        if not reply.tool_calls:
            return await self._end(run)
        assert self.bot is not None
        results = []
        for call in reply.tool_calls:
            arguments = call.parsed_arguments()
            op = {"move_to": "goto"}.get(call.name, call.name)
            if call.name not in {tool.name for tool in TOOLS}:
                answer: dict[str, Any] = {"ok": False, "error": f"unknown tool {call.name!r}"}
            else:
                answer = await self.bot.act(op, **arguments)
            self.actions.append({"tool": call.name, "arguments": arguments, "answer": answer})
            results.append(Message.tool(json.dumps(answer), tool_call_id=call.id, name=call.name))
        return Observation(results)

    async def _end(self, run: RunContext) -> End:
        assert self.server is not None
        epoch = run.sandbox.get("epoch", 1)
        await self.server.request({"op": "finish", "epoch": epoch, "agent": run.agent})
        loop = asyncio.get_running_loop()
        deadline = loop.time() + self.team_wait
        finished: list[int] = []
        while loop.time() < deadline:
            answer = await self.server.request({"op": "finished", "epoch": epoch})
            finished = answer["finished"]
            if len(finished) >= run.agents:
                break
            await asyncio.sleep(0.2)
        targets = spots(run.seed, run.agents)
        names = (await self.server.request({"op": "blocks", "positions": targets}))["names"]
        built = [name == BLOCK for name in names]
        team = sum(built) / len(built)
        own = float(built[run.agent])
        reward = {"team": team, "own": own, "mixed": 0.5 * team + 0.5 * own}[self.reward_mode]
        return End(
            reward=reward,
            metrics={
                "team_built": team,
                "own_built": own,
                "actions": float(len(self.actions)),
                "team_finished": float(len(finished)),
            },
        )

    async def close(self, run: RunContext) -> None:
        if self.bot is not None:
            await self.bot.close()
        if self.server is not None:
            await self.server.close()


ACTIONS = {"b": "build", "w": "wait", "d": "dig", "s": "say"}
"""`compact`'s replies: one letter each (a tiny model's action vocabulary)."""
INVALID_PENALTY = 0.5
"""What a `compact` reply that is not one of the letters costs its own bot (taken off its
reward). Without it a reply that does nothing is worth as much as `w`, and the tiny model can
slide onto the cheapest such reply (an empty one) in a couple of steps: on seed 1 every reply
was empty from the third sampling checkpoint on, every reward 0, and no group had a signal left
to recover from."""


class CompactBuild(TeamBuild):
    """One bot of `compact`: a short view, one reply of one letter, one action in the world.

    `b` walks next to the bot's spot and places cobblestone on it (the demonstration's two
    tool calls), `d` digs the spot, `s` says hello in the chat, `w` does nothing; any other reply
    does nothing either. The bots and the world are the full environment's; the reward is read
    from the world the same way (`reward`: team, own or mixed), less `INVALID_PENALTY` for a
    reply that is not one of the letters (the bot's own part: its teammates are not charged).
    """

    async def start(self, run: RunContext) -> Observation:
        await super().start(run)
        x, y, z = spots(run.seed, run.agents)[run.agent]
        return Observation(f"agent{run.agent} spot {x} {y} {z}. b w d s?")

    async def respond(self, run: RunContext, reply: Message) -> Observation:
        assert self.bot is not None
        letter = reply.text.strip().lower()
        action = ACTIONS.get(letter[:1]) if len(letter) == 1 else None
        x, y, z = spots(run.seed, run.agents)[run.agent]
        calls: list[tuple[str, dict[str, Any]]] = []
        if action == "build":
            place = {"x": x, "y": y, "z": z, "block": BLOCK}
            calls = [("goto", {"x": x + 2, "y": y, "z": z}), ("place", place)]
        elif action == "dig":
            calls = [("goto", {"x": x + 2, "y": y, "z": z}), ("dig", {"x": x, "y": y, "z": z})]
        elif action == "say":
            calls = [("say", {"text": "hello"})]
        for op, arguments in calls:
            answer = await self.bot.act(op, **arguments)
            self.actions.append({"tool": op, "arguments": arguments, "answer": answer})
        end = await self._end(run)
        invalid = action is None
        return End(
            reward=end.value - INVALID_PENALTY * invalid,
            metrics={**end.metrics, "invalid": float(invalid)},
        )


def compact_example(rng: random.Random) -> tuple[list[Message], str]:
    """A warm-up example for `compact`: a view of the right shape and a random letter."""
    agent, x, z = rng.randrange(4), rng.randint(4, 18), rng.randint(4, 18)
    view = f"agent{agent} spot {x} {GROUND + 1} {z}. b w d s?"
    return [Message.user(view)], rng.choice(sorted(ACTIONS))


def compact_script(prompt_text: str) -> str:
    """`compact`'s demonstration: build."""
    return "b"


_SPOT = re.compile(r"Your spot: (-?\d+) (-?\d+) (-?\d+)")


def builder_script(prompt_text: str) -> str:
    """A scripted player: walk to its spot, place cobblestone on it, tell the team, finish."""
    match = _SPOT.search(prompt_text)
    if match is None:
        return "I cannot find my spot."
    x, y, z = (int(v) for v in match.groups())
    step = prompt_text.count("<tool_response>")
    calls = [
        ("move_to", {"x": x + 2, "y": y, "z": z}),
        ("place", {"x": x, "y": y, "z": z, "block": BLOCK}),
        ("say", {"text": f"placed {BLOCK} at {x} {y} {z}"}),
    ]
    if step >= len(calls):
        return "Done."
    name, arguments = calls[step]
    return f'<tool_call>\n{{"name": "{name}", "arguments": {json.dumps(arguments)}}}\n</tool_call>'


environment = SandboxedEnvironment(
    name="minecraft_team",
    task=TeamBuild,
    parameters=[{"reward": "team"}],
    agents=4,
    group_size=4,
    max_turns=12,
    pool=MinecraftPool(),
    sampling={"max_tokens": 200},
    demonstration=builder_script,
    roles=["builder"] * 4,
)

compact = SandboxedEnvironment(
    name="minecraft_team-compact",
    task=CompactBuild,
    # The team's reward: the share of the four spots built. A bot that builds raises its whole
    # group's reward, so its group-relative advantage is positive on average (the others' moves
    # are noise it learns through); `rollout train --preset minecraft-cpu-tiny` learns it. A
    # reply that is no letter costs its own bot `INVALID_PENALTY`.
    parameters=[{"reward": "team"}],
    agents=4,
    group_size=4,
    max_turns=2,
    pool=MinecraftPool(),
    # One token: the action itself. With room for more, the stop token after a letter is
    # trained too, and negative advantages on the rarer letters' stops taught seed 0 to run
    # on after `b` (`bbb`, no action) at step 17, where no group had a signal left.
    sampling={"max_tokens": 1, "temperature": 1.0},
    warmup=compact_example,
    demonstration=compact_script,
    roles=["builder"] * 4,
)
