"""Helpers for tests that watch a live `rollout train`, and the contract of an interrupted one."""

from __future__ import annotations

import json
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


def check_interrupted(
    returncode: int, out: str, err: str, database_url: str, run_id: str, name: str
) -> None:
    """What a `rollout train --json --name NAME` stopped by Ctrl-C or a hangup must have done:
    exit 130, print a summary of a stopped run that counts the steps actually recorded, say how
    to resume it, stop every role it started, and mark the run stopped in the ledger."""
    assert returncode == 130, err[-3000:]
    summary = json.loads(out)
    with psycopg.connect(database_url) as conn:
        (recorded,) = conn.execute(
            "SELECT count(*) FROM train_steps WHERE run_id = %s AND step > 0", (run_id,)
        ).fetchone() or (0,)
        status = conn.execute(
            "SELECT value FROM settings WHERE run_id = %s AND key = 'status' "
            "ORDER BY id DESC LIMIT 1",
            (run_id,),
        ).fetchone()
    assert summary["status"] == "stopped" and summary["steps"] == recorded >= 1, summary
    assert f"next: uv run rollout up --run {name} --until-finished" in err, err[-3000:]
    deadline = time.monotonic() + 20
    while any(role_pids(run_id).values()) and time.monotonic() < deadline:
        time.sleep(0.2)
    assert not any(role_pids(run_id).values())  # nothing trains with nobody watching
    assert status is not None and status[0] == "stopped"
