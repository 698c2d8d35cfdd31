"""Seat ends written in batches: concurrent `end_seat` calls share a statement, each with its
own answer, and the exactly-once rules of a single end hold."""

from __future__ import annotations

import asyncio
import dataclasses
import math

import psycopg
import pytest

from rollout.ledger import EpisodeSpec, InvalidInput, Ledger, NotFound, RunRecord, StaleFence


async def test_concurrent_ends_each_get_their_own_answer(ledger: Ledger, run: RunRecord) -> None:
    await ledger.add_episodes(run.run_id, [EpisodeSpec(0, m, {}, m) for m in range(4)])
    live = [await ledger.claim_seat("r") for _ in range(3)]
    stale = await ledger.claim_seat("r", lease_seconds=0.05)
    assert stale is not None and all(c is not None for c in live)
    await asyncio.sleep(0.2)
    newer = await ledger.claim_seat("r2")  # takes `stale` over
    assert newer is not None and newer.episode_id == stale.episode_id
    a, b, c = (claim for claim in live if claim is not None)
    results = await asyncio.gather(
        ledger.end_seat(a, reward=1.0),
        ledger.end_seat(a, reward=0.0),  # the same seat again: the first end wins
        ledger.end_seat(b, reward=0.5, status="failed", error="boom"),
        ledger.end_seat(stale, reward=1.0),  # fenced out
        ledger.end_seat(dataclasses.replace(c, agent=5), reward=1.0),  # no such seat
        ledger.end_seat(c, reward=0.25, score={"ok": True}, metrics={"turns": 1.0}),
        return_exceptions=True,
    )
    assert results[:3] == [True, False, True]
    assert isinstance(results[3], StaleFence)
    assert isinstance(results[4], NotFound)
    assert results[5] is True
    assert await ledger.end_seat(c, reward=0.0) is False  # a retry
    ends = {
        end.episode_id: end for e in (a, b, c) for end in (await ledger.episode(e.episode_id)).ends
    }
    assert ends[a.episode_id].reward == 1.0
    assert (ends[b.episode_id].status, ends[b.episode_id].error) == ("failed", "boom")
    assert ends[c.episode_id].score == {"ok": True} and ends[c.episode_id].metrics == {"turns": 1.0}
    assert (await ledger.episode(stale.episode_id)).ends == ()
    assert await ledger.end_seat(newer, reward=1.0) is True


async def test_turn_rewards_are_recorded_with_the_end_by_turn(
    ledger: Ledger, run: RunRecord, database_url: str
) -> None:
    await ledger.add_episodes(run.run_id, [EpisodeSpec(0, m, {}, m) for m in range(2)])
    rewarded, plain = await ledger.claim_seat("r"), await ledger.claim_seat("r")
    assert rewarded is not None and plain is not None
    with pytest.raises(InvalidInput, match=r"turn_rewards\[1\] must be finite, got inf"):
        await ledger.end_seat(rewarded, reward=1.0, turn_rewards=[0.5, math.inf])
    # Ends written together, one with turn rewards (none on turn 1), one without.
    assert await asyncio.gather(
        ledger.end_seat(rewarded, reward=1.75, turn_rewards=[0.5, None, 1.25]),
        ledger.end_seat(plain, reward=1.0),
    ) == [True, True]
    (end,) = (await ledger.episode(rewarded.episode_id)).ends
    assert (end.reward, list(end.turn_rewards or ())) == (1.75, [0.5, None, 1.25])
    assert (await ledger.episode(plain.episode_id)).ends[0].turn_rewards is None
    async with await psycopg.AsyncConnection.connect(database_url) as conn:
        cursor = await conn.execute(
            "SELECT episode_id, agent, attempt, turn_index, reward FROM turn_rewards"
            " WHERE run_id = %s ORDER BY turn_index",
            (run.run_id,),
        )
        rows = await cursor.fetchall()
    seat = (rewarded.episode_id, rewarded.agent, rewarded.attempt)
    assert rows == [(*seat, 0, 0.5), (*seat, 2, 1.25)]


async def test_an_error_with_a_nul_character_is_recorded(ledger: Ledger, run: RunRecord) -> None:
    # A failed seat's error may quote a model's reply, and a text column cannot hold NUL.
    await ledger.add_episodes(run.run_id, [EpisodeSpec(0, 0, {}, 0)])
    claim = await ledger.claim_seat("r")
    assert claim is not None
    assert await ledger.end_seat(claim, reward=0.0, status="failed", error="no move: '\x00'")
    (end,) = (await ledger.episode(claim.episode_id)).ends
    assert end.status == "failed" and end.error == "no move: '\ufffd'"
