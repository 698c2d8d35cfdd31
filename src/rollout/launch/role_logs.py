"""Role logs that do not fill the disk: `<role>.log` rotated by size, three older files kept.

The local supervisor starts each role with its output appended to `<state>/logs/<role>.log`
(`ROLLOUT_LOG_MAX_MB`, default 100, sets the size). A role holds its log open for as long as it
runs, so the file is rotated by copying and truncating it in place: its content moves to
`<role>.log.1` (the older ones to `.2` and `.3`, the oldest dropped) and the role, which
appends, goes on writing at the start of the emptied file. A line the role writes between the
copy and the truncation can be lost; nothing else is.

A supervisor's own output is such a log too (`rollout train` starts `rollout up` with its output
appended to `<state>/logs/up-<run>.log`): `own_log()` finds it, and the supervisor rotates it
with its roles' logs.

Example:
    >>> import tempfile
    >>> from pathlib import Path
    >>> log = Path(tempfile.mkdtemp()) / "runner-0.log"
    >>> _ = log.write_text("x" * 200)
    >>> rotate_if_large(log, max_bytes=100)
    True
    >>> log.stat().st_size, len((log.parent / "runner-0.log.1").read_text())
    (0, 200)
    >>> rotate_if_large(log, max_bytes=100)  # small again: left alone
    False
"""

from __future__ import annotations

import os
import shutil
import stat
from pathlib import Path

KEEP = 3
"""Rotated files kept per role (`.1`, the newest, to `.3`)."""


def rotated(path: Path, number: int) -> Path:
    """The `number`th older file of the log `path` (`runner-0.log.2`)."""
    return path.with_name(f"{path.name}.{number}")


def rotate_if_large(path: Path, max_bytes: int, keep: int = KEEP) -> bool:
    """Rotate the log `path` if it has reached `max_bytes` (0: never); whether it did."""
    if max_bytes <= 0:
        return False
    try:
        size = path.stat().st_size
    except FileNotFoundError:
        return False
    if size < max_bytes:
        return False
    for number in range(keep - 1, 0, -1):
        older = rotated(path, number)
        if older.exists():
            older.replace(rotated(path, number + 1))
    with path.open("r+b") as log:  # one open file: copy what is there, then empty it
        with rotated(path, 1).open("wb") as copy:
            shutil.copyfileobj(log, copy)
        log.truncate(0)
    return True


def own_log() -> Path | None:
    """The file this process's standard output is appended to, if it is a regular file (a
    terminal, a pipe or /dev/null is not a log to rotate)."""
    try:
        if not stat.S_ISREG(os.fstat(1).st_mode):
            return None
        return Path(os.readlink("/proc/self/fd/1"))
    except OSError:  # no stdout, or no /proc (not Linux)
        return None
