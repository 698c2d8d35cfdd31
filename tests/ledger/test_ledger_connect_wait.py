"""`Ledger.connect` waits for a database that is not up yet, then gives up in one line.

The database comes up late for real: the test's Postgres is reached through a TCP forwarder
(tests/ledger/forwarder.py) that starts listening only a few seconds after `connect` began
(until then its port refuses connections, as a server still starting or failing over does).
The heartbeat rides an outage made the same way.
"""

from __future__ import annotations

import asyncio
import logging
import time

import pytest
from psycopg.conninfo import conninfo_to_dict, make_conninfo

from rollout.ledger import Ledger
from rollout.ledger.retry import DatabaseUnavailable
from rollout.net.server import free_port
from tests.ledger.forwarder import Forwarder


@pytest.mark.slow
async def test_connect_waits_for_a_database_that_comes_up_a_few_seconds_later(
    database_url: str, caplog: pytest.LogCaptureFixture
) -> None:
    forwarder = Forwarder(database_url)
    starter = asyncio.create_task(forwarder.start_after(2.0))
    began = time.monotonic()
    try:
        with caplog.at_level(logging.WARNING, logger="rollout.ledger"):
            ledger = await Ledger.connect(forwarder.url, max_size=2)
        waited = time.monotonic() - began
        try:
            assert await ledger.list_runs() == []  # a working ledger, migrations applied
        finally:
            await ledger.close()
    finally:
        await starter
        await forwarder.stop()
    assert 1.9 <= waited < 15.0, waited
    lines = [record.getMessage() for record in caplog.records]
    assert len(lines) == 2, lines  # one warning when it begins, one when it ends
    assert lines[0].startswith("database unreachable, retrying for up to 60 s")
    assert "Postgres at 127.0.0.1" in lines[0] and "\n" not in lines[0]
    assert lines[1].startswith("database reachable again after")


async def test_connect_gives_up_on_a_database_that_never_comes_in_one_line(
    monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    monkeypatch.setenv("ROLLOUT_DB_OUTAGE_S", "1.5")
    url = f"postgresql://nobody@127.0.0.1:{free_port()}/none"
    began = time.monotonic()
    with (
        caplog.at_level(logging.WARNING, logger="rollout.ledger"),
        pytest.raises(DatabaseUnavailable) as raised,
    ):
        await Ledger.connect(url)
    assert 1.4 <= time.monotonic() - began < 6.0
    message = str(raised.value)
    assert message.startswith("database unreachable for more than 1.5 s (Postgres at 127.0.0.1)")
    assert message.endswith("stopping (ROLLOUT_DB_OUTAGE_S sets how long to wait)")
    assert "\n" not in message
    warnings = [r.getMessage() for r in caplog.records if "unreachable" in r.getMessage()]
    assert len(warnings) == 1, warnings


async def test_connect_does_not_wait_when_the_server_refuses_us(database_url: str) -> None:
    info = conninfo_to_dict(database_url)
    info["dbname"] = "no_such_database"
    began = time.monotonic()
    with pytest.raises(Exception, match="does not exist"):
        await Ledger.connect(make_conninfo("", **info))
    assert time.monotonic() - began < 5.0  # answered at once, not waited on for 60 s


@pytest.mark.slow
async def test_the_heartbeat_logs_an_outage_once_when_it_begins_and_once_when_it_ends(
    database_url: str, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    # A short pool wait, so that each beat during the outage fails (it used to log each one).
    monkeypatch.setenv("ROLLOUT_DB_OUTAGE_S", "0.2")
    forwarder = Forwarder(database_url)
    await forwarder.start()
    ledger = await Ledger.connect(forwarder.url, max_size=2)
    try:
        process_id = await ledger.start_heartbeat("tester", interval=0.1)
        with caplog.at_level(logging.WARNING, logger="rollout.ledger"):
            await forwarder.stop()
            await asyncio.sleep(2.0)  # ~20 beats' time: each fails
            await forwarder.start()
            deadline = time.monotonic() + 10.0
            while not any("reachable again" in r.getMessage() for r in caplog.records):
                assert time.monotonic() < deadline, [r.getMessage() for r in caplog.records]
                await asyncio.sleep(0.1)
        lines = [record.getMessage() for record in caplog.records]
        assert len(lines) == 2, lines
        assert lines[0].startswith("database unreachable, retrying for up to 0.2 s")
        assert lines[1].startswith("database reachable again after")
        (beat,) = [p for p in await ledger.processes() if p.process_id == process_id]
        assert beat.state == "running"  # beating again
    finally:
        await ledger.close()
        await forwarder.stop()


async def test_a_call_cancelled_while_the_pool_is_checked_after_a_disconnect_stops(
    database_url: str,
) -> None:
    """The pool's check, run after each disconnect, swallows a cancel that lands while it tests
    a connection: the cancelled heartbeat used to beat on, and `close()` waited for it forever."""
    forwarder = Forwarder(database_url)
    await forwarder.start()
    ledger = await Ledger.connect(forwarder.url, min_size=1, max_size=1)
    try:
        forwarder.freeze()  # the check's query on the pooled connection gets no answer
        checking = asyncio.create_task(ledger._after_disconnect())  # pyright: ignore[reportPrivateUsage]
        await asyncio.sleep(0.5)
        assert not checking.done()
        checking.cancel()
        forwarder.thaw()  # the query and the cancel request reach the server
        with pytest.raises(asyncio.CancelledError):
            await asyncio.wait_for(checking, timeout=15.0)
    finally:
        forwarder.thaw()
        await asyncio.wait_for(ledger.close(), timeout=15.0)
        await forwarder.stop()
