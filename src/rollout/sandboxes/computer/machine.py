"""`Machine`: one computer, as its server runs it: a disk, cgroups, and commands in sandboxes.

The server process runs in a mount namespace of its own (`unshare --mount`): the computer's
disk is a size-limited tmpfs mounted there, invisible to the host and gone with the server.
`setup` fills it from the template (a cloned repository, files, a git commit, setup commands);
`execute` runs one command inside (`rollout.sandboxes.computer.bubblewrap`) within the computer's
cgroups and a wall-clock limit, and reports what it hit (`limits`); `read` and `write` move
files through a sandboxed command too, so a link the policy planted never leads outside;
`usage` says what the computer uses now.
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import os
import shutil
import signal
import subprocess
import tempfile
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from rollout.sandboxes.computer.bubblewrap import Disk, check_host, command_line, write_etc
from rollout.sandboxes.computer.cgroups import Cgroups
from rollout.sandboxes.computer.relay import serve_unix_to_tcp
from rollout.sandboxes.computer.template import WORKSPACE, Template
from rollout.sandboxes.errors import SandboxError

TEMPLATE_FILE = "template.json"
"""In the instance's folder: the template, as JSON (written by the pool)."""
SECRET_FILE = "secret"
"""In the instance's folder: the first secret (written by the pool, deleted once read)."""
READY_FILE = "ready"
"""In the instance's folder: written by the server once it is set up and listens."""
MiB = 1024 * 1024
FILE_BYTES = 64 * MiB
"""The largest file `read` returns."""
DISK_FULL_BYTES = 64 * 1024
"""Free space under which the disk counts as full."""
GIT_ENV = {
    "GIT_CONFIG_NOSYSTEM": "1",
    "GIT_CONFIG_GLOBAL": "/dev/null",
    "GIT_AUTHOR_NAME": "rollout",
    "GIT_AUTHOR_EMAIL": "rollout@computer",
    "GIT_COMMITTER_NAME": "rollout",
    "GIT_COMMITTER_EMAIL": "rollout@computer",
}
GITCONFIG = "[user]\n\tname = agent\n\temail = agent@computer\n[init]\n\tdefaultBranch = main\n"


@dataclass(frozen=True)
class Route:
    """An address outside that a command may reach, relayed in on 127.0.0.1:`port`."""

    host: str
    port: int


def with_output(result: Mapping[str, Any], stdout: bytes, stderr: bytes) -> dict[str, Any]:
    """A command's result with its output as text (what the API answers)."""
    return {
        **result,
        "stdout": stdout.decode(errors="replace"),
        "stderr": stderr.decode(errors="replace"),
    }


def _private_mounts() -> bool:
    """Whether this process has a mount namespace of its own (not its parent's)."""
    try:
        return os.readlink("/proc/self/ns/mnt") != os.readlink(f"/proc/{os.getppid()}/ns/mnt")
    except OSError:
        return False


async def _collect(stream: asyncio.StreamReader | None, keep: int) -> tuple[bytes, int]:
    """Read a stream to its end, keeping the first `keep` bytes; (kept, total)."""
    if stream is None:
        return b"", 0
    kept = bytearray()
    total = 0
    while True:
        chunk = await stream.read(65536)
        if not chunk:
            return bytes(kept), total
        total += len(chunk)
        if len(kept) < keep:
            kept += chunk[: keep - len(kept)]


