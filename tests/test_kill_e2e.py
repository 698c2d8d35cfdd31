"""kill -9 of every role of a live run: the run still finishes, and nothing is lost or counted
twice.

`rollout train` runs the parity example; once a few steps are recorded the test SIGKILLs the
trainer, the runner, the gateway and the inference server at once. The supervisor restarts them:
the new trainer waits for the dead one's lease to expire and resumes from the last recorded
checkpoint, and the seats the dead runner held are played again as new attempts once their claims
expire. The ledger must then show every version exactly once and in order, a takeover by a new
trainer lease epoch, re-played seats, and every seat's end written by its final attempt.
"""

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

STEPS = 16
ROLES = ("trainer", "runner", "gateway", "inference")


def _wait_for_step(database_url: str, at_least: int, timeout: float) -> str:
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


def _held_seats(database_url: str, run_id: str) -> dict[tuple[str, int], int]:
    """The seats a runner holds a live claim on: (episode, agent) -> the claim's attempt."""
    with psycopg.connect(database_url) as conn:
        rows = conn.execute(
            "SELECT episode_id, agent, attempt FROM seats WHERE run_id = %s AND NOT done"
            " AND attempt >= 1 AND expires_at > now()",
            (run_id,),
        ).fetchall()
    return {(episode, agent): attempt for episode, agent, attempt in rows}


def _wait_for_held_seats(database_url: str, run_id: str, timeout: float) -> None:
    deadline = time.monotonic() + timeout
    while not _held_seats(database_url, run_id):
        assert time.monotonic() < deadline, f"the runner held no seat within {timeout} s"
        time.sleep(0.05)


def _role_pids(run_id: str) -> dict[str, list[int]]:
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


@pytest.mark.slow
def test_a_run_survives_kill_9_of_every_role(database_url: str, tmp_path: Path) -> None:
    env = dict(os.environ, ROLLOUT_DATABASE_URL=database_url, ROLLOUT_STATE_DIR=str(tmp_path))
    train = subprocess.Popen(
        [
            sys.executable, "-m", "rollout.cli", "train", "parity.environment:environment",
            "--preset", "cpu-tiny", "--steps", str(STEPS), "--set", "groups_per_step=4",
            "--set", "stop_at_reward=2", "--json",
        ],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=env,
    )  # fmt: skip
    try:
        run_id = _wait_for_step(database_url, 3, timeout=300)
        _wait_for_held_seats(database_url, run_id, timeout=60)
        pids = _role_pids(run_id)
        assert all(pids[role] for role in ROLES), pids
        for role in ROLES:
            for pid in pids[role]:
                os.kill(pid, signal.SIGKILL)
        killed_at = time.time()
        time.sleep(0.5)  # a commit already on its way to Postgres lands before the snapshot
        held = _held_seats(database_url, run_id)
        out, err = train.communicate(timeout=600)
    finally:
        if train.poll() is None:
            train.kill()
    assert train.returncode == 0, err[-3000:]
    summary = json.loads(out)
    assert summary["status"] == "finished" and summary["steps"] == STEPS, summary
    restarted = _role_pids(run_id)  # the supervisor has stopped; none may be left behind
    assert not any(restarted.values()), restarted

    with psycopg.connect(database_url) as conn:
        versions = [
            row[0]
            for row in conn.execute(
                "SELECT version FROM checkpoints WHERE run_id = %s ORDER BY version", (run_id,)
            )
        ]
        assert versions == list(range(STEPS + 1))  # no step lost, none taken twice
        steps = conn.execute(
            "SELECT step, lease_epoch, extract(epoch FROM created_at)::float8 FROM train_steps"
            " WHERE run_id = %s ORDER BY step",
            (run_id,),
        ).fetchall()
        epochs = [epoch for _, epoch, _ in steps]
        assert epochs == sorted(epochs)  # a fenced-out trainer never wrote after its successor
        after = [epoch for _, epoch, at in steps if at > killed_at]
        assert after and min(after) > epochs[0]  # a new trainer (new lease epoch) carried on
        # Each group was trained once, and only complete groups were trained.
        groups = conn.execute(
            "SELECT count(*), count(DISTINCT group_index) FROM consumed_groups WHERE run_id = %s",
            (run_id,),
        ).fetchone()
        assert groups is not None and groups[0] == groups[1] == STEPS * 4
        unfinished = conn.execute(
            "SELECT count(*) FROM consumed_groups c JOIN episodes e"
            "  ON e.run_id = c.run_id AND e.group_index = c.group_index"
            " JOIN seats s ON s.episode_id = e.episode_id"
            " WHERE c.run_id = %s AND NOT s.done",
            (run_id,),
        ).fetchone()
        assert unfinished == (0,)
        # Each end is its seat's final attempt, and a seat the dead runner held was ended only by
        # a later attempt (its claim expired and the seat was played again). A held seat may stay
        # unplayed when its group was not needed before the last step. (The test waits for the
        # runner to hold claims before killing it, so `held` is rarely empty.)
        seats = conn.execute(
            "SELECT s.episode_id, s.agent, s.attempt, e.attempt FROM seats s JOIN seat_ends e"
            "  ON e.episode_id = s.episode_id AND e.agent = s.agent WHERE s.run_id = %s",
            (run_id,),
        ).fetchall()
        assert all(seat == end for _, _, seat, end in seats)
        ended = {(episode, agent): end for episode, agent, _, end in seats}
        replayed = {seat: ended[seat] for seat in held if seat in ended}
        assert all(end > held[seat] for seat, end in replayed.items()), (held, replayed)
