"""The one way out of a computer's network: TCP on its loopback, relayed through a Unix socket.

A computer has no network (its own network namespace holds only loopback). A command that
needs one address outside (a coding-agent CLI needs the gateway) asks for it by `connect`:

- outside, the computer's server listens on a Unix socket per address (`serve_unix_to_tcp`)
  and forwards each connection to that address, and to nothing else;
- the socket's folder is bind-mounted read-only into the command's sandbox, and this file runs
  there as a script, with the host's Python: it listens on `127.0.0.1:PORT` (the address's own
  port), starts the command, relays every connection to the socket, and exits with the
  command's status (128 + the signal if a signal ended it):

      python3 -I -S relay.py 127.0.0.1:8000=/run/rollout/net/0.sock -- claude -p ...

So the command reaches `http://127.0.0.1:8000` and only that. This module imports nothing but
the standard library (it runs inside the sandbox, where rollout is not installed).
"""

from __future__ import annotations

import asyncio
import contextlib
import signal
import sys
from collections.abc import Awaitable, Callable

Opener = Callable[[], Awaitable[tuple[asyncio.StreamReader, asyncio.StreamWriter]]]


async def _pump(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
    try:
        while True:
            data = await reader.read(65536)
            if not data:
                break
            writer.write(data)
            await writer.drain()
    except (ConnectionError, OSError):
        pass
    finally:
        with contextlib.suppress(Exception):
            if writer.can_write_eof():
                writer.write_eof()


async def relay(
    reader: asyncio.StreamReader, writer: asyncio.StreamWriter, open_other: Opener
) -> None:
    """Copy bytes both ways between a connection and a new one to the other side."""
    try:
        other_reader, other_writer = await open_other()
    except OSError:
        writer.close()
        return
    try:
        await asyncio.gather(_pump(reader, other_writer), _pump(other_reader, writer))
    finally:
        for each in (writer, other_writer):
            each.close()


async def serve_unix_to_tcp(path: str, host: str, port: int) -> asyncio.AbstractServer:
    """Outside the computer: a Unix socket at `path` whose connections go to host:port."""

    async def handle(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        await relay(reader, writer, lambda: asyncio.open_connection(host, port))

    return await asyncio.start_unix_server(handle, path)


async def _inside(routes: list[tuple[int, str]], argv: list[str]) -> int:
    servers = []
    for port, socket_path in routes:

        async def handle(
            reader: asyncio.StreamReader,
            writer: asyncio.StreamWriter,
            socket_path: str = socket_path,
        ) -> None:
            await relay(reader, writer, lambda: asyncio.open_unix_connection(socket_path))

        servers.append(await asyncio.start_server(handle, "127.0.0.1", port))
    process = await asyncio.create_subprocess_exec(*argv)
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, process.send_signal, sig)
    code = await process.wait()
    for server in servers:
        server.close()
    return 128 - code if code < 0 else code


def main(args: list[str]) -> int:
    """`relay.py 127.0.0.1:PORT=SOCKET ... -- COMMAND ...` (see the module docstring)."""
    if "--" not in args:
        print("usage: relay.py 127.0.0.1:PORT=SOCKET ... -- COMMAND ...", file=sys.stderr)
        return 2
    split = args.index("--")
    routes = []
    for route in args[:split]:
        address, _, socket_path = route.partition("=")
        routes.append((int(address.rpartition(":")[2]), socket_path))
    try:
        return asyncio.run(_inside(routes, args[split + 1 :]))
    except FileNotFoundError as error:
        print(f"relay: {error}", file=sys.stderr)
        return 127


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
