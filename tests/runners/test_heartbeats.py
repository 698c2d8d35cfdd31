"""A holder's seat heartbeats: every claim it plays renewed in one statement per beat."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Sequence

import pytest

from rollout.ledger import EpisodeSpec, Ledger, SeatClaim
from rollout.runners.heartbeat import SeatHeartbeats


async def test_claims_held_are_renewed_together_and_a_taken_over_one_is_let_go(
    ledger: Ledger, caplog: pytest.LogCaptureFixture
) -> None:
    run = await ledger.create_run("beats", "arithmetic.environment:environment", {})
    await ledger.add_episodes(run.run_id, [EpisodeSpec(0, m, {}, m) for m in range(3)])
    beats = SeatHeartbeats(ledger, lease_seconds=0.6)  # a beat every 0.2 s
    claims = [await ledger.claim_seat("r", run_id=run.run_id, lease_seconds=0.6) for _ in range(3)]
    first, second, third = [c for c in claims if c is not None]
    statements: list[int] = []
    renew = ledger.heartbeats

    async def counted(batch: Sequence[SeatClaim], lease_seconds: float = 60.0) -> list[SeatClaim]:
        statements.append(len(batch))
        return await renew(batch, lease_seconds)

    ledger.heartbeats = counted  # type: ignore[method-assign]
    try:
        async with beats.hold(first), beats.hold(second):
            await asyncio.sleep(1.5)  # two and a half leases: only the beats kept them
            # The third was never held: it expired, and is the only seat another runner gets.
            taken = await ledger.claim_seat("thief", run_id=run.run_id)
            assert taken is not None and taken.episode_id == third.episode_id
            assert await ledger.claim_seat("thief", run_id=run.run_id) is None
        assert len(statements) >= 5 and set(statements) == {2}  # both, in each statement
        # Held now, the third's claim is found taken over at its next beat and let go.
        statements.clear()
        with caplog.at_level(logging.WARNING, logger="rollout.runners.heartbeat"):
            async with beats.hold(third):
                await asyncio.sleep(5 * beats.every)
        assert f"lost seat {third.episode_id}/0" in caplog.text
        assert statements == [1]  # renewed no more after that beat
    finally:
        await beats.close()
