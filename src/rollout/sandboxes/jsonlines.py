"""A JSON-lines request/answer channel: one JSON object per line each way, in order.

Sandboxes and their agents' bodies often speak this (a gridworld server, a Minecraft bot bridge
on stdin/stdout): `JsonLines` wraps a reader/writer pair, `connect` opens one over TCP.
An answer `{"ok": false, "error": ...}` raises `SandboxError` naming the request.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
from typing import Any

from rollout.sandboxes.errors import SandboxError


class JsonLines:
    """Requests answered one by one over a stream pair."""

    def __init__(
        self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter | Any, name: str
    ) -> None:
        self.reader = reader
        self.writer = writer
        self.name = name
        self._lock = asyncio.Lock()

    async def read(self, timeout: float = 30.0) -> dict[str, Any]:  # noqa: ASYNC109
        """The next JSON object from the other side (lines that are not JSON are skipped)."""
        while True:
            try:
                line = await asyncio.wait_for(self.reader.readline(), timeout)
            except TimeoutError:
                raise SandboxError(f"{self.name}: no answer within {timeout:g} s") from None
            if not line:
                raise SandboxError(f"{self.name}: the connection closed")
            try:
                value = json.loads(line)
            except json.JSONDecodeError:
                continue
            if isinstance(value, dict):
                return value

    async def request(
        self,
        message: dict[str, Any],
        timeout: float = 30.0,  # noqa: ASYNC109
        *,
        check: bool = True,
    ) -> dict[str, Any]:
        """Send `message`, return its answer; `{"ok": false}` raises unless `check=False`."""
        async with self._lock:
            self.writer.write(json.dumps(message).encode() + b"\n")
            await self.writer.drain()
            answer = await self.read(timeout)
            while "id" in message and answer.get("id") != message["id"]:
                answer = await self.read(timeout)  # an event or a late answer
        if check and answer.get("ok") is False:
            raise SandboxError(f"{self.name}: {message.get('op')} failed: {answer.get('error')}")
        return answer

    async def close(self) -> None:
        self.writer.close()
        with contextlib.suppress(Exception):
            await self.writer.wait_closed()


async def connect(host: str, port: int, name: str, timeout: float = 10.0) -> JsonLines:  # noqa: ASYNC109
    """A `JsonLines` channel over a TCP connection to host:port."""
    try:
        reader, writer = await asyncio.wait_for(asyncio.open_connection(host, port), timeout)
    except (OSError, TimeoutError) as error:
        raise SandboxError(f"{name}: cannot connect to {host}:{port}: {error}") from error
    return JsonLines(reader, writer, name)
