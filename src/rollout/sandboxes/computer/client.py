"""`Computer`: an agent's handle on its episode's computer, from any host.

`Computer.of(run.sandbox)` reaches the computer at the address and with the claim's secret in
the instance's details; `run` runs a command inside it and returns a `CommandResult` (exit code,
output, time, and the limits it hit, each as a sentence), `read`/`write` move files, `usage`
says what it uses, `mark`/`marks` keep a team's finish line. `loopback_route(url)` turns an
address outside (the gateway's) into the one a command reaches inside, and the `connect` entry
that lets it through.

Example (with a running computer; `tests/sandboxes/test_computer_isolation.py` runs these):

    >>> async def demo(details):  # doctest: +SKIP
    ...     async with Computer.of(details) as computer:
    ...         await computer.write("hello.txt", "hi")
    ...         result = await computer.run("cat hello.txt && sleep 9", timeout=1)
    ...         return result.stdout, result.limits
    ('hi', ('wall-clock limit: every process was killed after 1 s',))
"""

from __future__ import annotations

import base64
import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from types import TracebackType
from typing import Any
from urllib.parse import urlsplit, urlunsplit

from rollout.net.client import JsonHttpClient, TransportError
from rollout.sandboxes.errors import SandboxError

REQUEST_SECONDS = 3600.0
"""The HTTP timeout of one request (a command's own limit is the computer's)."""


class ComputerError(SandboxError):
    """The computer refused a request or could not be reached (the message says which)."""

    def __init__(self, message: str, status: int | None = None) -> None:
        super().__init__(message)
        self.status = status


@dataclass(frozen=True)
class CommandResult:
    """How a command ended inside the computer."""

    exit_code: int
    """The command's exit code; 128 + N when signal N ended it."""
    stdout: str
    stderr: str
    seconds: float
    cpu_seconds: float
    timed_out: bool
    limits: tuple[str, ...]
    """Each limit the command hit, as a sentence ("wall-clock limit: ...")."""

    @property
    def ok(self) -> bool:
        """Exit code 0 and no limit hit."""
        return self.exit_code == 0 and not self.limits

    @property
    def reason(self) -> str:
        """One line: the exit code and the limits hit.

        >>> CommandResult(137, "", "", 2.0, 0.0, True, ("wall-clock limit: killed",)).reason
        'exit code 137; wall-clock limit: killed'
        """
        return "; ".join([f"exit code {self.exit_code}", *self.limits])

    def report(self, limit: int = 4000) -> str:
        """What to show the model (and the transcript): the reason, then the output, each
        stream cut to its last `limit` characters."""
        parts = [self.reason]
        if self.stdout:
            parts.append(self.stdout[-limit:])
        if self.stderr:
            parts.append(f"[stderr]\n{self.stderr[-limit:]}")
        return "\n".join(parts)

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> CommandResult:
        return cls(
            exit_code=int(data["exit_code"]),
            stdout=str(data["stdout"]),
            stderr=str(data["stderr"]),
            seconds=float(data["seconds"]),
            cpu_seconds=float(data["cpu_seconds"]),
            timed_out=bool(data["timed_out"]),
            limits=tuple(data["limits"]),
        )


def is_computer(details: Mapping[str, Any]) -> bool:
    """Whether an instance's details are a computer's."""
    return details.get("kind") == "computer"


def usage_line(usage: Mapping[str, Any]) -> str:
    """A computer's usage in one line (what `rollout sandboxes list` shows).

    >>> usage_line({"memory_bytes": 3 << 20, "memory_limit_bytes": 2 << 30, "processes": 2,
    ...             "process_limit": 256, "disk_bytes": 1 << 20, "disk_limit_bytes": 512 << 20,
    ...             "cpu_seconds": 1.25, "commands": 7, "running": 1})
    'memory 3/2048 MiB, 2/256 processes, disk 1/512 MiB, cpu 1.2 s, 7 commands (1 running)'
    """
    mib = 1 << 20
    return (
        f"memory {usage['memory_bytes'] // mib}/{usage['memory_limit_bytes'] // mib} MiB, "
        f"{usage['processes']}/{usage['process_limit']} processes, "
        f"disk {usage['disk_bytes'] // mib}/{usage['disk_limit_bytes'] // mib} MiB, "
        f"cpu {usage['cpu_seconds']:.1f} s, "
        f"{usage['commands']} commands ({usage['running']} running)"
    )


async def computer_usage(details: Mapping[str, Any], seconds: float = 3.0) -> dict[str, Any] | None:
    """A computer's usage, or None when it does not answer within `seconds`."""
    try:
        async with Computer.of(details, timeout=seconds) as computer:
            return await computer.usage()
    except SandboxError:
        return None


def loopback_route(url: str) -> tuple[str, str]:
    """(the URL a command uses inside, the `connect` entry that relays it out).

    >>> loopback_route("http://10.1.2.3:8000/v1")
    ('http://127.0.0.1:8000/v1', '10.1.2.3:8000')
    """
    parts = urlsplit(url)
    if parts.hostname is None or parts.port is None:
        raise SandboxError(f"connect: the URL must name a host and a port, got {url!r}")
    host = f"[{parts.hostname}]" if ":" in parts.hostname else parts.hostname
    inside = urlunsplit(parts._replace(netloc=f"127.0.0.1:{parts.port}"))
    return inside, f"{host}:{parts.port}"


