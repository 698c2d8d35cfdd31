"""A short `rollout train` with an eval every 3 steps, then on-demand evals of older checkpoints.

The parity example trains for 6 steps with a 16-episode parity suite scheduled every 3 steps:
the evaluator role (started by the local supervisor) scores checkpoints 0, 3 and 6, and
`rollout train` returns once they are scored. Then `rollout evals run` scores checkpoint 2 (never
scheduled) and the base model. The ledger must hold one score per checkpoint, environment and
suite version; every eval turn sampled by the checkpoint its job names (the evaluator's own
backend, not the training server) and claimed by an evaluator, never by a runner; and the
trainer must have trained on exactly its own train episodes.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import psycopg
import pytest

STEPS = 6
GROUPS_PER_STEP = 2
SUITE = "tests/evals/parity-small.yaml"


def _rollout(env: dict[str, str], *args: str, timeout: float = 900) -> Any:
    result = subprocess.run(
        [sys.executable, "-m", "rollout.cli", *args, "--json"],
        capture_output=True,
        text=True,
        env=env,
        timeout=timeout,
    )
    assert result.returncode == 0, result.stderr[-3000:]
    return json.loads(result.stdout)


@pytest.mark.slow
def test_scheduled_and_on_demand_evals_of_a_training_run(database_url: str, tmp_path: Path) -> None:
    env = dict(os.environ, ROLLOUT_DATABASE_URL=database_url, ROLLOUT_STATE_DIR=str(tmp_path))
    summary = _rollout(
        env, "train", "parity.environment:environment", "--preset", "cpu-tiny",
        "--steps", str(STEPS), "--set", f"groups_per_step={GROUPS_PER_STEP}",
        "--set", "stop_at_reward=2", "--set", f"evals=[{{suite: {SUITE}, every: 3}}]",
        "--set", "keep_checkpoints=10",  # checkpoint 2 is evaluated after the run
        "--set", "warmup_steps=2",  # the test is about evals, not learning
    )  # fmt: skip
    assert summary["status"] == "finished" and summary["steps"] == STEPS
    run_id = str(summary["run_id"])
    # Scheduled evals are scored by the time `rollout train` returns.
    with psycopg.connect(database_url) as conn:
        scheduled = conn.execute(
            "SELECT j.version FROM eval_jobs j JOIN eval_scores s USING (job_id)"
            " WHERE j.run_id = %s AND j.trigger = 'schedule' ORDER BY j.version",
            (run_id,),
        ).fetchall()
    assert [v for (v,) in scheduled] == [0, 3, 6]

    older = _rollout(env, "evals", "run", SUITE, "--checkpoint", "2", "--run", run_id)
    assert older["job"]["state"] == "done"
    base = _rollout(env, "evals", "run", SUITE, "--checkpoint", "base", "--run", run_id)
    assert base["job"]["state"] == "done"
    again = _rollout(env, "evals", "run", SUITE, "--checkpoint", "2", "--run", run_id)
    assert again["job"]["job_id"] == older["job"]["job_id"]  # idempotent

    rows = _rollout(env, "evals", "show", run_id)
    assert isinstance(rows, list)
    assert [(r["checkpoint"], r["environment"], r["suite_version"]) for r in rows] == [
        (c, "parity", "1") for c in ("base", "v0", "v2", "v3", "v6")
    ]
    assert all(r["episodes"] == 16 and r["ci_low"] <= r["score"] <= r["ci_high"] for r in rows)
    assert all(r["delta_base"] is not None for r in rows[1:])

    with psycopg.connect(database_url) as conn:
        # Every eval turn was sampled by the checkpoint its job evaluates.
        mismatched = conn.execute(
            "SELECT count(*) FROM turns t JOIN episodes e ON e.episode_id = t.episode_id"
            " JOIN eval_jobs j ON j.run_id = e.run_id AND j.job_id = e.group_index"
            " WHERE e.run_id = %s AND e.kind = 'eval' AND t.version <> j.version",
            (run_id,),
        ).fetchone()
        eval_turns = conn.execute(
            "SELECT count(*) FROM turns t JOIN episodes e ON e.episode_id = t.episode_id"
            " WHERE e.run_id = %s AND e.kind = 'eval'",
            (run_id,),
        ).fetchone()
        claimers = conn.execute(
            "SELECT DISTINCT split_part(c.runner, '-', 1) FROM seat_claims c"
            " JOIN episodes e ON e.episode_id = c.episode_id WHERE e.run_id = %s AND e.kind = %s",
            (run_id, "eval"),
        ).fetchall()
        trained = conn.execute(
            "SELECT sum((metrics->>'episodes')::float8) FROM train_steps"
            " WHERE run_id = %s AND step > 0",
            (run_id,),
        ).fetchone()
    assert mismatched == (0,) and eval_turns is not None and eval_turns[0] == 5 * 16
    assert claimers == [("evaluator",)]
    # The trainer trained on its own episodes only: 6 steps x 2 groups x 8 episodes.
    assert trained == (STEPS * GROUPS_PER_STEP * 8,)
