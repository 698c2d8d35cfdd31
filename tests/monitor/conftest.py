"""Fixtures for the monitor's tests: a served monitor app and a large synthetic run.

- `big_run` (module): a database of its own holding a run of 100,000 turns
  (`tests.monitor.synthetic.fill`), shared by the tests of a module; its URL is `big_run.url`.
- `serve_monitor` (function, async): a factory, `await serve_monitor(url, token=None)` -> the
  base URL of the monitor app over that database, served over real HTTP on 127.0.0.1 (stopped,
  and its store closed, after the test).
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Awaitable, Callable, Iterator
from dataclasses import dataclass
from typing import Any

import pytest

from rollout.ledger.embedded import with_database
from rollout.monitor.app import create_app
from rollout.monitor.store import MonitorStore
from rollout.net.server import AppServer
from tests.monitor.synthetic import Synthetic, fill


@dataclass(frozen=True)
class BigRun:
    url: str
    run: Synthetic


@pytest.fixture(scope="module")
def big_run(pg_server_url: str, _databases: Any) -> Iterator[BigRun]:
    name = _databases.take()
    try:
        url = with_database(pg_server_url, name)
        yield BigRun(url, fill(url, turns=100_000))
    finally:
        _databases.release(name)


@pytest.fixture
async def serve_monitor() -> AsyncIterator[Callable[..., Awaitable[str]]]:
    opened: list[tuple[MonitorStore, AppServer]] = []

    async def serve(url: str, token: str | None = None) -> str:
        store = await MonitorStore.open(url)
        server = AppServer(create_app(store, token=token))
        opened.append((store, server))
        await server.start()
        return server.url

    try:
        yield serve
    finally:
        for store, server in opened:
            await server.stop()
            await store.close()
