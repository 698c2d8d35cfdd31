"""One gridworld sandbox instance: a shared grid served over JSON lines on a TCP port.

    python -S server.py --port PORT [--idle-exit SECONDS]

Standard library only (it starts in a few milliseconds with `-S`). Each request is one JSON
line; each answer is one JSON line, `{"ok": true, ...}` or `{"ok": false, "error": "..."}`.
Every request but `reset` names the claim's `epoch`: the first `join` of a higher epoch lays out
a new world from the episode's seed, and a request from an older epoch (a runner that lost its
claim) is refused, so it can never act in a later episode's world.

- `join {epoch, agent, agents, seed, size, reach}`: lay out the world (once per epoch; goals
  1 to `reach` steps from their agent's start, default 3); the view.
- `move {epoch, agent, direction}`: one step up/down/left/right unless a wall or another agent
  is in the way; the view.
- `say {epoch, agent, text}`: a message every other agent sees in its next view.
- `finish {epoch, agent}` then `wait_all {epoch, timeout}`: the team's outcome once every agent
  has finished (or the timeout passed).
- `reset`: forget the world.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import random
from typing import Any

DIRECTIONS = {"up": (0, 1), "down": (0, -1), "left": (-1, 0), "right": (1, 0)}


class World:
    """Agents on a `size` x `size` grid, each with a goal cell."""

    def __init__(self, epoch: int, agents: int, seed: int, size: int, reach: int = 3) -> None:
        rng = random.Random(seed)
        cells = [(x, y) for x in range(size) for y in range(size)]
        rng.shuffle(cells)
        self.epoch = epoch
        self.size = size
        self.agents = agents
        self.positions = cells[:agents]
        self.goals: list[tuple[int, int]] = []
        for agent in range(agents):
            self.goals.append(rng.choice(self._goal_options(agent, max(reach, 1))))
        self.start_distance = [self.distance(a) for a in range(agents)]
        self.finished: set[int] = set()
        self.messages: list[list[str]] = [[] for _ in range(agents)]
        self.changed = asyncio.Event()

    def _goal_options(self, agent: int, reach: int) -> list[tuple[int, int]]:
        """Free cells 1 to `reach` steps from the agent's start (further if none is free)."""
        x, y = self.positions[agent]
        taken = {*self.positions, *self.goals}
        for limit in range(reach, 2 * self.size):
            options = [
                (gx, gy)
                for gx in range(self.size)
                for gy in range(self.size)
                if 1 <= abs(gx - x) + abs(gy - y) <= limit and (gx, gy) not in taken
            ]
            if options:
                return options
        raise ValueError(f"no free cell for agent {agent}'s goal on a {self.size}x{self.size} grid")

    def distance(self, agent: int) -> int:
        (x, y), (gx, gy) = self.positions[agent], self.goals[agent]
        return abs(gx - x) + abs(gy - y)

    def move(self, agent: int, direction: str) -> str:
        if direction not in DIRECTIONS:
            return f"unknown direction {direction!r}"
        dx, dy = DIRECTIONS[direction]
        x, y = self.positions[agent]
        target = (x + dx, y + dy)
        if not (0 <= target[0] < self.size and 0 <= target[1] < self.size):
            return "blocked by the wall"
        if target in self.positions:
            return "blocked by a teammate"
        self.positions[agent] = target
        return "moved"

    def view(self, agent: int) -> dict[str, Any]:
        """What `agent` sees: its offset to its goal, its teammates' offsets, messages."""
        x, y = self.positions[agent]
        gx, gy = self.goals[agent]
        mates = [
            [other, self.positions[other][0] - x, self.positions[other][1] - y]
            for other in range(self.agents)
            if other != agent
        ]
        heard, self.messages[agent] = self.messages[agent], []
        return {
            "goal": [gx - x, gy - y],
            "mates": mates,
            "heard": heard,
            "at_goal": (x, y) == (gx, gy),
        }

    def outcome(self) -> dict[str, Any]:
        reached = [self.distance(a) == 0 for a in range(self.agents)]
        return {
            "reached": reached,
            "distance": [self.distance(a) for a in range(self.agents)],
            "start_distance": self.start_distance,
            "finished": sorted(self.finished),
        }


class Server:
    def __init__(self) -> None:
        self.world: World | None = None
        self.last_request = asyncio.get_running_loop().time()

    def _world(self, request: dict[str, Any]) -> World:
        epoch = int(request["epoch"])
        if self.world is None or epoch != self.world.epoch:
            current = None if self.world is None else self.world.epoch
            raise ValueError(f"epoch {epoch} is not the world's (current: {current})")
        return self.world

    async def handle(self, request: dict[str, Any]) -> dict[str, Any]:
        self.last_request = asyncio.get_running_loop().time()
        op = request.get("op")
        if op == "reset":
            self.world = None
            return {}
        if op == "ping":
            return {"epoch": None if self.world is None else self.world.epoch}
        if op == "join":
            epoch = int(request["epoch"])
            if self.world is not None and epoch < self.world.epoch:
                raise ValueError(f"stale epoch {epoch} < {self.world.epoch}")
            if self.world is None or epoch > self.world.epoch:
                self.world = World(
                    epoch,
                    int(request["agents"]),
                    int(request["seed"]),
                    int(request["size"]),
                    int(request.get("reach", 3)),
                )
            return self.world.view(int(request["agent"]))
        world = self._world(request)
        agent = int(request.get("agent", 0))
        if op == "move":
            result = world.move(agent, str(request.get("direction")))
            return {"result": result, **world.view(agent)}
        if op == "look":
            return world.view(agent)
        if op == "say":
            for other in range(world.agents):
                if other != agent:
                    world.messages[other].append(f"agent {agent}: {request.get('text', '')}")
            return {}
        if op == "finish":
            world.finished.add(agent)
            world.changed.set()
            return world.outcome()
        if op == "wait_all":
            deadline = asyncio.get_running_loop().time() + float(request.get("timeout", 30))
            while len(world.finished) < world.agents:
                world.changed.clear()
                left = deadline - asyncio.get_running_loop().time()
                if left <= 0:
                    break
                try:
                    await asyncio.wait_for(world.changed.wait(), left)
                except TimeoutError:
                    break
            return world.outcome()
        raise ValueError(f"unknown op {op!r}")

    async def idle(self, limit: float) -> None:
        """Return once no request has come for `limit` seconds."""
        loop = asyncio.get_running_loop()
        idle = loop.time() - self.last_request
        while idle < limit:
            await asyncio.sleep(limit - idle)
            idle = loop.time() - self.last_request

    async def serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            while line := await reader.readline():
                try:
                    answer = {"ok": True, **await self.handle(json.loads(line))}
                except Exception as error:  # every bad request gets an answer, never a crash
                    answer = {"ok": False, "error": f"{type(error).__name__}: {error}"}
                writer.write(json.dumps(answer).encode() + b"\n")
                await writer.drain()
        except ConnectionError:
            pass
        finally:
            writer.close()


async def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, required=True)
    parser.add_argument("--idle-exit", type=float, default=900.0)
    arguments = parser.parse_args()
    world = Server()
    server = await asyncio.start_server(world.serve, arguments.host, arguments.port)
    async with server:
        # An instance nobody talks to for this long was left behind (its runners and ledger are
        # gone): exit rather than linger. A pool's health check then replaces it if needed.
        await world.idle(arguments.idle_exit)


if __name__ == "__main__":
    asyncio.run(main())
