"""kill -9 of an evaluator mid-suite: a restarted one finishes the suite, every episode once.

The evaluator role (`rollout evaluator --run RUN`) plays a queued 40-episode suite of slow
episodes, two at a time, with 3-second seat claims. Once some episodes have ended it is
SIGKILLed; a new evaluator process claims what is left, including the seats the dead one held
once their claims expire (as new attempts), and scores the job. The ledger must show every
episode ended exactly once by its final attempt, replayed seats, both evaluators at work, and
one score over exactly the 40 recorded ends.
"""

from __future__ import annotations

import asyncio
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import psycopg
import pytest

from rollout.blobs import BlobStore
from rollout.launch.evaluator.demand import evaluate
from rollout.ledger import Ledger

EPISODES = 40


async def _queue(database_url: str, blobs: BlobStore) -> tuple[str, int]:
    async with await Ledger.connect(database_url) as ledger:
        run = await ledger.create_run(
            "scripted",
            "arithmetic.environment:environment",
            {"kind": "single", "model": "scripted"},
        )
        job = await evaluate(
            ledger, blobs, "tests/evals/slow.yaml", checkpoint="base", run=run.run_id, play=False
        )
        return run.run_id, job.job_id


def _ended(database_url: str, run_id: str, job_id: int) -> int:
    with psycopg.connect(database_url) as conn:
        row = conn.execute(
            "SELECT count(*) FROM seat_ends se JOIN episodes e USING (episode_id)"
            " WHERE e.run_id = %s AND e.kind = 'eval' AND e.group_index = %s",
            (run_id, job_id),
        ).fetchone()
    assert row is not None
    return int(row[0])


def _scored(database_url: str, job_id: int) -> bool:
    with psycopg.connect(database_url) as conn:
        return (
            conn.execute("SELECT 1 FROM eval_scores WHERE job_id = %s", (job_id,)).fetchone()
            is not None
        )


def _wait(predicate: object, timeout: float, what: str) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if predicate():  # type: ignore[operator]
            return
        time.sleep(0.1)
    raise AssertionError(f"{what} within {timeout} s")


@pytest.mark.slow
def test_a_killed_evaluator_is_replaced_and_every_episode_counts_once(
    database_url: str, tmp_path: Path
) -> None:
    run_id, job_id = asyncio.run(_queue(database_url, BlobStore.from_url(str(tmp_path / "blobs"))))
    env = dict(os.environ, ROLLOUT_DATABASE_URL=database_url, ROLLOUT_STATE_DIR=str(tmp_path))
    argv = [
        sys.executable, "-m", "rollout.cli", "evaluator", "--run", run_id, "--concurrency", "2",
        "--lease-seconds", "3",
    ]  # fmt: skip
    logs = [(tmp_path / f"evaluator-{i}.log").open("wb") for i in range(2)]
    first = subprocess.Popen([*argv, "--name", "first"], env=env, stdout=logs[0], stderr=logs[0])
    second: subprocess.Popen[bytes] | None = None
    try:
        _wait(lambda: _ended(database_url, run_id, job_id) >= 6, 240, "6 episodes ended")
        first.send_signal(signal.SIGKILL)
        first.wait(30)
        killed_at = _ended(database_url, run_id, job_id)
        assert killed_at < EPISODES, "the suite finished before the kill"
        second = subprocess.Popen(
            [*argv, "--name", "second"], env=env, stdout=logs[1], stderr=logs[1]
        )
        _wait(lambda: _scored(database_url, job_id), 300, "the job was scored")
    finally:
        for process in (first, second):
            if process is not None and process.poll() is None:
                process.send_signal(signal.SIGTERM)
                process.wait(30)
        for log in logs:
            log.close()

    with psycopg.connect(database_url) as conn:
        ends = conn.execute(
            "SELECT se.episode_id, se.attempt, s.attempt, se.reward, c.runner"
            " FROM seat_ends se"
            " JOIN seats s ON s.episode_id = se.episode_id AND s.agent = se.agent"
            " JOIN seat_claims c ON c.episode_id = se.episode_id AND c.agent = se.agent"
            "  AND c.attempt = se.attempt"
            " JOIN episodes e ON e.episode_id = se.episode_id"
            " WHERE e.run_id = %s AND e.kind = 'eval' AND e.group_index = %s",
            (run_id, job_id),
        ).fetchall()
        replayed = conn.execute(
            "SELECT count(*) FROM seats WHERE run_id = %s AND kind = 'eval' AND attempt > 1",
            (run_id,),
        ).fetchone()
        score = conn.execute(
            "SELECT score, episodes FROM eval_scores WHERE job_id = %s", (job_id,)
        ).fetchall()
    # Every episode ended exactly once, by the attempt that holds its seat.
    assert len(ends) == len({e[0] for e in ends}) == EPISODES
    assert all(end_attempt == seat_attempt for _, end_attempt, seat_attempt, _, _ in ends)
    # The dead evaluator's claimed seats were played again as new attempts.
    assert replayed is not None and replayed[0] >= 1
    runners = {e[4].rsplit("-", 1)[0] for e in ends}
    assert runners == {"first", "second"}
    # One score, over exactly the recorded ends.
    assert score == [(sum(e[3] for e in ends) / EPISODES, EPISODES)]
