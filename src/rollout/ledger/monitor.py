"""The web monitor's reads: paged display queries on a read-only pool of their own.

`MonitorReads.open(ledger)` opens a small pool whose connections Postgres holds read-only
(`default_transaction_read_only`) and whose statements time out (`statement_timeout`), so a
display can neither write nor wait forever. Each read rides out a database outage like a ledger
call (`Ledger.ride_out`) and answers rows as dicts keyed by column name. Every list is bounded
by the caller's `limit` and continues from a cursor or offset: no query reads a whole run.

Abstractions:

- runs: `runs` (a page of runs with their settings, step and episode counts, last reward and
  newest version), `run_counts` (one run's seats, turns, groups, steps, servers, trainer),
  `steps` and `step_time` (train steps after a step; when one was recorded);
- checkpoints: `checkpoints` (versions after a version), `conversions` and `published` (per
  version in a range); `has_evals` and `eval_scores`;
- per policy (`rollout.runs.policies`): steps, step times, checkpoints, conversions and
  publications are one policy's, the default policy's unless a `policy` is given;
- machines: `processes_seen` (every role process that beat recently, with its host, state and
  its run's settings), `leases`, `runners`, `servers` (the facts that detail them);
- transcripts: `episodes` (a page, newest first, filtered by an `EpisodeFilter`), `episode`
  and `seats` (one episode's header), `conversation` (a page of one seat's turns) and
  `turn_tokens` (one turn's tokens).

An episode's status (`EPISODE_STATUSES`) is 'pending' (no seat claimed), 'running', 'completed'
or 'failed' (every seat ended, one of them failed); turns are those of each seat's winning
attempt (`episodes.WINNING_ATTEMPT_TURNS`).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, LiteralString

from psycopg.abc import Params
from psycopg.rows import dict_row
from psycopg_pool import AsyncConnectionPool

from rollout.contracts import DEFAULT_POLICY
from rollout.ledger.connection import Conn, LedgerConnection, Pool, fetch_all
from rollout.ledger.episodes import WINNING_ATTEMPT_TURNS
from rollout.ledger.processes import PROCESS_STATE, STALE_BEATS
from rollout.ledger.training import CHECKPOINT_COLUMNS, TRAIN_STEPS

READ_ONLY = "-c default_transaction_read_only=on -c statement_timeout=20000"
"""The pool's session options: Postgres refuses its writes, and no statement runs over 20 s."""

EPISODE_STATUSES = ("pending", "running", "completed", "failed")

# --------------------------------------------------------------------------------------------
# runs

RUNS: LiteralString = """
SELECT r.run_id, r.name, r.environment, extract(epoch FROM r.created_at)::float8 AS created_at,
  COALESCE((SELECT jsonb_object_agg(c.key, c.value) FROM current_settings c
            WHERE c.run_id = r.run_id), '{}') AS settings,
  (SELECT count(*) FROM train_steps s WHERE s.run_id = r.run_id AND s.step > 0) AS steps,
  (SELECT s.metrics->'reward' FROM train_steps s
   WHERE s.run_id = r.run_id AND s.step > 0 ORDER BY s.step DESC LIMIT 1) AS last_reward,
  (SELECT count(*) FROM episodes e WHERE e.run_id = r.run_id) AS episodes,
  (SELECT max(k.version) FROM checkpoints k WHERE k.run_id = r.run_id) AS latest_version
FROM runs r ORDER BY r.created_at DESC, r.run_id DESC OFFSET %(offset)s LIMIT %(limit)s
"""
RUN_COUNTS: LiteralString = """
SELECT
  (SELECT count(*) FROM seats WHERE run_id = %(run_id)s) AS seats,
  (SELECT count(*) FROM seats WHERE run_id = %(run_id)s AND NOT done
     AND expires_at > now()) AS seats_running,
  (SELECT count(*) FROM seat_ends WHERE run_id = %(run_id)s) AS seats_ended,
  (SELECT count(*) FROM seat_ends WHERE run_id = %(run_id)s AND status = 'failed')
     AS seats_failed,
  (SELECT count(*) FROM turns WHERE run_id = %(run_id)s) AS turns,
  (SELECT count(*) FROM consumed_groups WHERE run_id = %(run_id)s) AS groups_consumed,
  (SELECT count(*) FROM train_steps WHERE run_id = %(run_id)s) AS train_steps,
  (SELECT max(version) FROM checkpoints WHERE run_id = %(run_id)s) AS latest_version,
  (SELECT jsonb_agg(jsonb_build_object('server', server, 'version', version,
     'at', extract(epoch FROM created_at)::float8) ORDER BY server)
   FROM current_serving_acks WHERE run_id = %(run_id)s) AS servers,
  (SELECT jsonb_build_object('holder', holder, 'epoch', epoch,
     'expires_at', extract(epoch FROM expires_at)::float8, 'alive', expires_at > now())
   FROM leases WHERE name = %(trainer_lease)s) AS trainer
"""
STEPS_PAGE: LiteralString = TRAIN_STEPS + " LIMIT %(limit)s"
STEP_TIME: LiteralString = """
SELECT extract(epoch FROM created_at)::float8 AS created_at FROM train_steps
WHERE run_id = %(run_id)s AND policy = %(policy)s AND step <= %(step)s
ORDER BY step DESC LIMIT 1
"""

