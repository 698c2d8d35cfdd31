"""Recording turns: one statement per batch, fenced per row, and a writer that batches
concurrent `record_turn` calls.

`write_turns` sends a batch as one statement: it locks the batch's seat rows FOR SHARE (so a
concurrent claim of one of those seats waits for this statement's transaction), inserts the
turns whose attempt is their seat's latest and whose seat has not ended, and reports per row
what it saw, so each turn gets its own answer: True (new), False (recorded before), or an error
(StaleFence, NotFound). A part of at least `COPY_MIN` turns (off by default: it measured
slower) sends its rows by binary COPY into a staging table instead, and inserts from there with
the same fence and report (`rollout.ledger.turn_copy`).

`TurnWriter` (`rollout.ledger.turn_writer`) gives single-turn calls the throughput of batches
with no added latency: a call joins the pending batch; when fewer than `max_in_flight` batches
are being written, the pending batch is written at once, and calls that arrive meanwhile form
the next batch.

`TurnsMixin` is the ledger's face of both (`record_turn`, `record_turns`) and of reading turns
back (`seat_turns`, `last_turn`, `turns_for_run`). A turn is stored against the previous turn of
its seat attempt when that is known to be in the ledger (`rollout.ledger.turn_storage`): the
mixin keeps the last turn of recently written or read seat attempts, and a batch holding several
turns of one seat attempt is written in waves, one turn of each seat attempt per statement.
"""

from __future__ import annotations

import itertools
from collections import defaultdict
from collections.abc import Sequence
from typing import Any, LiteralString

from psycopg import AsyncConnection
from psycopg.rows import dict_row, kwargs_row

from rollout.contracts import Turn
from rollout.ledger.adapters import Float8s, Int4s
from rollout.ledger.connection import LedgerConnection, Pool, fetch_all
from rollout.ledger.errors import InvalidInput, StaleFence
from rollout.ledger.inputs import jsonb
from rollout.ledger.seats import seat_not_found, seat_taken_over
from rollout.ledger.turn_copy import COPY_MIN, copy_turns
from rollout.ledger.turn_sql import FENCE_AND_REPORT, INSERT_COLUMNS, LOCK_SEATS
from rollout.ledger.turn_storage import (
    INHERIT_SEPARATOR,
    TURN_COLUMNS,
    Row,
    SeatKey,
    Stored,
    TurnCache,
    TurnKey,
    encode,
    read_requests,
    rebuild,
    rebuild_reading,
    row_of,
    seat_key,
    stored_row,
    turn_key,
)
from rollout.ledger.turn_writer import MAX_BATCH, Outcome, TurnWriter

SEAT_TURNS: LiteralString = (
    "SELECT " + TURN_COLUMNS + " FROM turns t"
    " WHERE t.episode_id = %(episode_id)s AND t.agent = %(agent)s AND t.attempt = %(attempt)s"
    " ORDER BY t.turn_index"
)
LAST_TURN: LiteralString = SEAT_TURNS + " DESC LIMIT 1"
RUN_TURNS_SINCE: LiteralString = (
    "SELECT t.seq, " + TURN_COLUMNS + " FROM turns t"
    " WHERE t.run_id = %(run_id)s AND t.seq > %(since)s ORDER BY t.seq LIMIT %(limit)s"
)

