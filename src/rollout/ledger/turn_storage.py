"""How a turn is stored: what it adds to the previous turn of its seat attempt (migration 0007).

A turn of a long conversation repeats its predecessor: its prompt is the previous prompt, the
previous completion and a few new tokens, and its request repeats the previous messages, reply
and tools. Stored whole, a 200-turn episode holds O(n^2) tokens; stored as a reference to turn
`index - 1` plus what is new, O(n). `encode` computes the stored form against the previous
turn (None: stored whole); `decode` rebuilds the turn from its stored form and the previous
turn, exactly (the same token ids, the same JSON values).

The stored form (columns of `turns`):
- `prompt_prefix`: how many leading prompt tokens are the previous prompt + completion's;
  `prompt_added` the rest.
- `messages_prefix`: how many leading `messages` are the previous request's messages followed
  by its `reply` (None: `request_added` holds every message, or there are none);
- `request_inherits`: keys (with object or array values) equal to the previous request's and
  left out of `request_added`.

Example:
    >>> prev = Turn("e", 0, 1, 0, (1, 2), (3,), (-0.5,), 0, "stop",
    ...             request={"messages": [{"role": "user", "content": "hi"}],
    ...                      "reply": {"role": "assistant", "content": "yo"}, "tools": [1]})
    >>> turn = Turn("e", 0, 1, 1, (1, 2, 3, 4), (5,), (-0.1,), 0, "stop",
    ...             request={"messages": [{"role": "user", "content": "hi"},
    ...                                   {"role": "assistant", "content": "yo"},
    ...                                   {"role": "user", "content": "more"}], "tools": [1]})
    >>> stored = encode(turn, prev)
    >>> stored.prompt_prefix, stored.prompt_added, stored.messages_prefix
    (3, (4,), 2)
    >>> stored.request_inherits, stored.request_added
    (('tools',), {'messages': [{'role': 'user', 'content': 'more'}]})
    >>> decode(stored, prev) == (turn.prompt_tokens, turn.request)
    True
"""

from __future__ import annotations

import json
from collections import OrderedDict
from collections.abc import Sequence
from dataclasses import dataclass, replace
from typing import Any, LiteralString

from psycopg import AsyncConnection
from psycopg.rows import kwargs_row, tuple_row

from rollout.contracts import Turn
from rollout.ledger.adapters import Int4s
from rollout.ledger.connection import fetch_all
from rollout.ledger.errors import LedgerError

SeatKey = tuple[str, int, int]
TurnKey = tuple[str, int, int, int]

INHERIT_SEPARATOR = "\x1f"
"""Joins `request_inherits` keys for the batch statement (a key holding it is never inherited)."""


@dataclass(frozen=True, slots=True)
class Stored:
    """A turn's prompt and request as stored (see the module docstring)."""

    prompt_prefix: int
    prompt_added: tuple[int, ...]
    messages_prefix: int | None
    request_inherits: tuple[str, ...]
    request_added: dict[str, Any]

    @property
    def needs_previous(self) -> bool:
        """Whether rebuilding this turn reads turn `index - 1`."""
        return (
            self.prompt_prefix > 0
            or self.messages_prefix is not None
            or bool(self.request_inherits)
        )


def seat_key(turn: Turn) -> SeatKey:
    return (turn.episode_id, turn.agent, turn.attempt)


def _json(value: Any) -> str:
    return json.dumps(value, sort_keys=True, separators=(",", ":"))


def _same(a: Any, b: Any) -> bool:
    """Equal as JSON (Python's `==` holds `1 == 1.0 == True`, which JSON tells apart)."""
    return a == b and _json(a) == _json(b)


def _common_prefix(a: Sequence[Any], b: Sequence[Any], same: Any = None) -> int:
    n = min(len(a), len(b))
    if same is None:
        if a[:n] == b[:n]:
            return n
        same = int.__eq__
    for i in range(n):
        if not same(a[i], b[i]):
            return i
    return n


def _previous_messages(request: dict[str, Any]) -> list[Any] | None:
    messages = request.get("messages")
    if not isinstance(messages, list):
        return None
    return [*messages, request["reply"]] if "reply" in request else list(messages)