# --------------------------------------------------------------------------------------------
# checkpoints and evals

CHECKPOINTS_PAGE: LiteralString = (
    "SELECT " + CHECKPOINT_COLUMNS + " FROM checkpoints"
    " WHERE run_id = %(run_id)s AND policy = %(policy)s AND version > %(after)s"
    " ORDER BY version LIMIT %(limit)s"
)
CONVERSIONS_BETWEEN: LiteralString = """
SELECT version, backend, uri FROM conversions
WHERE run_id = %(run_id)s AND policy = %(policy)s AND version BETWEEN %(low)s AND %(high)s
ORDER BY backend
"""
PUBLISHED_BETWEEN: LiteralString = """
SELECT version, extract(epoch FROM min(created_at))::float8 AS published_at FROM serving
WHERE run_id = %(run_id)s AND policy = %(policy)s AND version BETWEEN %(low)s AND %(high)s
GROUP BY version
"""
# Older ledgers had no evals: ask whether the table exists before reading it.
EVALS_RECORDED: LiteralString = "SELECT to_regclass('eval_scores') IS NOT NULL AS recorded"
RUN_HAS_EVALS: LiteralString = (
    "SELECT 1 AS found FROM eval_scores WHERE run_id = %(run_id)s LIMIT 1"
)
EVAL_SCORES: LiteralString = """
SELECT j.version, j.suite, j.suite_version, s.environment, s.score, s.ci_low, s.ci_high,
       s.episodes, s.failed, s.method, extract(epoch FROM s.created_at)::float8 AS created_at,
       s.policy
FROM eval_scores s JOIN eval_jobs j ON j.job_id = s.job_id
WHERE s.run_id = %(run_id)s ORDER BY j.version, j.suite, j.suite_version, s.position, s.policy
LIMIT 10000
"""

# --------------------------------------------------------------------------------------------
# machines: each process the ledger has seen

