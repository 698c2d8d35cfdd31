"""Writing a large batch of turns by binary COPY into a staging table, then one fenced INSERT.

`copy_turns` does what the array statement of `rollout.ledger.turns` does (the same fence per
row: the seat rows locked FOR SHARE, a turn inserted only when its attempt is its seat's latest
and its seat has not ended; the same turn twice stored once; the same per-row report), but the
rows travel as one binary COPY stream into a temporary table (no WAL, no index), built here
from bytes: the token and logprob arrays of the whole batch are converted by numpy once and
sliced per row, instead of being bound as 20 parameter arrays that the server slices per row.
The INSERT then reads (and empties) the staging table: `WITH v AS (DELETE ... RETURNING *)`.

The caller's transaction holds it all (one commit); on an autocommit connection it opens one.
`rollout.ledger.turns` uses it for parts of at least `COPY_MIN` turns.
"""

from __future__ import annotations

import struct
from collections.abc import Sequence
from typing import Any, LiteralString

import numpy as np
from psycopg import AsyncConnection
from psycopg.pq import TransactionStatus
from psycopg.rows import dict_row

from rollout.contracts import Turn
from rollout.errors import describe
from rollout.ledger.errors import InvalidInput
from rollout.ledger.inputs import json_text
from rollout.ledger.turn_sql import FENCE_AND_REPORT, LOCK_SEATS
from rollout.ledger.turn_storage import Stored

COPY_MIN = 501
"""Parts of at least this many turns go by COPY (smaller ones by the array statement). Off by
default (parts hold at most 500 turns): at 500 turns, one per seat, COPY measured slower than the
array statement in client and server CPU (benchmarks/ledger_turns.py); `turns.COPY_MIN` turns
it on."""

STAGING: LiteralString = """
CREATE TEMP TABLE IF NOT EXISTS turns_staging (
    ord int4, episode_id text, agent int4, attempt int4, turn_index int4, prompt_added int4[],
    completion_tokens int4[], logprobs float8[], version int4, stop_reason text,
    extends_previous bool, started_at float8, ended_at float8, temperature float8,
    request_added jsonb, prompt_prefix int4, messages_prefix int4, request_inherits text[],
    policy text
) ON COMMIT DELETE ROWS
"""

COPY: LiteralString = "COPY turns_staging FROM STDIN (FORMAT BINARY)"

# The array statement's fence and report (rollout.ledger.turn_sql), read from staging.
INSERT_STAGED: LiteralString = (
    """
WITH v AS (
    DELETE FROM turns_staging RETURNING *
"""
    + LOCK_SEATS
    + """
    SELECT seat.run_id, v.episode_id, v.agent, v.attempt, v.turn_index, v.prompt_added,
           v.completion_tokens, v.logprobs, v.version, v.stop_reason, v.extends_previous,
           v.started_at, v.ended_at, v.temperature, v.request_added, v.prompt_prefix,
           v.messages_prefix, v.request_inherits, v.policy
"""
    + FENCE_AND_REPORT
)

_HEADER = b"PGCOPY\n\xff\r\n\x00" + struct.pack(">ii", 0, 0)
_TRAILER = struct.pack(">h", -1)
_FIELDS = struct.pack(">h", 19)
_INT4 = struct.Struct(">ii")  # length 4, value
_FLOAT8 = struct.Struct(">id")  # length 8, value
_NULL = struct.pack(">i", -1)
_TRUE = struct.pack(">ib", 1, 1)
_FALSE = struct.pack(">ib", 1, 0)
_INT4_OID, _FLOAT8_OID, _TEXT_OID = 23, 701, 25
_ARRAY = struct.Struct(">iiiiii")  # byte length, ndim 1, no nulls, element type, length, lbound
_EMPTY = {oid: struct.pack(">iiii", 12, 0, 0, oid) for oid in (_INT4_OID, _FLOAT8_OID, _TEXT_OID)}
_INT4_PAIR = np.dtype([("size", ">i4"), ("value", ">i4")])
_FLOAT8_PAIR = np.dtype([("size", ">i4"), ("value", ">f8")])


