"""A TCP forwarder to the test's Postgres that can be switched off and on: a real outage.

While off, its port refuses connections and the connections it carried are cut, as when a
database server restarts or fails over; the server itself (shared by the test session) is
untouched. Frozen, it holds the bytes of the connections it carries without cutting them. Armed
with `cut_after(marker)`, it cuts the next connection that sends `marker` (b"COMMIT": a write
whose COMMIT reached the server) right after passing it on, before any answer comes back.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Callable

from psycopg.conninfo import conninfo_to_dict, make_conninfo

from rollout.net.server import free_port


class _Link:
    """One carried connection: `cut` once its client must hear nothing more."""

    def __init__(self) -> None:
        self.cut = False


async def _pipe(
    reader: asyncio.StreamReader,
    writer: asyncio.StreamWriter,
    flowing: asyncio.Event,
    link: _Link,
    on_data: Callable[[bytes, _Link], bool] | None = None,
) -> None:
    with contextlib.suppress(ConnectionError, OSError):
        while data := await reader.read(65536):
            await flowing.wait()
            if link.cut:
                break  # an answer the cut client must not get
            cut_now = on_data is not None and on_data(data, link)
            writer.write(data)
            await writer.drain()
            if cut_now:
                break
    writer.close()


class Forwarder:
    """Forwards 127.0.0.1:`port` to the server of `target_url` while on; `url` reaches it."""

    def __init__(self, target_url: str) -> None:
        info = conninfo_to_dict(target_url)
        self._host = str(info.get("host") or "localhost")
        self._port = int(info.get("port") or 5432)
        self.port = free_port()
        info.update(host="127.0.0.1", port=str(self.port))
        info.pop("hostaddr", None)
        self.url = make_conninfo("", **info)
        """The target database, reached through this forwarder."""
        self._server: asyncio.Server | None = None
        self._writers: set[asyncio.StreamWriter] = set()
        self._flowing = asyncio.Event()
        self._flowing.set()
        self._cut_marker: bytes | None = None
        self.cuts = 0
        """Connections cut by `cut_after` so far."""

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        if self._host.startswith("/"):  # a Unix socket folder
            path = f"{self._host}/.s.PGSQL.{self._port}"
            up_reader, up_writer = await asyncio.open_unix_connection(path)
        else:
            up_reader, up_writer = await asyncio.open_connection(self._host, self._port)
        self._writers |= {writer, up_writer}
        link = _Link()

        def upward(data: bytes, link: _Link) -> bool:
            if self._cut_marker is None or self._cut_marker not in data:
                return False
            self._cut_marker = None
            self.cuts += 1
            link.cut = True
            writer.close()  # the client hears nothing more; the server gets the bytes
            return True

        await asyncio.gather(
            _pipe(reader, up_writer, self._flowing, link, upward),
            _pipe(up_reader, writer, self._flowing, link),
        )

    def cut_after(self, marker: bytes) -> None:
        """Cut the next connection that sends `marker`, after passing it on (see the module
        docstring)."""
        self._cut_marker = marker

    async def start_after(self, seconds: float) -> None:
        """Start listening `seconds` from now (the database "comes back")."""
        await asyncio.sleep(seconds)
        await self.start()

    async def start(self) -> None:
        """Listen (again) on the same port."""
        if self._server is None:
            self._server = await asyncio.start_server(self._serve, "127.0.0.1", self.port)

    def freeze(self) -> None:
        """Hold every byte from now on, keeping the connections open (a network that stalls:
        a query sent meanwhile gets no answer)."""
        self._flowing.clear()

    def thaw(self) -> None:
        """Relay again, the held bytes first."""
        self._flowing.set()

    async def stop(self) -> None:
        """Refuse new connections and cut the ones carried."""
        if self._server is not None:
            self._server.close()
            self._server = None
        for writer in self._writers:
            writer.close()
        self._writers.clear()
