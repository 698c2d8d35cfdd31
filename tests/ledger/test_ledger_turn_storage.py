"""Turns stored as what they add to the previous turn (migration 0007): every reader gets the
identical token ids and request back, and a long conversation stores O(n) tokens."""

from __future__ import annotations

import json
import uuid
from collections.abc import Iterator
from typing import Any

import psycopg
import pytest
from psycopg import sql

from rollout.contracts import Turn
from rollout.ledger import EpisodeSpec, Ledger, RunRecord, SeatClaim, apply_migrations
from rollout.ledger.embedded import with_database
from rollout.ledger.migrate import migrations
from tests.ledger.ledger_helpers import turn_for

TOOLS = [{"name": "search", "parameters": {"type": "object", "properties": {}}}]


def conversation(claim: SeatClaim, turns: int) -> list[Turn]:
    """A chat that grows: each prompt is the previous prompt + completion + new tokens, each
    request the previous messages + reply + a new user message (with JSON look-alikes)."""
    made: list[Turn] = []
    prompt: tuple[int, ...] = (1, 2, 3)
    messages: list[dict[str, Any]] = [{"role": "user", "content": "start"}]
    for index in range(turns):
        completion = tuple(range(1000 + 10 * index, 1005 + 10 * index))
        reply = {"role": "assistant", "content": f"reply {index}", "n": index % 2 == 0}
        request = {
            "protocol": "chat.completions",
            "messages": list(messages),
            "tools": TOOLS,
            "reply": reply,
            "sampling": {"temperature": 1 if index % 3 else 1.0},
            "fingerprint": f"fp-{index}",
        }
        made.append(
            turn_for(
                claim,
                index,
                prompt_tokens=prompt,
                completion_tokens=completion,
                logprobs=tuple(-0.5 for _ in completion),
                request=request,
            )
        )
        prompt = (*prompt, *completion, 7, index)
        messages = [*messages, reply, {"role": "user", "content": f"go on {index}", "n": 1}]
    return made


async def stored_sizes(ledger: Ledger, claim: SeatClaim) -> tuple[int, int]:
    """Prompt tokens and request bytes stored for the seat attempt."""
    async with await psycopg.AsyncConnection.connect(ledger.url) as conn:
        cursor = await conn.execute(
            "SELECT sum(cardinality(prompt_added)), sum(length(request_added::text))"
            " FROM turns WHERE episode_id = %s AND agent = %s AND attempt = %s",
            (claim.episode_id, claim.agent, claim.attempt),
        )
        row = await cursor.fetchone()
    assert row is not None
    return int(row[0]), int(row[1])


async def sql_views(ledger: Ledger, claim: SeatClaim) -> list[tuple[Any, ...]]:
    """What SQL readers (the monitor) see through prompt_tokens(t), prompt_length(t), request(t)."""
    async with await psycopg.AsyncConnection.connect(ledger.url) as conn:
        cursor = await conn.execute(
            "SELECT t.prompt_tokens, t.prompt_length, t.request FROM turns t"
            " WHERE t.episode_id = %s AND t.agent = %s AND t.attempt = %s ORDER BY t.turn_index",
            (claim.episode_id, claim.agent, claim.attempt),
        )
        return await cursor.fetchall()


def assert_same(read: list[Turn], written: list[Turn]) -> None:
    assert read == written
    for a, b in zip(read, written, strict=True):  # JSON types too: 1, 1.0 and True differ
        assert json.dumps(a.request, sort_keys=True) == json.dumps(b.request, sort_keys=True)


@pytest.fixture
async def claims(ledger: Ledger, run: RunRecord) -> list[SeatClaim]:
    await ledger.add_episodes(run.run_id, [EpisodeSpec(0, m, {}, m) for m in range(3)])
    found = [await ledger.claim_seat("r") for _ in range(3)]
    assert all(claim is not None for claim in found)
    return [claim for claim in found if claim is not None]


