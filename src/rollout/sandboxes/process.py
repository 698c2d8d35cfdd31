"""`ProcessPool`: instances that are local processes listening on a TCP port.

The default way sandboxes run: one process per instance on the runner's machine, started in its
own session so that it outlives the runner that started it (a killed runner's instance is reset
and reused by the next claimer instead of being lost). Its output goes to `sandbox.log` in the
instance's folder; its details are `{"host", "port", "pid", "workdir", "hostname"}`.

An instance listens on this machine's service address (`rollout.net.address.service_address`:
`ROLLOUT_HOST_ADDRESS`, else loopback while the ledger is this machine's embedded Postgres, else
the address of the interface that routes outward), and `host` in its details is an address the
runners of other machines reach: the agents of one episode may be played anywhere. Its `pid`
and `workdir` mean something only on the machine named by `hostname` (its host name), so the
health check looks at the process, and `stop` signals it, only there; elsewhere the health check
is the port alone and `stop` does nothing.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
import socket
import subprocess
import time
from abc import abstractmethod
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from rollout import procs
from rollout.net.address import advertised, service_address
from rollout.sandboxes.errors import SandboxError
from rollout.sandboxes.pool import Details, SandboxPool

LOG_NAME = "sandbox.log"

# Children this process started, so that their exit is reaped (no zombies counted as alive).
_children: dict[int, subprocess.Popen[bytes]] = {}


def free_port(host: str = "127.0.0.1") -> int:
    """A TCP port on `host` that nothing listens on right now."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind((host, 0))
        return sock.getsockname()[1]


def on_this_machine(details: Mapping[str, Any]) -> bool:
    """Whether an instance's process runs on this machine (its `hostname` is this one's; an
    instance recorded without one is taken to be local)."""
    return details.get("hostname", socket.gethostname()) == socket.gethostname()


def process_alive(pid: int) -> bool:
    """Whether process `pid` runs (a zombie does not count); a child of this process that
    exited is reaped here."""
    child = _children.get(pid)
    if child is not None:
        return child.poll() is None
    return procs.process_alive(pid)


async def port_open(host: str, port: int, timeout: float = 1.0) -> bool:  # noqa: ASYNC109
    """Whether a TCP connection to host:port succeeds."""
    try:
        _reader, writer = await asyncio.wait_for(asyncio.open_connection(host, port), timeout)
    except (OSError, TimeoutError):
        return False
    writer.close()
    with contextlib.suppress(OSError):
        await writer.wait_closed()
    return True


def log_tail(workdir: Path | str, lines: int = 15) -> str:
    """The last lines of an instance's log (for error messages)."""
    try:
        text = (Path(workdir) / LOG_NAME).read_text(errors="replace")
    except OSError:
        return "(no log)"
    return "\n".join(text.splitlines()[-lines:])


async def stop_process(pid: int, grace: float = 5.0) -> None:
    """SIGTERM the process group of `pid`, then SIGKILL it if it is still there after `grace`."""
    for sig, wait in ((signal.SIGTERM, grace), (signal.SIGKILL, 2.0)):
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(pid, sig)
        deadline = time.monotonic() + wait
        while time.monotonic() < deadline:
            if not process_alive(pid):
                _children.pop(pid, None)
                return
            await asyncio.sleep(0.05)
    _children.pop(pid, None)


def spawn(
    pool: str, command: Sequence[str], workdir: Path, environ: Mapping[str, str]
) -> subprocess.Popen[bytes]:
    """Start `command` in `workdir` in a session of its own, output to its log."""
    workdir.mkdir(parents=True, exist_ok=True)
    with open(workdir / LOG_NAME, "ab") as log:
        try:
            process = subprocess.Popen(
                list(command),
                stdin=subprocess.DEVNULL,
                stdout=log,
                stderr=subprocess.STDOUT,
                cwd=workdir,
                env={**os.environ, **environ},
                start_new_session=True,  # outlives its runner; stopped as a group
            )
        except OSError as error:
            raise SandboxError(f"{pool}: cannot run {command[0]!r}: {error}") from error
    _children[process.pid] = process
    return process


class ProcessPool(SandboxPool):
    """Instances are processes of `command(port, workdir, host)`; healthy while the port
    answers."""

    startup_timeout: float = 30.0

    @abstractmethod
    def command(self, port: int, workdir: Path, host: str) -> Sequence[str]:
        """The command line of one instance listening on `host` (an address of this machine)
        and `port`."""

    def environ(self) -> Mapping[str, str]:
        """Extra environment variables for the instance."""
        return {}

    async def ready(self, details: Mapping[str, Any]) -> bool:
        """Whether a just-started instance accepts connections (default: its port answers)."""
        return await port_open(details["host"], details["port"])

    async def start(self, workdir: Path) -> Details:
        bind = service_address()
        port = free_port(bind)
        process = spawn(self.name, self.command(port, workdir, bind), workdir, self.environ())
        details: Details = {
            "host": advertised(bind),
            "port": port,
            "pid": process.pid,
            "workdir": str(workdir),
            "hostname": socket.gethostname(),
        }
        deadline = time.monotonic() + self.startup_timeout
        while not await self.ready(details):
            if process.poll() is not None:
                _children.pop(process.pid, None)
                raise SandboxError(
                    f"{self.name}: instance exited with code {process.returncode} while "
                    f"starting; its log ends:\n{log_tail(workdir)}"
                )
            if time.monotonic() > deadline:
                await stop_process(process.pid)
                raise SandboxError(
                    f"{self.name}: instance did not accept connections on port {port} within "
                    f"{self.startup_timeout:.0f} s; its log ends:\n{log_tail(workdir)}"
                )
            await asyncio.sleep(0.05)
        return details

    async def health(self, details: Mapping[str, Any]) -> bool:
        pid = details.get("pid")
        if isinstance(pid, int) and on_this_machine(details) and not process_alive(pid):
            return False
        return await port_open(details["host"], details["port"])

    async def stop(self, details: Mapping[str, Any]) -> None:
        pid = details.get("pid")
        if isinstance(pid, int) and on_this_machine(details):
            await stop_process(pid)
