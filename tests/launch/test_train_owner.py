"""Runs stop when you leave: a `kill -9` of `rollout train` (no chance to stop
anything) still stops every process it started, because the supervisor and the roles watch
their owner (`rollout.launch.owner`), and the run is marked stopped for `rollout up --run`."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import psycopg
import pytest

from rollout.procs import process_alive
from tests.live_run import wait_for_step as _wait_for_step


def _descendants(root: int) -> set[int]:
    """Every live process below `root` (by parent pid, from /proc)."""
    children: dict[int, list[int]] = {}
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            stat = (entry / "stat").read_text()
        except OSError:
            continue
        ppid = int(stat.rsplit(")", 1)[1].split()[1])
        children.setdefault(ppid, []).append(int(entry.name))
    found: set[int] = set()
    todo = [root]
    while todo:
        for child in children.get(todo.pop(), []):
            if child not in found:
                found.add(child)
                todo.append(child)
    return found


@pytest.mark.slow
@pytest.mark.timeout(600)
@pytest.mark.skipif(not Path("/proc").is_dir(), reason="reads processes from /proc")
def test_kill_9_of_train_stops_every_role(database_url: str, tmp_path: Path) -> None:
    env = dict(os.environ, ROLLOUT_DATABASE_URL=database_url, ROLLOUT_STATE_DIR=str(tmp_path))
    # More steps than it can reach before the kill (a quiet machine trains 200 in about a minute).
    train = subprocess.Popen(
        [
            sys.executable, "-m", "rollout.cli", "train", "parity.environment:environment",
            "--preset", "cpu-tiny", "--steps", "100000", "--set", "groups_per_step=4",
            "--set", "stop_at_reward=2", "--name", "orphaned", "--json",
        ],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        env=env,
    )  # fmt: skip
    try:
        run_id = _wait_for_step(database_url, 1, timeout=400)
        started = _descendants(train.pid)
        assert len(started) >= 5, started  # up, bridge, runner, inference, gateway, trainer
        train.send_signal(signal.SIGKILL)
        train.wait(10)
        killed_at = time.monotonic()
        while any(process_alive(pid) for pid in started) and time.monotonic() - killed_at < 30:
            time.sleep(0.2)
        gone_after = time.monotonic() - killed_at
        left = [pid for pid in started if process_alive(pid)]
    finally:
        if train.poll() is None:
            train.kill()
    for pid in left:  # clean up before failing
        os.kill(pid, signal.SIGKILL)
    assert not left, f"still running {gone_after:.1f} s after kill -9: {left}"
    print(f"{len(started)} processes gone {gone_after:.1f} s after kill -9 of rollout train")
    with psycopg.connect(database_url) as conn:
        row = conn.execute(
            "SELECT value FROM settings WHERE run_id = %s AND key = 'status' "
            "ORDER BY id DESC LIMIT 1",
            (run_id,),
        ).fetchone()
    assert row is not None and row[0] == "stopped"
