"""`rollout train` end to end: real role processes, real Postgres, a real tiny model that learns.

The run is the README's main command: the cpu-tiny preset on the parity example
(`parity.environment`), which a fresh tiny model learns in about 95-170 steps. Afterwards the
ledger must show that episodes kept playing while the trainer stepped, that some turns were
sampled by a version older than the one that trained on them (off-policy happened), that no turn
began beyond max_lag, and that the reward of the last steps clearly exceeds that of the first.
"""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
import sys
from bisect import bisect_right
from pathlib import Path

import pytest

from rollout.ledger import Ledger

MAX_STEPS = 260
MAX_LAG = 1
COMMIT_SLACK_S = 0.25
"""A checkpoint's `created_at` is its INSERT, the last statement before its COMMIT: until the
commit is flushed, a turn that starts is rightly gated on the checkpoint before it. Turns that
start within this much of a checkpoint's `created_at` are measured against the one before
(a step takes over half a second here, so a gate that let a whole step through is still seen)."""


@pytest.mark.slow
@pytest.mark.timeout(960)  # above the command's own 900 s limit, so that one reports first
def test_train_learns_off_policy_within_max_lag(database_url: str, tmp_path: Path) -> None:
    env = dict(os.environ, ROLLOUT_DATABASE_URL=database_url, ROLLOUT_STATE_DIR=str(tmp_path))
    result = subprocess.run(
        [
            sys.executable,
            "-m",
            "rollout.cli",
            "train",
            "parity.environment:environment",
            "--preset",
            "cpu-tiny",
            "--steps",
            str(MAX_STEPS),
            "--max-lag",
            str(MAX_LAG),
            "--set",
            "stop_at_reward=0.9",
            "--json",
        ],
        capture_output=True,
        text=True,
        env=env,
        timeout=900,
    )
    assert result.returncode == 0, result.stderr[-3000:]
    summary = json.loads(result.stdout)
    assert summary["status"] == "finished" and 3 <= summary["steps"] <= MAX_STEPS
    print("train summary:", json.dumps(summary))
    asyncio.run(_check_ledger(database_url, summary["run_id"], summary["steps"]))


async def _check_ledger(database_url: str, run_id: str, steps_taken: int) -> None:
    ledger = await Ledger.connect(database_url)
    try:
        checkpoints = sorted(await ledger.checkpoints(run_id), key=lambda c: c.created_at)
        steps = await ledger.train_steps(run_id)
        turns = []
        cursor = 0
        while page := await ledger.turns_for_run(run_id, since=cursor, limit=5000):
            cursor = page[-1][0]
            turns.extend(turn for _, turn in page)
    finally:
        await ledger.close()
    assert [c.version for c in checkpoints] == list(range(steps_taken + 1))
    times = [c.created_at for c in checkpoints]

    def newest_at(moment: float) -> int:
        index = bisect_right(times, moment) - 1
        return checkpoints[index].version if index >= 0 else -1

    assert turns
    committed = [t.started_at - COMMIT_SLACK_S for t in turns]
    behind = [newest_at(moment) - t.version for t, moment in zip(turns, committed, strict=True)]
    # No turn began on a version more than max_lag behind the newest committed checkpoint.
    late = [
        (round(t.started_at - times[bisect_right(times, t.started_at) - 1], 4), t.version, b)
        for t, b in zip(turns, behind, strict=True)
        if b > MAX_LAG
    ]
    assert not late, late[:10]  # (seconds after the newest checkpoint, version, behind)
    # Off-policy happened: some steps trained on turns sampled by an older version than the
    # weights being updated (lag is measured per trained turn by the trainer).
    assert max(step.metrics["lag_max"] for step in steps if step.step > 0) >= 1
    # Episodes kept playing while the trainer stepped: turns ran during train steps.
    during = 0
    for step in steps:
        if step.step == 0:
            continue
        began = step.created_at - step.metrics["step_seconds"]
        during += sum(1 for t in turns if t.started_at < step.created_at and t.ended_at > began)
    assert during > 0
    rewards = [s.metrics["reward"] for s in sorted(steps, key=lambda s: s.step) if s.step > 0]
    first, last = sum(rewards[:3]) / 3, sum(rewards[-5:]) / 5
    assert first < 0.75, rewards  # starts near chance
    assert last >= first + 0.25, rewards  # and clearly learns
