"""Seat keys (no open doors): random, scoped to the one seat they were issued for, and dead once
that seat ends or its claim expires, while other seats' keys keep working."""

from __future__ import annotations

import asyncio
from collections.abc import Sequence

from rollout.ledger import EpisodeSpec, KeyInfo, Ledger


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


async def test_keys_checked_at_once_are_read_in_one_statement_and_each_gets_its_seat(
    ledger: Ledger,
) -> None:
    run = await ledger.create_run("keys-batch", "arithmetic.environment:environment", {})
    await ledger.add_episodes(run.run_id, [EpisodeSpec(0, m, {}, seed=m) for m in range(6)])
    claims = [await ledger.claim_seat(f"runner-{m}", run_id=run.run_id) for m in range(6)]
    assert all(claim is not None for claim in claims)
    live = [claim for claim in claims if claim is not None]
    await ledger.end_seat(live[0], reward=0.0)  # its key stops resolving
    batches: list[int] = []
    read = ledger._read_keys

    async def counted(keys: Sequence[str]) -> list[KeyInfo | None]:
        batches.append(len(keys))
        return await read(keys)

    ledger._key_reader._write = counted
    asked = [claim.api_key for claim in live] + ["rk-nobody", live[3].api_key]
    infos = await asyncio.gather(*(ledger.resolve_key(key) for key in asked))

    seats = [(claim.episode_id, claim.agent, claim.attempt) for claim in live]
    expected = [None, *seats[1:], None, seats[3]]  # the ended seat's key, ..., an unknown key
    got = [None if i is None else (i.episode_id, i.agent, i.attempt) for i in infos]
    assert got == expected
    assert all(i is None or i.lag is not None for i in infos)  # the lag view came with each
    # The first key's statement started alone; the seven asked meanwhile waited for it and
    # went together.
    assert batches == [1, 7]
