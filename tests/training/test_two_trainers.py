"""Two live trainer processes on one run: a revived old trainer cannot publish.

Two `rollout trainer --run RUN` start; A takes the run's lease and trains; the test pauses it
with SIGSTOP, lets its lease lapse, and trainer B takes it over (epoch 2) and trains on. A is
then revived with SIGCONT: its next renewal or fenced write is refused, and it exits with one
line saying it stands down. The ledger shows each version once, lease epochs that never go back,
and no checkpoint or serving record of A's after B's first.

Opt-in (ROLLOUT_TWO_TRAINERS_E2E=1): it costs 30 s to well over a minute on CI's 2 busy cores,
and `test_trainer_fence.py` checks the same refusals in process on every run. The test plays
the other roles through the ledger, so only the two trainers are processes: the
runner (every seat ends `failed`, so each step is an optimizer step with nothing to learn), the
bridge (each checkpoint's own folder is its `local` conversion) and an inference server (it
acknowledges what it is told to serve).
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
import subprocess
import sys
import time
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import psycopg
import pytest

from rollout.blobs import BlobStore
from rollout.launch.new_run import create_run
from rollout.ledger import Ledger
from rollout.training.config import RunConfig

STEPS = 4


async def _play(ledger: Ledger, run_id: str, stop: asyncio.Event) -> None:
    """The runner, the bridge and the inference server, through the ledger."""
    while not stop.is_set():
        for claim in await ledger.claim_seats("test-runner", limit=16, run_id=run_id):
            await ledger.end_seat(claim, reward=0.0, status="failed", error="played by the test")
        for checkpoint in await ledger.checkpoints(run_id):
            if "local" not in await ledger.conversions(run_id, checkpoint.version):
                await ledger.record_conversion(run_id, checkpoint.version, "local", checkpoint.uri)
        serving = await ledger.serving(run_id)
        if serving is not None:
            await ledger.ack_serving(run_id, "test-server", serving.version)
        await asyncio.sleep(0.1)


async def _until(check: Callable[[], Awaitable[object]], within: float, what: str) -> None:
    deadline = time.monotonic() + within
    while not await check():
        assert time.monotonic() < deadline, f"{what} within {within} s"
        await asyncio.sleep(0.1)


def _trainer(run_id: str, env: dict[str, str], log: Path) -> subprocess.Popen[bytes]:
    with open(log, "wb") as out:
        return subprocess.Popen(
            [sys.executable, "-m", "rollout.cli", "trainer", "--run", run_id],
            stdout=out,
            stderr=subprocess.STDOUT,
            env=env,
        )


@pytest.mark.slow
@pytest.mark.skipif(
    os.environ.get("ROLLOUT_TWO_TRAINERS_E2E") != "1",
    reason="opt-in (ROLLOUT_TWO_TRAINERS_E2E=1): two trainer processes, 30-100 s on 2 busy cores",
)
async def test_a_revived_old_trainer_cannot_publish(
    ledger: Ledger, database_url: str, tiny_model_dir: Path, tmp_path: Path
) -> None:
    config = RunConfig.model_validate({"steps": STEPS, "groups_per_step": 1, "group_size": 2})
    run = await create_run(
        ledger, "parity.environment:environment", config, tiny_model_dir, "two-trainers"
    )
    run_id = run.run_id
    env = dict(os.environ, ROLLOUT_DATABASE_URL=database_url, ROLLOUT_STATE_DIR=str(tmp_path))
    blobs = BlobStore.from_url(str(tmp_path / "blobs"))
    lease = f"trainer:{run_id}"

    async def sql(query: str, *params: object) -> list[tuple[Any, ...]]:
        async with await psycopg.AsyncConnection.connect(database_url, autocommit=True) as conn:
            cursor = await conn.execute(query, params)  # type: ignore[arg-type]
            return await cursor.fetchall() if cursor.description else []

    async def versions_of_epoch(epoch: int) -> int:
        rows = await sql(
            "SELECT count(*) FROM checkpoints WHERE run_id = %s AND lease_epoch = %s AND"
            " version > 0",
            run_id,
            epoch,
        )
        return int(rows[0][0])

    stop = asyncio.Event()
    player = asyncio.create_task(_play(ledger, run_id, stop))
    # Both start at once (their start-up is most of the time); the one that takes the lease
    # first is A, the other waits for it.
    trainers = [_trainer(run_id, env, tmp_path / f"{n}.log") for n in range(2)]
    try:
        await _until(lambda: versions_of_epoch(1), 60, "no trainer recorded a step")
        [(holder,)] = await sql("SELECT holder FROM leases WHERE name = %s", lease)
        first = next(p for p in trainers if str(holder).endswith(f"-{p.pid}"))
        first.send_signal(signal.SIGSTOP)
        paused_at = time.time()
        await sql("UPDATE leases SET expires_at = now() WHERE name = %s", lease)  # A's lapses

        await _until(lambda: versions_of_epoch(2), 60, "trainer B recorded no step")
        first.send_signal(signal.SIGCONT)  # the revived old trainer
        code = await asyncio.to_thread(first.wait, 60)
        await _until(lambda: _finished(ledger, run_id), 60, "trainer B did not finish the run")
    finally:
        stop.set()
        for process in trainers:
            if process.poll() is None:
                with contextlib.suppress(ProcessLookupError):
                    process.send_signal(signal.SIGCONT)
                process.terminate()
                try:
                    await asyncio.to_thread(process.wait, 15)
                except subprocess.TimeoutExpired:
                    process.kill()
                    await asyncio.to_thread(process.wait, 15)
        await player

    lines = (tmp_path / f"{trainers.index(first)}.log").read_text().splitlines()
    stood_down = [line for line in lines if "stands down" in line]
    assert code != 0 and len(stood_down) == 1, lines[-20:]
    assert "Traceback" not in "\n".join(lines), lines[-40:]
    assert f"{lease!r}" in stood_down[0] and "writes nothing more" in stood_down[0]

    checkpoints = await sql(
        "SELECT version, lease_epoch, extract(epoch FROM created_at)::float8, uri"
        " FROM checkpoints WHERE run_id = %s ORDER BY version",
        run_id,
    )
    assert [row[0] for row in checkpoints] == list(range(STEPS + 1))  # each version once
    epochs = [row[1] for row in checkpoints]
    assert epochs == sorted(epochs) and epochs[0] == 1 and epochs[-1] == 2
    # Nothing of A's after the pause (a write refused by the fence leaves no row).
    assert all(e == 2 for _, e, at, _ in checkpoints if at > paused_at)
    steps = await sql("SELECT lease_epoch FROM train_steps WHERE run_id = %s ORDER BY step", run_id)
    assert [row[0] for row in steps] == sorted(row[0] for row in steps)
    serving = await sql(
        "SELECT version, lease_epoch, extract(epoch FROM created_at)::float8 FROM serving"
        " WHERE run_id = %s ORDER BY id",
        run_id,
    )
    assert [row[1] for row in serving] == sorted(row[1] for row in serving)
    assert [row[0] for row in serving] == sorted(row[0] for row in serving)
    assert all(e == 2 for _, e, at in serving if at > paused_at)
    # Every kept checkpoint's files are there, and they are the recorder's (keys carry the epoch).
    deleted = set((await ledger.settings(run_id)).get("deleted_checkpoints") or [])
    for version, epoch, _, uri in checkpoints:
        assert str(uri).endswith(f"-e{epoch}")
        assert version in deleted or blobs.exists(str(uri)), uri


async def _finished(ledger: Ledger, run_id: str) -> bool:
    return bool((await ledger.settings(run_id)).get("finished"))
