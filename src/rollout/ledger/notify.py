"""Wake-ups: one dedicated LISTEN connection per `Ledger`, shared by every waiter.

Writes NOTIFY a channel per fact table (by trigger, payload = run id), except the writes made
for every turn and every claim: a NOTIFY holds Postgres's database-wide notification lock through
its commit, so notifying commits queue behind each other (migration 0009). The connection LISTENs
only on the channels this process waits on (the first `wait` on a channel adds it, and counts
as news, since a write just before it went unheard), or on those `listen` names: every
notification of a LISTENed channel costs Postgres a signal to the listener and the listener a
wake-up, so a role that never waits on seat ends (the inference server, the gateway) should not
hear the dozens each step brings. `Listener.wait` returns
True when a notification arrived since this ledger's previous wait on the same key, so a
notification that lands while a follower is busy querying is not lost; otherwise it waits up to
`timeout` and returns False, which is the polling fallback. When the connection drops, waits time
out (polling) until it is back (it reconnects every `reconnect_delay` and LISTENs on every
channel again), and every key counts as notified once on reconnect, since notifications may
have been missed; so does any wait that began while it was down and outlasts the reconnect.

`WakeupsMixin` gives the `Ledger` its `listen` and `wait`.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Sequence

import psycopg
from psycopg import sql

from rollout.ledger.connection import LedgerConnection, Pool
from rollout.ledger.errors import InvalidInput
from rollout.tasks import raise_if_cancelled, stop_task

log = logging.getLogger(__name__)

CHANNELS: tuple[str, ...] = (
    "runs",  # a run was created
    "settings",  # a run setting changed
    "episodes",  # episodes were added, or settings changed (seats may be claimable)
    "ends",  # a seat ended
    "groups",  # a train seat ended: a group may be complete
    "train_steps",  # a train step was recorded
    "checkpoints",  # a checkpoint was recorded
    "conversions",  # a checkpoint conversion was recorded
    "serving",  # a serving record or a serving acknowledgement was written
    "serving_acks",  # a server acknowledged what it serves
)

_Key = tuple[str, str | None]

REFRESH_SECONDS = 0.2
"""How often the listening connection looks for channels asked for since it last listened (a
first `wait` on a channel waits that long at most for its LISTEN)."""


def _first_line(error: BaseException) -> str:
    """psycopg's messages run over several lines; a log line keeps the first."""
    text = str(error).strip()
    return text.splitlines()[0] if text else repr(error)


