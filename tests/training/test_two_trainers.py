"""Two live trainer processes on one run: a revived old trainer cannot publish.

Two `rollout trainer --run RUN` start at once; the first to take the run's lease is A, and it
records step 1. The test pauses A with SIGSTOP (at a moment when it has no transaction open),
ends A's lease, and trainer B takes it over (epoch 2) and records step 2, the run's last. A is
then revived with SIGCONT: its next renewal or fenced write is refused, and it exits with one
line saying it stands down. The ledger shows each version once, lease epochs that never go back,
and no checkpoint or serving record of A's after the pause.

The test plays the other roles through the ledger, so only the two trainers are processes: the
runner (every seat ends `failed`, so each step is an optimizer step with nothing to learn; it
ends one group before the pause and the rest only after B holds the lease, so A cannot run
ahead and leave B nothing to do), the bridge (each checkpoint's own folder is its `local`
conversion) and an inference server (it acknowledges what it is told to serve).

Every wait has a deadline and names the step it waited for, with both trainers' log tails;
both processes are killed at the end. Cost: the two processes' start-up (each imports torch and
transformers: about 11 s of CPU) is nearly all of it; from A's first step to the end takes 5-15
s. Measured (call) on this project's shared 2-core machine: 30 s at load 3 (23 s of it start-up),
68-82 s at load 7-12, 150-260 s at load 14-18 (the old version: 40 s at load 3-8); `pytest -rP`
prints when each wait ended.

Why A is paused only outside a transaction: a fenced write locks the lease row (`check_fence`),
so a trainer stopped inside one holds that lock, and ending or taking over its lease then waits
for it (Postgres has no idle-in-transaction timeout by default). The old version of this test
paused A at any moment and ended its lease with an UPDATE that had no deadline: that can wait
forever, the likely cause of the one hang seen at load ~10.
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
from rollout.ledger.leases import trainer_lease
from rollout.runs.config import RunConfig

STEPS = 2
"""Step 1 by A, step 2 by B after its take-over."""
GROUP_SIZE = 2
START_S = 240.0
"""Deadline for a trainer's first step: start-up (importing torch) on 2 busy cores."""
STEP_S = 30.0
"""Deadline for every later wait."""
APP = "two-trainers-{}"
"""Each trainer's Postgres application_name (libpq's PGAPPNAME), to see its sessions."""


class _Player:
    """The runner, the bridge and the inference server, through the ledger.

    `groups` is how many more groups the runner may end (None: all of them).
    """

    def __init__(self, ledger: Ledger, run_id: str) -> None:
        self.ledger = ledger
        self.run_id = run_id
        self.groups: int | None = 0
        self.stop = asyncio.Event()

    async def play(self) -> None:
        while not self.stop.is_set():
            await asyncio.wait_for(self._once(), STEP_S)
            await asyncio.sleep(0.1)

    async def _once(self) -> None:
        ledger, run_id = self.ledger, self.run_id
        if self.groups is None or self.groups > 0:
            # Seats are handed out oldest first, so GROUP_SIZE seats are one group's.
            claims = await ledger.claim_seats("test-runner", limit=GROUP_SIZE, run_id=run_id)
            for claim in claims:
                await ledger.end_seat(claim, reward=0.0, status="failed", error="played by test")
            if claims and self.groups is not None:
                self.groups -= 1
        for checkpoint in await ledger.checkpoints(run_id):
            if "local" not in await ledger.conversions(run_id, checkpoint.version):
                await ledger.record_conversion(run_id, checkpoint.version, "local", checkpoint.uri)
        serving = await ledger.serving(run_id)
        if serving is not None:
            await ledger.ack_serving(run_id, "test-server", serving.version)


def _trainer(run_id: str, env: dict[str, str], n: int, log: Path) -> subprocess.Popen[bytes]:
    with open(log, "wb") as out:  # a file, not a pipe: a pipe nobody reads can fill and block
        return subprocess.Popen(
            [sys.executable, "-m", "rollout.cli", "trainer", "--run", run_id],
            stdout=out,
            stderr=subprocess.STDOUT,
            env=dict(env, PGAPPNAME=APP.format(n)),
        )