class Computer:
    """A client of one computer's API (see the module docstring).

    Args:
        url: `http://HOST:PORT` of its server.
        secret: The claim's secret.
        timeout: The HTTP timeout of one request, in seconds.
    """

    def __init__(self, url: str, secret: str, timeout: float = REQUEST_SECONDS) -> None:
        self.url = url.rstrip("/")
        self._secret = secret
        self._http = JsonHttpClient(timeout=timeout, max_connections=16)

    @classmethod
    def of(cls, details: Mapping[str, Any], timeout: float = REQUEST_SECONDS) -> Computer:
        """The computer of an instance's details (`RunContext.sandbox`)."""
        try:
            url = f"http://{details['host']}:{details['port']}"
            return cls(url, str(details["secret"]), timeout)
        except KeyError as error:
            raise SandboxError(
                f"not a computer's details: {error.args[0]!r} is missing (keys: {sorted(details)})"
            ) from None

    async def __aenter__(self) -> Computer:
        return self

    async def __aexit__(
        self,
        kind: type[BaseException] | None,
        error: BaseException | None,
        trace: TracebackType | None,
    ) -> None:
        await self.close()

    async def close(self) -> None:
        await self._http.close()

    async def _call(self, method: str, path: str, body: Mapping[str, Any] | None = None) -> Any:
        try:
            response = await self._http.request(
                method,
                f"{self.url}{path}",
                data=None if body is None else json.dumps(body),
                headers={
                    "Authorization": f"Bearer {self._secret}",
                    "Content-Type": "application/json",
                },
            )
        except TransportError as error:
            raise ComputerError(f"computer at {self.url} is unreachable: {error}") from error
        try:
            answer = json.loads(response.body)
        except json.JSONDecodeError:
            answer = {"error": response.text[:200]}
        if response.status != 200:
            message = answer.get("error") if isinstance(answer, dict) else answer
            raise ComputerError(
                f"computer at {self.url}: {path} answered {response.status}: {message}",
                response.status,
            )
        return answer

    async def run(
        self,
        command: str | Sequence[str],
        *,
        timeout: float | None = None,  # noqa: ASYNC109 - the computer enforces it
        cwd: str | None = None,
        env: Mapping[str, str] | None = None,
        stdin: str | None = None,
        connect: Sequence[str] = (),
    ) -> CommandResult:
        """Run a command inside the computer (a string runs under `/bin/sh -c`).

        Args:
            command: The command.
            timeout: Its wall-clock limit in seconds (at most the template's).
            cwd: Where it starts (default `/workspace`).
            env: Its own variables.
            stdin: Its standard input.
            connect: `HOST:PORT` addresses it may reach, each at `127.0.0.1:PORT` inside.
        """
        body: dict[str, Any] = {
            "command": command if isinstance(command, str) else list(command),
            "env": dict(env or {}),
            "connect": list(connect),
        }
        if timeout is not None:
            body["timeout"] = timeout
        if cwd is not None:
            body["cwd"] = cwd
        if stdin is not None:
            body["stdin"] = stdin
        return CommandResult.from_json(await self._call("POST", "/run", body))

    async def read(self, path: str) -> bytes:
        """A file's content (relative paths are in `/workspace`). Raises ComputerError (404)
        when it is not there."""
        answer = await self._call("POST", "/read", {"path": path})
        return base64.b64decode(answer["content"])

    async def read_text(self, path: str) -> str:
        return (await self.read(path)).decode(errors="replace")

    async def exists(self, path: str) -> bool:
        """Whether a file is there (read inside the computer)."""
        try:
            await self.read(path)
        except ComputerError as error:
            if error.status == 404:
                return False
            raise
        return True

    async def write(self, path: str, content: str | bytes) -> None:
        """Write a file, making its folders."""
        data = content.encode() if isinstance(content, str) else content
        await self._call(
            "POST", "/write", {"path": path, "content": base64.b64encode(data).decode()}
        )

    async def usage(self) -> dict[str, Any]:
        """Memory, processes, CPU time, disk and commands, with the limits."""
        return await self._call("GET", "/usage")

    async def health(self) -> bool:
        """Whether the computer answers with this secret."""
        try:
            await self._call("GET", "/health")
        except ComputerError:
            return False
        return True

    async def mark(self, name: str) -> list[str]:
        """Set a mark of this claim (e.g. `finished-0`); returns every mark set."""
        return list((await self._call("POST", "/marks", {"name": name}))["marks"])

    async def marks(self) -> list[str]:
        return list((await self._call("GET", "/marks"))["marks"])

    async def reset(self) -> None:
        """Kill every process of the computer and make its disk again from its template."""
        await self._call("POST", "/reset", {})

    async def rotate(self, secret: str) -> None:
        """Replace the claim's secret (the claimer does, on each claim)."""
        await self._call("POST", "/claim", {"secret": secret})
        self._secret = secret
