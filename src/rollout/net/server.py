"""Run an ASGI app under uvicorn inside the current event loop, on a chosen or free port."""

from __future__ import annotations

import asyncio
import contextlib
import errno
import socket
from collections.abc import Iterator
from typing import Any

import uvicorn

from rollout.errors import RolloutError


class ServerError(RolloutError, OSError):
    """A server could not start listening (the port is taken, the address is not ours)."""


def free_port(host: str = "127.0.0.1") -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind((host, 0))
        return int(sock.getsockname()[1])


def bind(host: str, port: int) -> socket.socket:
    """A TCP socket bound to `host:port` (0: a free port), ready to listen.

    Raises:
        ServerError: one line naming the address: the port is in use, or the address is not
            this machine's.
    """
    try:
        family, kind, proto, _, address = socket.getaddrinfo(
            host, port, type=socket.SOCK_STREAM, flags=socket.AI_PASSIVE
        )[0]
    except socket.gaierror as error:
        raise ServerError(f"cannot listen on {host}:{port}: {error.strerror}") from None
    sock = socket.socket(family, kind, proto)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    try:
        sock.bind(address)
    except OSError as error:
        sock.close()
        if error.errno == errno.EADDRINUSE:
            raise ServerError(
                f"port {port} on {host} is in use: stop what listens there or choose another "
                "port (--port)"
            ) from None
        raise ServerError(f"cannot listen on {host}:{port}: {error.strerror}") from None
    return sock


class _InProcessServer(uvicorn.Server):
    # uvicorn would take over SIGINT/SIGTERM for the whole process; the owner handles those.
    @contextlib.contextmanager
    def capture_signals(self) -> Iterator[None]:
        yield


class AppServer:
    """Runs an ASGI app with uvicorn in the current event loop.

    Example:
        ```python
        server = AppServer(app)              # 127.0.0.1, a free port
        await server.start()
        print(server.base_url)               # http://127.0.0.1:PORT/v1
        await server.stop()
        ```
    """

    def __init__(
        self, app: Any, *, host: str = "127.0.0.1", port: int = 0, log_level: str = "warning"
    ) -> None:
        self.app = app
        self.host = host
        self._port = port
        self._config = uvicorn.Config(
            app,
            host=host,
            port=port,
            log_level=log_level,
            access_log=False,
            lifespan="off",
            timeout_graceful_shutdown=2,
            timeout_keep_alive=30,
        )
        self._server = _InProcessServer(self._config)
        self._task: asyncio.Task[None] | None = None

    @property
    def port(self) -> int:
        if self._port == 0:
            raise ServerError("AppServer.port: the server is not started")
        return self._port

    @property
    def url(self) -> str:
        """`http://HOST:PORT`."""
        return self.root_url

    @property
    def root_url(self) -> str:
        """`http://HOST:PORT` (what ANTHROPIC_BASE_URL takes)."""
        return f"http://{self.host}:{self.port}"

    @property
    def base_url(self) -> str:
        """`http://HOST:PORT/v1` (what OpenAI clients take as base_url)."""
        return f"{self.root_url}/v1"

    async def _serve(self, sock: socket.socket) -> None:
        try:
            await self._server.serve(sockets=[sock])
        except SystemExit as exc:  # uvicorn exits the process when it cannot start
            raise ServerError(f"server could not listen on {self.host}:{self._port}") from exc
        finally:
            sock.close()

    async def start(self) -> AppServer:
        """Listen; returns once the server accepts connections (`port` is then known).

        Raises:
            ServerError: the port is in use (one line naming it), or the server did not start.
        """
        if self._task is not None:
            return self
        # Bound here, not by uvicorn: a port in use is one line naming it, not uvicorn's log.
        sock = bind(self.host, self._port)
        self._task = asyncio.create_task(self._serve(sock), name="app-server")
        while not self._server.started:
            if self._task.done():
                self._task.result()  # raises the startup error (port in use, ...)
                raise ServerError(f"server on {self.host}:{self._port} did not start")
            await asyncio.sleep(0.01)
        sockets = [s for server in self._server.servers for s in server.sockets]
        self._port = sockets[0].getsockname()[1]
        return self

    async def stop(self) -> None:
        if self._task is None:
            return
        self._server.should_exit = True
        try:
            await self._task
        finally:
            self._task = None

    async def __aenter__(self) -> AppServer:
        await self.start()
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.stop()