def _tails(logs: list[Path]) -> str:
    parts = []
    for log in logs:
        lines = log.read_text(errors="replace").splitlines() if log.exists() else []
        parts.append(f"--- {log.name} (last 15 lines) ---\n" + "\n".join(lines[-15:]))
    return "\n".join(parts)


@pytest.mark.slow
async def test_a_revived_old_trainer_cannot_publish(
    ledger: Ledger, database_url: str, tiny_model_dir: Path, tmp_path: Path
) -> None:
    config = RunConfig.model_validate(
        {"steps": STEPS, "groups_per_step": 1, "group_size": GROUP_SIZE}
    )
    run = await create_run(
        ledger, "parity.environment:environment", config, tiny_model_dir, "two-trainers"
    )
    run_id = run.run_id
    env = dict(os.environ, ROLLOUT_DATABASE_URL=database_url, ROLLOUT_STATE_DIR=str(tmp_path))
    blobs = BlobStore.from_url(str(tmp_path / "blobs"))
    lease = trainer_lease(run_id)
    logs = [tmp_path / f"{n}.log" for n in range(2)]

    async def sql(query: str, *params: object) -> list[tuple[Any, ...]]:
        # Deadlines in the server too: a lock held by a paused process fails, never hangs.
        options = "-c statement_timeout=10000 -c lock_timeout=5000"
        async with await psycopg.AsyncConnection.connect(
            database_url, autocommit=True, options=options, connect_timeout=10
        ) as conn:
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

    async def until(check: Callable[[], Awaitable[object]], within: float, what: str) -> None:
        deadline = time.monotonic() + within
        while True:
            if await asyncio.wait_for(check(), STEP_S):
                marks.append(f"{time.monotonic() - began:5.1f} s: {what}")
                return
            for n, process in enumerate(trainers):
                if process is not first and process.poll() is not None:
                    pytest.fail(
                        f"waiting for {what}: trainer {n} exited ({process.returncode})\n"
                        + "\n".join(marks)
                        + "\n"
                        + _tails(logs)
                    )
            if player.done():
                player.result()  # its error, if it failed
            if time.monotonic() > deadline:
                pytest.fail(
                    f"waiting for {what}: not within {within} s\n"
                    + "\n".join(marks)
                    + "\n"
                    + _tails(logs)
                )
            await asyncio.sleep(0.1)

    async def busy_sessions(n: int) -> int:
        rows = await sql(
            "SELECT count(*) FROM pg_stat_activity WHERE application_name = %s AND state <> 'idle'",
            APP.format(n),
        )
        return int(rows[0][0])

    marks: list[str] = []  # when each wait ended (shown on failure, and printed)
    began = time.monotonic()
    player_ = _Player(ledger, run_id)
    player_.groups = 1  # A's first step only
    player = asyncio.create_task(player_.play())
    # Both start at once (their start-up is most of the time); the one that takes the lease
    # first is A, the other waits for it.
    trainers = [_trainer(run_id, env, n, logs[n]) for n in range(2)]
    first: subprocess.Popen[bytes] | None = None
    try:
        await until(lambda: versions_of_epoch(1), START_S, "trainer A's step 1 (start-up)")
        [(holder,)] = await sql("SELECT holder FROM leases WHERE name = %s", lease)
        a = next(n for n, p in enumerate(trainers) if str(holder).endswith(f"-{p.pid}"))
        first = trainers[a]

        async def paused_outside_a_transaction() -> bool:
            assert first is not None
            first.send_signal(signal.SIGSTOP)
            await asyncio.sleep(0.2)  # a statement already sent finishes in the server
            if await busy_sessions(a) == 0:
                return True
            first.send_signal(signal.SIGCONT)  # stopped inside a transaction: try again
            await asyncio.sleep(0.3)
            return False

        await until(paused_outside_a_transaction, STEP_S, "trainer A paused outside a transaction")
        paused_at = time.time()
        await sql("UPDATE leases SET expires_at = now() WHERE name = %s", lease)  # A's lapses
        await until(
            lambda: _lease_epoch(sql, lease, 2), STEP_S, "trainer B's take-over (lease epoch 2)"
        )
        player_.groups = None  # now B may train
        await until(lambda: versions_of_epoch(2), STEP_S, "trainer B's step 2")
        first.send_signal(signal.SIGCONT)  # the revived old trainer
        a_log = logs[a]
        # Its stand-down line comes as it exits; at load 15 that took over 30 s after SIGCONT.
        await until(lambda: _stood_down(a_log), 3 * STEP_S, "trainer A to stand down")
        await until(lambda: _finished(ledger, run_id), STEP_S, "trainer B to finish the run")
    finally:
        player_.stop.set()
        for process in trainers:
            if process.poll() is None:
                with contextlib.suppress(ProcessLookupError):
                    process.send_signal(signal.SIGCONT)
                    process.kill()
            with contextlib.suppress(subprocess.TimeoutExpired):
                await asyncio.to_thread(process.wait, 15)
        with contextlib.suppress(Exception):
            await asyncio.wait_for(player, STEP_S)

    print("\n".join(marks))  # pytest -s or -rP: where the time went
    assert first is not None
    lines = logs[trainers.index(first)].read_text().splitlines()
    stood_down = [line for line in lines if "stands down" in line]
    # The line is the CLI's `error:` exit line; the process is not waited for (its exit, torch
    # and all, took 10 s more at load 7), the `finally` kills it.
    assert len(stood_down) == 1 and stood_down[0].startswith("error: "), _tails(logs)
    assert "Traceback" not in "\n".join(lines), _tails(logs)
    assert f"{lease!r}" in stood_down[0] and "writes nothing more" in stood_down[0]

    checkpoints = await sql(
        "SELECT version, lease_epoch, extract(epoch FROM created_at)::float8, uri"
        " FROM checkpoints WHERE run_id = %s ORDER BY version",
        run_id,
    )
    assert [row[0] for row in checkpoints] == list(range(STEPS + 1))  # each version once
    assert [row[1] for row in checkpoints] == [1, 1, 2]  # v0, v1 by A; v2 by B
    # Nothing of A's after the pause (a write refused by the fence leaves no row).
    assert all(e == 2 for _, e, at, _ in checkpoints if at > paused_at)
    steps = await sql("SELECT lease_epoch FROM train_steps WHERE run_id = %s ORDER BY step", run_id)
    assert [row[0] for row in steps] == [1, 1, 2]  # steps 0, 1 by A; 2 by B
    serving = await sql(
        "SELECT version, lease_epoch, extract(epoch FROM created_at)::float8 FROM serving"
        " WHERE run_id = %s ORDER BY id",
        run_id,
    )
    assert [row[1] for row in serving] == sorted(row[1] for row in serving)
    assert [row[0] for row in serving] == sorted(row[0] for row in serving)
    assert all(e == 2 for _, e, at in serving if at > paused_at)
    assert serving and serving[-1][:2] == (STEPS, 2)  # B published the last version
    # Every kept checkpoint's files are there, and they are the recorder's (keys carry the epoch).
    deleted = set((await ledger.settings(run_id)).get("deleted_checkpoints") or [])
    for version, epoch, _, uri in checkpoints:
        assert str(uri).endswith(f"-e{epoch}")
        assert version in deleted or blobs.exists(str(uri)), uri


async def _lease_epoch(
    sql: Callable[..., Awaitable[list[tuple[Any, ...]]]], lease: str, epoch: int
) -> bool:
    rows = await sql("SELECT epoch FROM leases WHERE name = %s", lease)
    return bool(rows) and rows[0][0] >= epoch


async def _stood_down(log: Path) -> bool:
    return "stands down" in await asyncio.to_thread(log.read_text, errors="replace")


async def _finished(ledger: Ledger, run_id: str) -> bool:
    return bool((await ledger.settings(run_id)).get("finished"))
