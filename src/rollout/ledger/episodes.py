"""Reading episodes back: each with its seats, its seat ends and its seats' turns.

An `EpisodeRecord` carries, per seat, the turns of its winning attempt: the attempt that ended
the seat or, for a seat still playing, its latest attempt (`seats.attempt` either way:
`WINNING_ATTEMPT_TURNS`, the one definition every read of an episode's turns joins).
`load_episodes` builds them in three or four queries for any number of episodes; the trainer's
`complete_groups` reads through it too.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Sequence
from typing import Any, LiteralString

from psycopg.rows import class_row, dict_row, kwargs_row

from rollout.contracts import Turn
from rollout.ledger.connection import Conn, LedgerConnection, fetch_all
from rollout.ledger.errors import NotFound
from rollout.ledger.records import EpisodeRecord, SeatEnd, SeatState
from rollout.ledger.turn_storage import TURN_COLUMNS, rebuild, stored_row

EPISODES: LiteralString = """
SELECT episode_id, run_id, group_index, member, parameters, seed, agents, kind,
       extract(epoch FROM created_at)::float8 AS created_at
FROM episodes WHERE episode_id = ANY(%(ids)s)
"""
SEATS: LiteralString = """
SELECT episode_id, agent, attempt, runner, extract(epoch FROM expires_at)::float8 AS expires_at,
       done AS ended
FROM seats WHERE episode_id = ANY(%(ids)s) ORDER BY episode_id, agent
"""
SEAT_ENDS: LiteralString = """
SELECT episode_id, agent, attempt, status, reward, score, metrics, error,
       extract(epoch FROM created_at)::float8 AS created_at, turn_rewards
FROM seat_ends WHERE episode_id = ANY(%(ids)s) ORDER BY episode_id, agent
"""
# Each seat's turns of its winning attempt, as a FROM item (`t` the turn, `s` its seat): the
# attempt that ended the seat or, for a seat still playing, its latest (`seats.attempt` either
# way). Every read of an episode's turns (here, the trainer's groups, the monitor) joins it.
WINNING_ATTEMPT_TURNS: LiteralString = (
    "turns t JOIN seats s"
    " ON s.episode_id = t.episode_id AND s.agent = t.agent AND s.attempt = t.attempt"
)
WINNING_TURNS: LiteralString = (
    "SELECT "
    + TURN_COLUMNS
    + " FROM "
    + WINNING_ATTEMPT_TURNS
    + " WHERE s.episode_id = ANY(%(ids)s) ORDER BY t.episode_id, t.agent, t.turn_index"
)
LATEST_EPISODE_IDS: LiteralString = """
SELECT episode_id FROM episodes
WHERE run_id = %(run_id)s AND (%(kind)s::text IS NULL OR kind = %(kind)s)
ORDER BY seq DESC LIMIT %(limit)s
"""
# Episodes by state: pending (no seat ever claimed), running (claimed, a seat still open),
# ended (every seat ended), failed (ended, and a seat of it failed). Read from the run's open
# seats (the `seats_open` index: what is in flight), a count of its episodes and its failed
# ends (`seat_ends_failed`, migration 0019): every episode has a seat, a closed seat was claimed,
# and an episode with no open seat has ended. The run's count of episodes is kept as they are
# added (`run_episode_totals`, migration 0021): counting them grew with the run (5.7 ms a call at
# 32,000 episodes).
# Each open episode's agents are a probe of its key (a lateral LIMIT, never flattened into a
# join): measured mid-run, the planner hashed every episode of the run to join ~150 open ones
# (11 of the read's 17 ms at 26,000 episodes).
EPISODE_COUNTS: LiteralString = """
WITH open AS (
    SELECT s.episode_id, count(*) FILTER (WHERE s.attempt = 0) AS unclaimed
    FROM seats s WHERE NOT s.done AND s.run_id = %(run_id)s GROUP BY s.episode_id
), open_state AS (
    SELECT count(*) AS open, count(*) FILTER (WHERE o.unclaimed = e.agents) AS pending
    FROM open o
    CROSS JOIN LATERAL (SELECT e.agents FROM episodes e WHERE e.episode_id = o.episode_id
                        LIMIT 1) e
)
SELECT t.total, o.pending, o.open - o.pending AS running, t.total - o.open AS ended, f.failed
FROM (SELECT coalesce((SELECT r.total FROM run_episode_totals r WHERE r.run_id = %(run_id)s), 0)
        AS total) t,
     open_state o,
     (SELECT count(DISTINCT x.episode_id) AS failed FROM seat_ends x
      WHERE x.run_id = %(run_id)s AND x.status = 'failed'
        AND NOT EXISTS (SELECT 1 FROM open WHERE open.episode_id = x.episode_id)) f
