"""Helpers for tests that watch a live `rollout train` (moved here from the old kill e2e test)."""

from __future__ import annotations

import signal
import time
from pathlib import Path

import psycopg

ROLES = ("trainer", "runner", "gateway", "inference")


def ctrl_c_as_in_a_terminal() -> None:
    """`preexec_fn` for a child that the test stops with SIGINT: Ctrl-C's default action, as a
    terminal's foreground command has it. A background job of a non-interactive shell (a CI
    script's `pytest &`) starts with SIGINT ignored, children inherit that, and Python then
    installs no KeyboardInterrupt handler, so the signal would do nothing."""
    signal.signal(signal.SIGINT, signal.SIG_DFL)


def wait_for_step(database_url: str, at_least: int, timeout: float) -> str:
    """The id of the run that has recorded train step `at_least`, waiting up to `timeout` s."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        with psycopg.connect(database_url) as conn:
            row = conn.execute(
                "SELECT run_id FROM train_steps GROUP BY run_id HAVING max(step) >= %s", (at_least,)
            ).fetchone()
        if row is not None:
            return str(row[0])
        time.sleep(0.2)
    raise AssertionError(f"no train step {at_least} within {timeout} s")


def role_pids(run_id: str) -> dict[str, list[int]]:
    """The live processes of `run_id`'s roles (`rollout.cli <role> ... <run_id>`), by role."""
    found: dict[str, list[int]] = {role: [] for role in ROLES}
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            argv = (entry / "cmdline").read_bytes().split(b"\0")
        except OSError:
            continue
        args = [a.decode(errors="replace") for a in argv]
        if "rollout.cli" not in args or run_id not in args:
            continue
        role = args[args.index("rollout.cli") + 1]
        if role in found:
            found[role].append(int(entry.name))
    return found
