"""Runs you can stop: a hangup (SIGHUP, the terminal closed) or Ctrl-C (SIGINT) of
`rollout train` stops every role it started, marks the run stopped, counts the steps actually
recorded, exits 130 and prints a resume hint that works as printed."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from tests.live_run import check_interrupted, role_pids, wait_for_step


@pytest.mark.slow
@pytest.mark.timeout(600)
def test_a_hangup_stops_the_roles_and_counts_the_recorded_steps(
    database_url: str, tmp_path: Path
) -> None:
    """A hangup (the terminal closed). Ctrl-C is checked on the monitor's browser test's run,
    which ends that way (tests/monitor/test_browser.py)."""
    env = dict(os.environ, ROLLOUT_DATABASE_URL=database_url, ROLLOUT_STATE_DIR=str(tmp_path))
    # More steps than it can reach before the signal: with compiled bytecode a quiet 2-core
    # machine trained 200 steps in 62 s, finishing before the signal came.
    train = subprocess.Popen(
        [
            sys.executable, "-m", "rollout.cli", "train", "parity.environment:environment",
            "--preset", "cpu-tiny", "--steps", "100000", "--set", "groups_per_step=2",
            "--set", "warmup_steps=2", "--set", "stop_at_reward=null",
            "--name", "interrupted", "--json",
        ],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=env,
    )  # fmt: skip
    try:
        run_id = wait_for_step(database_url, 1, timeout=400)
        assert all(role_pids(run_id).values())
        train.send_signal(signal.SIGHUP)
        out, err = train.communicate(timeout=90)
    finally:
        if train.poll() is None:
            train.kill()
    check_interrupted(train.returncode, out, err, database_url, run_id, "interrupted")
