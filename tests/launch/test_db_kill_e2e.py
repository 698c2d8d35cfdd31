"""kill -9 of the embedded Postgres in the middle of `rollout train`: the supervisor restarts it,
every role rides out the outage, and the run finishes with each checkpoint version once.

Opt-in (`ROLLOUT_DB_KILL_E2E=1`): it takes about 90 s on two busy cores (a minute of it the
run's start), over the suite's budget; the in-process tests (tests/ledger/test_ledger_outage.py,
tests/launch/test_embedded_watch.py) cover the same faults cheaply in CI.
"""

from __future__ import annotations

import asyncio
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import psycopg
import pytest

from rollout.ledger import apply_migrations
from rollout.ledger.embedded import database_url, embedded_pid

STEPS = 3


@pytest.mark.slow
@pytest.mark.skipif(
    os.environ.get("ROLLOUT_DB_KILL_E2E") != "1", reason="opt-in: ROLLOUT_DB_KILL_E2E=1 (~90 s)"
)
def test_a_run_survives_kill_9_of_the_embedded_postgres(embedded_state_dir: Path) -> None:
    env = dict(os.environ, ROLLOUT_STATE_DIR=str(embedded_state_dir))
    env.pop("ROLLOUT_DATABASE_URL", None)
    url = database_url(embedded_state_dir)  # started here, so the test can read it too
    asyncio.run(apply_migrations(url))
    train = subprocess.Popen(
        [
            sys.executable, "-m", "rollout.cli", "train", "parity.environment:environment",
            "--preset", "cpu-tiny", "--steps", str(STEPS), "--set", "stop_at_reward=2",
            "--set", "warmup_steps=2", "--set", "groups_per_step=2", "--json",
        ],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=env,
    )  # fmt: skip
    began = time.monotonic()
    try:
        deadline = began + 120
        run_id = None
        while run_id is None:
            assert time.monotonic() < deadline, "no train step 1 within 120 s"
            assert train.poll() is None, train.communicate()[1][-3000:]
            with psycopg.connect(url) as conn:
                row = conn.execute(
                    "SELECT run_id FROM train_steps GROUP BY run_id HAVING max(step) >= 1"
                ).fetchone()
            run_id = None if row is None else str(row[0])
            time.sleep(0.2)
        print(f"train step 1 after {time.monotonic() - began:.1f} s")
        pid = embedded_pid(embedded_state_dir)
        assert pid is not None
        os.kill(pid, signal.SIGKILL)
        killed = time.monotonic()
        out, err = train.communicate(timeout=180)
    finally:
        if train.poll() is None:
            train.kill()
    assert train.returncode == 0, err[-3000:]
    summary = json.loads(out)
    assert summary["status"] == "finished" and summary["steps"] == STEPS, summary
    print(f"finished {time.monotonic() - killed:.1f} s after the kill")
    with psycopg.connect(url) as conn:  # the restarted server, after crash recovery
        versions = [
            row[0]
            for row in conn.execute(
                "SELECT version FROM checkpoints WHERE run_id = %s ORDER BY version", (run_id,)
            )
        ]
        steps = [
            row[0]
            for row in conn.execute(
                "SELECT step FROM train_steps WHERE run_id = %s ORDER BY step", (run_id,)
            )
        ]
    assert versions == list(range(STEPS + 1))  # none lost, none written twice
    assert steps == list(range(STEPS + 1)), steps
    assert embedded_pid(embedded_state_dir) not in (None, pid)