async def test_a_long_conversation_reads_back_identically_and_stores_linearly(
    ledger: Ledger, run: RunRecord, claims: list[SeatClaim]
) -> None:
    claim = claims[0]
    turns = conversation(claim, 40)
    for turn in turns:
        assert await ledger.record_turn(turn)
    assert_same(await ledger.seat_turns(claim.episode_id, 0, claim.attempt), turns)
    assert await ledger.last_turn(claim.episode_id, 0, claim.attempt) == turns[-1]
    assert_same(list((await ledger.episode(claim.episode_id)).turns), turns)
    paged: list[Turn] = []
    since = 0
    while page := await ledger.turns_for_run(run.run_id, since=since, limit=7):
        paged.extend(turn for _, turn in page)
        since = page[-1][0]
    assert_same(paged, turns)
    requests = await ledger.turn_requests(claim.episode_id, 0, claim.attempt, upto=39)
    assert requests == {t.index: t.request for t in turns}
    views = await sql_views(ledger, claim)
    assert [list(row[0]) for row in views] == [list(t.prompt_tokens) for t in turns]
    assert [row[1] for row in views] == [len(t.prompt_tokens) for t in turns]
    assert [row[2] for row in views] == [t.request for t in turns]

    tokens, request_bytes = await stored_sizes(ledger, claim)
    assert tokens == 3 + 2 * 39  # the first prompt, then two new tokens a turn
    whole = sum(len(str(t.request)) for t in turns)
    assert request_bytes < whole / 5


async def test_a_batch_of_whole_conversations_is_stored_in_waves(
    ledger: Ledger, claims: list[SeatClaim]
) -> None:
    chats = [conversation(claim, 12) for claim in claims]
    batch = [turn for round_ in zip(*chats, strict=True) for turn in reversed(round_)]
    assert await ledger.record_turns(batch) == [True] * len(batch)
    assert await ledger.record_turns(batch) == [False] * len(batch)
    for claim, chat in zip(claims, chats, strict=True):
        assert_same(await ledger.seat_turns(claim.episode_id, 0, claim.attempt), chat)
        assert (await stored_sizes(ledger, claim))[0] == 3 + 2 * 11


async def test_a_fresh_ledger_stores_against_what_it_reads(
    ledger: Ledger, make_ledger: Any, claims: list[SeatClaim]
) -> None:
    claim = claims[0]
    turns = conversation(claim, 6)
    for turn in turns[:3]:
        await ledger.record_turn(turn)
    other = await make_ledger()  # another gateway: it knows nothing of this seat yet
    assert await other.record_turn(turns[3])  # stored whole: turn 2 is not known to it
    assert await other.last_turn(claim.episode_id, 0, claim.attempt) == turns[3]
    assert await other.record_turn(turns[4])  # against turn 3, read back
    assert await ledger.record_turn(turns[5])  # stored whole: this one never saw turn 4
    assert_same(await ledger.seat_turns(claim.episode_id, 0, claim.attempt), turns)
    views = await sql_views(ledger, claim)
    assert [row[2] for row in views] == [t.request for t in turns]
    whole = len(turns[3].prompt_tokens) + len(turns[5].prompt_tokens)
    assert (await stored_sizes(ledger, claim))[0] == 3 + 2 * 2 + whole + 2


async def test_prompts_that_start_over_or_diverge(ledger: Ledger, claims: list[SeatClaim]) -> None:
    claim = claims[0]
    first = turn_for(claim, 0, prompt_tokens=(1, 2, 3), completion_tokens=(4,), logprobs=(-1.0,))
    diverged = turn_for(claim, 1, prompt_tokens=(1, 2, 9, 9), request={"messages": "not a list"})
    fresh = turn_for(claim, 2, prompt_tokens=(5,), request={"messages": [{"role": "system"}]})
    empty = turn_for(claim, 3, prompt_tokens=(), request={})
    turns = [first, diverged, fresh, empty]
    for turn in turns:
        assert await ledger.record_turn(turn)
    assert_same(await ledger.seat_turns(claim.episode_id, 0, claim.attempt), turns)
    assert [list(row[0]) for row in await sql_views(ledger, claim)] == [
        list(t.prompt_tokens) for t in turns
    ]


@pytest.fixture
def empty_database_url(pg_server_url: str) -> Iterator[str]:
    name = f"e_{uuid.uuid4().hex[:16]}"
    with psycopg.connect(pg_server_url, autocommit=True) as conn:
        conn.execute(sql.SQL("CREATE DATABASE {}").format(sql.Identifier(name)))
    try:
        yield with_database(pg_server_url, name)
    finally:
        with psycopg.connect(pg_server_url, autocommit=True) as conn:
            conn.execute(sql.SQL("DROP DATABASE {} WITH (FORCE)").format(sql.Identifier(name)))