def whole(turn: Turn) -> Stored:
    """The turn stored on its own."""
    return Stored(0, turn.prompt_tokens, None, (), turn.request)


def encode(turn: Turn, previous: Turn | None) -> Stored:
    """`turn` stored against `previous` (turn `index - 1` of its seat attempt, or None)."""
    if previous is None or seat_key(previous) != seat_key(turn) or previous.index != turn.index - 1:
        return whole(turn)
    base = previous.prompt_tokens + previous.completion_tokens
    prompt = turn.prompt_tokens
    prefix = len(base) if prompt[: len(base)] == base else _common_prefix(prompt, base)
    request, before = turn.request, previous.request
    inherits = tuple(
        key
        for key, value in request.items()
        if key != "messages"
        and isinstance(value, dict | list)
        and INHERIT_SEPARATOR not in key
        and key in before
        and _same(value, before[key])
    )
    added = {key: value for key, value in request.items() if key not in inherits}
    messages_prefix: int | None = None
    messages, earlier = request.get("messages"), _previous_messages(before)
    if isinstance(messages, list) and earlier is not None:
        common = _common_prefix(messages, earlier, _same)
        if common > 0:
            messages_prefix = common
            added["messages"] = messages[common:]
    return Stored(prefix, prompt[prefix:], messages_prefix, inherits, added)


def decode(stored: Stored, previous: Turn | None) -> tuple[tuple[int, ...], dict[str, Any]]:
    """The prompt tokens and request of a stored turn, given turn `index - 1` (rebuilt)."""
    if not stored.needs_previous:
        return stored.prompt_added, stored.request_added
    if previous is None:
        raise LedgerError("a stored turn refers to its previous turn, which is missing")
    prompt = stored.prompt_added
    if stored.prompt_prefix:
        base = previous.prompt_tokens + previous.completion_tokens
        prompt = base[: stored.prompt_prefix] + prompt
    before = previous.request
    request = {key: before[key] for key in stored.request_inherits if key in before}
    request.update(stored.request_added)
    if stored.messages_prefix is not None:
        earlier = _previous_messages(before) or []
        added = stored.request_added.get("messages") or []
        request["messages"] = earlier[: stored.messages_prefix] + list(added)
    return prompt, request


class TurnCache:
    """The last recorded turn of recently written seat attempts (rows known to be in the
    ledger: written by this process, or read from it), to store the next turn against.

    Bounded (least recently used first out): a turn holds its whole prompt, and a gateway's
    seats keep the same objects alive while they play; a seat that fell out stores its next
    turn whole."""

    def __init__(self, seats: int = 1024) -> None:
        self._seats = seats
        self._turns: OrderedDict[SeatKey, Turn] = OrderedDict()

    def get(self, key: SeatKey) -> Turn | None:
        turn = self._turns.get(key)
        if turn is not None:
            self._turns.move_to_end(key)
        return turn

    def put(self, turn: Turn) -> None:
        key = seat_key(turn)
        known = self._turns.get(key)
        if known is not None and known.index > turn.index:
            return
        self._turns[key] = turn
        self._turns.move_to_end(key)
        while len(self._turns) > self._seats:
            self._turns.popitem(last=False)


# What a turn is read from: every read of turns names the table `t`.
TURN_COLUMNS: LiteralString = (
    "t.episode_id, t.agent, t.attempt, t.turn_index AS index, t.prompt_added, t.prompt_prefix,"
    " t.messages_prefix, t.request_inherits, t.request_added, t.completion_tokens, t.logprobs,"
    " t.version, t.stop_reason, t.extends_previous, t.started_at, t.ended_at, t.temperature,"
    " t.policy"
)
# Every earlier turn of some seat attempts: what a page of turns refers back to.
HISTORY: LiteralString = (
    "SELECT " + TURN_COLUMNS + " FROM turns t JOIN unnest(%(episode_id)s::text[],"
    " %(agent)s::int4[], %(attempt)s::int4[], %(below)s::int4[]) AS k(episode_id, agent,"
    " attempt, below) ON t.episode_id = k.episode_id AND t.agent = k.agent"
    " AND t.attempt = k.attempt AND t.turn_index < k.below"
)

Row = tuple[Turn, Stored]
"""A row as read: the turn with its stored prompt and request, and its stored form."""


