"""The ledger's connection to Postgres: a pool, and the base class of every concept's mixin.

`LedgerConnection.connect` finds the database (a URL, `ROLLOUT_DATABASE_URL`, or the embedded
server), applies pending migrations and opens a pool of autocommit connections. Every method
takes a connection from the pool for one statement or one transaction, so a `Ledger` is safe to
share between tasks.

Rows are read by column name: pooled connections return dicts (`dict_row`), and `fetch_one` /
`fetch_all` read a query whose column names are a record's fields straight into that record
(psycopg's `class_row`), or through any other row factory. A concept that holds a resource
(the LISTEN connection, the turn batcher) sets it up in its mixin's `__init__` and lets go of it
in its `close`, each calling `super()` so that every mixin of the facade gets its turn.

Every public coroutine method a subclass defines is wrapped when the class is made
(`__init_subclass__`, rollout.ledger.retry): a call whose connection dies (Postgres restarted,
crashed, failed over) runs again on a fresh connection with back-off, for up to
`ROLLOUT_DB_OUTAGE_S`, then raises `DatabaseUnavailable`.
"""

from __future__ import annotations

import asyncio
import logging
import os
from collections.abc import Awaitable, Callable
from typing import Any, LiteralString, Self, TypeVar

from psycopg import AsyncConnection
from psycopg.abc import Params
from psycopg.conninfo import conninfo_to_dict
from psycopg.rows import AsyncRowFactory, DictRow, dict_row
from psycopg_pool import AsyncConnectionPool

from rollout.ledger.adapters import register_dumpers
from rollout.ledger.embedded import ledger_url
from rollout.ledger.migrate import apply_migrations
from rollout.ledger.retry import Outage, is_not_up_yet, retried, run_retrying, wrap_methods
from rollout.settings import DATABASE_URL_VAR, get_settings
from rollout.tasks import raise_if_cancelled

Conn = AsyncConnection[DictRow]
Pool = AsyncConnectionPool[Conn]
R = TypeVar("R")


async def fetch_one(
    conn: AsyncConnection[Any],
    row_factory: AsyncRowFactory[R],
    query: LiteralString,
    params: Params | None = None,
) -> R | None:
    """The first row of `query`, made by `row_factory` (for example `class_row(RunRecord)`)."""
    async with conn.cursor(row_factory=row_factory) as cursor:
        await cursor.execute(query, params)
        return await cursor.fetchone()


async def fetch_all(
    conn: AsyncConnection[Any],
    row_factory: AsyncRowFactory[R],
    query: LiteralString,
    params: Params | None = None,
) -> list[R]:
    """Every row of `query`, made by `row_factory`."""
    async with conn.cursor(row_factory=row_factory) as cursor:
        await cursor.execute(query, params)
        return await cursor.fetchall()


COMMAND_WAIT_S = 1.0
"""How long a command a person types (`rollout runs list`, `evals`, `env check`, `train` before
its run exists) waits for a database that has not answered yet, before its one-line error.
Long-running roles wait `ROLLOUT_DB_OUTAGE_S` instead: on a cluster they may start first."""

IDLE_IN_TRANSACTION_S = 60
"""Postgres ends a pooled session that sits this long inside an open transaction.

Every ledger transaction is a few statements with no other work inside, so only a frozen
process (SIGSTOP, a stalled VM) leaves one open; its row locks would otherwise stall everyone
else, for example a new trainer taking over the lease of a paused one."""


async def _configure(conn: AsyncConnection[Any]) -> None:
    register_dumpers(conn)
    await conn.execute(
        "SELECT set_config('idle_in_transaction_session_timeout', %s, false)",
        (f"{IDLE_IN_TRANSACTION_S}s",),
    )


class _QuietReconnects(logging.Filter):
    """Drops the pools' warning per failed reconnect attempt and per dead (closed or broken)
    connection: during an outage the ledger logs one line instead (rollout.ledger.retry)."""

    def filter(self, record: logging.LogRecord) -> bool:
        message = str(record.msg)
        return not message.startswith(
            ("error connecting in", "discarding closed connection", "discarding broken connection")
        )


logging.getLogger("psycopg.pool").addFilter(_QuietReconnects())


def _where(url: str) -> str:
    """Where the database is, for messages (no password)."""
    try:
        info = conninfo_to_dict(url)
    except Exception:  # a message must not fail
        return "the database"
    return f"Postgres at {info.get('host') or 'localhost'}"


