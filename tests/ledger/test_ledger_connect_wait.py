"""`Ledger.connect` waits for a database that is not up yet, then gives up in one line.

The database comes up late for real: the test's Postgres is reached through a TCP forwarder on a
free port that starts listening only a few seconds after `connect` began (until then the port
refuses connections, as a server still starting or being failed over does).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import AsyncIterator

import pytest
from psycopg.conninfo import conninfo_to_dict, make_conninfo

from rollout.ledger import Ledger
from rollout.ledger.retry import DatabaseUnavailable
from rollout.net.server import free_port


async def _pipe(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
    with contextlib.suppress(ConnectionError, OSError):
        while data := await reader.read(65536):
            writer.write(data)
            await writer.drain()
    writer.close()


@contextlib.asynccontextmanager
async def _forwarder(target_url: str, port: int, after_s: float) -> AsyncIterator[None]:
    """Forward 127.0.0.1:`port` to the server of `target_url`, listening after `after_s`."""
    info = conninfo_to_dict(target_url)
    host = str(info.get("host") or "localhost")
    target_port = int(info.get("port") or 5432)

    async def serve(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        if host.startswith("/"):  # a Unix socket folder
            up_reader, up_writer = await asyncio.open_unix_connection(
                f"{host}/.s.PGSQL.{target_port}"
            )
        else:
            up_reader, up_writer = await asyncio.open_connection(host, target_port)
        await asyncio.gather(_pipe(reader, up_writer), _pipe(up_reader, writer))

    servers: list[asyncio.Server] = []

    async def start() -> None:
        await asyncio.sleep(after_s)
        servers.append(await asyncio.start_server(serve, "127.0.0.1", port))

    starter = asyncio.create_task(start())
    try:
        yield
    finally:
        starter.cancel()
        for server in servers:
            server.close()


def _through(database_url: str, port: int) -> str:
    info = conninfo_to_dict(database_url)
    info.update(host="127.0.0.1", port=str(port))
    info.pop("hostaddr", None)
    return make_conninfo("", **info)


async def test_connect_waits_for_a_database_that_comes_up_a_few_seconds_later(
    database_url: str, caplog: pytest.LogCaptureFixture
) -> None:
    port = free_port()
    url = _through(database_url, port)
    async with _forwarder(database_url, port, after_s=2.0):
        began = time.monotonic()
        with caplog.at_level(logging.WARNING, logger="rollout.ledger"):
            ledger = await Ledger.connect(url, max_size=2)
        waited = time.monotonic() - began
        try:
            assert await ledger.list_runs() == []  # a working ledger, migrations applied
        finally:
            await ledger.close()
    assert 1.9 <= waited < 15.0, waited
    lines = [record.getMessage() for record in caplog.records]
    assert len(lines) == 2, lines  # one warning when it begins, one when it ends
    assert lines[0].startswith("database not reachable yet, retrying for up to 60 s")
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
    assert message.startswith("cannot reach the database (Postgres at 127.0.0.1): connection")
    assert message.endswith("(waited 1.5 s; ROLLOUT_DB_OUTAGE_S sets how long)")
    assert "\n" not in message
    warnings = [r.getMessage() for r in caplog.records if "not reachable yet" in r.getMessage()]
    assert len(warnings) == 1, warnings


async def test_connect_does_not_wait_when_the_server_refuses_us(database_url: str) -> None:
    info = conninfo_to_dict(database_url)
    info["dbname"] = "no_such_database"
    began = time.monotonic()
    with pytest.raises(Exception, match="does not exist"):
        await Ledger.connect(make_conninfo("", **info))
    assert time.monotonic() - began < 5.0  # answered at once, not waited on for 60 s
