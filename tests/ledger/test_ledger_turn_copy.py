"""The COPY path of a large batch of turns (rollout.ledger.turn_copy): the same answers and
guarantees as the array statement (fenced, idempotent, all or nothing, read back exactly)."""

from __future__ import annotations

import psycopg
import pytest

from rollout.contracts import Turn
from rollout.ledger import EpisodeSpec, Ledger, RunRecord, SeatClaim
from rollout.ledger import turns as turns_module
from rollout.ledger.errors import InvalidInput, NotFound, StaleFence
from rollout.ledger.turns import write_turns

from .ledger_helpers import turn_for

COPY_MIN = 64
SEATS = COPY_MIN + 6  # one wave of a batch is one COPY part


@pytest.fixture(autouse=True)
def copy_on(monkeypatch: pytest.MonkeyPatch) -> None:
    """Parts of COPY_MIN turns or more go by COPY (off by default)."""
    monkeypatch.setattr(turns_module, "COPY_MIN", COPY_MIN)


async def claim_seats(ledger: Ledger, run: RunRecord, count: int = SEATS) -> list[SeatClaim]:
    await ledger.add_episodes(run.run_id, [EpisodeSpec(0, m, {}, m) for m in range(count)])
    claims = []
    while (claim := await ledger.claim_seat("r")) is not None:
        claims.append(claim)
    assert len(claims) == count
    return claims


def conversation(claim: SeatClaim, turns: int) -> list[Turn]:
    """Turns that extend each other (stored as deltas), with odd values along the way."""
    made: list[Turn] = []
    prompt: tuple[int, ...] = (1, 2, 3, claim.agent)
    messages: list[dict[str, str]] = [{"role": "user", "content": "héllo? no: \u2603"}]
    for index in range(turns):
        completion = () if index == 1 else (2**31 - 1, 0, index)
        reply = {"role": "assistant", "content": f"r{index}"}
        made.append(
            turn_for(
                claim,
                index,
                prompt_tokens=prompt,
                completion_tokens=completion,
                logprobs=tuple(-0.1234567890123 * (i + 1) for i in range(len(completion))),
                stop_reason="length" if index % 2 else "stop",
                policy=f"p{claim.agent}-{index % 2}",  # a policy per agent (and per turn)
                request={
                    "messages": list(messages),
                    "reply": reply,
                    "tools": [{"name": "t", "n": 1.5}],
                    "n": index,
                },
            )
        )
        prompt = prompt + completion + (index, 7)
        messages = [*messages, reply, {"role": "user", "content": f"more {index}"}]
    return made


async def stored_count(ledger: Ledger, where: str = "true") -> int:
    async with await psycopg.AsyncConnection.connect(ledger.url) as conn:
        cursor = await conn.execute(f"SELECT count(*) FROM turns WHERE {where}")  # type: ignore[arg-type]
        row = await cursor.fetchone()
    assert row is not None
    return row[0]


async def test_copy_batch_round_trips_and_is_idempotent(ledger: Ledger, run: RunRecord) -> None:
    claims = await claim_seats(ledger, run)
    played = {claim.episode_id: conversation(claim, 4) for claim in claims}
    turns = [turn for claim in claims for turn in played[claim.episode_id][:3]]
    assert await ledger.record_turns(turns) == [True] * len(turns)
    for claim in claims[:5] + claims[-2:]:
        assert (
            await ledger.seat_turns(claim.episode_id, claim.agent, claim.attempt)
            == (played[claim.episode_id][:3])
        )
    # Later waves were stored against the turn before (what the array statement does).
    assert await stored_count(ledger, "prompt_prefix > 0 AND messages_prefix > 0") == 2 * SEATS
    # The same turns again, and a turn twice in one batch: stored once.
    assert await ledger.record_turns(turns) == [False] * len(turns)
    more = [played[claim.episode_id][3] for claim in claims]
    assert await ledger.record_turns(more + more[:3]) == [True] * len(more) + [False] * 3
    assert await stored_count(ledger) == 4 * SEATS
    claim = claims[7]
    assert (
        await ledger.seat_turns(claim.episode_id, claim.agent, claim.attempt)
        == (played[claim.episode_id])
    )
    rows = await ledger.turns_for_run(run.run_id, limit=10_000)
    assert len(rows) == 4 * SEATS


async def test_copy_batch_is_fenced_and_all_or_nothing(ledger: Ledger, run: RunRecord) -> None:
    claims = await claim_seats(ledger, run, SEATS + 2)
    done, taken, live = claims[0], claims[1], claims[2:]
    await ledger.end_seat(done, reward=0.0)
    batch = [turn_for(claim, 0) for claim in live]
    with pytest.raises(StaleFence, match="has ended"):
        await ledger.record_turns([*batch, turn_for(done, 0)])
    stale = turn_for(taken, 0, attempt=taken.attempt + 1)
    with pytest.raises(StaleFence, match="taken over"):
        await ledger.record_turns([stale, *batch])
    with pytest.raises(NotFound):
        await ledger.record_turns([*batch, turn_for(live[0], 0, agent=9)])
    with pytest.raises(InvalidInput, match="int32"):
        await ledger.record_turns([*batch, turn_for(live[0], 1, completion_tokens=(2**31, 1, 2))])
    with pytest.raises(InvalidInput, match=r"turn\.request must be JSON"):
        await ledger.record_turns([*batch, turn_for(live[0], 1, request={"x": float("nan")})])
    assert await stored_count(ledger) == 0
    assert await ledger.record_turns(batch) == [True] * len(batch)


async def test_copy_part_isolates_a_bad_turn(ledger: Ledger, run: RunRecord) -> None:
    # The turn batcher's path: autocommit, each turn its own answer.
    claims = await claim_seats(ledger, run)
    await ledger.end_seat(claims[0], reward=1.0)
    turns = [turn_for(claim, 0) for claim in claims]
    turns[5] = turn_for(claims[5], 0, completion_tokens=(-(2**31) - 1, 1, 2))
    async with await psycopg.AsyncConnection.connect(ledger.url, autocommit=True) as conn:
        from rollout.ledger.adapters import register_dumpers

        register_dumpers(conn)
        outcomes = await write_turns(conn, turns, isolate=True)
        later = await write_turns(conn, [turn_for(c, 1) for c in claims[1:]], isolate=True)
        staged = await (await conn.execute("SELECT to_regclass('turns_staging')")).fetchone()
        assert staged is not None and staged[0] is not None  # the part went by COPY
    assert later == [True] * (SEATS - 1)
    assert isinstance(outcomes[0], StaleFence) and isinstance(outcomes[5], InvalidInput)
    assert outcomes[1:5] == [True] * 4 and outcomes[6:] == [True] * (SEATS - 6)
    assert await stored_count(ledger) == 2 * SEATS - 3
