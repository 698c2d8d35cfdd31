"""A computer's server: the small authenticated API through which agents use it.

`python -m rollout.sandboxes.computer.server --workdir W --host H --port P --name N`, started
by `ComputerPool` under `unshare --mount` (its disk is a tmpfs only this process's namespace
sees). It reads the template from `W/template.json` and its first secret from `W/secret`
(deleted once read), sets the computer up (`Machine.setup`), listens, and writes `W/ready`.

Every request must carry `Authorization: Bearer SECRET`; without it (or with a former secret)
the answer is 401 and nothing else, on every path. The secret is the claim's: the claimer
replaces it on each claim (`POST /claim`), so a runner that lost its claim cannot touch the
next episode's computer. JSON in, JSON out; bad input is a 400 naming the field and the value.

- `GET /health`: `{"ok": true}`.
- `POST /claim {"secret"}`: the new claim's secret (and a fresh set of marks).
- `POST /reset`: kill every process of the computer and make its disk again from the
  template (`Machine.reset`), without a new process.
- `POST /run {"command", "cwd", "env", "stdin", "timeout", "connect"}`: run a command (a list
  of arguments, or a string for `/bin/sh -c`) and answer its exit code, output, time and the
  limits it hit; `connect` lists `HOST:PORT` addresses the command may reach, each at
  `127.0.0.1:PORT` inside (`rollout.sandboxes.computer.relay`).
- `POST /read {"path"}` -> `{"content": base64}`, `POST /write {"path", "content": base64}`.
- `GET /usage`: memory, processes, CPU time, disk, commands, and the limits.
- `POST /marks {"name"}`, `GET /marks`: names the claim's agents set (a team's finish line), out
  of the sandboxed commands' reach.
"""

from __future__ import annotations

import argparse
import asyncio
import base64
import binascii
import contextlib
import hmac
import json
import logging
import signal
import sys
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route as HttpRoute

from rollout.errors import describe, problems
from rollout.net.server import AppServer
from rollout.sandboxes.computer.machine import (
    READY_FILE,
    SECRET_FILE,
    TEMPLATE_FILE,
    Machine,
    Route,
    with_output,
)
from rollout.sandboxes.computer.template import WORKSPACE, Template
from rollout.sandboxes.errors import SandboxError

log = logging.getLogger("rollout.sandboxes.computer")


class _Body(BaseModel):
    model_config = ConfigDict(extra="forbid")


class RunBody(_Body):
    command: list[str] | str
    cwd: str = WORKSPACE
    env: dict[str, str] = Field(default_factory=dict)
    stdin: str | None = None
    timeout: float | None = Field(default=None, gt=0)
    connect: list[str] = Field(default_factory=list)

    @field_validator("command")
    @classmethod
    def _not_empty(cls, value: list[str] | str) -> list[str] | str:
        if not value:
            raise ValueError("must not be empty")
        return value

    @field_validator("cwd")
    @classmethod
    def _absolute(cls, value: str) -> str:
        if not value.startswith("/"):
            raise ValueError("must be an absolute path inside the computer")
        return value

    def routes(self) -> list[Route]:
        routes: list[Route] = []
        for address in self.connect:
            host, _, port = address.rpartition(":")
            if not host or not port.isdigit() or not 0 < int(port) < 65536:
                raise SandboxError(f"connect: each address must be HOST:PORT, got {address!r}")
            if any(route.port == int(port) for route in routes):
                raise SandboxError(f"connect: two addresses with port {port}: {self.connect}")
            routes.append(Route(host.strip("[]"), int(port)))
        return routes


class PathBody(_Body):
    path: str = Field(min_length=1)


class WriteBody(PathBody):
    content: str


class SecretBody(_Body):
    secret: str = Field(min_length=16)


class MarkBody(_Body):
    name: str = Field(min_length=1, max_length=200)


class _Unreadable(SandboxError):
    """A file that is not there (or cannot be read): a 404."""


def _error(status: int, message: str) -> JSONResponse:
    return JSONResponse({"error": message}, status_code=status)


