"""Database outages: ledger calls retry on a fresh connection, LISTEN comes back, nothing doubles.

The fault is real: every backend of the test's database is terminated with
`pg_terminate_backend` (what a server restart or failover does to clients), so pooled
connections and the LISTEN connection die under the ledger.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable

import psycopg
import pytest

from rollout.ledger import EpisodeSpec, Ledger, RunRecord
from rollout.ledger.retry import DatabaseUnavailable, Outage, run_retrying
from tests.ledger.ledger_helpers import turn_for

MakeLedger = Callable[..., Awaitable[Ledger]]


async def _terminate_backends(url: str) -> int:
    """Terminate every other connection to the database of `url`; how many there were."""
    async with await psycopg.AsyncConnection.connect(url, autocommit=True) as conn:
        cursor = await conn.execute(
            "SELECT count(pg_terminate_backend(pid)) FROM pg_stat_activity"
            " WHERE datname = current_database() AND pid <> pg_backend_pid()"
        )
        row = await cursor.fetchone()
    assert row is not None
    return int(row[0])


async def test_calls_and_listen_ride_out_terminated_backends(
    ledger: Ledger, make_ledger: MakeLedger, run: RunRecord, caplog: pytest.LogCaptureFixture
) -> None:
    await ledger.add_episodes(run.run_id, [EpisodeSpec(0, m, {}, seed=m) for m in range(2)])
    first = await ledger.claim_seat("runner", run_id=run.run_id)
    assert first is not None
    assert await ledger.record_turn(turn_for(first, 0))
    assert await ledger.listen()
    assert not await ledger.wait("ends", timeout=0.01)  # the key is watched from here on

    with caplog.at_level(logging.WARNING, logger="rollout.ledger"):
        assert await _terminate_backends(ledger.url) >= 2  # a pooled one and the listener
        # A write on a dead pooled connection: retried on a fresh one, stored once.
        assert await ledger.end_seat(first, reward=1.0)
        assert await ledger.record_turn(turn_for(first, 0)) is False  # there already
    warnings = [r.getMessage() for r in caplog.records if "unreachable" in r.getMessage()]
    assert len(warnings) == 1, warnings
    assert warnings[0].startswith("database unreachable, retrying for up to 60 s")

    # The listener reconnects and LISTENs again; then a write elsewhere wakes it.
    assert await ledger.wait("ends", timeout=10.0)  # "maybe missed" wake-up on reconnect
    while await ledger.wait("ends", timeout=0.3):  # drain what the outage left
        pass
    other = await make_ledger()
    second = await other.claim_seat("runner-2", run_id=run.run_id)
    assert second is not None
    assert await other.end_seat(second, reward=0.0)
    assert await ledger.wait("ends", timeout=10.0)

    episodes = await ledger.list_episodes(run.run_id)
    assert sorted(len(e.ends) for e in episodes) == [1, 1]
    record = await ledger.episode(first.episode_id)
    assert [t.index for t in record.turns] == [0]


async def test_a_write_whose_commit_was_lost_is_stored_once(ledger: Ledger, run: RunRecord) -> None:
    """The connection dies after the COMMIT, before the caller hears of it: the retry finds
    the fact there and stores nothing more."""
    await ledger.add_episodes(run.run_id, [EpisodeSpec(0, 0, {}, seed=1)])
    claim = await ledger.claim_seat("runner", run_id=run.run_id)
    assert claim is not None
    results: list[bool] = []

    async def end_then_lose_the_connection() -> bool:
        stored = await ledger.end_seat(claim, reward=1.0)
        results.append(stored)
        if len(results) == 1:  # committed; now the connection goes before the answer does
            async with ledger._pool.connection() as conn:  # pyright: ignore[reportPrivateUsage]
                await _terminate_backends(ledger.url)
                await conn.execute("SELECT 1")  # raises: the server closed it
        return stored

    assert await run_retrying(Outage(5.0), end_then_lose_the_connection) is False
    assert results == [True, False]
    record = await ledger.episode(claim.episode_id)
    assert len(record.ends) == 1


async def test_an_outage_past_the_limit_stops_with_one_line(
    monkeypatch: pytest.MonkeyPatch, tmp_path: object
) -> None:
    monkeypatch.setenv("ROLLOUT_DB_OUTAGE_S", "0.3")
    outage = Outage(where="Postgres at /nowhere")
    assert outage.limit_s == 0.3
    attempts = 0

    async def connect() -> None:
        nonlocal attempts
        attempts += 1
        await psycopg.AsyncConnection.connect("host=/nonexistent-rollout dbname=x")

    loop = asyncio.get_running_loop()
    began = loop.time()
    with pytest.raises(DatabaseUnavailable) as raised:
        await run_retrying(outage, connect)
    assert 0.3 <= loop.time() - began < 3.0
    assert attempts >= 3  # backed off, not given up at once
    message = str(raised.value)
    assert "\n" not in message
    assert message.startswith("database unreachable for more than 0.3 s (Postgres at /nowhere)")


async def test_a_call_that_never_gets_through_gives_up_while_others_succeed(
    ledger: Ledger,
) -> None:
    """Other calls of the same ledger succeed between its retries (a heartbeat ending the
    shared outage each time): the call still gives up its limit after its own first failure."""
    outage = Outage(0.5)
    attempts = 0

    async def unreachable() -> None:
        nonlocal attempts
        attempts += 1
        await psycopg.AsyncConnection.connect("host=/nonexistent-rollout dbname=x")

    async def heartbeat() -> None:
        while True:
            await ledger.list_runs()  # a real call that gets through
            outage.succeeded()
            await asyncio.sleep(0.05)

    beating = asyncio.create_task(heartbeat())
    loop = asyncio.get_running_loop()
    began = loop.time()
    try:
        with pytest.raises(DatabaseUnavailable):
            await asyncio.wait_for(run_retrying(outage, unreachable), timeout=10.0)
    finally:
        beating.cancel()
    assert 0.5 <= loop.time() - began < 3.0
    assert attempts >= 3


async def test_a_bad_statement_is_not_retried(ledger: Ledger) -> None:
    attempts = 0

    async def bad() -> None:
        nonlocal attempts
        attempts += 1
        async with ledger._pool.connection() as conn:  # pyright: ignore[reportPrivateUsage]
            await conn.execute("SELECT * FROM no_such_table")

    with pytest.raises(psycopg.errors.UndefinedTable):
        await run_retrying(Outage(5.0), bad)
    assert attempts == 1


def test_every_public_call_retries_but_the_listed_ones() -> None:
    import inspect

    from rollout.ledger.retry import NOT_RETRIED

    public = {
        name
        for name, value in inspect.getmembers(Ledger)
        if not name.startswith("_") and inspect.iscoroutinefunction(value)
    } - {"connect"}  # the class method that makes the pool
    assert public >= NOT_RETRIED  # a renamed method must not silently become retried
    retried = {name for name in public if getattr(getattr(Ledger, name), "__rollout_retried__", 0)}
    assert retried == public - NOT_RETRIED
    assert {"end_seat", "record_turn", "record_checkpoint", "claim_seat"} <= retried


async def test_a_call_after_close_fails_at_once(make_ledger: MakeLedger) -> None:
    closed = await make_ledger()
    await closed.close()
    loop = asyncio.get_running_loop()
    began = loop.time()
    with pytest.raises(psycopg.OperationalError):
        await closed.list_runs()
    assert loop.time() - began < 1.0  # not retried as if the server were away
