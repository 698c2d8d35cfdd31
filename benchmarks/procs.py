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
    cpu_s: float  # user + system CPU seconds so far


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
        found[int(entry)] = Proc(argv, int(fields[1]), (int(fields[11]) + int(fields[12])) / TICK)
    return found


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
