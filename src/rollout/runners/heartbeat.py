"""A seat's heartbeat: the claim is renewed while its seat plays, and stops with the play.

`seat_heartbeat(ledger, claim, lease_seconds)` renews the claim every third of its lease for as
long as the block runs (the runner's and the evaluator's seats). Two ways it could outlive its
seat are closed: a cancel that a library under the ledger swallowed during a renewal (Python
3.11's `wait_for` inside psycopg_pool) is noticed at the next beat, and the block's exit stops
the beat with `rollout.tasks.stop_task` (bounded, never swallowing a cancel of its own). Before, a
swallowed cancel left a beat renewing the claim forever while the seat's end waited for it.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

from rollout.ledger import Ledger, SeatClaim, StaleFence
from rollout.tasks import raise_if_cancelled, stop_task

log = logging.getLogger(__name__)


async def _beat(ledger: Ledger, claim: SeatClaim, lease_seconds: float) -> None:
    while True:
        raise_if_cancelled()  # a cancel the pool swallowed during the last beat
        await asyncio.sleep(lease_seconds / 3)
        try:
            await ledger.heartbeat(claim, lease_seconds)
        except StaleFence:
            log.warning("lost seat %s/%s", claim.episode_id, claim.agent)
            return


@asynccontextmanager
async def seat_heartbeat(
    ledger: Ledger, claim: SeatClaim, lease_seconds: float
) -> AsyncIterator[None]:
    """Renew `claim` while the block runs (see the module docstring)."""
    beat = asyncio.create_task(_beat(ledger, claim, lease_seconds))
    try:
        yield
    finally:
        await stop_task(beat)