PROCESSES_SEEN: LiteralString = (
    """
SELECT p.process_id, p.host, p.pid, p.role, p.run_id, p.status,
       extract(epoch FROM p.started_at)::float8 AS started_at,
       extract(epoch FROM p.beat_at)::float8 AS beat_at,
       """
    + PROCESS_STATE
    + """ AS state,
       COALESCE((SELECT jsonb_object_agg(c.key, c.value) FROM current_settings c
                 WHERE c.run_id = p.run_id), '{}') AS run_settings
FROM processes p
WHERE p.beat_at > now() - make_interval(secs => %(recent)s)
ORDER BY p.run_id NULLS FIRST, p.role, p.started_at LIMIT 1000
"""
)
LEASES: LiteralString = """
SELECT name, holder, epoch, extract(epoch FROM expires_at)::float8 AS expires_at,
       extract(epoch FROM acquired_at)::float8 AS acquired_at
FROM leases ORDER BY name LIMIT 1000
"""
# A runner's last sign of life: its last claim, or the last heartbeat of a seat it still holds
# (a heartbeat moves the seat's expiry to now + its lease).
RUNNERS: LiteralString = """
WITH claims AS (
    SELECT runner, run_id, max(claimed_at) AS last_claim, count(*) AS claims,
           max(lease_s) AS lease_s
    FROM seat_claims GROUP BY runner, run_id),
held AS (
    SELECT runner, run_id, count(*) FILTER (WHERE expires_at > now()) AS live,
           max(expires_at) AS expires
    FROM seats WHERE NOT done AND runner IS NOT NULL GROUP BY runner, run_id)
SELECT c.runner, c.run_id, extract(epoch FROM c.last_claim)::float8 AS last_claim, c.claims,
       COALESCE(h.live, 0) AS seats_held,
       extract(epoch FROM GREATEST(c.last_claim, CASE WHEN h.expires IS NOT NULL
           THEN LEAST(now(), h.expires - make_interval(secs => c.lease_s)) END))::float8
           AS last_seen
FROM claims c LEFT JOIN held h USING (runner, run_id)
ORDER BY last_seen DESC LIMIT 1000
"""
SERVERS: LiteralString = """
SELECT a.server, a.run_id, a.version, extract(epoch FROM a.created_at)::float8 AS acked_at,
       s.version AS published_version,
       extract(epoch FROM s.created_at)::float8 AS published_at
FROM current_serving_acks a
LEFT JOIN LATERAL (SELECT version, created_at FROM serving
                   WHERE run_id = a.run_id ORDER BY id DESC LIMIT 1) s ON true
ORDER BY a.run_id, a.server LIMIT 1000
"""
# A gateway leaves only the turns it records.
GATEWAYS: LiteralString = """
SELECT c.run_id, c.value #>> '{}' AS url,
       (SELECT extract(epoch FROM t.recorded_at)::float8 FROM turns t
        WHERE t.run_id = c.run_id ORDER BY t.seq DESC LIMIT 1) AS last_turn
FROM current_settings c WHERE c.key = 'gateway_url' ORDER BY c.run_id LIMIT 1000
"""

# --------------------------------------------------------------------------------------------
# transcripts