def row_of(
    *,
    prompt_added: Sequence[int],
    prompt_prefix: int,
    messages_prefix: int | None,
    request_inherits: Sequence[str] | None,
    request_added: dict[str, Any],
    completion_tokens: Sequence[int],
    logprobs: Sequence[float],
    **columns: Any,
) -> Row:
    stored = Stored(
        prompt_prefix,
        tuple(prompt_added),
        messages_prefix,
        tuple(request_inherits or ()),
        request_added,
    )
    turn = Turn(
        prompt_tokens=stored.prompt_added,
        completion_tokens=tuple(completion_tokens),
        logprobs=tuple(logprobs),
        request=request_added,
        **columns,
    )
    return turn, stored


stored_row = kwargs_row(row_of)
"""Row factory: a row of `TURN_COLUMNS` as a `Row` (to `rebuild`)."""


def turn_key(turn: Turn) -> TurnKey:
    return (turn.episode_id, turn.agent, turn.attempt, turn.index)


def rebuild(rows: Sequence[Row], earlier: dict[TurnKey, Turn] | None = None) -> list[Turn]:
    """The turns of `rows` (in their order), each rebuilt from the turn before it, found among
    `rows` or in `earlier` (rebuilt turns by key)."""
    built = dict(earlier or {})
    for turn, stored in sorted(rows, key=lambda row: turn_key(row[0])):
        if stored.needs_previous:
            key = turn_key(turn)
            previous = built.get((key[0], key[1], key[2], key[3] - 1))
            prompt, request = decode(stored, previous)
            turn = replace(turn, prompt_tokens=prompt, request=request)
        built[turn_key(turn)] = turn
    return [built[turn_key(turn)] for turn, _ in rows]


async def rebuild_reading(conn: AsyncConnection[Any], rows: Sequence[Row]) -> list[Turn]:
    """`rebuild`, reading the earlier turns of the seat attempts whose rows refer to turns
    that are not among `rows` (one query)."""
    present = {turn_key(turn) for turn, _ in rows}
    below: dict[SeatKey, int] = {}
    for turn, stored in rows:
        key = seat_key(turn)
        if stored.needs_previous and (*key, turn.index - 1) not in present:
            below[key] = max(below.get(key, 0), turn.index)
    if not below:
        return rebuild(rows)
    params = {
        "episode_id": [key[0] for key in below],
        "agent": Int4s([key[1] for key in below]),
        "attempt": Int4s([key[2] for key in below]),
        "below": Int4s(list(below.values())),
    }
    history = await fetch_all(conn, stored_row, HISTORY, params)
    earlier = {turn_key(turn): turn for turn in rebuild(history)}
    return rebuild(rows, earlier)


# The stored requests of one seat attempt's turns up to an index (every turn a request refers to).
SEAT_REQUESTS: LiteralString = (
    "SELECT t.turn_index, t.messages_prefix, t.request_inherits, t.request_added FROM turns t"
    " WHERE t.episode_id = %(episode_id)s AND t.agent = %(agent)s AND t.attempt = %(attempt)s"
    " AND t.turn_index <= %(upto)s ORDER BY t.turn_index"
)


async def read_requests(
    conn: AsyncConnection[Any], episode_id: str, agent: int, attempt: int, upto: int
) -> dict[int, dict[str, Any]]:
    """The requests of one seat attempt's turns 0..`upto`, by index, rebuilt in one pass (what
    `request(t)` in SQL rebuilds turn by turn)."""
    params = {"episode_id": episode_id, "agent": agent, "attempt": attempt, "upto": upto}
    requests: dict[int, dict[str, Any]] = {}
    previous: Turn | None = None
    async with conn.cursor(row_factory=tuple_row) as cursor:
        await cursor.execute(SEAT_REQUESTS, params)
        for index, messages_prefix, inherits, added in await cursor.fetchall():
            stored = Stored(0, (), messages_prefix, tuple(inherits or ()), added)
            if stored.needs_previous and (previous is None or previous.index != index - 1):
                raise LedgerError(f"turn {index - 1} of episode {episode_id!r} is missing")
            _, request = decode(stored, previous)
            requests[index] = request
            previous = Turn(episode_id, agent, attempt, index, (), (), (), 0, "", request=request)
    return requests