# One statement for any batch size (prepared once): the batch arrives as parallel arrays, the
# ragged token and logprob lists flattened into one array each with 1-based [start:end] bounds.
# Text, bool and jsonb arrays go in binary (%b): the text format escapes each element in Python.
WRITE_TURNS: LiteralString = (
    """
WITH v AS (
    SELECT * FROM unnest(
        %(episode_id)b::text[], %(agent)s::int4[], %(attempt)s::int4[], %(turn_index)s::int4[],
        %(prompt_start)s::int4[], %(prompt_end)s::int4[], %(completion_start)s::int4[],
        %(completion_end)s::int4[], %(version)s::int4[], %(stop_reason)b::text[],
        %(extends_previous)b::bool[], %(started_at)s::float8[], %(ended_at)s::float8[],
        %(temperature)s::float8[], %(request)b::jsonb[], %(prompt_prefix)s::int4[],
        %(messages_prefix)s::int4[], %(request_inherits)b::text[], %(policy)b::text[]
    ) WITH ORDINALITY AS v(episode_id, agent, attempt, turn_index, prompt_start, prompt_end,
                          completion_start, completion_end, version, stop_reason,
                          extends_previous, started_at, ended_at, temperature, request,
                          prompt_prefix, messages_prefix, request_inherits, policy, ord)
"""
    + LOCK_SEATS
    + """
    SELECT seat.run_id, v.episode_id, v.agent, v.attempt, v.turn_index,
           (%(prompt_tokens)s::int4[])[v.prompt_start:v.prompt_end],
           (%(completion_tokens)s::int4[])[v.completion_start:v.completion_end],
           (%(logprobs)s::float8[])[v.completion_start:v.completion_end],
           v.version, v.stop_reason, v.extends_previous, v.started_at, v.ended_at,
           v.temperature, v.request, v.prompt_prefix, NULLIF(v.messages_prefix, -1),
           string_to_array(v.request_inherits, E'\\x1f'), v.policy
"""
    + FENCE_AND_REPORT
)


# The same for one turn, with scalar parameters (much cheaper to send than 15 arrays).
WRITE_TURN: LiteralString = (
    """
WITH seat AS (
    SELECT run_id, attempt, done FROM seats
    WHERE episode_id = %(episode_id)s AND agent = %(agent)s
    FOR SHARE
), ins AS (
    INSERT INTO turns """
    + INSERT_COLUMNS
    + """
    SELECT seat.run_id, %(episode_id)s, %(agent)s, %(attempt)s, %(turn_index)s,
           %(prompt_tokens)s::int4[], %(completion_tokens)s::int4[], %(logprobs)s::float8[],
           %(version)s, %(stop_reason)s, %(extends_previous)s, %(started_at)s, %(ended_at)s,
           %(temperature)s, %(request)s, %(prompt_prefix)s, %(messages_prefix)s,
           %(request_inherits)s::text[], %(policy)s
    FROM seat WHERE seat.attempt = %(attempt)s AND NOT seat.done
    ON CONFLICT DO NOTHING
    RETURNING 1
)
SELECT 1 AS ord, seat.attempt AS latest, seat.done, EXISTS (SELECT 1 FROM ins) AS inserted,
       CASE WHEN seat.done THEN EXISTS (
           SELECT 1 FROM turns t
           WHERE t.episode_id = %(episode_id)s AND t.agent = %(agent)s
             AND t.attempt = %(attempt)s AND t.turn_index = %(turn_index)s) END AS existed
FROM seat
"""
)


def _single_params(turn: Turn, stored: Stored) -> dict[str, Any]:
    return {
        "episode_id": turn.episode_id,
        "agent": turn.agent,
        "attempt": turn.attempt,
        "turn_index": turn.index,
        "prompt_tokens": Int4s(stored.prompt_added, "turn.prompt_tokens"),
        "completion_tokens": Int4s(turn.completion_tokens, "turn.completion_tokens"),
        "logprobs": Float8s(turn.logprobs, "turn.logprobs"),
        "version": turn.version,
        "stop_reason": turn.stop_reason,
        "extends_previous": turn.extends_previous,
        "started_at": float(turn.started_at),
        "ended_at": float(turn.ended_at),
        "temperature": float(turn.temperature),
        "request": jsonb("turn.request", stored.request_added),
        "prompt_prefix": stored.prompt_prefix,
        "messages_prefix": stored.messages_prefix,
        "request_inherits": list(stored.request_inherits),
        "policy": turn.policy,
    }