def _pairs(values: list[Any], pair: np.dtype[Any], field: str, what: str) -> bytes:
    """Every element of a batch's arrays as (length, value) pairs, as COPY's arrays hold them."""
    try:
        converted = np.array(values, dtype=pair["value"])  # OverflowError outside int32
    except (OverflowError, TypeError, ValueError):
        raise InvalidInput(f"{field} must be {what}, got {describe(values[:8])}...") from None
    pairs = np.empty(len(values), dtype=pair)
    pairs["size"] = pair["value"].itemsize
    pairs["value"] = converted
    return pairs.tobytes()


def _array(data: bytes, start: int, count: int, oid: int, width: int) -> bytes:
    if count == 0:
        return _EMPTY[oid]
    body = data[start * width : (start + count) * width]
    return _ARRAY.pack(20 + len(body), 1, 0, oid, count, 1) + body


def _text(value: str) -> bytes:
    data = value.encode()
    return struct.pack(">i", len(data)) + data


def _texts(values: Sequence[str]) -> bytes:
    if not values:
        return _EMPTY[_TEXT_OID]
    body = b"".join(_text(value) for value in values)
    return _ARRAY.pack(20 + len(body), 1, 0, _TEXT_OID, len(values), 1) + body


def _request(value: dict[str, Any]) -> bytes:
    data = json_text("turn.request", value).encode()
    return struct.pack(">ib", len(data) + 1, 1) + data  # jsonb binary: version 1, then text


def copy_data(turns: Sequence[Turn], stored: Sequence[Stored]) -> bytes:
    """The binary COPY stream of `turns_staging` rows for a batch (`ord` counts from 1)."""
    prompts = _pairs(
        [token for form in stored for token in form.prompt_added],
        _INT4_PAIR,
        "turn.prompt_tokens",
        "int32 token ids",
    )
    completions = _pairs(
        [token for turn in turns for token in turn.completion_tokens],
        _INT4_PAIR,
        "turn.completion_tokens",
        "int32 token ids",
    )
    logprobs = _pairs(
        [value for turn in turns for value in turn.logprobs],
        _FLOAT8_PAIR,
        "turn.logprobs",
        "numbers",
    )
    int4, float8 = _INT4.pack, _FLOAT8.pack
    rows = [_HEADER]
    prompt_at = completion_at = 0
    try:
        for ord_, (turn, form) in enumerate(zip(turns, stored, strict=True), 1):
            prompt_count, completion_count = len(form.prompt_added), len(turn.completion_tokens)
            rows += (
                _FIELDS,
                int4(4, ord_),
                _text(turn.episode_id),
                int4(4, turn.agent),
                int4(4, turn.attempt),
                int4(4, turn.index),
                _array(prompts, prompt_at, prompt_count, _INT4_OID, 8),
                _array(completions, completion_at, completion_count, _INT4_OID, 8),
                _array(logprobs, completion_at, completion_count, _FLOAT8_OID, 12),
                int4(4, turn.version),
                _text(turn.stop_reason),
                _TRUE if turn.extends_previous else _FALSE,
                float8(8, turn.started_at),
                float8(8, turn.ended_at),
                float8(8, turn.temperature),
                _request(form.request_added),
                int4(4, form.prompt_prefix),
                _NULL if form.messages_prefix is None else int4(4, form.messages_prefix),
                _texts(form.request_inherits),
                _text(turn.policy),
            )
            prompt_at += prompt_count
            completion_at += completion_count
    except struct.error as error:
        raise InvalidInput(f"a turn's integer or float field is out of range: {error}") from None
    rows.append(_TRAILER)
    return b"".join(rows)


async def copy_turns(
    conn: AsyncConnection[Any], turns: Sequence[Turn], stored: Sequence[Stored]
) -> list[dict[str, Any]]:
    """Write a part (distinct turns) by COPY; the fence's report, one row per turn (by `ord`)."""
    data = copy_data(turns, stored)
    if conn.info.transaction_status == TransactionStatus.IDLE:
        async with conn.transaction():
            return await _copy(conn, data)
    return await _copy(conn, data)


async def _copy(conn: AsyncConnection[Any], data: bytes) -> list[dict[str, Any]]:
    async with conn.cursor(row_factory=dict_row) as cursor:
        await cursor.execute(STAGING)
        async with cursor.copy(COPY) as copy:
            await copy.write(data)
        await cursor.execute(INSERT_STAGED)
        return await cursor.fetchall()