class Listener:
    """Listens on every ledger channel and wakes waiters."""

    def __init__(self, url: str, *, reconnect_delay: float = 1.0) -> None:
        self._url = url
        self._reconnect_delay = reconnect_delay
        self._task: asyncio.Task[None] | None = None
        self._ready = asyncio.Event()
        self._generation: dict[_Key, int] = {}
        self._seen: dict[_Key, int] = {}
        self._events: dict[_Key, asyncio.Event] = {}
        self._connected_once = False
        self._down = False
        self._wanted: set[str] = set()
        """The channels to LISTEN on (waited on, or named by `listen`)."""
        self._listening: set[str] = set()
        """Those LISTENed on the current connection."""
        self._listened = asyncio.Condition()

    def start(self) -> None:
        if self._task is None:
            self._task = asyncio.create_task(self._run(), name="rollout-ledger-listener")

    async def ready(
        self,
        timeout: float,  # noqa: ASYNC109
        channels: Sequence[str] = (),
    ) -> bool:
        """Start listening (if not yet) and wait until LISTEN is in place on `channels` (and on
        every channel asked for before)."""
        self._wanted.update(channels)
        self.start()
        if self._ready.is_set() and self._wanted <= self._listening:
            return True

        async def listening() -> None:
            async with self._listened:
                await self._listened.wait_for(
                    lambda: self._ready.is_set() and self._wanted <= self._listening
                )

        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(listening(), timeout)
        return self._ready.is_set() and self._wanted <= self._listening

    async def close(self) -> None:
        if self._task is not None:
            await stop_task(self._task)
            self._task = None

    async def _run(self) -> None:
        while True:
            raise_if_cancelled()  # a cancel psycopg swallowed while it connected or listened
            try:
                conn = await psycopg.AsyncConnection.connect(self._url, autocommit=True)
            except Exception as error:
                # Once per outage (the ledger's calls warn too); then quietly every second.
                (log.debug if self._down else log.warning)(
                    "ledger listener: cannot connect (%s); polling meanwhile", _first_line(error)
                )
                self._down = True
                await asyncio.sleep(self._reconnect_delay)
                continue
            self._down = False
            self._listening = set()
            try:
                if self._connected_once:
                    self._wake_all()  # notifications may have been missed while disconnected
                self._connected_once = True
                while True:
                    for channel in sorted(self._wanted - self._listening):
                        await conn.execute(sql.SQL("LISTEN {}").format(sql.Identifier(channel)))
                        self._listening.add(channel)
                    self._ready.set()
                    async with self._listened:
                        self._listened.notify_all()
                    async for note in conn.notifies(timeout=REFRESH_SECONDS):
                        self._bump((note.channel, None))
                        self._bump((note.channel, note.payload))
            except asyncio.CancelledError:
                raise
            except Exception as error:
                log.warning(
                    "ledger listener: connection lost (%s); reconnecting", _first_line(error)
                )
            finally:
                self._ready.clear()
                self._listening = set()
                with contextlib.suppress(Exception):
                    await conn.close()
            await asyncio.sleep(self._reconnect_delay)

    def _bump(self, key: _Key) -> None:
        self._generation[key] = self._generation.get(key, 0) + 1
        event = self._events.pop(key, None)
        if event is not None:
            event.set()

    def _wake_all(self) -> None:
        for key in list(self._generation) + list(self._events):
            self._bump(key)

    def _take(self, keys: list[_Key]) -> bool:
        """Mark the keys seen; True if any had news since the last take."""
        news = False
        for key in keys:
            generation = self._generation.get(key, 0)
            if generation != self._seen.get(key, 0):
                news = True
            self._seen[key] = generation
        return news

    async def wait(
        self,
        channels: list[str],
        run_id: str | None,
        timeout: float,  # noqa: ASYNC109
    ) -> bool:
        loop = asyncio.get_running_loop()
        deadline = loop.time() + timeout
        keys: list[_Key] = [(channel, run_id) for channel in channels]
        reconnecting = self._connected_once and not self._ready.is_set()
        new = [channel for channel in channels if channel not in self._wanted]
        if not await self.ready(timeout, channels):
            return False
        if reconnecting or new:
            # Anything may have been written while it was down (or, on a first wait on a
            # channel, just before its LISTEN), with no NOTIFY heard; a key nobody waited on
            # before the drop is not among those `_wake_all` bumps.
            self._take(keys)
            return True
        if self._take(keys):
            return True
        events = [self._events.setdefault(key, asyncio.Event()) for key in keys]
        waiters = [asyncio.create_task(event.wait()) for event in events]
        try:
            remaining = max(0.0, deadline - loop.time())
            done, _ = await asyncio.wait(
                waiters, timeout=remaining, return_when=asyncio.FIRST_COMPLETED
            )
        finally:
            for waiter in waiters:
                waiter.cancel()
        if not done:
            return False
        self._take(keys)
        return True


class WakeupsMixin(LedgerConnection):
    """Waiting for the ledger's notifications (see the module docstring)."""

    def __init__(self, pool: Pool, url: str) -> None:
        super().__init__(pool, url)
        self._listener = Listener(url)

    async def close(self) -> None:
        await self._listener.close()
        await super().close()

    async def listen(
        self,
        timeout: float = 10.0,  # noqa: ASYNC109
        channels: Sequence[str] = CHANNELS,
    ) -> bool:
        """LISTEN on `channels` (default every channel) now, so that notifications from here on
        are not missed by the first `wait` on one of them. True once it listens."""
        for name in channels:
            if name not in CHANNELS:
                raise InvalidInput(f"channel must be one of {CHANNELS}, got {name!r}")
        return await self._listener.ready(timeout, channels)

    async def wait(
        self,
        channel: str | Sequence[str],
        timeout: float,  # noqa: ASYNC109 - the contract's signature
        *,
        run_id: str | None = None,
    ) -> bool:
        """Wait for a NOTIFY on `channel` (or time out: polling fallback). True if notified.

        A notification that arrived since this ledger's previous wait on the same channel
        counts (it returns True at once), so a follower's loop of "query, then wait" misses
        nothing. With `run_id`, only that run's notifications count.

        Args:
            channel: One of `CHANNELS`, or several (any of them wakes).
            timeout: Seconds to wait at most.
            run_id: Only wake for this run.
        """
        channels = [channel] if isinstance(channel, str) else list(channel)
        for name in channels:
            if name not in CHANNELS:
                raise InvalidInput(f"channel must be one of {CHANNELS}, got {name!r}")
        return await self._listener.wait(channels, run_id, timeout)
