"""The SQL both write paths of a batch of turns share.

`rollout.ledger.turns`' array statement and `rollout.ledger.turn_copy`'s staged COPY each build a
CTE `v` of the batch's rows (with an `ord` column) and then the same fence and report: lock the
batch's seats, insert only into each seat's latest attempt while it has not ended (a repeat does
nothing), and answer one row per input row (its seat's latest attempt, whether the seat is done,
whether the row was inserted, and whether it already existed). Written once so that the two paths
cannot drift apart.
"""

from __future__ import annotations

from typing import LiteralString

INSERT_COLUMNS: LiteralString = (
    "(run_id, episode_id, agent, attempt, turn_index, prompt_added, completion_tokens, logprobs,"
    " version, stop_reason, extends_previous, started_at, ended_at, temperature, request_added,"
    " prompt_prefix, messages_prefix, request_inherits, policy)"
)

LOCK_SEATS: LiteralString = (
    """), seat AS (
    SELECT s.episode_id, s.agent, s.run_id, s.attempt, s.done FROM seats s
    WHERE (s.episode_id, s.agent) IN (SELECT episode_id, agent FROM v)
    FOR SHARE OF s
), ins AS (
    INSERT INTO turns """
    + INSERT_COLUMNS
)
"""Follows `WITH v AS (...)`; the caller's `SELECT` of the values to insert (from `v` and `seat`)
comes next, then `FENCE_AND_REPORT`."""

FENCE_AND_REPORT: LiteralString = """
    FROM v JOIN seat ON seat.episode_id = v.episode_id AND seat.agent = v.agent
    WHERE seat.attempt = v.attempt AND NOT seat.done
    ORDER BY v.ord
    ON CONFLICT DO NOTHING
    RETURNING episode_id, agent, attempt, turn_index
)
SELECT v.ord, seat.attempt AS latest, seat.done, ins.episode_id IS NOT NULL AS inserted,
       CASE WHEN seat.done AND ins.episode_id IS NULL THEN EXISTS (
           SELECT 1 FROM turns t
           WHERE t.episode_id = v.episode_id AND t.agent = v.agent
             AND t.attempt = v.attempt AND t.turn_index = v.turn_index) END AS existed
FROM v
LEFT JOIN seat ON seat.episode_id = v.episode_id AND seat.agent = v.agent
LEFT JOIN ins ON ins.episode_id = v.episode_id AND ins.agent = v.agent
             AND ins.attempt = v.attempt AND ins.turn_index = v.turn_index
"""
