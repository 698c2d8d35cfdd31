"""Code that reaches the database on connections of its own rides out an outage like a ledger
call (`Ledger.ride_out`): the monitor's read-only pool, cut by a real outage (the test's
Postgres through a TCP forwarder switched off for a second, tests/ledger/forwarder.py)."""

from __future__ import annotations

import asyncio
import logging
import time

import pytest

from rollout.ledger import Ledger
from rollout.ledger.monitor import MonitorReads
from tests.ledger.forwarder import Forwarder


async def test_the_monitors_reads_ride_out_an_outage(
    database_url: str, caplog: pytest.LogCaptureFixture
) -> None:
    forwarder = Forwarder(database_url)
    await forwarder.start()
    ledger = await Ledger.connect(forwarder.url, max_size=2)
    reads = await MonitorReads.open(ledger)
    try:
        await ledger.create_run("steady", "parity.environment:environment", {})
        assert [run["name"] for run in await reads.runs(offset=0, limit=5)] == ["steady"]
        await forwarder.stop()  # its pooled connections are cut, new ones refused
        back = asyncio.create_task(forwarder.start_after(1.0))
        began = time.monotonic()
        with caplog.at_level(logging.WARNING, logger="rollout.ledger"):
            assert [run["name"] for run in await reads.runs(offset=0, limit=5)] == ["steady"]
        await back
        assert 0.9 <= time.monotonic() - began < 20.0
        lines = [record.getMessage() for record in caplog.records]
        assert len(lines) == 2, lines
        assert lines[0].startswith("database unreachable, retrying for up to 60 s")
        assert lines[1].startswith("database reachable again after")
    finally:
        await reads.close()
        await ledger.close()
        await forwarder.stop()


async def test_ride_out_gives_up_after_the_limit_and_does_not_retry_bad_statements(
    database_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    import psycopg

    from rollout.ledger.retry import DatabaseUnavailable

    monkeypatch.setenv("ROLLOUT_DB_OUTAGE_S", "0.5")
    ledger = await Ledger.connect(database_url, max_size=1)
    calls = 0

    async def refused() -> None:
        nonlocal calls
        calls += 1
        await psycopg.AsyncConnection.connect("postgresql://nobody@127.0.0.1:1/none")

    async def bad() -> None:
        nonlocal calls
        calls += 1
        async with await psycopg.AsyncConnection.connect(ledger.url) as conn:
            await conn.execute("SELECT no_such_column")

    try:
        with pytest.raises(DatabaseUnavailable, match=r"database unreachable for more than 0\.5 s"):
            await ledger.ride_out(refused)
        assert calls > 1
        calls = 0
        with pytest.raises(psycopg.errors.UndefinedColumn):
            await ledger.ride_out(bad)
        assert calls == 1
    finally:
        await ledger.close()