def _batch_params(turns: Sequence[Turn], stored: Sequence[Stored]) -> dict[str, Any]:
    prompt_start: list[int] = []
    prompt_end: list[int] = []
    completion_start: list[int] = []
    completion_end: list[int] = []
    prompt_at = completion_at = 1
    for turn, form in zip(turns, stored, strict=True):
        prompt_start.append(prompt_at)
        prompt_at += len(form.prompt_added)
        prompt_end.append(prompt_at - 1)
        completion_start.append(completion_at)
        completion_at += len(turn.completion_tokens)
        completion_end.append(completion_at - 1)
    chain = itertools.chain.from_iterable
    return {
        "episode_id": [t.episode_id for t in turns],
        "agent": Int4s([t.agent for t in turns], "turn.agent"),
        "attempt": Int4s([t.attempt for t in turns], "turn.attempt"),
        "turn_index": Int4s([t.index for t in turns], "turn.index"),
        "prompt_start": Int4s(prompt_start),
        "prompt_end": Int4s(prompt_end),
        "completion_start": Int4s(completion_start),
        "completion_end": Int4s(completion_end),
        "version": Int4s([t.version for t in turns], "turn.version"),
        "stop_reason": [t.stop_reason for t in turns],
        "extends_previous": [t.extends_previous for t in turns],
        "started_at": Float8s([t.started_at for t in turns], "turn.started_at"),
        "ended_at": Float8s([t.ended_at for t in turns], "turn.ended_at"),
        "temperature": Float8s([t.temperature for t in turns], "turn.temperature"),
        "request": [jsonb("turn.request", f.request_added) for f in stored],
        "prompt_prefix": Int4s([f.prompt_prefix for f in stored]),
        "messages_prefix": Int4s(
            [-1 if f.messages_prefix is None else f.messages_prefix for f in stored]
        ),
        "request_inherits": [INHERIT_SEPARATOR.join(f.request_inherits) for f in stored],
        "policy": [t.policy for t in turns],
        "prompt_tokens": Int4s(list(chain(f.prompt_added for f in stored)), "turn.prompt_tokens"),
        "completion_tokens": Int4s(
            list(chain(t.completion_tokens for t in turns)), "turn.completion_tokens"
        ),
        "logprobs": Float8s(list(chain(t.logprobs for t in turns)), "turn.logprobs"),
    }


def validate_turn(turn: Turn) -> None:
    """Raise InvalidInput (naming the field) for a turn that cannot be recorded."""
    if turn.index < 0:
        raise InvalidInput(f"turn.index must be >= 0, got {turn.index!r}")
    if turn.attempt < 1:
        raise InvalidInput(f"turn.attempt must be >= 1 (a claimed attempt), got {turn.attempt!r}")
    if len(turn.logprobs) != len(turn.completion_tokens):
        raise InvalidInput(
            f"turn.logprobs has {len(turn.logprobs)} values for "
            f"{len(turn.completion_tokens)} completion tokens (episode {turn.episode_id!r}, "
            f"agent {turn.agent}, index {turn.index})"
        )


def _outcome(turn: Turn, row: dict[str, Any] | None) -> Outcome:
    if row is None or row["latest"] is None:
        return seat_not_found(turn.episode_id, turn.agent)
    if row["inserted"]:
        return True
    if row["latest"] != turn.attempt:
        return seat_taken_over(turn.episode_id, turn.agent, turn.attempt, row["latest"])
    if row["done"] and not row["existed"]:
        return StaleFence(
            f"seat {turn.agent} of episode {turn.episode_id!r} has ended; turn {turn.index} "
            "was not recorded"
        )
    return False  # recorded before: a retry


