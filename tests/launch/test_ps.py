"""`rollout ps`: real role processes show up from their heartbeats; one killed with kill -9 is
shown as dead once it missed its beats, and a cleanly stopped one is gone from the default list."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import psycopg
import pytest

from rollout.ledger.processes import DEFAULT_INTERVAL, STALE_BEATS

pytestmark = pytest.mark.slow


def _ps(env: dict[str, str], *args: str) -> list[dict[str, Any]]:
    out = subprocess.run(
        [sys.executable, "-m", "rollout.cli", "ps", "--json", *args],
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
        check=True,
    ).stdout
    return json.loads(out)


def _wait_for(check: Any, timeout: float) -> Any:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = check()
        if value:
            return value
        time.sleep(0.3)
    raise AssertionError("timed out")


def _beats(database_url: str, pid: int) -> list[tuple[str, str | None, str]]:
    with psycopg.connect(database_url) as conn:
        return conn.execute(
            "SELECT role, run_id, status FROM processes WHERE pid = %s", (pid,)
        ).fetchall()


def test_ps_lists_role_processes_and_shows_a_killed_one_dead(
    database_url: str, tmp_path: Path
) -> None:
    env = dict(os.environ, ROLLOUT_DATABASE_URL=database_url, ROLLOUT_STATE_DIR=str(tmp_path))
    with psycopg.connect(database_url, autocommit=True) as conn:
        conn.execute(
            "INSERT INTO runs VALUES ('r-ps', 'ps-run', 'parity.environment:environment', '{}')"
        )
    cli = [sys.executable, "-m", "rollout.cli"]
    runner = subprocess.Popen([*cli, "runner", "--run", "ps-run", "--concurrency", "1"], env=env)
    bridge = subprocess.Popen([*cli, "bridge"], env=env)
    try:
        _wait_for(lambda: _beats(database_url, runner.pid) and _beats(database_url, bridge.pid), 60)
        rows = {row["pid"]: row for row in _ps(env)}
        assert rows[runner.pid]["role"] == "runner" and rows[runner.pid]["run_id"] == "r-ps"
        assert rows[runner.pid]["state"] == "running"
        assert rows[runner.pid]["status"] == "playing seats"
        assert rows[bridge.pid]["role"] == "bridge" and rows[bridge.pid]["state"] == "running"
        assert rows[runner.pid]["age_s"] < STALE_BEATS * DEFAULT_INTERVAL

        runner.send_signal(signal.SIGKILL)
        runner.wait(10)
        bridge.send_signal(signal.SIGTERM)  # a clean stop says so
        bridge.wait(30)
        time.sleep(STALE_BEATS * DEFAULT_INTERVAL + 1.0)
        rows = {row["pid"]: row for row in _ps(env)}
        assert rows[runner.pid]["state"] == "dead"
        assert rows[runner.pid]["age_s"] > STALE_BEATS * DEFAULT_INTERVAL
        assert bridge.pid not in rows
        everything = {row["pid"]: row for row in _ps(env, "--all")}
        assert everything[bridge.pid]["state"] == "stopped"

        table = subprocess.run(
            [*cli, "ps"], env=env, capture_output=True, text=True, timeout=60, check=True
        ).stdout
        assert "runner" in table and "dead" in table
    finally:
        for process in (runner, bridge):
            if process.poll() is None:
                process.kill()
                process.wait(10)
