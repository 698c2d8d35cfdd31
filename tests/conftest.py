"""Shared fixtures for the platform's tests.

Postgres (a real server, never a mock):

- `pg_server_url` (session): the URL of the `postgres` maintenance database of one private
  PostgreSQL 16 for the whole test session, started with `pgserver` in a temporary folder (about
  3 s, once) and stopped and deleted at the end. It runs with `fsync=off`: test data need not
  survive a power cut. Set `ROLLOUT_TEST_DATABASE_URL` to use a server you run instead.
- `database_url` (function): the URL of a fresh database for this test alone, with the ledger's
  migrations applied (cloned from a template database ahead of time by a background thread),
  dropped after the test. Give it to subprocesses as `ROLLOUT_DATABASE_URL`.
- `ledger` (function, async): a connected `rollout.ledger.Ledger` on a fresh database, closed
  after the test. Tests never see each other's rows.
- `make_ledger` (function, async): a factory for more `Ledger`s on the same fresh database (for
  tests of concurrent processes' views), each closed after the test.
- `embedded_state_dir` (function): a state folder for tests that start the embedded Postgres
  themselves (no URL given). Never put an embedded server under `tmp_path`: pytest resets
  `/tmp/pytest-of-<user>` to mode 0700 whenever a session starts, which locks out the server's
  system user (as root, pgserver runs Postgres as user 'pgserver') and crashes it.

State: `ROLLOUT_STATE_DIR` points at a private temporary folder for the whole session (unless
it is set already), so nothing is written under `.rollout/` in the checkout.

Blobs:

- `blob_store` (function): a local `rollout.blobs.BlobStore` rooted in the test's tmp_path.

Example:
    async def test_runs(ledger):
        run = await ledger.create_run("r", "environments.arithmetic:env", {})
        assert (await ledger.get_run("r")).run_id == run.run_id
"""

from __future__ import annotations

import asyncio
import os
import queue
import shutil
import tempfile
import threading
import uuid
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator
from pathlib import Path
from typing import Any

import psycopg
import pytest
from psycopg import sql

from rollout.blobs import BlobStore
from rollout.ledger import Ledger
from rollout.ledger.embedded import pgserver_handle, stop_embedded, with_database
from rollout.ledger.migrate import apply_migrations, schema_fingerprint

# Serialises template creation when several test sessions share one server.
_TEMPLATE_LOCK = 0x726F6C6C6F7575


@pytest.fixture(scope="session", autouse=True)
def _private_state_dir() -> Iterator[None]:
    """Anything a test builds in the default state folder (the scripted model's tokenizer, ...)
    goes to a private temporary folder, not `.rollout/` in the checkout."""
    if os.environ.get("ROLLOUT_STATE_DIR"):
        yield
        return
    folder = tempfile.mkdtemp(prefix="rollout-test-state-")
    os.environ["ROLLOUT_STATE_DIR"] = folder
    try:
        yield
    finally:
        os.environ.pop("ROLLOUT_STATE_DIR", None)
        stop_embedded(folder)  # a command a test ran may have started it there
        shutil.rmtree(folder, ignore_errors=True)


@pytest.fixture(scope="session")
def pg_server_url() -> Iterator[str]:
    """URL of the session's Postgres server (its `postgres` database)."""
    external = os.environ.get("ROLLOUT_TEST_DATABASE_URL")
    if external:
        yield external
        return
    # Not under pytest's basetemp: pytest resets /tmp/pytest-of-<user> to 0700 whenever any
    # session starts, which locks out the server's own system user (pgserver runs Postgres as
    # 'pgserver' when we are root) and crashes it.
    folder = Path(tempfile.mkdtemp(prefix="rollout-test-pg-"))
    server = pgserver_handle(folder / "pgdata", "delete")
    url = str(server.get_uri())
    with psycopg.connect(url, autocommit=True) as conn:
        # Test data need not survive a crash; skip the fsyncs (DROP DATABASE checkpoints).
        conn.execute("ALTER SYSTEM SET fsync = off")
        conn.execute("ALTER SYSTEM SET synchronous_commit = off")
        conn.execute("ALTER SYSTEM SET full_page_writes = off")
        conn.execute("SELECT pg_reload_conf()")
    try:
        yield url
    finally:
        server.cleanup()
        shutil.rmtree(folder, ignore_errors=True)