def _waves(turns: Sequence[Turn]) -> list[list[int]]:
    """Positions of `turns` in waves: a seat attempt's turns go one per wave, by index, so
    each is written after the one it is stored against."""
    waves: list[list[int]] = []
    seen: dict[SeatKey, int] = defaultdict(int)
    for i in sorted(range(len(turns)), key=lambda i: (seat_key(turns[i]), turns[i].index)):
        key = seat_key(turns[i])
        if seen[key] == len(waves):
            waves.append([])
        waves[seen[key]].append(i)
        seen[key] += 1
    return waves


async def _write_part(
    conn: AsyncConnection[Any], turns: Sequence[Turn], stored: Sequence[Stored]
) -> list[Outcome]:
    if len(turns) == 1:
        found = await fetch_all(conn, dict_row, WRITE_TURN, _single_params(turns[0], stored[0]))
    elif len(turns) >= COPY_MIN:
        found = await copy_turns(conn, turns, stored)
    else:
        found = await fetch_all(conn, dict_row, WRITE_TURNS, _batch_params(turns, stored))
    rows = {row["ord"]: row for row in found}  # ord counts from 1
    return [_outcome(turn, rows.get(n + 1)) for n, turn in enumerate(turns)]


async def write_turns(
    conn: AsyncConnection[Any],
    turns: Sequence[Turn],
    known: dict[SeatKey, Turn] | None = None,
    *,
    isolate: bool = False,
) -> list[Outcome]:
    """Write a batch (any size; split into statements of MAX_BATCH); one outcome per turn.

    A turn repeated within the batch is written once; its repeats get False, or the first
    one's error. `known` maps seat attempts to a turn known to be in the ledger (written, or
    read); a turn is stored against turn `index - 1` when that is known, and each turn this
    writes becomes known (give the caller's cache these only once they are committed).

    With `isolate` (autocommit connections only), a statement that fails is retried one turn
    at a time, and a turn that still fails gets its exception as its outcome; without, the
    exception propagates.
    """
    known = {} if known is None else known
    first: dict[TurnKey, int] = {}
    unique: list[Turn] = []
    for turn in turns:
        key = turn_key(turn)
        if key not in first:
            first[key] = len(unique)
            unique.append(turn)
    outcomes: list[Outcome] = [False] * len(unique)
    for wave in _waves(unique):
        for start in range(0, len(wave), MAX_BATCH):
            positions = wave[start : start + MAX_BATCH]
            part = [unique[i] for i in positions]
            stored = [encode(turn, known.get(seat_key(turn))) for turn in part]
            found: list[Outcome]
            try:
                found = list(await _write_part(conn, part, stored))
            except Exception as error:
                if not isolate:
                    raise
                # One bad turn (say, a token id out of range) must not fail the others.
                found = [error] if len(part) == 1 else []
                for turn, form in zip(part, stored, strict=True) if len(part) > 1 else ():
                    try:
                        found.extend(await _write_part(conn, [turn], [form]))
                    except Exception as single:
                        found.append(single)
            for i, turn, outcome in zip(positions, part, found, strict=True):
                outcomes[i] = outcome
                before = known.get(seat_key(turn))
                if outcome is True and (before is None or before.index < turn.index):
                    known[seat_key(turn)] = turn
    results: list[Outcome] = []
    seen: set[TurnKey] = set()
    for turn in turns:
        key = turn_key(turn)
        outcome = outcomes[first[key]]
        if key in seen and outcome is True:
            outcome = False
        seen.add(key)
        results.append(outcome)
    return results


def _cursor_and_row(*, seq: int, **columns: Any) -> tuple[int, Row]:
    return seq, row_of(**columns)


_cursor_row = kwargs_row(_cursor_and_row)


