"""A role whose database stays away past ROLLOUT_DB_OUTAGE_S stops with one line, no traceback."""

from __future__ import annotations

import asyncio
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from rollout.ledger import apply_migrations
from rollout.ledger.embedded import database_url, stop_embedded


@pytest.mark.slow
def test_a_runner_stops_with_one_line_when_the_database_stays_away(
    embedded_state_dir: Path,
) -> None:
    url = database_url(embedded_state_dir)  # nobody watches it: an "external" database here
    asyncio.run(apply_migrations(url))
    env = dict(
        os.environ,
        ROLLOUT_DATABASE_URL=url,
        ROLLOUT_STATE_DIR=str(embedded_state_dir),
        ROLLOUT_DB_OUTAGE_S="2",
    )
    runner = subprocess.Popen(
        [sys.executable, "-m", "rollout.cli", "runner", "--name", "outage-test"],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=env,
    )
    try:
        time.sleep(4.0)  # connected and waiting for seats
        assert runner.poll() is None, runner.communicate()[1][-2000:]
        stop_embedded(embedded_state_dir)
        stopped = time.monotonic()
        _, err = runner.communicate(timeout=60)
    finally:
        if runner.poll() is None:
            runner.kill()
    assert runner.returncode == 2, err[-2000:]
    assert "Traceback" not in err, err[-3000:]
    last = err.strip().splitlines()[-1]
    assert last.startswith("error: database unreachable for more than 2 s"), err[-2000:]
    warnings = [line for line in err.splitlines() if "database unreachable, retrying" in line]
    assert len(warnings) == 1, err[-3000:]
    assert time.monotonic() - stopped < 30.0
