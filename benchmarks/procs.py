"""Processes for the benchmarks that start `rollout train`: reading /proc, stopping its group."""

from __future__ import annotations

import os
import signal
import subprocess
from dataclasses import dataclass
from pathlib import Path
from typing import Any

TICK = os.sysconf("SC_CLK_TCK")


@dataclass(frozen=True)
class Proc:
    argv: list[str]
    parent: int
    user_s: float  # CPU seconds so far in user mode
    system_s: float  # and in the kernel on the process's behalf (system calls, page faults)

    @property
    def cpu_s(self) -> float:
        return self.user_s + self.system_s


def processes() -> dict[int, Proc]:
    """Every process we can read, by pid."""
    found: dict[int, Proc] = {}
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            argv = Path(f"/proc/{entry}/cmdline").read_bytes().decode().split("\0")
            fields = Path(f"/proc/{entry}/stat").read_text().rsplit(")", 1)[1].split()
        except (OSError, IndexError):
            continue
        user, system = int(fields[11]) / TICK, int(fields[12]) / TICK
        found[int(entry)] = Proc(argv, int(fields[1]), user, system)
    return found


def cpu_seconds(pid: int) -> float:
    """User + system CPU seconds of process `pid` so far."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / TICK


MACHINE_FIELDS = ("user", "nice", "system", "idle", "iowait", "irq", "softirq", "steal")


def machine_cpu() -> dict[str, float]:
    """The whole machine's CPU seconds so far by kind (`/proc/stat`'s first line, all cores):
    softirq is the kernel's deferred work (loopback TCP's packet processing is most of it here),
    which no process's own time includes."""
    fields = Path("/proc/stat").read_text().splitlines()[0].split()[1:]
    return {name: int(value) / TICK for name, value in zip(MACHINE_FIELDS, fields, strict=False)}


def role_of(proc: Proc) -> str | None:
    """The role of a `python -m rollout.cli ROLE ...` process (None for any other)."""
    if "rollout.cli" not in proc.argv[:-1]:
        return None
    return proc.argv[proc.argv.index("rollout.cli") + 1]


def stop_group(process: subprocess.Popen[Any], grace: float = 60.0) -> None:
    """SIGTERM `process`'s group (`rollout train` stops on it as on Ctrl-C, which a background
    job ignores), then SIGKILL it if it is still there after `grace` seconds."""
    os.killpg(process.pid, signal.SIGTERM)
    try:
        process.wait(grace)
    except subprocess.TimeoutExpired:
        os.killpg(process.pid, signal.SIGKILL)
        process.wait()