class Machine:
    """One computer (see the module docstring).

    Args:
        workdir: The instance's folder on the host (its disk is mounted at `workdir/disk`).
        template: What the computer holds and may use.
        name: The name of its cgroups.
    """

    def __init__(self, workdir: Path, template: Template, name: str) -> None:
        self.workdir = workdir
        self.template = template
        self.name = name
        self.disk = Disk(workdir / "disk", workdir / "etc")
        self.cgroups: Cgroups | None = None
        self.commands = 0
        self.running = 0
        self._ids = itertools.count(1)

    async def setup(self) -> None:
        """Check the host, make the cgroups, and make the disk from the template."""
        check_host()
        if not _private_mounts():
            raise SandboxError(
                "computer: the server must run in a mount namespace of its own "
                "(`unshare --mount --propagation private`), or its disk would show on the host"
            )
        write_etc(self.disk.etc)
        self.cgroups = Cgroups.create(self.name, self.template.limits)
        await self._fill()

    async def reset(self) -> None:
        """Kill every process of the computer and make its disk again from the template."""
        if self.cgroups is not None:
            await asyncio.to_thread(self.cgroups.kill)
        await self._host(["umount", "--lazy", str(self.disk.root)])
        await self._fill()

    async def _fill(self) -> None:
        """Mount a fresh disk and put the template's content on it."""
        limits = self.template.limits
        root = self.disk.root
        root.mkdir(parents=True, exist_ok=True)
        size = f"size={int(limits.disk_mb * MiB)},mode=0755"
        await self._host(["mount", "-t", "tmpfs", "-o", size, "rollout-computer", str(root)])
        for folder, mode in ((self.disk.home, 0o755), (self.disk.tmp, 0o1777)):
            folder.mkdir()
            folder.chmod(mode)
        (self.disk.home / ".gitconfig").write_text(GITCONFIG)
        workspace = self.disk.workspace
        if self.template.repository is not None:
            await self._host(["git", "clone", "--quiet", self.template.repository, str(workspace)])
        else:
            workspace.mkdir()
        for path, text in self.template.files.items():
            target = workspace / path
            target.parent.mkdir(parents=True, exist_ok=True)
            target.write_text(text)
        if self.template.git and self.template.repository is None:
            git = ["git", "-C", str(workspace)]
            await self._host([*git, "init", "--quiet", "--initial-branch", "main"])
            await self._host([*git, "add", "--all"])
            await self._host([*git, "commit", "--quiet", "--allow-empty", "-m", "template"])
        for command in self.template.setup:
            result = with_output(*await self.execute(["/bin/sh", "-c", command]))
            if result["exit_code"] != 0 or result["limits"]:
                raise SandboxError(
                    f"computer: setup command {command!r} failed (exit {result['exit_code']}"
                    f"{'; ' if result['limits'] else ''}{'; '.join(result['limits'])}): "
                    f"{(result['stderr'] or result['stdout'])[-500:]}"
                )

    async def _host(self, argv: Sequence[str]) -> None:
        """A trusted step of the setup, run on the host side (the template's, not the policy's)."""
        process = await asyncio.create_subprocess_exec(
            *argv,
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            env={**os.environ, **GIT_ENV},
        )
        out, _ = await process.communicate()
        if process.returncode != 0:
            raise SandboxError(
                f"computer: {' '.join(argv[:3])} ... failed: {out.decode(errors='replace')[-500:]}"
            )

    async def execute(
        self,
        argv: Sequence[str],
        *,
        cwd: str = WORKSPACE,
        env: Mapping[str, str] | None = None,
        stdin: bytes | None = None,
        timeout: float | None = None,  # noqa: ASYNC109 - the command's own limit, enforced here
        routes: Sequence[Route] = (),
        keep_bytes: int | None = None,
    ) -> tuple[dict[str, Any], bytes, bytes]:
        """Run one command inside the computer: (what it hit, its stdout, its stderr)."""
        if self.cgroups is None:
            raise SandboxError("computer: not set up")
        limits = self.template.limits
        wall = min(timeout or limits.command_seconds, limits.command_seconds)
        keep = keep_bytes or limits.output_bytes
        number = next(self._ids)
        group = self.cgroups.child(f"command-{number}", limits)
        # A short folder of its own: a Unix socket's path must fit in 108 bytes.
        net_folder = Path(tempfile.mkdtemp(prefix="rollout-net-")) if routes else None
        servers: list[asyncio.AbstractServer] = []
        began = time.monotonic()
        self.commands += 1
        self.running += 1
        try:
            names: list[tuple[int, str]] = []
            if routes:
                assert net_folder is not None
                for index, route in enumerate(routes):
                    name = f"{index}.sock"
                    servers.append(
                        await serve_unix_to_tcp(str(net_folder / name), route.host, route.port)
                    )
                    names.append((route.port, name))
            line = command_line(
                self.disk,
                self.template,
                argv,
                cwd=cwd,
                env=env,
                procs_files=group.procs_files(),
                routes=names,
                net_folder=net_folder,
            )
            process = await asyncio.create_subprocess_exec(
                *line,
                stdin=subprocess.PIPE if stdin is not None else subprocess.DEVNULL,
                stdout=subprocess.PIPE,
                stderr=subprocess.PIPE,
            )
            if stdin is not None and process.stdin is not None:
                with contextlib.suppress(ConnectionError):
                    process.stdin.write(stdin)
                    await process.stdin.drain()
                process.stdin.close()
            out = asyncio.create_task(_collect(process.stdout, keep))
            err = asyncio.create_task(_collect(process.stderr, keep))
            timed_out = False
            try:
                await asyncio.wait_for(process.wait(), wall)
            except TimeoutError:
                timed_out = True
            # Whatever the command left (background processes, a fork bomb's children) is killed
            # with it: the wall-clock limit and the end of the command alike.
            await asyncio.to_thread(group.kill)
            code = await process.wait()
            (stdout, out_bytes), (stderr, err_bytes) = await asyncio.gather(out, err)
            counters = group.counters()
        finally:
            self.running -= 1
            for server in servers:
                server.close()
            if net_folder is not None:
                shutil.rmtree(net_folder, ignore_errors=True)
            await asyncio.to_thread(group.remove)
        hit = self._limits_hit(code, timed_out, wall, counters.fork_refusals, counters.oom_kills)
        if max(out_bytes, err_bytes) > keep:
            hit.append(f"output cut to its first {keep} bytes per stream")
        result = {
            "exit_code": 128 - code if code < 0 else code,
            "stdout_bytes": out_bytes,
            "stderr_bytes": err_bytes,
            "seconds": round(time.monotonic() - began, 3),
            "cpu_seconds": round(counters.cpu_seconds, 3),
            "timed_out": timed_out,
            "limits": hit,
        }
        return result, stdout, stderr

    def _limits_hit(
        self, code: int, timed_out: bool, wall: float, refused: int, killed: int
    ) -> list[str]:
        limits = self.template.limits
        hit = []
        if timed_out:
            hit.append(f"wall-clock limit: every process was killed after {wall:g} s")
        if refused:
            hit.append(f"process limit: {refused} fork(s) refused at {limits.processes} processes")
        if killed:
            hit.append(f"memory limit: {killed} process(es) killed at {limits.memory_mb:g} MiB")
        if code in (128 + signal.SIGXCPU, -signal.SIGXCPU):
            hit.append(f"CPU time limit: a process used its {limits.cpu_seconds} s of CPU")
        if self.disk_free() < DISK_FULL_BYTES:
            hit.append(f"disk full: the computer's {limits.disk_mb:g} MiB are used")
        return hit

    def disk_free(self) -> int:
        stats = os.statvfs(self.disk.root)
        return stats.f_bavail * stats.f_frsize

    async def read(self, path: str) -> bytes:
        """A file's content, read inside the computer. Raises SandboxError if it cannot."""
        data = await self._file_command(["cat", "--", path], None, FILE_BYTES + 1)
        if len(data) > FILE_BYTES:
            raise SandboxError(f"cannot read {path}: larger than {FILE_BYTES} bytes")
        return data

    async def write(self, path: str, data: bytes) -> None:
        """Write a file inside the computer (its folders made). Raises SandboxError."""
        script = 'mkdir -p -- "$(dirname -- "$1")" && cat > "$1"'
        await self._file_command(["/bin/sh", "-c", script, "sh", path], data, 65536)

    async def _file_command(self, argv: list[str], stdin: bytes | None, keep: int) -> bytes:
        result, stdout, stderr = await self.execute(
            argv, stdin=stdin, timeout=60.0, keep_bytes=keep
        )
        if result["exit_code"] != 0 or result["timed_out"]:
            reason = stderr.decode(errors="replace").strip() or "; ".join(result["limits"])
            raise SandboxError(f"{reason or 'failed'} (exit {result['exit_code']})")
        return stdout

    def usage(self) -> dict[str, Any]:
        """What the computer uses now, and its limits."""
        limits = self.template.limits
        counters = self.cgroups.counters() if self.cgroups is not None else None
        stats = os.statvfs(self.disk.root)
        return {
            "memory_bytes": counters.memory_bytes if counters else 0,
            "memory_peak_bytes": counters.memory_peak_bytes if counters else 0,
            "memory_limit_bytes": int(limits.memory_mb * MiB),
            "processes": counters.processes if counters else 0,
            "process_limit": limits.processes,
            "cpu_seconds": round(counters.cpu_seconds, 3) if counters else 0.0,
            "disk_bytes": (stats.f_blocks - stats.f_bfree) * stats.f_frsize,
            "disk_limit_bytes": stats.f_blocks * stats.f_frsize,
            "commands": self.commands,
            "running": self.running,
        }

    async def close(self) -> None:
        """Kill every process of the computer and remove its cgroups."""
        if self.cgroups is not None:
            await asyncio.to_thread(self.cgroups.remove)
