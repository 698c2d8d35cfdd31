"""The Python side of the Minecraft world: the server pool, its control channel, the bots.

- `MinecraftPool`: a sandbox instance is one `server.js` process (flying-squid, offline,
  superflat, 1.21.4) with a JSON-lines control port; a reset is a fresh world folder and a
  restart (~1 s here, plus the bots' reconnection).
- `control(details)`: the control channel (set up a task's world, read blocks, the team's
  finish line, one-at-a-time bot logins).
- `Bot`: one agent's mineflayer bot, a `bot.js` process spoken to over JSON lines on its
  stdin/stdout (its logs go to stderr, into a file next to the server's).

The Node packages are pinned in `package.json`; `npm ci` in this folder installs them (CI does).
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import json
import shutil
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from rollout.sandboxes import JsonLines, ProcessPool, SandboxError, connect
from rollout.sandboxes.process import port_open

HERE = Path(__file__).resolve().parent
SERVER_JS = HERE / "server.js"
BOT_JS = HERE / "bot.js"
CONTROL_FILE = "control.json"


def node() -> str:
    """The `node` executable; a SandboxError that says what to install when it is missing."""
    found = shutil.which("node")
    if found is None:
        raise SandboxError("minecraft: `node` (Node.js 18 or newer) is not on PATH")
    if not (HERE / "node_modules" / "flying-squid").is_dir():
        raise SandboxError(
            f"minecraft: the Node packages are not installed: run `npm ci` in {HERE}"
        )
    return found


class MinecraftPool(ProcessPool):
    """One flying-squid server per instance; four bots (seats) play in it."""

    name = "minecraft"
    seats = 4
    max_instances = 2
    startup_timeout = 90.0

    def command(self, port: int, workdir: Path, host: str) -> Sequence[str]:
        world = str(workdir / "world")
        return [node(), str(SERVER_JS), "--host", host, "--port", str(port), "--world", world]

    async def ready(self, details: Mapping[str, Any]) -> bool:
        control_file = Path(details["workdir"]) / CONTROL_FILE
        return control_file.exists() and await port_open(details["host"], details["port"])

    async def start(self, workdir: Path) -> dict[str, Any]:
        (workdir / CONTROL_FILE).unlink(missing_ok=True)
        details = await super().start(workdir)
        info = json.loads((workdir / CONTROL_FILE).read_text())
        return {**details, "control_port": info["control_port"]}

    async def health(self, details: Mapping[str, Any]) -> bool:
        if not await super().health(details):
            return False
        try:
            channel = await control(details)
        except SandboxError:
            return False
        try:
            await channel.request({"op": "ping"}, timeout=10)
            return True
        except SandboxError:
            return False
        finally:
            await channel.close()


async def control(details: Mapping[str, Any]) -> JsonLines:
    """A control channel to the instance's server."""
    return await connect(details["host"], details["control_port"], "minecraft control")


class Bot:
    """One agent's mineflayer bot (a `bot.js` process)."""

    def __init__(self, process: asyncio.subprocess.Process, username: str) -> None:
        self.process = process
        self.username = username
        assert process.stdout is not None and process.stdin is not None
        self.channel = JsonLines(process.stdout, process.stdin, f"bot {username}")
        self._ids = itertools.count(1)

    @classmethod
    async def join(
        cls, details: Mapping[str, Any], username: str, server: JsonLines, log: Path
    ) -> Bot:
        """Start the bot, wait for the server's login turn, log in and spawn."""
        with log.open("ab") as stderr:
            process = await asyncio.create_subprocess_exec(
                node(),
                str(BOT_JS),
                "--host",
                str(details["host"]),
                "--port",
                str(details["port"]),
                "--username",
                username,
                stdin=asyncio.subprocess.PIPE,
                stdout=asyncio.subprocess.PIPE,
                stderr=stderr,
                limit=1 << 20,
            )
        bot = cls(process, username)
        try:
            await bot._expect("loaded", timeout=120)
            await server.request({"op": "join_turn", "username": username}, timeout=300)
            try:
                assert process.stdin is not None
                process.stdin.write(b'{"op": "connect"}\n')
                await process.stdin.drain()
                await bot._expect("spawned", timeout=60)
            finally:
                await server.request({"op": "join_done", "username": username})
        except BaseException:
            await bot.close()
            raise
        return bot

    async def _expect(self, event: str, timeout: float) -> dict[str, Any]:  # noqa: ASYNC109
        message = await self.channel.read(timeout)
        if message.get("event") != event:
            raise SandboxError(f"bot {self.username}: expected {event!r}, got {message}")
        return message

    async def act(self, op: str, **arguments: Any) -> dict[str, Any]:
        """One operation (see bot.js); the answer, `{"ok": false, "error"}` included."""
        answer = await self.channel.request(
            {"id": next(self._ids), "op": op, **arguments}, timeout=60, check=False
        )
        return {k: v for k, v in answer.items() if k != "id"}

    async def close(self) -> None:
        if self.process.returncode is None:
            with contextlib.suppress(Exception):
                await self.channel.close()  # stdin closed: the bot quits
            try:
                await asyncio.wait_for(self.process.wait(), 3)
            except TimeoutError:
                self.process.kill()
                await self.process.wait()
