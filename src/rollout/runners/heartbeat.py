"""Seat heartbeats: a holder's claims are renewed while their seats play, all in one statement.

`SeatHeartbeats(ledger, lease_seconds)` belongs to one holder (a runner, an evaluator); `async
with beats.hold(claim):` keeps `claim` renewed for as long as the block runs. One task renews
every claim held for at least a third of the lease, every third of the lease, in one statement
(`Ledger.heartbeats`): 64 seats in play cost one statement and no task each. A claim that
another attempt took over is logged and renewed no more (its writes are refused with
`StaleFence` anyway). A renewal that fails (the ledger is unreachable) is tried again at the
next beat; the claims expire if it never comes back, and their seats are played again.

The task stops with `close`, bounded (`rollout.tasks.stop_task`), and a cancel that a library
under the ledger swallowed during a renewal (Python 3.11's `wait_for` inside psycopg_pool) is
noticed at the next beat (`raise_if_cancelled`): a beat never outlives its holder.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import AsyncIterator

from rollout.ledger import Ledger, SeatClaim
from rollout.tasks import raise_if_cancelled, stop_task

log = logging.getLogger(__name__)

_Seat = tuple[str, int, int]
"""A claim's seat attempt: episode, agent, attempt."""


def _key(claim: SeatClaim) -> _Seat:
    return claim.episode_id, claim.agent, claim.attempt


class SeatHeartbeats:
    """Renews the claims its holder plays (see the module docstring)."""

    def __init__(self, ledger: Ledger, lease_seconds: float) -> None:
        self.ledger = ledger
        self.lease_seconds = lease_seconds
        self._held: dict[_Seat, tuple[SeatClaim, float]] = {}
        """Each claim held, and when it was claimed or last renewed (monotonic seconds)."""
        self._task: asyncio.Task[None] | None = None

    @property
    def every(self) -> float:
        """Seconds between beats: a third of the lease."""
        return self.lease_seconds / 3

    @contextlib.asynccontextmanager
    async def hold(self, claim: SeatClaim) -> AsyncIterator[None]:
        """Renew `claim` while the block runs."""
        key = _key(claim)
        self._held[key] = (claim, time.monotonic())
        if self._task is None or self._task.done():
            self._task = asyncio.create_task(self._run(), name="rollout-seat-heartbeats")
        try:
            yield
        finally:
            self._held.pop(key, None)

    async def beat(self) -> list[SeatClaim]:
        """Renew, now, every claim held for at least a third of the lease; the claims that were
        taken over (they are renewed no more)."""
        now = time.monotonic()
        due = [claim for claim, since in self._held.values() if now - since >= self.every]
        if not due:
            return []
        lost = await self.ledger.heartbeats(due, self.lease_seconds)
        gone = {_key(claim) for claim in lost}
        for claim in due:
            key = _key(claim)
            if key in gone:
                self._held.pop(key, None)
                log.warning("lost seat %s/%s", claim.episode_id, claim.agent)
            elif key in self._held:
                self._held[key] = (claim, now)
        return lost

    async def _run(self) -> None:
        while True:
            raise_if_cancelled()  # a cancel the pool swallowed during the last beat
            await asyncio.sleep(self.every)
            try:
                await self.beat()
            except Exception as error:  # the ledger is unreachable: try again at the next beat
                log.warning("seat heartbeats failed (%s); trying again", error)

    async def close(self) -> None:
        """Stop renewing (the claims still held expire by themselves)."""
        if self._task is not None:
            await stop_task(self._task)
            self._task = None