class ComputerApi:
    """The HTTP API over a `Machine` (see the module docstring)."""

    def __init__(self, machine: Machine, secret: str) -> None:
        self.machine = machine
        self.secret = secret
        self.marks: list[str] = []
        routes = [
            HttpRoute("/health", self.health, methods=["GET"]),
            HttpRoute("/claim", self.claim, methods=["POST"]),
            HttpRoute("/reset", self.reset, methods=["POST"]),
            HttpRoute("/run", self.run, methods=["POST"]),
            HttpRoute("/read", self.read, methods=["POST"]),
            HttpRoute("/write", self.write, methods=["POST"]),
            HttpRoute("/usage", self.usage, methods=["GET"]),
            HttpRoute("/marks", self.list_marks, methods=["GET"]),
            HttpRoute("/marks", self.mark, methods=["POST"]),
        ]
        self.app = Starlette(routes=routes)

    async def __call__(self, scope: Any, receive: Any, send: Any) -> None:
        """Refuse every request without the claim's secret, before routing."""
        if scope["type"] == "http":
            headers = dict(scope.get("headers") or [])
            given = headers.get(b"authorization", b"").decode("latin-1")
            expected = f"Bearer {self.secret}"
            if not hmac.compare_digest(given.encode(), expected.encode()):
                response = _error(401, "this computer needs its claim's secret")
                await response(scope, receive, send)
                return
        await self.app(scope, receive, send)

    @staticmethod
    async def _body(request: Request, model: type[_Body]) -> Any:
        try:
            return model.model_validate(json.loads(await request.body() or b"{}"))
        except json.JSONDecodeError as error:
            raise SandboxError(f"the body is not JSON: {error}") from error
        except ValidationError as error:
            raise SandboxError(problems(error)) from error

    async def _answer(self, handler: Callable[[], Awaitable[Any]]) -> Response:
        try:
            return JSONResponse(await handler())
        except _Unreadable as error:
            return _error(404, str(error))
        except SandboxError as error:
            return _error(400, str(error))
        except OSError as error:  # the host failed it (not the request): say what, not a bare 500
            log.exception("computer: a request failed")
            return _error(500, f"computer: {error}")

    async def health(self, request: Request) -> Response:
        return JSONResponse({"ok": True, "running": self.machine.running})

    async def claim(self, request: Request) -> Response:
        async def go() -> dict[str, Any]:
            body: SecretBody = await self._body(request, SecretBody)
            self.secret = body.secret
            self.marks = []
            return {"ok": True}

        return await self._answer(go)

    async def reset(self, request: Request) -> Response:
        async def go() -> dict[str, Any]:
            await self.machine.reset()
            self.marks = []
            return {"ok": True}

        return await self._answer(go)

    async def run(self, request: Request) -> Response:
        async def go() -> dict[str, Any]:
            body: RunBody = await self._body(request, RunBody)
            argv = (
                ["/bin/sh", "-c", body.command] if isinstance(body.command, str) else body.command
            )
            return with_output(
                *await self.machine.execute(
                    argv,
                    cwd=body.cwd,
                    env=body.env,
                    stdin=None if body.stdin is None else body.stdin.encode(),
                    timeout=body.timeout,
                    routes=body.routes(),
                )
            )

        return await self._answer(go)

    async def read(self, request: Request) -> Response:
        async def go() -> dict[str, Any]:
            body: PathBody = await self._body(request, PathBody)
            try:
                data = await self.machine.read(body.path)
            except SandboxError as error:
                raise _Unreadable(f"cannot read {describe(body.path)}: {error}") from error
            return {"content": base64.b64encode(data).decode()}

        return await self._answer(go)

    async def write(self, request: Request) -> Response:
        async def go() -> dict[str, Any]:
            body: WriteBody = await self._body(request, WriteBody)
            try:
                data = base64.b64decode(body.content, validate=True)
            except binascii.Error as error:
                raise SandboxError(
                    f"content must be base64, got {describe(body.content)}"
                ) from error
            try:
                await self.machine.write(body.path, data)
            except SandboxError as error:
                raise SandboxError(f"cannot write {describe(body.path)}: {error}") from error
            return {"ok": True, "bytes": len(data)}

        return await self._answer(go)

    async def usage(self, request: Request) -> Response:
        return JSONResponse(self.machine.usage())

    async def list_marks(self, request: Request) -> Response:
        return JSONResponse({"marks": self.marks})

    async def mark(self, request: Request) -> Response:
        async def go() -> dict[str, Any]:
            body: MarkBody = await self._body(request, MarkBody)
            if body.name not in self.marks:
                self.marks.append(body.name)
            return {"marks": self.marks}

        return await self._answer(go)


async def serve(workdir: Path, host: str, port: int, name: str) -> None:
    """Set the computer up, serve its API until SIGTERM or SIGINT, then kill its processes."""
    template = Template.from_json(json.loads((workdir / TEMPLATE_FILE).read_text()))
    secret_file = workdir / SECRET_FILE
    secret = secret_file.read_text().strip()
    secret_file.unlink()
    machine = Machine(workdir, template, name)
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set)
    try:
        await machine.setup()
        server = await AppServer(ComputerApi(machine, secret), host=host, port=port).start()
        (workdir / READY_FILE).write_text(f"{server.port}\n")
        log.info("computer %s serving on %s:%s", name, host, server.port)
        try:
            await stop.wait()
        finally:
            with contextlib.suppress(Exception):
                await asyncio.wait_for(server.stop(), 5)
    finally:
        await machine.close()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description="A computer's server (started by ComputerPool).")
    parser.add_argument("--workdir", type=Path, required=True)
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, required=True)
    parser.add_argument("--name", required=True)
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(message)s")
    try:
        asyncio.run(serve(args.workdir, args.host, args.port, args.name))
    except SandboxError as error:
        print(f"computer: {error}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
