"""A watchdog that ties a process group to the process that started it (Linux).

Run as `python tie.py STARTER_PID GRACE_S COMMAND...` at the head of a new process group
(`start_new_session=True`), it starts COMMAND in that group and waits. When the starter dies,
however it died (SIGKILL included: the kernel's parent-death signal), when it is told to stop
(SIGTERM or SIGINT), or when COMMAND ends by itself, it ends the whole group: SIGTERM to every
other member, SIGKILL after GRACE_S seconds to those still there. So a server that spawns its
own workers (vLLM's API server, engine core and workers) leaves nothing behind, and a member that
ignores SIGTERM or is still starting up dies as well. It exits with COMMAND's exit status.

COMMAND itself gets SIGTERM if this watchdog is killed. `tied_command(command)` is the command
line that runs `command` so (`rollout.inference.vllm_server` starts vLLM with it). The file
imports nothing from rollout: the watchdog runs it by path.
"""

from __future__ import annotations

import contextlib
import ctypes
import os
import signal
import subprocess
import sys
import time
from collections.abc import Sequence
from pathlib import Path

PR_SET_PDEATHSIG = 1
KILL_WAIT_S = 10.0
"""How long the watchdog keeps killing what is left of the group."""


TIE_GRACE_S = 10.0
"""Seconds the group gets between SIGTERM and SIGKILL when the watchdog ends it (below
`VllmServer.stop`'s own timeout, so the watchdog finishes first)."""


def tied_command(command: Sequence[str], grace: float = TIE_GRACE_S) -> list[str]:
    """`command` run under this watchdog, which ends its whole process group when this process
    dies, SIGKILL included; start it with `start_new_session=True`. Elsewhere than Linux
    `command` is returned as it is.

    The parent-death signal follows the thread that started the child: start it from a thread
    that lives as long as this process.

    Example:
        >>> tied_command(["/usr/bin/python3", "-m", "http.server"])[-3:]
        ['/usr/bin/python3', '-m', 'http.server']
    """
    if not sys.platform.startswith("linux"):
        return list(command)
    return [sys.executable, str(Path(__file__)), str(os.getpid()), str(grace), *command]


def _ask_parent_death_signal() -> None:
    ctypes.CDLL(None, use_errno=True).prctl(PR_SET_PDEATHSIG, signal.SIGTERM, 0, 0, 0)


def _group_members() -> list[int]:
    """The live processes of this process group, this one excepted (from /proc)."""
    me, group = os.getpid(), os.getpgid(0)
    members = []
    for name in os.listdir("/proc"):
        if not name.isdigit() or int(name) == me:
            continue
        try:
            with open(f"/proc/{name}/stat", encoding="ascii", errors="replace") as stat:
                fields = stat.read().rsplit(")", 1)[1].split()  # state, ppid, pgrp, ...
        except (OSError, IndexError):
            continue
        if int(fields[2]) == group and fields[0] != "Z":
            members.append(int(name))
    return members


def _signal_all(pids: list[int], signum: int) -> None:
    for pid in pids:
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signum)


def _end_group(grace: float) -> None:
    _signal_all(_group_members(), signal.SIGTERM)
    deadline = time.monotonic() + grace
    while (members := _group_members()) and time.monotonic() < deadline:
        time.sleep(0.2)
    # SIGKILL until none is left: a member may have spawned another since the last look (one
    # still starting may even have caught the SIGTERM above before its exec).
    deadline = time.monotonic() + KILL_WAIT_S
    while members and time.monotonic() < deadline:
        _signal_all(members, signal.SIGKILL)
        time.sleep(0.05)
        members = _group_members()


def main(argv: list[str]) -> int:
    starter, grace, command = int(argv[0]), float(argv[1]), argv[2:]
    stop: list[int] = []
    for signum in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP):
        signal.signal(signum, lambda number, _frame: stop.append(number))
    _ask_parent_death_signal()
    if os.getppid() != starter:
        return 1  # the starter died before the request
    child = subprocess.Popen(command, preexec_fn=_ask_parent_death_signal)
    while child.poll() is None and not stop:
        time.sleep(0.2)
    _end_group(grace)
    code = child.wait()
    return code if code >= 0 else 128 - code


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
