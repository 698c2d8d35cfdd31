"""A runner's sandbox loops stop when cancelled, even when the ledger call they were in swallowed
the cancel (as psycopg_pool's connection check can): the claim loop of `SandboxSeats.acquire`
and the renewal loop of `SandboxSeats.hold`, on a real ledger, with a real process instance."""

from __future__ import annotations

import asyncio
import contextlib
import time
from pathlib import Path
from typing import Any

import pytest

from rollout.ledger import Ledger
from rollout.ledger.sandboxes import SandboxClaim
from rollout.sandboxes.seats import SandboxSeats
from tests.sandboxes.worlds import FolderServer, Seat


async def _swallow_a_cancel() -> None:
    with contextlib.suppress(asyncio.CancelledError):
        await asyncio.sleep(3600)  # the library call in progress when the cancel lands


class SwallowingClaims(Ledger):
    """A ledger whose sandbox claims, cancelled mid-call, return as if no instance was free."""

    async def claim_sandbox(self, *args: Any, **kwargs: Any) -> SandboxClaim | None:
        await _swallow_a_cancel()
        return None


class SwallowingRenewals(Ledger):
    """A ledger whose claim renewals, cancelled mid-call, return as if they had renewed."""

    async def renew_sandbox(self, claim: SandboxClaim, lease_seconds: float = 30.0) -> None:
        await _swallow_a_cancel()


@pytest.mark.timeout(60)
async def test_the_claim_loop_stops_when_its_cancel_is_swallowed(database_url: str) -> None:
    ledger = await SwallowingClaims.connect(database_url)
    try:
        seats = SandboxSeats(ledger, "r1", host="h")
        acquiring = asyncio.create_task(seats.acquire(FolderServer(), Seat()))
        await asyncio.sleep(0.3)  # inside its first claim
        acquiring.cancel()
        done, _ = await asyncio.wait({acquiring}, timeout=5.0)
        assert done and acquiring.cancelled()
    finally:
        await ledger.close()


@pytest.mark.timeout(60)
async def test_a_held_seat_ends_when_its_renewals_cancel_is_swallowed(
    database_url: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("ROLLOUT_STATE_DIR", str(tmp_path))
    ledger = await SwallowingRenewals.connect(database_url)
    pool = FolderServer()
    seats = SandboxSeats(ledger, "r1", host="h", lease_seconds=0.3)
    try:
        async with seats.hold(pool, Seat()) as details:
            assert details["instance"]
            await asyncio.sleep(0.3)  # a renewal (every 0.1 s) is in progress
            began = time.monotonic()
        # The renewal loop stopped at once: it did not hold the seat's end for stop_task's wait.
        assert time.monotonic() - began < 5.0
        assert (await ledger.sandbox(details["instance"])).state == "dirty"  # released
    finally:
        await seats.close({pool.name: pool})
        await ledger.close()