# Status, mean completed reward and ended seats of episode `e` (see EPISODE_STATUSES).
EPISODE_STATUS: LiteralString = """
CROSS JOIN LATERAL (
    SELECT CASE WHEN bool_and(s.done) THEN
                    CASE WHEN bool_or(x.status = 'failed') THEN 'failed' ELSE 'completed' END
                WHEN max(s.attempt) > 0 THEN 'running' ELSE 'pending' END AS status,
           avg(x.reward) FILTER (WHERE x.status = 'completed') AS reward,
           count(x.agent) AS seats_ended
    FROM seats s LEFT JOIN seat_ends x ON x.episode_id = s.episode_id AND x.agent = s.agent
    WHERE s.episode_id = e.episode_id) st
"""
EPISODES_PAGE: LiteralString = (
    """
SELECT e.seq, e.episode_id, e.run_id, r.name AS run_name, r.environment, e.kind,
       e.group_index, e.member, e.agents, extract(epoch FROM e.created_at)::float8 AS created_at,
       e.parameters, st.status, st.reward, st.seats_ended, tt.turns, tt.version_low,
       tt.version_high
FROM episodes e JOIN runs r ON r.run_id = e.run_id
"""
    + EPISODE_STATUS
    + """
CROSS JOIN LATERAL (
    SELECT count(*) AS turns, min(t.version) AS version_low, max(t.version) AS version_high
    FROM """
    + WINNING_ATTEMPT_TURNS
    + """
    WHERE t.episode_id = e.episode_id) tt
"""
)
"""Followed by `WHERE` and the filters in use (`EPISODE_FILTERS`), then `EPISODES_ORDER`."""
EPISODES_ORDER: LiteralString = "\nORDER BY e.seq DESC LIMIT %(limit)s"
EPISODE_FILTERS: dict[str, LiteralString] = {
    "run_id": "e.run_id = %(run_id)s",
    "cursor": "e.seq < %(cursor)s",
    "environment": "r.environment = %(environment)s",
    "kind": "e.kind = %(kind)s",
    "status": "st.status = %(status)s",
    "reward_min": "st.reward >= %(reward_min)s",
    "reward_max": "st.reward <= %(reward_max)s",
    "version": "EXISTS (SELECT 1 FROM turns t WHERE t.episode_id = e.episode_id"
    " AND t.version = %(version)s)",
    # The id, the parameters or any message of any recorded request.
    "text": "(e.episode_id = %(text)s OR e.parameters::text ILIKE %(pattern)s OR EXISTS ("
    "SELECT 1 FROM turns t WHERE t.episode_id = e.episode_id"
    " AND t.request_added::text ILIKE %(pattern)s))",
}
"""The condition of each filter of `MonitorReads.episodes`, by parameter name."""
EPISODE_HEADER: LiteralString = (
    """
SELECT e.episode_id, e.run_id, r.name AS run_name, r.environment, e.kind, e.group_index,
       e.member, e.parameters, e.seed, e.agents,
       extract(epoch FROM e.created_at)::float8 AS created_at, st.status, st.reward
FROM episodes e JOIN runs r ON r.run_id = e.run_id
"""
    + EPISODE_STATUS
    + "WHERE e.episode_id = %(episode_id)s"
)
EPISODE_SEATS: LiteralString = (
    """
SELECT seat.agent, seat.attempt, seat.runner,
       extract(epoch FROM seat.expires_at)::float8 AS expires_at, seat.done AS ended,
       x.status, x.reward, x.score, x.metrics, x.error,
       (SELECT count(*) FROM """
    + WINNING_ATTEMPT_TURNS
    + """
        WHERE s.episode_id = seat.episode_id AND s.agent = seat.agent) AS turns
FROM seats seat
LEFT JOIN seat_ends x ON x.episode_id = seat.episode_id AND x.agent = seat.agent
WHERE seat.episode_id = %(episode_id)s ORDER BY seat.agent
"""
)
CONVERSATION_PAGE: LiteralString = (
    """
SELECT t.turn_index, t.attempt, t.version, t.stop_reason, t.extends_previous, t.started_at,
       t.ended_at, t.temperature, t.prompt_length AS prompt_length,
       cardinality(t.completion_tokens) AS completion_length,
       (SELECT avg(v) FROM unnest(t.logprobs) v) AS mean_logprob
FROM """
    + WINNING_ATTEMPT_TURNS
    + """
WHERE t.episode_id = %(episode_id)s AND t.agent = %(agent)s AND t.turn_index >= %(start)s
ORDER BY t.turn_index LIMIT %(limit)s
"""
)
TURN_TOKEN_COLUMNS: LiteralString = (
    "t.run_id, t.attempt, t.version, t.extends_previous, t.stop_reason,"
    " t.prompt_tokens AS prompt_tokens, t.completion_tokens, t.logprobs"
)
TURN_OF_SEAT: LiteralString = (
    " WHERE t.episode_id = %(episode_id)s AND t.agent = %(agent)s AND t.turn_index = %(index)s"
)
WINNING_TURN_TOKENS: LiteralString = (
    "SELECT " + TURN_TOKEN_COLUMNS + " FROM " + WINNING_ATTEMPT_TURNS + TURN_OF_SEAT
)
ATTEMPT_TURN_TOKENS: LiteralString = (
    "SELECT " + TURN_TOKEN_COLUMNS + " FROM turns t" + TURN_OF_SEAT + " AND t.attempt = %(attempt)s"
)


@dataclass(frozen=True)
class EpisodeFilter:
    """Which episodes `MonitorReads.episodes` lists; None (or empty text) is no filter."""

    run_id: str | None = None
    environment: str | None = None
    kind: str | None = None
    """One of `records.EPISODE_KINDS`."""
    status: str | None = None
    """One of `EPISODE_STATUSES`."""
    reward_min: float | None = None
    reward_max: float | None = None
    """Bounds on the mean reward of the completed seats."""
    version: int | None = None
    """Some turn was sampled at this version."""
    text: str | None = None
    """The episode id, or text in its parameters or in any message of its requests."""


def like_pattern(text: str) -> str:
    """An `ILIKE` pattern matching `text` anywhere, its own `%`, `_` and `\\` taken literally.

    Example:
        >>> like_pattern("50%_off")
        '%50\\\\%\\\\_off%'
    """
    escaped = text.replace("\\", "\\\\").replace("%", "\\%").replace("_", "\\_")
    return f"%{escaped}%"