"""


def _seat_of(*, episode_id: str, **columns: Any) -> tuple[str, SeatState]:
    return episode_id, SeatState(**columns)


_seat_row = kwargs_row(_seat_of)


async def load_episodes(
    conn: Conn, episode_ids: Sequence[str], *, with_turns: bool
) -> list[EpisodeRecord]:
    """Episodes (in the order of `episode_ids`, unknown ids left out) with seats, ends and,
    with `with_turns`, the turns of each seat's winning attempt."""
    if not episode_ids:
        return []
    params = {"ids": list(episode_ids)}
    base = {row["episode_id"]: row for row in await fetch_all(conn, dict_row, EPISODES, params)}
    seats: dict[str, list[SeatState]] = defaultdict(list)
    for episode_id, seat in await fetch_all(conn, _seat_row, SEATS, params):
        seats[episode_id].append(seat)
    ends: dict[str, list[SeatEnd]] = defaultdict(list)
    for end in await fetch_all(conn, class_row(SeatEnd), SEAT_ENDS, params):
        ends[end.episode_id].append(end)
    turns: dict[str, list[Turn]] = defaultdict(list)
    if with_turns:
        # Every turn of each winning attempt: each row's previous turn is among them.
        for turn in rebuild(await fetch_all(conn, stored_row, WINNING_TURNS, params)):
            turns[turn.episode_id].append(turn)
    return [
        EpisodeRecord(
            **base[episode_id],
            turns=tuple(turns[episode_id]),
            ends=tuple(ends[episode_id]),
            seats=tuple(seats[episode_id]),
        )
        for episode_id in episode_ids
        if episode_id in base
    ]


class EpisodesMixin(LedgerConnection):
    """Episode reads and counts (see the module docstring)."""

    async def episode(self, episode_id: str) -> EpisodeRecord:
        """One episode with its seats, ends and the turns of each seat's winning attempt (the
        one that ended it) or, for a seat still playing, its latest attempt."""
        async with self._pool.connection() as conn:
            records = await load_episodes(conn, [episode_id], with_turns=True)
        if not records:
            raise NotFound(f"episode {episode_id!r} not found")
        return records[0]

    async def list_episodes(
        self,
        run_id: str,
        limit: int = 100,
        *,
        kind: str | None = None,
        with_turns: bool = True,
    ) -> list[EpisodeRecord]:
        """The run's most recently added episodes, newest first.

        With `with_turns=False` the records' `turns` are left empty (much less to read).
        """
        params = {"run_id": run_id, "kind": kind, "limit": limit}
        async with self._pool.connection() as conn:
            rows = await fetch_all(conn, dict_row, LATEST_EPISODE_IDS, params)
            ids = [row["episode_id"] for row in rows]
            return await load_episodes(conn, ids, with_turns=with_turns)

    async def episode_counts(self, run_id: str) -> dict[str, int]:
        """Episodes of the run by state: 'total', 'pending' (no seat claimed yet), 'running'
        (claimed, not every seat ended), 'ended' (every seat ended) and 'failed' (ended with a
        failed seat)."""
        async with self._pool.connection() as conn:
            counts = await fetch_all(conn, dict_row, EPISODE_COUNTS, {"run_id": run_id})
        return dict(counts[0])
