"""Runs you can stop: Ctrl-C (SIGINT) or a hangup (SIGHUP, the terminal closed) of
`rollout train` stops every role it started, marks the run stopped, counts the steps actually
recorded, exits 130 and prints a resume hint that works as printed."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import psycopg
import pytest

from tests.live_run import ctrl_c_as_in_a_terminal
from tests.live_run import role_pids as _role_pids
from tests.live_run import wait_for_step as _wait_for_step


@pytest.mark.slow
@pytest.mark.timeout(600)
@pytest.mark.parametrize("signum", [signal.SIGINT, signal.SIGHUP], ids=["ctrl-c", "hangup"])
def test_an_interrupted_train_stops_its_roles_and_counts_the_recorded_steps(
    database_url: str, tmp_path: Path, signum: int
) -> None:
    env = dict(os.environ, ROLLOUT_DATABASE_URL=database_url, ROLLOUT_STATE_DIR=str(tmp_path))
    # More steps than it can reach before the signal: with compiled bytecode a quiet 2-core
    # machine trained 200 steps in 62 s, finishing before the signal came.
    train = subprocess.Popen(
        [
            sys.executable, "-m", "rollout.cli", "train", "parity.environment:environment",
            "--preset", "cpu-tiny", "--steps", "100000", "--set", "groups_per_step=4",
            "--set", "stop_at_reward=2", "--name", "interrupted", "--json",
        ],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=env,
        preexec_fn=ctrl_c_as_in_a_terminal,
    )  # fmt: skip
    try:
        run_id = _wait_for_step(database_url, 2, timeout=400)
        assert all(_role_pids(run_id).values())
        train.send_signal(signum)
        out, err = train.communicate(timeout=90)
    finally:
        if train.poll() is None:
            train.kill()
    assert train.returncode == 130, err[-3000:]
    summary = json.loads(out)
    with psycopg.connect(database_url) as conn:
        (recorded,) = conn.execute(
            "SELECT count(*) FROM train_steps WHERE run_id = %s AND step > 0", (run_id,)
        ).fetchone() or (0,)
    assert summary["status"] == "stopped" and summary["steps"] == recorded >= 2
    assert "next: uv run rollout up --run interrupted --until-finished" in err
    deadline = time.monotonic() + 20
    while any(_role_pids(run_id).values()) and time.monotonic() < deadline:
        time.sleep(0.2)
    assert not any(_role_pids(run_id).values())  # nothing trains with nobody watching
    with psycopg.connect(database_url) as conn:
        row = conn.execute(
            "SELECT value FROM settings WHERE run_id = %s AND key = 'status' "
            "ORDER BY id DESC LIMIT 1",
            (run_id,),
        ).fetchone()
    assert row is not None and row[0] == "stopped"