class TurnsMixin(LedgerConnection):
    """Recording turns, fenced by seat attempt, and reading them back."""

    def __init__(self, pool: Pool, url: str) -> None:
        super().__init__(pool, url)
        self._writer = TurnWriter(self._write_batch)
        self._last_turns = TurnCache()

    async def close(self) -> None:
        await self._writer.close()  # the batches being written first, then the pool
        await super().close()

    def _known(self, turns: Sequence[Turn]) -> dict[SeatKey, Turn]:
        known: dict[SeatKey, Turn] = {}
        for turn in turns:
            key = seat_key(turn)
            if key not in known and (last := self._last_turns.get(key)) is not None:
                known[key] = last
        return known

    def _remember(self, known: dict[SeatKey, Turn]) -> None:
        for turn in known.values():
            self._last_turns.put(turn)

    async def _write_batch(self, turns: Sequence[Turn]) -> list[Outcome]:
        known = self._known(turns)
        try:
            async with self._pool.connection() as conn:
                return await write_turns(conn, turns, known, isolate=True)
        finally:
            self._remember(known)  # autocommit: what was written is committed

    async def record_turn(self, turn: Turn) -> bool:
        """Fenced by attempt; idempotent on (episode, agent, attempt, index). True if new.

        Concurrent calls are written together, one statement per batch; each call still gets
        its own answer.

        Raises:
            StaleFence: the attempt was taken over, or the seat has ended (and this turn was not
                recorded before).
            NotFound: no such seat.
        """
        validate_turn(turn)
        return await self._writer.record(turn)

    async def record_turns(self, turns: Sequence[Turn]) -> list[bool]:
        """Record many turns in one transaction; `[record_turn(t) for t in turns]`, batched.

        All or nothing: if any turn is fenced out (its attempt was taken over, or its seat ended
        before it was recorded) this raises StaleFence naming it and records none of them.

        Returns:
            For each turn, True if it was new.
        """
        if not turns:
            return []
        for turn in turns:
            validate_turn(turn)
        known = self._known(turns)
        async with self._pool.connection() as conn:
            async with conn.transaction():
                outcomes = await write_turns(conn, turns, known)
                for outcome in outcomes:
                    if isinstance(outcome, Exception):
                        raise outcome  # rolls the transaction back
            self._remember(known)  # committed
        return [bool(outcome) for outcome in outcomes]

    async def seat_turns(self, episode_id: str, agent: int, attempt: int) -> list[Turn]:
        """The turns of one seat attempt, in order."""
        params = {"episode_id": episode_id, "agent": agent, "attempt": attempt}
        async with self._pool.connection() as conn:
            turns = rebuild(await fetch_all(conn, stored_row, SEAT_TURNS, params))
        if turns:
            self._last_turns.put(turns[-1])
        return turns

    async def last_turn(self, episode_id: str, agent: int, attempt: int) -> Turn | None:
        """The latest turn of one seat attempt, or None before its first."""
        params = {"episode_id": episode_id, "agent": agent, "attempt": attempt}
        async with self._pool.connection() as conn:
            rows = await rebuild_reading(conn, await fetch_all(conn, stored_row, LAST_TURN, params))
        if not rows:
            return None
        self._last_turns.put(rows[0])
        return rows[0]

    async def turn_requests(
        self, episode_id: str, agent: int, attempt: int, *, upto: int
    ) -> dict[int, dict[str, Any]]:
        """The requests of one seat attempt's turns 0..`upto`, by index (no tokens read)."""
        async with self._pool.connection() as conn:
            return await read_requests(conn, episode_id, agent, attempt, upto)

    async def turns_for_run(
        self, run_id: str, *, since: int = 0, limit: int = 1000
    ) -> list[tuple[int, Turn]]:
        """Turns of the run recorded after cursor `since`, oldest first, as (cursor, turn).

        Pass the last cursor back as `since` to tail the run (every attempt's turns).
        """
        params = {"run_id": run_id, "since": since, "limit": limit}
        async with self._pool.connection() as conn:
            found = await fetch_all(conn, _cursor_row, RUN_TURNS_SINCE, params)
            turns = await rebuild_reading(conn, [row for _, row in found])
        cursors = [cursor for cursor, _ in found]
        return list(zip(cursors, turns, strict=True))
