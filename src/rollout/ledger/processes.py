"""Heartbeats: every role process says where it runs, its role, its run and what it is doing.

A role calls `start_heartbeat` once after connecting; a background task then upserts one row
(`processes`, keyed by host, pid and a random suffix) every `interval` seconds, and `close`
stops it and marks the row stopped. `set_process_status` changes the short status string sent
with the next beat. `processes` lists the rows with their age, judged by the database's clock:
a row that never said it stopped and has not beaten for more than `STALE_BEATS` intervals is
`dead` (killed, frozen, or its machine is gone).

A beat lost to a database outage is not retried (the next one comes soon); the outage is logged
once when it begins and once when it ends (the ledger's `Outage`, shared with the role's own
calls), never once per beat."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import secrets
import socket
from dataclasses import dataclass
from typing import LiteralString

from psycopg.rows import class_row

from rollout.ledger.connection import LedgerConnection, Pool, fetch_all
from rollout.ledger.errors import InvalidInput
from rollout.ledger.inputs import not_empty
from rollout.ledger.retry import is_disconnect
from rollout.tasks import raise_if_cancelled

log = logging.getLogger("rollout.ledger.processes")

CLOSE_WAIT_S = 10.0
"""How long `close()` waits for the cancelled heartbeat to end."""

DEFAULT_INTERVAL = 2.0
"""Seconds between beats: one small upsert each, so cheap enough for every process."""
STALE_BEATS = 3
"""Missed beats after which a process that never said it stopped is shown as dead."""
RECENT_SECONDS = 600.0
"""`processes()` without `everything`: running ones, and dead ones that beat this recently."""

BEAT: LiteralString = """
INSERT INTO processes AS p (process_id, host, pid, role, run_id, status, interval_s)
VALUES (%(process_id)s, %(host)s, %(pid)s, %(role)s, %(run_id)s, %(status)s, %(interval_s)s)
ON CONFLICT (process_id) DO UPDATE SET
    status = EXCLUDED.status, interval_s = EXCLUDED.interval_s, beat_at = now()
"""
STOPPED: LiteralString = """
UPDATE processes SET stopped_at = now(), beat_at = now(), status = 'stopped'
WHERE process_id = %(process_id)s
"""
PROCESS_STATE: LiteralString = """
CASE WHEN stopped_at IS NOT NULL THEN 'stopped'
     WHEN now() - beat_at > make_interval(secs => interval_s * %(stale_beats)s)
     THEN 'dead' ELSE 'running' END"""
"""A `processes` row's state: 'stopped', 'dead' (no beat for `stale_beats` intervals) or
'running'."""
PROCESSES: LiteralString = (
    """
SELECT process_id, host, pid, role, run_id, status, interval_s,
       extract(epoch FROM started_at)::float8 AS started_at,
       extract(epoch FROM beat_at)::float8 AS beat_at,
       extract(epoch FROM now() - beat_at)::float8 AS age_s,
       """
    + PROCESS_STATE
    + """ AS state
FROM processes
WHERE %(everything)s
   OR (stopped_at IS NULL AND beat_at > now() - make_interval(secs => %(recent)s))
ORDER BY run_id NULLS FIRST, role, started_at
"""
)


@dataclass(frozen=True)
class ProcessRecord:
    """One role process as its last heartbeat left it (times in Unix seconds)."""

    process_id: str
    host: str
    pid: int
    role: str
    run_id: str | None
    status: str
    interval_s: float
    started_at: float
    beat_at: float
    age_s: float
    """Seconds since the last beat, by the database's clock."""
    state: str
    """`running`, `dead` (no beat for more than STALE_BEATS intervals) or `stopped`."""


class ProcessesMixin(LedgerConnection):
    """This process's heartbeat and the list of every process's (see the module docstring)."""

    def __init__(self, pool: Pool, url: str) -> None:
        super().__init__(pool, url)
        self._beat: dict[str, object] | None = None
        self._beat_task: asyncio.Task[None] | None = None

    async def start_heartbeat(
        self,
        role: str,
        *,
        run_id: str | None = None,
        status: str = "starting",
        interval: float = DEFAULT_INTERVAL,
    ) -> str:
        """Record this process (host, pid, `role`, `run_id`) now and every `interval` seconds.

        Returns its process id. A second call replaces the role and run of the first (one row
        per process). The first beat is written before returning, so the process is listed at
        once; a later beat that fails (the database restarting) is logged and retried.
        """
        not_empty("role", role)
        if interval <= 0:
            raise InvalidInput(f"interval must be > 0, got {interval!r}")
        previous = self._beat
        self._beat = {
            "process_id": previous["process_id"]
            if previous
            else f"{socket.gethostname()}:{os.getpid()}:{secrets.token_hex(3)}",
            "host": socket.gethostname(),
            "pid": os.getpid(),
            "role": role,
            "run_id": run_id,
            "status": status,
            "interval_s": float(interval),
        }
        await self._write_beat()
        if self._beat_task is None:
            self._beat_task = asyncio.create_task(self._beat_loop(), name="rollout-heartbeat")
        return str(self._beat["process_id"])

    def set_process_status(self, status: str) -> None:
        """What this process is doing now, in a few words; sent with the next beat."""
        if self._beat is not None:
            self._beat["status"] = status

    async def _write_beat(self) -> None:
        assert self._beat is not None
        async with self._pool.connection() as conn:
            await conn.execute(BEAT, self._beat)

    async def _beat_loop(self) -> None:
        assert self._beat is not None
        failing: str | None = None  # the error last logged, so each is logged once
        while True:
            raise_if_cancelled()  # a cancel the pool swallowed during the last beat
            await asyncio.sleep(float(self._beat["interval_s"]))  # type: ignore[arg-type]
            try:
                await self._write_beat()
            except Exception as error:  # a missed beat must not stop the role
                if is_disconnect(error):
                    # The ledger's one outage: a line when it begins (shared with the role's
                    # calls), a line when it ends; never one per beat.
                    self._outage.failed(error)
                    with contextlib.suppress(Exception):
                        await self._after_disconnect()
                elif str(error) != failing:
                    failing = str(error)
                    log.warning("heartbeat not recorded (%s); retrying", error)
                continue
            failing = None
            self._outage.succeeded()

    async def processes(self, *, everything: bool = False) -> list[ProcessRecord]:
        """Every process that is running or recently died (`everything`: stopped ones and old
        dead ones too), ordered by run, role and start."""
        params = {"stale_beats": STALE_BEATS, "everything": everything, "recent": RECENT_SECONDS}
        async with self._pool.connection() as conn:
            return await fetch_all(conn, class_row(ProcessRecord), PROCESSES, params)

    async def close(self) -> None:
        """Stop beating and mark this process stopped (best effort), then close the rest."""
        task, self._beat_task = self._beat_task, None
        if task is not None:
            task.cancel()
            # Bounded: a library that swallows the cancel must not keep close() waiting.
            done, _ = await asyncio.wait({task}, timeout=CLOSE_WAIT_S)
            if not done:
                log.warning("the heartbeat did not stop within %g s; closing anyway", CLOSE_WAIT_S)
            with contextlib.suppress(Exception):
                async with asyncio.timeout(5.0), self._pool.connection() as conn:
                    assert self._beat is not None
                    await conn.execute(STOPPED, {"process_id": self._beat["process_id"]})
        await super().close()
