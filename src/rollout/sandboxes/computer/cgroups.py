"""Linux control groups (v1) that hold a computer's processes within its limits.

`Cgroups.create(name, limits)` makes one group per controller under this process's own groups,
`<controller mount>/<own path>/rollout-computers/<name>`: `pids` (processes: `fork` fails past
`pids.max`), `memory` (the kernel kills a process past the limit), `cpu` (a CFS quota: at most
`cpus` cores) and `cpuacct` (CPU time used). `pids` and `memory` are required; a host without
them gets a `SandboxError` that says what is missing. Each command runs in a child group
(`child`), so that what it hit (`Counters`) is its own, and every process it left behind is
killed (`kill`) before the group is removed.

A process joins the groups by writing its pid to each group's `cgroup.procs`
(`procs_files`) before it starts the command: its children are born inside, so no fork can
escape the limits.
"""

from __future__ import annotations

import contextlib
import os
import signal
import time
from dataclasses import dataclass
from pathlib import Path

from rollout.sandboxes.computer.template import Limits
from rollout.sandboxes.errors import SandboxError

REQUIRED = ("pids", "memory")
OPTIONAL = ("cpu", "cpuacct")
PARENT = "rollout-computers"
CFS_PERIOD_US = 100_000


def _mounts() -> dict[str, Path]:
    """Controller -> where its v1 hierarchy is mounted."""
    found: dict[str, Path] = {}
    with contextlib.suppress(OSError), open("/proc/self/mountinfo") as mountinfo:
        for line in mountinfo:
            before, _, after = line.partition(" - ")
            fields, rest = before.split(), after.split()
            if len(rest) < 3 or rest[0] != "cgroup":
                continue
            for option in rest[2].split(","):
                if option in REQUIRED + OPTIONAL:
                    found.setdefault(option, Path(fields[4]))
    return found


def _own_paths() -> dict[str, str]:
    """Controller -> this process's group path within its hierarchy."""
    own: dict[str, str] = {}
    with contextlib.suppress(OSError), open("/proc/self/cgroup") as groups:
        for line in groups:
            parts = line.rstrip("\n").split(":", 2)
            if len(parts) == 3:
                for controller in parts[1].split(","):
                    own[controller] = parts[2]
    return own


@dataclass(frozen=True)
class Counters:
    """What a group used and hit."""

    fork_refusals: int = 0
    """Forks refused because the process limit was reached."""
    oom_kills: int = 0
    """Processes the kernel killed at the memory limit."""
    cpu_seconds: float = 0.0
    memory_bytes: int = 0
    memory_peak_bytes: int = 0
    processes: int = 0