class MonitorReads:
    """The monitor's read-only pool and its queries (see the module docstring)."""

    def __init__(self, ledger: LedgerConnection, pool: Pool) -> None:
        self._ledger = ledger
        self._pool = pool

    @classmethod
    async def open(cls, ledger: LedgerConnection, *, max_size: int = 6) -> MonitorReads:
        """A read-only pool of up to `max_size` connections to `ledger`'s database, riding out
        outages with `ledger` (which the caller keeps open while this is, and closes)."""
        pool: Pool = AsyncConnectionPool(
            ledger.url,
            min_size=1,
            max_size=max_size,
            connection_class=Conn,
            kwargs={"autocommit": True, "row_factory": dict_row, "options": READ_ONLY},
            open=False,
            name="rollout-monitor",
        )
        try:
            await pool.open(wait=True, timeout=30.0)
        except BaseException:
            await pool.close()
            raise
        return cls(ledger, pool)

    async def close(self) -> None:
        await self._pool.close()

    async def _rows(
        self, query: LiteralString, params: Params | None = None
    ) -> list[dict[str, Any]]:
        """Rows of one query, riding out a database outage like a ledger call."""

        async def read() -> list[dict[str, Any]]:
            async with self._pool.connection() as conn:
                return await fetch_all(conn, dict_row, query, params)

        return await self._ledger.ride_out(read)

    # ------------------------------------------------------------------------------------------
    # runs

    async def runs(self, *, offset: int, limit: int) -> list[dict[str, Any]]:
        """Runs newest first, from `offset`: id, name, environment, created_at, settings (every
        current one), steps (RL steps), last_reward, episodes, latest_version."""
        return await self._rows(RUNS, {"offset": offset, "limit": limit})

    async def run_counts(self, run_id: str, trainer_lease: str) -> dict[str, Any]:
        """Seats (all, running, ended, failed), turns, groups consumed, train steps, the newest
        version, the servers' acknowledgements and the trainer's lease `trainer_lease`."""
        (row,) = await self._rows(RUN_COUNTS, {"run_id": run_id, "trainer_lease": trainer_lease})
        return row

    async def steps(
        self, run_id: str, *, after: int, limit: int, policy: str = DEFAULT_POLICY
    ) -> list[dict[str, Any]]:
        """`policy`'s train steps after step `after`, oldest first: step, metrics, created_at,
        ..."""
        params = {"run_id": run_id, "after": after, "limit": limit, "policy": policy}
        return await self._rows(STEPS_PAGE, params)

    async def step_time(
        self, run_id: str, step: int, *, policy: str = DEFAULT_POLICY
    ) -> float | None:
        """When `policy`'s last step at or before `step` was recorded, or None."""
        rows = await self._rows(STEP_TIME, {"run_id": run_id, "step": step, "policy": policy})
        return rows[0]["created_at"] if rows else None

    # ------------------------------------------------------------------------------------------
    # checkpoints and evals

    async def checkpoints(
        self, run_id: str, *, after: int, limit: int, policy: str = DEFAULT_POLICY
    ) -> list[dict[str, Any]]:
        """`policy`'s checkpoints after version `after`, oldest first
        (`training.CHECKPOINT_COLUMNS`)."""
        return await self._rows(
            CHECKPOINTS_PAGE,
            {"run_id": run_id, "after": after, "limit": limit, "policy": policy},
        )

    async def conversions(
        self, run_id: str, low: int, high: int, *, policy: str = DEFAULT_POLICY
    ) -> list[dict[str, Any]]:
        """Conversions (version, backend, uri) of `policy`'s versions `low`..`high`, by
        backend."""
        params = {"run_id": run_id, "low": low, "high": high, "policy": policy}
        return await self._rows(CONVERSIONS_BETWEEN, params)

    async def published(
        self, run_id: str, low: int, high: int, *, policy: str = DEFAULT_POLICY
    ) -> dict[int, float]:
        """Version -> when it was first to be served, for `policy`'s versions `low`..`high`."""
        params = {"run_id": run_id, "low": low, "high": high, "policy": policy}
        rows = await self._rows(PUBLISHED_BETWEEN, params)
        return {row["version"]: row["published_at"] for row in rows}

    async def has_evals(self, run_id: str) -> bool:
        """Whether the run has eval scores (and the ledger records evals at all)."""
        (row,) = await self._rows(EVALS_RECORDED)
        return bool(row["recorded"]) and bool(await self._rows(RUN_HAS_EVALS, {"run_id": run_id}))

    async def eval_scores(self, run_id: str) -> list[dict[str, Any]]:
        """Eval scores by checkpoint version, suite, suite version and position."""
        return await self._rows(EVAL_SCORES, {"run_id": run_id})

    # ------------------------------------------------------------------------------------------
    # machines

    async def processes_seen(self, recent_seconds: float) -> list[dict[str, Any]]:
        """Every role process whose last beat is within `recent_seconds` (running, dead or
        stopped): process_id, host, pid, role, run_id, status, started_at, beat_at, state
        (`processes.PROCESS_STATE`) and its run's settings (`{}` without a run)."""
        params = {"recent": recent_seconds, "stale_beats": STALE_BEATS}
        return await self._rows(PROCESSES_SEEN, params)

    async def leases(self) -> list[dict[str, Any]]:
        """Every lease: name, holder, epoch, expires_at, acquired_at."""
        return await self._rows(LEASES)

    async def runners(self) -> list[dict[str, Any]]:
        """Each runner per run: runner, run_id, last_claim, claims, seats_held, last_seen."""
        return await self._rows(RUNNERS)

    async def servers(self) -> list[dict[str, Any]]:
        """Each inference server per run: server, run_id, version (acknowledged), acked_at, and
        the run's published_version and published_at (its latest serving record)."""
        return await self._rows(SERVERS)

    async def gateways(self) -> list[dict[str, Any]]:
        """Each run's gateway: run_id, url, last_turn (when it last recorded one)."""
        return await self._rows(GATEWAYS)

    # ------------------------------------------------------------------------------------------
    # transcripts

    async def episodes(
        self, where: EpisodeFilter, *, cursor: int | None, limit: int
    ) -> list[dict[str, Any]]:
        """Episodes newest first, before sequence number `cursor`: seq (the cursor), ids, run
        name, environment, parameters, status, reward, seats_ended, turns and version_low /
        version_high (the range of versions that sampled them)."""
        params: dict[str, Any] = {
            "run_id": where.run_id,
            "cursor": cursor,
            "environment": where.environment or None,
            "kind": where.kind,
            "status": where.status,
            "reward_min": where.reward_min,
            "reward_max": where.reward_max,
            "version": where.version,
            "text": where.text or None,
        }
        conditions: list[LiteralString] = [
            EPISODE_FILTERS[name] for name, value in params.items() if value is not None
        ]
        if where.text:
            params["pattern"] = like_pattern(where.text)
        params["limit"] = limit
        query = EPISODES_PAGE
        if conditions:
            query += "WHERE " + " AND ".join(conditions)
        return await self._rows(query + EPISODES_ORDER, params)

    async def episode(self, episode_id: str) -> dict[str, Any] | None:
        """One episode's header (with its status and reward), or None."""
        rows = await self._rows(EPISODE_HEADER, {"episode_id": episode_id})
        return rows[0] if rows else None

    async def seats(self, episode_id: str) -> list[dict[str, Any]]:
        """The episode's seats by agent: attempt, runner, expires_at, ended, how the seat ended
        (status, reward, score, metrics, error; None while playing) and its turns."""
        return await self._rows(EPISODE_SEATS, {"episode_id": episode_id})

    async def conversation(
        self, episode_id: str, agent: int, *, start: int, limit: int
    ) -> list[dict[str, Any]]:
        """Turns `start`.. of the seat's winning attempt without their tokens: turn_index,
        attempt, version, stop_reason, extends_previous, started_at, ended_at, temperature,
        prompt_length, completion_length, mean_logprob."""
        params = {"episode_id": episode_id, "agent": agent, "start": start, "limit": limit}
        return await self._rows(CONVERSATION_PAGE, params)

    async def turn_tokens(
        self, episode_id: str, agent: int, index: int, attempt: int | None = None
    ) -> dict[str, Any] | None:
        """Turn `index` of the seat's winning attempt (or of `attempt`) with its tokens, or
        None: run_id, attempt, version, extends_previous, stop_reason, prompt_tokens,
        completion_tokens, logprobs."""
        params = {"episode_id": episode_id, "agent": agent, "index": index, "attempt": attempt}
        query = WINNING_TURN_TOKENS if attempt is None else ATTEMPT_TURN_TOKENS
        rows = await self._rows(query, params)
        return rows[0] if rows else None
