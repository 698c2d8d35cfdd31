"""The supervisor's watch restarts a kill -9'd embedded Postgres; a Ledger rides it out."""

from __future__ import annotations

import asyncio
import os
import signal
import time
from pathlib import Path

import pytest

from rollout.launch.db_watch import watch_embedded
from rollout.ledger import Ledger
from rollout.ledger.embedded import database_url, embedded_pid, stop_embedded


@pytest.mark.slow
async def test_a_killed_embedded_postgres_is_restarted_and_the_ledger_goes_on(
    embedded_state_dir: Path,
) -> None:
    url = await asyncio.to_thread(database_url, embedded_state_dir)
    async with await Ledger.connect(url, max_size=2) as ledger:
        before = await ledger.create_run("before", "env:a", {})
        assert await ledger.listen()
        old = embedded_pid(embedded_state_dir)
        assert old is not None
        stop = asyncio.Event()
        watch = asyncio.create_task(watch_embedded(url, embedded_state_dir, stop, interval=0.2))
        try:
            os.kill(old, signal.SIGKILL)
            began = time.monotonic()
            # Retried until the watch has the server back (crash recovery from its WAL); an
            # orphaned backend of the dead server may still take it first (and it survives).
            after = await ledger.create_run("after", "env:a", {})
            # The killed server can still look alive for a moment while it exits (its pid file
            # stays): wait for a server with another pid.
            while (new := embedded_pid(embedded_state_dir)) in (None, old):
                assert time.monotonic() - began < 30.0, "the watch did not restart the server"
                await asyncio.sleep(0.1)
            assert new is not None and new != old
            await ledger.list_runs()
            recovered = time.monotonic() - began
            names = [run.name for run in await ledger.list_runs()]
            assert names == [before.name, after.name]  # the committed run survived, once
            # LISTEN is back on the new server: a write wakes a waiter.
            while await ledger.wait("settings", timeout=0.3):  # the reconnect's wake-up
                pass
            await ledger.set_setting(after.run_id, "paused", True)
            assert await ledger.wait("settings", timeout=10.0, run_id=after.run_id)
            # Stopped on purpose (`rollout down`), it stays stopped.
            assert stop_embedded(embedded_state_dir)
            await asyncio.sleep(1.0)
            assert embedded_pid(embedded_state_dir) is None
        finally:
            stop.set()
            await watch
    print(f"embedded Postgres back and a write through in {recovered:.1f} s")
    assert recovered < 30.0


async def test_an_external_database_is_not_watched(tmp_path: Path) -> None:
    stop = asyncio.Event()  # never set: the watch must return by itself
    external = "postgresql://rollout@db.example.com:5432/rollout"
    await asyncio.wait_for(watch_embedded(external, tmp_path, stop), timeout=5.0)
