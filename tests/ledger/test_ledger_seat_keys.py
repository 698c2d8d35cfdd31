"""Seat keys (no open doors): random, scoped to the one seat they were issued for, and dead once
that seat ends or its claim expires, while other seats' keys keep working."""

from __future__ import annotations

import asyncio

from rollout.ledger import EpisodeSpec, Ledger


async def test_seat_keys_are_random_scoped_and_die_with_their_seat(ledger: Ledger) -> None:
    run = await ledger.create_run("keys", "arithmetic.environment:environment", {})
    await ledger.add_episodes(run.run_id, [EpisodeSpec(0, m, {}, seed=m) for m in range(3)])
    ending = await ledger.claim_seat("runner-a", run_id=run.run_id)
    other = await ledger.claim_seat("runner-b", run_id=run.run_id)
    expiring = await ledger.claim_seat("runner-c", run_id=run.run_id, lease_seconds=0.5)
    assert ending is not None and other is not None and expiring is not None
    keys = [ending.api_key, other.api_key, expiring.api_key]
    assert len(set(keys)) == 3
    for claim in (ending, other, expiring):
        # Random (>= 128 bits as text), and nothing in it names the seat it opens.
        assert len(claim.api_key) >= 24
        assert claim.episode_id not in claim.api_key and run.run_id not in claim.api_key
        info = await ledger.resolve_key(claim.api_key)
        assert info is not None
        assert (info.episode_id, info.agent, info.attempt) == (
            claim.episode_id,
            claim.agent,
            claim.attempt,
        )
    assert await ledger.resolve_key(ending.api_key[:-1]) is None  # no prefix or guess matches

    await ledger.end_seat(ending, reward=1.0)
    await asyncio.sleep(0.7)  # past the third claim's lease
    assert await ledger.resolve_key(ending.api_key) is None
    assert await ledger.resolve_key(expiring.api_key) is None
    still = await ledger.resolve_key(other.api_key)
    assert still is not None and still.episode_id == other.episode_id