async def test_turns_written_before_migration_0007_read_back(empty_database_url: str) -> None:
    with psycopg.connect(empty_database_url, autocommit=True) as conn:
        conn.execute(
            "CREATE TABLE schema_migrations (version integer PRIMARY KEY, name text NOT NULL,"
            " checksum text NOT NULL, applied_at timestamptz NOT NULL DEFAULT now())"
        )
        for migration in migrations():
            if migration.version < 7:
                conn.execute(migration.sql.encode())
                conn.execute(
                    "INSERT INTO schema_migrations (version, name, checksum) VALUES (%s, %s, %s)",
                    (migration.version, migration.name, migration.checksum),
                )
        conn.execute(
            """
            INSERT INTO runs VALUES ('r1', 'old', 'env:env', '{}');
            INSERT INTO episodes (episode_id, run_id, kind, group_index, member, parameters,
                                  seed, agents) VALUES ('e1', 'r1', 'train', 0, 0, '{}', 0, 1);
            INSERT INTO seats (episode_id, agent, run_id, kind, attempt, runner)
                VALUES ('e1', 0, 'r1', 'train', 1, 'x');
            INSERT INTO seat_claims (episode_id, agent, attempt, run_id, runner, api_key, lease_s)
                VALUES ('e1', 0, 1, 'r1', 'x', 'k', 60);
            INSERT INTO turns (episode_id, agent, attempt, turn_index, run_id, prompt_tokens,
                               completion_tokens, logprobs, version, stop_reason,
                               extends_previous, started_at, ended_at, temperature, request)
            SELECT 'e1', 0, 1, k, 'r1', ARRAY[1, 2] || array_fill(k, ARRAY[k]), '{5}', '{-0.5}',
                   0, 'stop', k > 0, 0, 1, 1.0,
                   jsonb_build_object('messages', jsonb_build_array(k))
            FROM generate_series(0, 2) k;
            """
        )
    assert (await apply_migrations(empty_database_url))[0] == "0007_turn_deltas.sql"
    ledger = await Ledger.connect(empty_database_url)
    try:
        turns = await ledger.seat_turns("e1", 0, 1)
        assert [t.prompt_tokens for t in turns] == [(1, 2), (1, 2, 1), (1, 2, 2, 2)]
        assert [t.request for t in turns] == [{"messages": [k]} for k in range(3)]
        claim = SeatClaim("r1", "e1", 0, 1, "x", {}, 0, 1, "k")
        new = turn_for(claim, 3, prompt_tokens=(1, 2, 2, 2, 5, 6), request={"messages": [2, 9]})
        assert await ledger.record_turn(new)  # against turn 2 (last_turn read it)
        assert (await ledger.seat_turns("e1", 0, 1))[3] == new
    finally:
        await ledger.close()


@pytest.mark.parametrize("copy", [False, True], ids=["statement", "copy"])
async def test_a_reply_with_a_nul_character_is_recorded(
    ledger: Ledger, claims: list[SeatClaim], monkeypatch: pytest.MonkeyPatch, copy: bool
) -> None:
    # A byte-level model can sample NUL, which a jsonb string cannot hold: the turn is recorded
    # (its tokens exactly) with U+FFFD in the request's text, not refused with a database error.
    from rollout.ledger import turns as turns_module

    monkeypatch.setattr(turns_module, "COPY_MIN", 1 if copy else 10**9)
    claim = claims[0]
    request = {
        "messages": [{"role": "user", "content": "a\x00b"}],
        "reply": {"role": "assistant", "content": "\x00x"},
    }
    turn = turn_for(claim, 0, completion_tokens=(0, 120), logprobs=(-0.5, -0.25), request=request)
    assert await ledger.record_turns([turn]) == [True]
    stored = await ledger.turn_requests(claim.episode_id, 0, claim.attempt, upto=0)
    assert stored[0]["messages"][0]["content"] == "a\ufffdb"
    assert stored[0]["reply"]["content"] == "\ufffdx"
    (back,) = await ledger.seat_turns(claim.episode_id, 0, claim.attempt)
    assert back.completion_tokens == (0, 120)