class Cgroups:
    """One group per controller at the same relative place (see the module docstring)."""

    def __init__(self, paths: dict[str, Path]) -> None:
        self.paths = paths

    @classmethod
    def create(cls, name: str, limits: Limits) -> Cgroups:
        """The computer's groups, with its limits. Raises SandboxError naming what is missing."""
        mounts, own = _mounts(), _own_paths()
        missing = [c for c in REQUIRED if c not in mounts]
        if missing:
            raise SandboxError(
                f"computer: the {' and '.join(missing)} cgroup controller(s) are not mounted "
                "(cgroup v1 under /sys/fs/cgroup, writable by root): needed to limit a "
                "computer's processes and memory"
            )
        paths: dict[str, Path] = {}
        for controller, mount in mounts.items():
            base = mount / own.get(controller, "/").lstrip("/") / PARENT / name
            if base in paths.values():  # controllers mounted together (cpu,cpuacct)
                paths[controller] = base
                continue
            try:
                base.mkdir(parents=True, exist_ok=True)
            except OSError as error:
                if controller in REQUIRED:
                    raise SandboxError(
                        f"computer: cannot make the {controller} cgroup {base}: {error}"
                    ) from error
                continue
            paths[controller] = base
        groups = cls(paths)
        memory = int(limits.memory_mb * 1024 * 1024)
        groups._write("pids", "pids.max", str(limits.processes))
        groups._write("memory", "memory.limit_in_bytes", str(memory))
        # With swap accounting, swap counts too (no swapping around the limit).
        groups._write("memory", "memory.memsw.limit_in_bytes", str(memory), required=False)
        quota = max(1000, int(limits.cpus * CFS_PERIOD_US))
        groups._write("cpu", "cpu.cfs_period_us", str(CFS_PERIOD_US), required=False)
        groups._write("cpu", "cpu.cfs_quota_us", str(quota), required=False)
        return groups

    @classmethod
    def existing(cls, name: str) -> Cgroups:
        """The groups `create(name, ...)` made (for removing them from another process)."""
        mounts, own = _mounts(), _own_paths()
        return cls(
            {
                controller: mount / own.get(controller, "/").lstrip("/") / PARENT / name
                for controller, mount in mounts.items()
            }
        )

    def child(self, name: str, limits: Limits) -> Cgroups:
        """A group under each of these (one command's), with the same process limit."""
        paths = {controller: path / name for controller, path in self.paths.items()}
        for path in set(paths.values()):
            path.mkdir(exist_ok=True)  # the computer's quota (cpu) bounds its children too
        groups = Cgroups(paths)
        groups._write("pids", "pids.max", str(limits.processes))
        return groups

    def _write(self, controller: str, name: str, value: str, *, required: bool = True) -> None:
        path = self.paths.get(controller)
        if path is None:
            if required:
                raise SandboxError(f"computer: no {controller} cgroup to set {name}")
            return
        try:
            (path / name).write_text(value)
        except OSError as error:
            if required:
                raise SandboxError(
                    f"computer: cannot set {path / name} to {value}: {error}"
                ) from error

    def _read(self, controller: str, name: str) -> str:
        path = self.paths.get(controller)
        if path is None:
            return ""
        try:
            return (path / name).read_text()
        except OSError:
            return ""

    def procs_files(self) -> list[str]:
        """The `cgroup.procs` files a process writes its pid to, to join every group."""
        return sorted({str(path / "cgroup.procs") for path in self.paths.values()})

    def pids(self) -> list[int]:
        """Every process in the groups, their children's groups included."""
        root = self.paths.get("pids")
        if root is None:
            return []
        found: list[int] = []
        for folder, _dirs, _files in os.walk(root):
            with contextlib.suppress(OSError):
                found.extend(int(pid) for pid in Path(folder, "cgroup.procs").read_text().split())
        return found

    def counters(self) -> Counters:
        events = dict(
            line.split() for line in self._read("pids", "pids.events").splitlines() if line
        )
        oom = dict(line.split() for line in self._read("memory", "memory.oom_control").splitlines())

        def number(text: str) -> int:
            return int(text) if text.strip().isdigit() else 0

        return Counters(
            fork_refusals=number(events.get("max", "0")),
            oom_kills=number(oom.get("oom_kill", "0")),
            cpu_seconds=number(self._read("cpuacct", "cpuacct.usage")) / 1e9,
            memory_bytes=number(self._read("memory", "memory.usage_in_bytes")),
            memory_peak_bytes=number(self._read("memory", "memory.max_usage_in_bytes")),
            processes=len(self.pids()),
        )

    def kill(self, timeout: float = 5.0) -> bool:
        """SIGKILL every process in the groups until none is left; False if some survived."""
        deadline = time.monotonic() + timeout
        while True:
            pids = self.pids()
            if not pids:
                return True
            for pid in pids:
                with contextlib.suppress(ProcessLookupError, PermissionError):
                    os.kill(pid, signal.SIGKILL)
            if time.monotonic() > deadline:
                return False
            time.sleep(0.01)

    def remove(self) -> None:
        """Kill what is left and remove the groups (children first); no error if gone."""
        self.kill()
        for path in sorted(set(self.paths.values()), key=lambda p: len(p.parts), reverse=True):
            for folder, _dirs, _files in os.walk(path, topdown=False):
                with contextlib.suppress(OSError):
                    os.rmdir(folder)