@pytest.fixture(scope="session")
def _template_database(pg_server_url: str) -> str:
    """A migrated template database, named by the migrations' fingerprint."""
    name = f"rollout_template_{schema_fingerprint()}"
    with psycopg.connect(pg_server_url, autocommit=True) as conn:
        conn.execute("SELECT pg_advisory_lock(%s)", (_TEMPLATE_LOCK,))
        try:
            exists = conn.execute(
                "SELECT 1 FROM pg_database WHERE datname = %s", (name,)
            ).fetchone()
            if not exists:
                building = f"{name}_building"
                conn.execute(
                    sql.SQL("DROP DATABASE IF EXISTS {} WITH (FORCE)").format(
                        sql.Identifier(building)
                    )
                )
                conn.execute(sql.SQL("CREATE DATABASE {}").format(sql.Identifier(building)))
                asyncio.run(apply_migrations(with_database(pg_server_url, building)))
                conn.execute(
                    sql.SQL("ALTER DATABASE {} RENAME TO {}").format(
                        sql.Identifier(building), sql.Identifier(name)
                    )
                )
        finally:
            conn.execute("SELECT pg_advisory_unlock(%s)", (_TEMPLATE_LOCK,))
    return name


class _Databases:
    """Fresh databases cloned from the template, made ahead by a background thread (so a test
    rarely waits for CREATE DATABASE) and dropped behind it."""

    def __init__(self, server_url: str, template: str, ahead: int = 2) -> None:
        self._server_url = server_url
        self._template = template
        self._ahead = ahead
        self._ready: queue.Queue[str] = queue.Queue()
        self._to_drop: queue.Queue[str] = queue.Queue()
        self._wake = threading.Event()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._work, name="test-databases", daemon=True)
        self._thread.start()

    def _create(self, conn: psycopg.Connection[Any]) -> str:
        name = f"t_{uuid.uuid4().hex[:16]}"
        conn.execute(
            sql.SQL("CREATE DATABASE {} TEMPLATE {}").format(
                sql.Identifier(name), sql.Identifier(self._template)
            )
        )
        return name

    @staticmethod
    def _drop(conn: psycopg.Connection[Any], name: str) -> None:
        conn.execute(
            sql.SQL("DROP DATABASE IF EXISTS {} WITH (FORCE)").format(sql.Identifier(name))
        )

    def _work(self) -> None:
        with psycopg.connect(self._server_url, autocommit=True) as conn:
            while not self._stop.is_set():
                try:
                    self._drop(conn, self._to_drop.get_nowait())
                    continue
                except queue.Empty:
                    pass
                if self._ready.qsize() < self._ahead:
                    self._ready.put(self._create(conn))
                    continue
                self._wake.wait(0.5)
                self._wake.clear()

    def take(self) -> str:
        try:
            name = self._ready.get(timeout=0.01)
        except queue.Empty:
            with psycopg.connect(self._server_url, autocommit=True) as conn:
                name = self._create(conn)
        self._wake.set()
        return name

    def release(self, name: str) -> None:
        self._to_drop.put(name)
        self._wake.set()

    def close(self) -> None:
        self._stop.set()
        self._wake.set()
        self._thread.join(timeout=60)
        with psycopg.connect(self._server_url, autocommit=True) as conn:
            for pending in (self._ready, self._to_drop):
                while not pending.empty():
                    self._drop(conn, pending.get_nowait())


@pytest.fixture(scope="session")
def _databases(pg_server_url: str, _template_database: str) -> Iterator[_Databases]:
    databases = _Databases(pg_server_url, _template_database)
    try:
        yield databases
    finally:
        databases.close()


@pytest.fixture
def database_url(pg_server_url: str, _databases: _Databases) -> Iterator[str]:
    """URL of a fresh, migrated database for this test only (dropped afterwards)."""
    name = _databases.take()
    try:
        yield with_database(pg_server_url, name)
    finally:
        _databases.release(name)


@pytest.fixture
async def make_ledger(database_url: str) -> AsyncIterator[Callable[..., Awaitable[Ledger]]]:
    """Factory: `await make_ledger(**connect_kwargs)` -> a Ledger on this test's database."""
    opened: list[Ledger] = []

    async def make(**kwargs: Any) -> Ledger:
        ledger = await Ledger.connect(database_url, **kwargs)
        opened.append(ledger)
        return ledger

    try:
        yield make
    finally:
        for ledger in opened:
            await ledger.close()


@pytest.fixture
async def ledger(make_ledger: Callable[..., Awaitable[Ledger]]) -> Ledger:
    """A Ledger on a fresh database of the session's Postgres."""
    return await make_ledger()


@pytest.fixture
def embedded_state_dir() -> Iterator[Path]:
    """A state folder for tests that start the embedded Postgres themselves (`rollout up`,
    `Ledger.connect()` with no URL). Outside pytest's basetemp (see `pg_server_url`); any
    embedded server in it is stopped and the folder deleted after the test."""
    folder = Path(tempfile.mkdtemp(prefix="rollout-test-state-"))
    try:
        yield folder
    finally:
        stop_embedded(folder)
        shutil.rmtree(folder, ignore_errors=True)


@pytest.fixture
def blob_store(tmp_path: Path) -> BlobStore:
    """A local blob store rooted in this test's tmp_path."""
    return BlobStore.from_url(str(tmp_path / "blobs"))