class LedgerConnection:
    """A pool of connections to the ledger database (the base of every concept's mixin)."""

    def __init_subclass__(cls, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        wrap_methods(cls)  # each concept's calls ride out a database outage

    def __init__(self, pool: Pool, url: str) -> None:
        self._pool = pool
        self.url = url
        """The database URL (give it to child processes as ROLLOUT_DATABASE_URL)."""
        self._outage = Outage(where=_where(url))
        self._group_floors: dict[tuple[str, str], int] = {}
        """Per (run, policy), a group index below which every train group is consumed
        (`rollout.ledger.training`: the trainable-groups scan starts there)."""
        self._complete_groups: dict[tuple[str, str], dict[int, int]] = {}
        """Per (run, policy), the train groups this process found complete and has not
        consumed, with their first episode's seq: a complete group stays complete, so the
        trainable-groups scan leaves them out."""

    async def _after_disconnect(self) -> None:
        """Drop the pool's dead connections, so a retry does not take one of them.

        The pool's check swallows a cancellation that arrives while it tests a connection (it
        counts the connection as broken and goes on), so a cancel requested meanwhile is raised
        here: a heartbeat or a call cancelled during an outage stops instead of going on.
        """
        await self._pool.check()
        raise_if_cancelled()

    @retried
    async def ride_out(self, call: Callable[[], Awaitable[Any]]) -> Any:
        """Run `call` as a ledger call: rerun on a disconnect, sharing this ledger's outage.

        For code that reaches the database on connections of its own (the monitor's read-only
        pool): `call` must be safe to run again (a read, or an idempotent write).
        """
        return await call()

    @classmethod
    async def connect(
        cls,
        url: str | None = None,
        *,
        state_dir: str | os.PathLike[str] | None = None,
        min_size: int = 1,
        max_size: int = 10,
        migrate: bool = True,
        wait_s: float | None = None,
    ) -> Self:
        """Connect (url, or ROLLOUT_DATABASE_URL, or the embedded Postgres under state_dir).

        A database that is not up yet (connection refused, the server starting) is retried with
        back-off for up to `ROLLOUT_DB_OUTAGE_S`, with one warning, as an outage is; then
        `DatabaseUnavailable` in one line. With `wait_s` (a command a person types passes
        `COMMAND_WAIT_S`) it is retried that long, silently, before the one line. One that
        refuses the connection (a wrong password or database name) fails at once. Once
        connected, calls ride out an outage of `ROLLOUT_DB_OUTAGE_S` either way.

        Args:
            url: A Postgres URL or connection string.
            state_dir: Where the embedded server lives when there is no URL (default
                ROLLOUT_STATE_DIR, else `.rollout`).
            min_size: Connections the pool keeps open.
            max_size: The most connections the pool opens (bounds concurrent calls).
            migrate: Apply pending schema migrations first.
            wait_s: How long to wait for a database that has not answered yet (default
                `ROLLOUT_DB_OUTAGE_S`, with a warning when the wait begins).
        """
        resolved = await asyncio.to_thread(ledger_url, url, state_dir=state_dir)
        settings = get_settings()
        outage = settings.db_outage_s
        starting_s = outage if wait_s is None else wait_s
        # A server that never answers (packets dropped) is given up on as one that refuses.
        connect_timeout = max(2, int(starting_s)) if wait_s is not None else None

        async def open_pool() -> Pool:
            if migrate:
                await apply_migrations(resolved, connect_timeout=connect_timeout)
            pool: Pool = AsyncConnectionPool(
                resolved,
                # A wait for a connection never outlasts the outage a call rides out.
                timeout=min(30.0, outage) if outage > 0 else 30.0,
                connection_class=Conn,
                min_size=min_size,
                max_size=max_size,
                kwargs={"autocommit": True, "row_factory": dict_row},
                open=False,
                name="rollout-ledger",
                configure=_configure,
            )
            try:
                await pool.open(
                    wait=True, timeout=30.0 if connect_timeout is None else connect_timeout
                )
            except BaseException:
                await pool.close()
                raise
            return pool

        # A database not up yet (a server still starting, a failover under way) is waited for
        # as long as an outage is ridden out; one that refuses us is not.
        if url is not None:
            where = _where(resolved)
        elif settings.database_url:
            where = DATABASE_URL_VAR
        else:
            where = "the embedded database"
        starting = Outage(starting_s, where=where, starting=True, quiet=wait_s is not None)
        pool = await run_retrying(starting, open_pool, retryable=is_not_up_yet)
        return cls(pool, resolved)

    async def close(self) -> None:
        """Close the pool (mixins holding more close theirs first, then call this)."""
        await self._pool.close()

    async def __aenter__(self) -> Self:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()
