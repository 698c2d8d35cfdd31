"""A pooled session left inside an open transaction (its process frozen: SIGSTOP, a stalled VM)
is ended by Postgres after `IDLE_IN_TRANSACTION_S`, so the row locks it held stop blocking the
others: here a setting written for the run, which must wait on the frozen holder's lock."""

from __future__ import annotations

import time

import psycopg
import pytest

from rollout.ledger import Ledger, connection
from rollout.ledger.retry import is_disconnect


async def test_a_session_frozen_inside_a_transaction_is_ended_and_its_locks_freed(
    database_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(connection, "IDLE_IN_TRANSACTION_S", 1)
    frozen = await Ledger.connect(database_url)
    other = await Ledger.connect(database_url)
    try:
        run = await other.create_run("idle", "environments.arithmetic:env", {})
        async with frozen._pool.connection() as conn:  # a holder that stops mid-way
            await conn.execute("BEGIN")
            await conn.execute("SELECT 1 FROM runs WHERE run_id = %s FOR UPDATE", (run.run_id,))
            began = time.monotonic()
            # The new setting's foreign key needs a share lock on the run's row: it waits until
            # Postgres ends the frozen session, about a second later.
            assert await other.set_setting(run.run_id, "paused", True)
            waited = time.monotonic() - began
            assert 0.8 <= waited < 30.0, waited
            with pytest.raises(psycopg.Error) as ended:
                await conn.execute("SELECT 1")
            # A ledger call that meets this reruns on a fresh connection, as after a disconnect.
            assert is_disconnect(ended.value), ended.value
        assert (await other.settings(run.run_id))["paused"] is True
        assert (await frozen.settings(run.run_id))["paused"] is True  # its pool recovered
    finally:
        await frozen.close()
        await other.close()
