"""Local processes by id: whether one runs, is a zombie, or is gone.

- `process_state(pid)`: 'running', 'zombie' (exited, not reaped by its parent) or 'gone';
- `process_alive(pid)`: whether it runs, a zombie counting as gone;
- `process_label(name)`: `NAME-HOST-PID`, how this process names itself as a lease holder.

A process that exited stays a zombie until its parent reaps it, and in a container with no init
nobody reaps the orphans: `os.kill(pid, 0)` still succeeds on one, so a killed server or sandbox
would look alive forever. Linux's `/proc/PID/stat` says which it is (state `Z`). Where `/proc`
cannot be read, a process that answers a signal counts as running.

Example:
    >>> import os
    >>> process_state(os.getpid()), process_alive(os.getpid())
    ('running', True)
"""

from __future__ import annotations

import os
import socket
from pathlib import Path
from typing import Literal

ProcessState = Literal["running", "zombie", "gone"]


def process_state(pid: int) -> ProcessState:
    """Whether process `pid` runs, is a zombie nobody reaped yet, or is gone."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return "gone"
    except PermissionError:
        return "running"  # someone else's process: it exists
    try:
        stat = Path(f"/proc/{pid}/stat").read_text(encoding="ascii", errors="replace")
        state = stat.rsplit(")", 1)[1].split()[0]  # after the command name, which may hold ')'
    except (OSError, IndexError):
        return "running"
    return "zombie" if state == "Z" else "running"


def process_alive(pid: int) -> bool:
    """Whether process `pid` runs (a zombie counts as gone)."""
    return process_state(pid) == "running"


def process_label(name: str) -> str:
    """`NAME-HOST-PID`: this process as a holder of claims and leases, unique among the
    processes of every machine that shares the ledger (two machines' `rollout up` both start a
    `runner-0`, and pids repeat across machines)."""
    return f"{name}-{socket.gethostname()}-{os.getpid()}"
