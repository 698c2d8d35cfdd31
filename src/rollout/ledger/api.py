"""The ledger's Python API: append-only facts in Postgres, fenced writes, wake-ups.

All methods are async and safe to call concurrently (each takes a connection from a pool). Every
write is idempotent on a natural key: writing the same fact twice stores it once and the second
call returns False. Writes made under a lease or a seat claim check its epoch/attempt in the same
transaction, holding a row lock on the lease (or seat) row, and raise `StaleFence`, changing
nothing, when someone took over.

Abstractions:

- runs and their settings (`create_run`, `get_run`, `list_runs`, `set_setting`, `settings`,
  `pause_run`/`resume_run`: 'paused' stops seat claims; `run_summary`, `episode_counts`);
- episodes and seats (`add_episodes`; `claim_seat` hands one seat attempt and its API key to a
  runner; `heartbeat`, `record_turn`/`record_turns` and `end_seat` are fenced by that attempt;
  `resolve_key`; reads: `episode`, `list_episodes`, `seat_turns`, `last_turn`, `turns_for_run`);
- leases (`acquire_lease`, `renew_lease`, `release_lease`, `lease`);
- training (`complete_groups`; `record_train_step` marks groups consumed and records the step
  and its checkpoint, fenced by the trainer's lease; `record_checkpoint`; `latest_checkpoint`,
  `checkpoints`, `train_steps`);
- serving (`record_conversion`, `conversions`, `set_serving` (fenced), `serving`,
  `ack_serving`, `serving_acks`);
- wake-ups (`wait` on channels from `CHANNELS`, `listen`, `notify`; polling is the fallback).

Example:
    >>> async def demo() -> None:  # doctest: +SKIP
    ...     ledger = await Ledger.connect()  # ROLLOUT_DATABASE_URL, or the embedded Postgres
    ...     run = await ledger.create_run("demo", "environments.arithmetic:env", {})
    ...     await ledger.add_episodes(run.run_id, [EpisodeSpec(0, 0, {}, seed=1)])
    ...     claim = await ledger.claim_seat("runner-1", run_id=run.run_id)
    ...     await ledger.end_seat(claim, reward=1.0)
"""

from __future__ import annotations

import asyncio
import json
import math
import os
import secrets
from collections import defaultdict
from collections.abc import Sequence
from typing import Any, LiteralString

from psycopg import AsyncConnection
from psycopg import errors as pg_errors
from psycopg.types.json import Jsonb
from psycopg_pool import AsyncConnectionPool

from rollout.contracts import Turn
from rollout.ledger.adapters import register_dumpers
from rollout.ledger.embedded import ledger_url
from rollout.ledger.errors import InvalidInput, LeaseHeld, LedgerError, NotFound, StaleFence
from rollout.ledger.migrate import apply_migrations
from rollout.ledger.notify import CHANNELS, Listener
from rollout.ledger.records import (
    EPISODE_KINDS,
    SEAT_STATUSES,
    CheckpointRecord,
    EpisodeRecord,
    EpisodeSpec,
    GroupRecord,
    KeyInfo,
    Lease,
    RunRecord,
    RunSummary,
    SeatClaim,
    SeatEnd,
    SeatState,
    ServingAck,
    ServingRecord,
    TrainStepRecord,
)
from rollout.ledger.turns import Outcome, TurnWriter, validate_turn, write_turns

__all__ = [
    "CHANNELS",
    "CheckpointRecord",
    "EpisodeRecord",
    "EpisodeSpec",
    "GroupRecord",
    "InvalidInput",
    "KeyInfo",
    "Lease",
    "LeaseHeld",
    "Ledger",
    "LedgerError",
    "NotFound",
    "RunRecord",
    "RunSummary",
    "SeatClaim",
    "SeatEnd",
    "SeatState",
    "ServingAck",
    "ServingRecord",
    "StaleFence",
    "TrainStepRecord",
]

_TURN_COLUMNS: LiteralString = (
    "episode_id, agent, attempt, turn_index, prompt_tokens, completion_tokens, logprobs, version,"
    " stop_reason, extends_previous, started_at, ended_at, temperature, request"
)
_T_TURN_COLUMNS: LiteralString = (
    "t.episode_id, t.agent, t.attempt, t.turn_index, t.prompt_tokens, t.completion_tokens,"
    " t.logprobs, t.version, t.stop_reason, t.extends_previous, t.started_at, t.ended_at,"
    " t.temperature, t.request"
)
_END_COLUMNS: LiteralString = (
    "episode_id, agent, attempt, status, reward, score, metrics, error,"
    " extract(epoch FROM created_at)::float8"
)
_EPISODE_COLUMNS: LiteralString = (
    "episode_id, run_id, group_index, member, parameters, seed, agents, kind,"
    " extract(epoch FROM created_at)::float8"
)
_CHECKPOINT_COLUMNS: LiteralString = (
    "run_id, version, parent_version, uri, kind, extract(epoch FROM created_at)::float8, metadata"
)


def _finite(field: str, value: Any) -> float:
    try:
        number = float(value)
    except (TypeError, ValueError):
        raise InvalidInput(f"{field} must be a number, got {value!r}") from None
    if not math.isfinite(number):
        raise InvalidInput(f"{field} must be finite, got {value!r}")
    return number


def _json(field: str, value: Any) -> Jsonb:
    """Wrap for a jsonb column, rejecting what JSON cannot hold (NaN, sets, objects)."""
    try:
        json.dumps(value, allow_nan=False)
    except (TypeError, ValueError) as error:
        raise InvalidInput(
            f"{field} must be JSON (no NaN or infinity): {error}: {value!r}"
        ) from None
    return Jsonb(value)


def _metrics(field: str, metrics: dict[str, float] | None) -> Jsonb:
    clean: dict[str, float] = {}
    for key, value in (metrics or {}).items():
        clean[str(key)] = _finite(f"{field}[{key!r}]", value)
    return Jsonb(clean)


def _turn_from_row(row: Sequence[Any]) -> Turn:
    return Turn(
        episode_id=row[0],
        agent=row[1],
        attempt=row[2],
        index=row[3],
        prompt_tokens=tuple(row[4]),
        completion_tokens=tuple(row[5]),
        logprobs=tuple(row[6]),
        version=row[7],
        stop_reason=row[8],
        extends_previous=row[9],
        started_at=row[10],
        ended_at=row[11],
        temperature=row[12],
        request=row[13],
    )


def _end_from_row(row: Sequence[Any]) -> SeatEnd:
    return SeatEnd(
        episode_id=row[0],
        agent=row[1],
        attempt=row[2],
        status=row[3],
        reward=row[4],
        score=row[5],
        metrics=row[6],
        error=row[7],
        created_at=row[8],
    )


def _checkpoint_from_row(row: Sequence[Any]) -> CheckpointRecord:
    return CheckpointRecord(
        run_id=row[0],
        version=row[1],
        parent_version=row[2],
        uri=row[3],
        kind=row[4],
        created_at=row[5],
        metadata=row[6],
    )


def _run_from_row(row: Sequence[Any]) -> RunRecord:
    return RunRecord(
        run_id=row[0], name=row[1], environment=row[2], config=row[3], created_at=row[4]
    )


async def _configure(conn: AsyncConnection[Any]) -> None:
    register_dumpers(conn)


def episode_id_for(run_id: str, spec: EpisodeSpec) -> str:
    """The deterministic id of an episode: run, kind, group and member."""
    return f"{run_id}-{spec.kind}-g{spec.group_index}-m{spec.member}"


class Ledger:
    """A connection pool to the ledger database plus a listener for wake-ups."""

    def __init__(self, pool: AsyncConnectionPool[AsyncConnection[Any]], url: str) -> None:
        self._pool = pool
        self.url = url
        """The database URL (give it to child processes as ROLLOUT_DATABASE_URL)."""
        self._listener = Listener(url)
        self._writer = TurnWriter(self._write_turns)

    @classmethod
    async def connect(
        cls,
        url: str | None = None,
        *,
        state_dir: str | os.PathLike[str] | None = None,
        min_size: int = 1,
        max_size: int = 10,
        migrate: bool = True,
    ) -> Ledger:
        """Connect (url, or ROLLOUT_DATABASE_URL, or the embedded Postgres under state_dir).

        Args:
            url: A Postgres URL or connection string.
            state_dir: Where the embedded server lives when there is no URL (default
                ROLLOUT_STATE_DIR, else `.rollout`).
            min_size: Connections the pool keeps open.
            max_size: The most connections the pool opens (bounds concurrent calls).
            migrate: Apply pending schema migrations first.
        """
        resolved = await asyncio.to_thread(ledger_url, url, state_dir=state_dir)
        if migrate:
            await apply_migrations(resolved)
        pool: AsyncConnectionPool[AsyncConnection[Any]] = AsyncConnectionPool(
            resolved,
            min_size=min_size,
            max_size=max_size,
            kwargs={"autocommit": True},
            open=False,
            name="rollout-ledger",
            configure=_configure,
        )
        await pool.open(wait=True, timeout=30.0)
        return cls(pool, resolved)

    async def close(self) -> None:
        await self._writer.close()
        await self._listener.close()
        await self._pool.close()

    async def __aenter__(self) -> Ledger:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()

    # ------------------------------------------------------------------------------------------
    # runs and their settings

    async def create_run(self, name: str, environment: str, config: dict[str, Any]) -> RunRecord:
        """Create a run. Idempotent on `name`: the same name, environment and config returns the
        existing run; a different environment or config under a taken name is an error."""
        if not name or not name.strip():
            raise InvalidInput(f"run name must not be empty, got {name!r}")
        if not environment:
            raise InvalidInput(f"environment must not be empty, got {environment!r}")
        config_json = _json("config", config)
        async with self._pool.connection() as conn:
            for _ in range(5):
                run_id = secrets.token_hex(4)
                cursor = await conn.execute(
                    "INSERT INTO runs (run_id, name, environment, config) VALUES (%s, %s, %s, %s)"
                    " ON CONFLICT DO NOTHING"
                    " RETURNING run_id, name, environment, config,"
                    " extract(epoch FROM created_at)::float8",
                    (run_id, name, environment, config_json),
                )
                row = await cursor.fetchone()
                if row is not None:
                    return _run_from_row(row)
                cursor = await conn.execute(
                    "SELECT run_id, name, environment, config,"
                    " extract(epoch FROM created_at)::float8 FROM runs WHERE name = %s",
                    (name,),
                )
                existing = await cursor.fetchone()
                if existing is None:
                    continue  # the random id collided; draw another
                run = _run_from_row(existing)
                if run.environment != environment or run.config != json.loads(
                    json.dumps(config)  # compare as stored: tuples are lists in JSON
                ):
                    raise LedgerError(
                        f"run name {name!r} is taken by run {run.run_id} with a different "
                        "environment or config; choose another name"
                    )
                return run
        raise LedgerError("could not draw a free run id")  # pragma: no cover

    async def get_run(self, run: str) -> RunRecord:
        """By id or name; raises NotFound."""
        async with self._pool.connection() as conn:
            cursor = await conn.execute(
                "SELECT run_id, name, environment, config, extract(epoch FROM created_at)::float8"
                " FROM runs WHERE run_id = %s OR name = %s ORDER BY run_id = %s DESC LIMIT 1",
                (run, run, run),
            )
            row = await cursor.fetchone()
        if row is None:
            raise NotFound(f"run {run!r} not found (neither a run id nor a run name)")
        return _run_from_row(row)

    async def list_runs(self) -> list[RunRecord]:
        """Every run, oldest first."""
        async with self._pool.connection() as conn:
            cursor = await conn.execute(
                "SELECT run_id, name, environment, config, extract(epoch FROM created_at)::float8"
                " FROM runs ORDER BY created_at, run_id"
            )
            return [_run_from_row(row) for row in await cursor.fetchall()]

    async def set_setting(self, run_id: str, key: str, value: Any) -> bool:
        """Append a setting fact (max_lag, paused, ...); the latest per key wins.

        Returns False (and appends nothing) when the key already has this value.
        """
        if not key:
            raise InvalidInput(f"setting key must not be empty, got {key!r}")
        value_json = _json(f"setting {key!r}", value)
        async with self._pool.connection() as conn:
            try:
                cursor = await conn.execute(
                    "INSERT INTO settings (run_id, key, value)"
                    " SELECT %(run)s, %(key)s, %(value)s"
                    " WHERE (SELECT value FROM settings WHERE run_id = %(run)s AND key = %(key)s"
                    "        ORDER BY id DESC LIMIT 1) IS DISTINCT FROM %(value)s"
                    " RETURNING 1",
                    {"run": run_id, "key": key, "value": value_json},
                )
            except pg_errors.ForeignKeyViolation:
                raise NotFound(f"run {run_id!r} not found") from None
            return await cursor.fetchone() is not None

    async def settings(self, run_id: str) -> dict[str, Any]:
        """The latest value of every setting of the run."""
        async with self._pool.connection() as conn:
            cursor = await conn.execute(
                "SELECT key, value FROM current_settings WHERE run_id = %s", (run_id,)
            )
            return {key: value for key, value in await cursor.fetchall()}

    async def pause_run(self, run_id: str) -> bool:
        """Stop handing out seats of the run (seats already claimed play on)."""
        return await self.set_setting(run_id, "paused", True)

    async def resume_run(self, run_id: str) -> bool:
        return await self.set_setting(run_id, "paused", False)

    async def run_summary(self, run_id: str) -> RunSummary:
        """Counts derived from the run's facts, for a monitor or the CLI."""
        async with self._pool.connection() as conn:
            cursor = await conn.execute(
                """
                SELECT
                  (SELECT count(*) FROM episodes WHERE run_id = %(r)s),
                  (SELECT count(*) FROM (SELECT episode_id FROM seats WHERE run_id = %(r)s
                     GROUP BY episode_id HAVING bool_and(done)) e),
                  (SELECT count(*) FROM seats WHERE run_id = %(r)s),
                  (SELECT count(*) FROM seats WHERE run_id = %(r)s AND NOT done
                     AND expires_at > now()),
                  (SELECT count(*) FROM seat_ends WHERE run_id = %(r)s),
                  (SELECT count(*) FROM seat_ends WHERE run_id = %(r)s AND status = 'failed'),
                  (SELECT count(*) FROM turns WHERE run_id = %(r)s),
                  (SELECT count(*) FROM consumed_groups WHERE run_id = %(r)s),
                  (SELECT count(*) FROM train_steps WHERE run_id = %(r)s),
                  (SELECT max(version) FROM checkpoints WHERE run_id = %(r)s),
                  (SELECT version FROM serving WHERE run_id = %(r)s ORDER BY id DESC LIMIT 1)
                """,
                {"r": run_id},
            )
            row = await cursor.fetchone()
        assert row is not None
        return RunSummary(run_id, *row)

    async def episode_counts(self, run_id: str) -> dict[str, int]:
        """Episodes of the run by state: 'total', 'pending' (no seat claimed yet), 'running'
        (claimed, not every seat ended), 'ended' (every seat ended) and 'failed' (ended with a
        failed seat)."""
        async with self._pool.connection() as conn:
            cursor = await conn.execute(
                """
                SELECT count(*),
                       count(*) FILTER (WHERE claimed = 0),
                       count(*) FILTER (WHERE claimed > 0 AND NOT ended),
                       count(*) FILTER (WHERE ended),
                       count(*) FILTER (WHERE ended AND failed)
                FROM (
                    SELECT s.episode_id,
                           count(*) FILTER (WHERE s.attempt > 0) AS claimed,
                           bool_and(s.done) AS ended,
                           EXISTS (SELECT 1 FROM seat_ends x WHERE x.episode_id = s.episode_id
                                   AND x.status = 'failed') AS failed
                    FROM seats s WHERE s.run_id = %s GROUP BY s.episode_id
                ) e
                """,
                (run_id,),
            )
            row = await cursor.fetchone()
        assert row is not None
        return dict(zip(("total", "pending", "running", "ended", "failed"), row, strict=True))

    # ------------------------------------------------------------------------------------------
    # episodes and seats

    async def add_episodes(self, run_id: str, episodes: Sequence[EpisodeSpec]) -> list[str]:
        """Idempotent on (run, kind, group_index, member); returns episode ids, in order.

        An episode already present keeps its first parameters, seed and agents.
        """
        rows: list[tuple[Any, ...]] = []
        seen: set[str] = set()
        for position, spec in enumerate(episodes):
            if spec.kind not in EPISODE_KINDS:
                raise InvalidInput(
                    f"episodes[{position}].kind must be one of {EPISODE_KINDS}, got {spec.kind!r}"
                )
            if spec.agents < 1:
                raise InvalidInput(f"episodes[{position}].agents must be >= 1, got {spec.agents!r}")
            if spec.group_index < 0 or spec.member < 0:
                raise InvalidInput(
                    f"episodes[{position}] group_index and member must be >= 0, got "
                    f"{spec.group_index!r} and {spec.member!r}"
                )
            episode_id = episode_id_for(run_id, spec)
            if episode_id in seen:
                raise InvalidInput(f"episodes[{position}] repeats episode {episode_id!r}")
            seen.add(episode_id)
            rows.append(
                (
                    episode_id,
                    run_id,
                    spec.kind,
                    spec.group_index,
                    spec.member,
                    _json(f"episodes[{position}].parameters", spec.parameters),
                    int(spec.seed),
                    spec.agents,
                )
            )
        if not rows:
            return []
        async with self._pool.connection() as conn, conn.transaction():
            cursor = conn.cursor()
            try:
                await cursor.executemany(
                    "INSERT INTO episodes (episode_id, run_id, kind, group_index, member,"
                    " parameters, seed, agents) VALUES (%s, %s, %s, %s, %s, %s, %s, %s)"
                    " ON CONFLICT DO NOTHING",
                    rows,
                )
            except pg_errors.ForeignKeyViolation:
                raise NotFound(f"run {run_id!r} not found") from None
            # Seats for the episodes just inserted (and any missing), in episode order.
            await conn.execute(
                "INSERT INTO seats (episode_id, agent, run_id, kind)"
                " SELECT e.episode_id, a, e.run_id, e.kind"
                " FROM episodes e CROSS JOIN LATERAL generate_series(0, e.agents - 1) a"
                " WHERE e.episode_id = ANY(%s)"
                " ORDER BY e.seq, a"
                " ON CONFLICT DO NOTHING",
                ([row[0] for row in rows],),
            )
        return [row[0] for row in rows]

    async def claim_seat(
        self,
        runner: str,
        *,
        run_id: str | None = None,
        lease_seconds: float = 60.0,
        kinds: Sequence[str] | None = None,
    ) -> SeatClaim | None:
        """Claim one unclaimed seat (see `claim_seats`); None when there is nothing to claim."""
        claims = await self.claim_seats(
            runner, limit=1, run_id=run_id, lease_seconds=lease_seconds, kinds=kinds
        )
        return claims[0] if claims else None

    async def claim_seats(
        self,
        runner: str,
        *,
        limit: int,
        run_id: str | None = None,
        lease_seconds: float = 60.0,
        kinds: Sequence[str] | None = None,
    ) -> list[SeatClaim]:
        """Claim up to `limit` unclaimed seats (or ones whose claim expired: attempt + 1) in one
        transaction. SKIP LOCKED: concurrent claimers never get the same seat attempt.

        Seats are handed out oldest episode first, only for runs that are neither paused nor
        finished (a finished run's leftover queued episodes are never played). Each claim gets
        its own API key.

        Args:
            runner: Who claims (recorded with each claim).
            limit: The most seats to claim (>= 1).
            run_id: Only seats of this run.
            lease_seconds: A claim expires unless renewed by `heartbeat` within this time.
            kinds: Only episodes of these kinds ('train', 'eval', 'playground').
        """
        if lease_seconds <= 0:
            raise InvalidInput(f"lease_seconds must be > 0, got {lease_seconds!r}")
        if limit < 1:
            raise InvalidInput(f"limit must be >= 1, got {limit!r}")
        if kinds is not None:
            for kind in kinds:
                if kind not in EPISODE_KINDS:
                    raise InvalidInput(f"kinds must be among {EPISODE_KINDS}, got {kind!r}")
        api_keys = ["rk-" + secrets.token_urlsafe(24) for _ in range(limit)]
        async with self._pool.connection() as conn:
            cursor = await conn.execute(
                """
                WITH pick AS (
                    SELECT s.episode_id, s.agent, s.seq FROM seats s
                    WHERE NOT s.done
                      AND (s.expires_at IS NULL OR s.expires_at <= now())
                      AND (%(run)s::text IS NULL OR s.run_id = %(run)s)
                      AND (%(kinds)s::text[] IS NULL OR s.kind = ANY(%(kinds)s::text[]))
                      AND NOT EXISTS (
                          SELECT 1 FROM current_settings p
                          WHERE p.run_id = s.run_id AND p.key IN ('paused', 'finished')
                            AND p.value = 'true'::jsonb)
                    ORDER BY s.seq
                    LIMIT %(limit)s
                    FOR UPDATE OF s SKIP LOCKED
                ), claimed AS (
                    UPDATE seats s
                    SET attempt = s.attempt + 1, runner = %(runner)s,
                        expires_at = now() + make_interval(secs => %(lease)s)
                    FROM pick
                    WHERE s.episode_id = pick.episode_id AND s.agent = pick.agent
                    RETURNING s.run_id, s.episode_id, s.agent, s.attempt, pick.seq
                ), keyed AS (
                    SELECT c.*, (%(keys)s::text[])[row_number() OVER (ORDER BY c.seq)] AS api_key
                    FROM claimed c
                ), fact AS (
                    INSERT INTO seat_claims (episode_id, agent, attempt, run_id, runner, api_key,
                                             lease_s)
                    SELECT episode_id, agent, attempt, run_id, %(runner)s, api_key, %(lease)s
                    FROM keyed
                    RETURNING 1
                )
                SELECT k.run_id, k.episode_id, k.agent, k.attempt, e.parameters, e.seed,
                       e.agents, e.kind, e.group_index, e.member, k.api_key,
                       (SELECT count(*) FROM fact)
                FROM keyed k JOIN episodes e ON e.episode_id = k.episode_id
                ORDER BY k.seq
                """,
                {
                    "run": run_id,
                    "kinds": list(kinds) if kinds is not None else None,
                    "runner": runner,
                    "lease": float(lease_seconds),
                    "keys": api_keys,
                    "limit": limit,
                },
            )
            rows = await cursor.fetchall()
        return [
            SeatClaim(
                run_id=row[0],
                episode_id=row[1],
                agent=row[2],
                attempt=row[3],
                runner=runner,
                parameters=row[4],
                seed=row[5],
                agents=row[6],
                api_key=row[10],
                kind=row[7],
                group_index=row[8],
                member=row[9],
            )
            for row in rows
        ]

    async def heartbeat(self, claim: SeatClaim, lease_seconds: float = 60.0) -> None:
        """Extend the claim; StaleFence if another attempt took over.

        A claim that expired but was not taken over is revived. A heartbeat after this attempt
        ended the seat is a no-op.
        """
        if lease_seconds <= 0:
            raise InvalidInput(f"lease_seconds must be > 0, got {lease_seconds!r}")
        async with self._pool.connection() as conn:
            cursor = await conn.execute(
                "UPDATE seats SET expires_at = now() + make_interval(secs => %s)"
                " WHERE episode_id = %s AND agent = %s AND attempt = %s AND NOT done"
                " RETURNING 1",
                (float(lease_seconds), claim.episode_id, claim.agent, claim.attempt),
            )
            if await cursor.fetchone() is not None:
                return
            await self._raise_seat_fence(conn, claim.episode_id, claim.agent, claim.attempt)

    async def _raise_seat_fence(
        self, conn: AsyncConnection[Any], episode_id: str, agent: int, attempt: int
    ) -> None:
        """Raise why a write for (episode, agent, attempt) was refused; return if it ended."""
        cursor = await conn.execute(
            "SELECT attempt, done FROM seats WHERE episode_id = %s AND agent = %s",
            (episode_id, agent),
        )
        row = await cursor.fetchone()
        if row is None:
            raise NotFound(f"seat {agent} of episode {episode_id!r} not found")
        latest, done = row
        if latest != attempt:
            raise StaleFence(
                f"attempt {attempt} of seat {agent} of episode {episode_id!r} was taken over "
                f"by attempt {latest}"
            )
        if not done:  # pragma: no cover - the write would have succeeded
            raise LedgerError(f"seat {agent} of episode {episode_id!r} refused a write")

    async def resolve_key(self, api_key: str) -> KeyInfo | None:
        """The seat attempt an API key was issued for, or None for an unknown key.

        The key of a superseded attempt still resolves (to its own attempt); its writes are
        refused with StaleFence.
        """
        async with self._pool.connection() as conn:
            cursor = await conn.execute(
                "SELECT run_id, episode_id, agent, attempt FROM seat_claims WHERE api_key = %s",
                (api_key,),
            )
            row = await cursor.fetchone()
        if row is None:
            return None
        return KeyInfo(run_id=row[0], episode_id=row[1], agent=row[2], attempt=row[3])

    async def last_turn(self, episode_id: str, agent: int, attempt: int) -> Turn | None:
        async with self._pool.connection() as conn:
            cursor = await conn.execute(
                f"SELECT {_TURN_COLUMNS} FROM turns"
                " WHERE episode_id = %s AND agent = %s AND attempt = %s"
                " ORDER BY turn_index DESC LIMIT 1",
                (episode_id, agent, attempt),
            )
            row = await cursor.fetchone()
        return _turn_from_row(row) if row is not None else None

    async def seat_turns(self, episode_id: str, agent: int, attempt: int) -> list[Turn]:
        async with self._pool.connection() as conn:
            cursor = await conn.execute(
                f"SELECT {_TURN_COLUMNS} FROM turns"
                " WHERE episode_id = %s AND agent = %s AND attempt = %s ORDER BY turn_index",
                (episode_id, agent, attempt),
            )
            return [_turn_from_row(row) for row in await cursor.fetchall()]

    async def record_turn(self, turn: Turn) -> bool:
        """Fenced by attempt; idempotent on (episode, agent, attempt, index). True if new.

        Concurrent calls are written together, one statement per batch (see `turns.py`); each
        call still gets its own answer.

        Raises:
            StaleFence: the attempt was taken over, or the seat has ended (and this turn was not
                recorded before).
            NotFound: no such seat.
        """
        validate_turn(turn)
        return await self._writer.record(turn)

    async def _write_turns(self, turns: Sequence[Turn]) -> list[Outcome]:
        async with self._pool.connection() as conn:
            return await write_turns(conn, turns)

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
        async with self._pool.connection() as conn, conn.transaction():
            outcomes = await write_turns(conn, turns)
            for outcome in outcomes:
                if isinstance(outcome, LedgerError):
                    raise outcome  # rolls the transaction back
        return [bool(outcome) for outcome in outcomes]

    async def end_seat(
        self,
        claim: SeatClaim,
        *,
        reward: float,
        score: dict[str, Any] | None = None,
        metrics: dict[str, float] | None = None,
        status: str = "completed",
        error: str | None = None,
    ) -> bool:
        """Fenced by attempt; the first end of a seat wins. True if new.

        Raises:
            StaleFence: another attempt took the seat over.
        """
        if status not in SEAT_STATUSES:
            raise InvalidInput(f"status must be one of {SEAT_STATUSES}, got {status!r}")
        reward_value = _finite("reward", reward)
        score_json = _json("score", score) if score is not None else None
        metrics_json = _metrics("metrics", metrics)
        async with self._pool.connection() as conn, conn.transaction():
            cursor = await conn.execute(
                "SELECT run_id, kind, attempt, done FROM seats"
                " WHERE episode_id = %s AND agent = %s FOR UPDATE",
                (claim.episode_id, claim.agent),
            )
            row = await cursor.fetchone()
            if row is None:
                raise NotFound(f"seat {claim.agent} of episode {claim.episode_id!r} not found")
            run_id, kind, latest, done = row
            if latest != claim.attempt:
                raise StaleFence(
                    f"attempt {claim.attempt} of seat {claim.agent} of episode "
                    f"{claim.episode_id!r} was taken over by attempt {latest}"
                )
            if done:
                return False  # this attempt ended it before (a retry)
            await conn.execute(
                "INSERT INTO seat_ends (episode_id, agent, attempt, run_id, status, reward, score,"
                " metrics, error) VALUES (%s, %s, %s, %s, %s, %s, %s, %s, %s)",
                (
                    claim.episode_id,
                    claim.agent,
                    claim.attempt,
                    run_id,
                    status,
                    reward_value,
                    score_json,
                    metrics_json,
                    error,
                ),
            )
            await conn.execute(
                "UPDATE seats SET done = true, expires_at = NULL"
                " WHERE episode_id = %s AND agent = %s",
                (claim.episode_id, claim.agent),
            )
            if kind == "train":
                await conn.execute("SELECT pg_notify('groups', %s)", (run_id,))
        return True

    async def episode(self, episode_id: str) -> EpisodeRecord:
        """One episode with its seats, ends and the turns of each seat's winning attempt (the
        one that ended it) or, for a seat still playing, its latest attempt."""
        async with self._pool.connection() as conn:
            records = await self._episodes(conn, [episode_id], with_turns=True)
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
        async with self._pool.connection() as conn:
            cursor = await conn.execute(
                "SELECT episode_id FROM episodes WHERE run_id = %s"
                " AND (%s::text IS NULL OR kind = %s) ORDER BY seq DESC LIMIT %s",
                (run_id, kind, kind, limit),
            )
            ids = [row[0] for row in await cursor.fetchall()]
            return await self._episodes(conn, ids, with_turns=with_turns)

    async def _episodes(
        self, conn: AsyncConnection[Any], episode_ids: Sequence[str], *, with_turns: bool
    ) -> list[EpisodeRecord]:
        """Load episodes (in the order of `episode_ids`) with seats, ends and maybe turns."""
        if not episode_ids:
            return []
        ids = list(episode_ids)
        cursor = await conn.execute(
            f"SELECT {_EPISODE_COLUMNS} FROM episodes WHERE episode_id = ANY(%s)", (ids,)
        )
        base = {row[0]: row for row in await cursor.fetchall()}
        cursor = await conn.execute(
            "SELECT episode_id, agent, attempt, runner, extract(epoch FROM expires_at)::float8,"
            " done FROM seats WHERE episode_id = ANY(%s) ORDER BY episode_id, agent",
            (ids,),
        )
        seats: dict[str, list[SeatState]] = defaultdict(list)
        for row in await cursor.fetchall():
            seats[row[0]].append(SeatState(row[1], row[2], row[3], row[4], row[5]))
        cursor = await conn.execute(
            f"SELECT {_END_COLUMNS} FROM seat_ends WHERE episode_id = ANY(%s)"
            " ORDER BY episode_id, agent",
            (ids,),
        )
        ends: dict[str, list[SeatEnd]] = defaultdict(list)
        for row in await cursor.fetchall():
            ends[row[0]].append(_end_from_row(row))
        turns: dict[str, list[Turn]] = defaultdict(list)
        if with_turns:
            # The winning attempt is the ended one, else the latest: seats.attempt either way.
            cursor = await conn.execute(
                f"SELECT {_T_TURN_COLUMNS} FROM turns t JOIN seats s"
                "   ON s.episode_id = t.episode_id AND s.agent = t.agent"
                "  AND s.attempt = t.attempt"
                " WHERE s.episode_id = ANY(%s) ORDER BY t.episode_id, t.agent, t.turn_index",
                (ids,),
            )
            for row in await cursor.fetchall():
                turns[row[0]].append(_turn_from_row(row))
        records: list[EpisodeRecord] = []
        for episode_id in ids:
            row = base.get(episode_id)
            if row is None:
                continue
            records.append(
                EpisodeRecord(
                    episode_id=row[0],
                    run_id=row[1],
                    group_index=row[2],
                    member=row[3],
                    parameters=row[4],
                    seed=row[5],
                    agents=row[6],
                    kind=row[7],
                    turns=tuple(turns.get(episode_id, ())),
                    ends=tuple(ends.get(episode_id, ())),
                    seats=tuple(seats.get(episode_id, ())),
                    created_at=row[8],
                )
            )
        return records

    async def turns_for_run(
        self, run_id: str, *, since: int = 0, limit: int = 1000
    ) -> list[tuple[int, Turn]]:
        """Turns of the run recorded after cursor `since`, oldest first, as (cursor, turn).

        Pass the last cursor back as `since` to tail the run (a monitor's live view).
        """
        async with self._pool.connection() as conn:
            cursor = await conn.execute(
                f"SELECT seq, {_TURN_COLUMNS} FROM turns WHERE run_id = %s AND seq > %s"
                " ORDER BY seq LIMIT %s",
                (run_id, since, limit),
            )
            return [(row[0], _turn_from_row(row[1:])) for row in await cursor.fetchall()]

    # ------------------------------------------------------------------------------------------
    # leases and training

    async def acquire_lease(self, name: str, holder: str, ttl_seconds: float = 30.0) -> Lease:
        """Take the lease if free or expired (epoch + 1); renew if held by `holder`.

        `holder` must be unique per process (for example host, pid and a random suffix): two
        processes with one holder name would share the lease and defeat the fence.

        Raises:
            LeaseHeld: another holder has it and it has not expired.
        """
        if ttl_seconds <= 0:
            raise InvalidInput(f"ttl_seconds must be > 0, got {ttl_seconds!r}")
        if not holder:
            raise InvalidInput(f"holder must not be empty, got {holder!r}")
        async with self._pool.connection() as conn:
            cursor = await conn.execute(
                "INSERT INTO leases AS l (name, holder, epoch, expires_at)"
                " VALUES (%(name)s, %(holder)s, 1, now() + make_interval(secs => %(ttl)s))"
                " ON CONFLICT (name) DO UPDATE SET"
                "   epoch = CASE WHEN l.holder = EXCLUDED.holder THEN l.epoch ELSE l.epoch + 1 END,"
                "   acquired_at = CASE WHEN l.holder = EXCLUDED.holder THEN l.acquired_at"
                "                 ELSE now() END,"
                "   holder = EXCLUDED.holder,"
                "   expires_at = EXCLUDED.expires_at"
                " WHERE l.holder = EXCLUDED.holder OR l.expires_at <= now()"
                " RETURNING epoch, extract(epoch FROM expires_at)::float8",
                {"name": name, "holder": holder, "ttl": float(ttl_seconds)},
            )
            row = await cursor.fetchone()
            if row is not None:
                return Lease(name=name, holder=holder, epoch=row[0], expires_at=row[1])
            cursor = await conn.execute(
                "SELECT holder, epoch, greatest(0, extract(epoch FROM expires_at - now()))::float8"
                " FROM leases WHERE name = %s",
                (name,),
            )
            current = await cursor.fetchone()
        if current is None:  # pragma: no cover - leases are never deleted
            raise LedgerError(f"lease {name!r} vanished while acquiring it")
        raise LeaseHeld(
            f"lease {name!r} is held by {current[0]!r} (epoch {current[1]}) for another "
            f"{current[2]:.1f} s"
        )

    async def renew_lease(self, lease: Lease, ttl_seconds: float = 30.0) -> Lease:
        """Extend a held lease; StaleFence if its epoch is no longer current."""
        async with self._pool.connection() as conn:
            cursor = await conn.execute(
                "UPDATE leases SET expires_at = now() + make_interval(secs => %s)"
                " WHERE name = %s AND holder = %s AND epoch = %s"
                " RETURNING extract(epoch FROM expires_at)::float8",
                (float(ttl_seconds), lease.name, lease.holder, lease.epoch),
            )
            row = await cursor.fetchone()
        if row is None:
            raise StaleFence(f"lease {lease.name!r} epoch {lease.epoch} was taken over")
        return Lease(lease.name, lease.holder, lease.epoch, row[0])

    async def release_lease(self, lease: Lease) -> bool:
        """Let the lease expire now (a clean shutdown). False if it was already taken over."""
        async with self._pool.connection() as conn:
            cursor = await conn.execute(
                "UPDATE leases SET expires_at = now()"
                " WHERE name = %s AND holder = %s AND epoch = %s RETURNING 1",
                (lease.name, lease.holder, lease.epoch),
            )
            return await cursor.fetchone() is not None

    async def lease(self, name: str) -> Lease | None:
        """The lease's current holder and epoch (expired or not), or None if never taken."""
        async with self._pool.connection() as conn:
            cursor = await conn.execute(
                "SELECT holder, epoch, extract(epoch FROM expires_at)::float8"
                " FROM leases WHERE name = %s",
                (name,),
            )
            row = await cursor.fetchone()
        return Lease(name, row[0], row[1], row[2]) if row is not None else None

    async def _check_fence(self, conn: AsyncConnection[Any], lease: Lease, lock: str) -> None:
        """Inside a transaction: lock the lease row and raise StaleFence unless `lease` is
        current. The lock makes a concurrent take-over wait until this transaction ends."""
        query: LiteralString = (
            "SELECT holder, epoch FROM leases WHERE name = %s FOR UPDATE"
            if lock == "update"
            else "SELECT holder, epoch FROM leases WHERE name = %s FOR SHARE"
        )
        cursor = await conn.execute(query, (lease.name,))
        row = await cursor.fetchone()
        if row is None:
            raise StaleFence(f"lease {lease.name!r} was never acquired")
        holder, epoch = row
        if epoch != lease.epoch or holder != lease.holder:
            raise StaleFence(
                f"lease {lease.name!r} epoch {lease.epoch} ({lease.holder!r}) was taken over "
                f"by {holder!r} at epoch {epoch}"
            )

    async def complete_groups(self, run_id: str, limit: int) -> list[GroupRecord]:
        """Complete 'train' groups not yet consumed by a train step, oldest first.

        A group is complete when every episode of it has every seat ended (a failed seat counts
        as ended). Each episode carries the turns of each seat's winning attempt, by agent then
        index, and its ends.
        """
        if limit <= 0:
            return []
        async with self._pool.connection() as conn:
            cursor = await conn.execute(
                """
                SELECT s.group_index FROM (
                    SELECT e.group_index, min(e.seq) AS first_seq, bool_and(st.done) AS complete
                    FROM episodes e JOIN seats st ON st.episode_id = e.episode_id
                    WHERE e.run_id = %(r)s AND e.kind = 'train'
                      AND NOT EXISTS (SELECT 1 FROM consumed_groups c
                                      WHERE c.run_id = %(r)s AND c.group_index = e.group_index)
                    GROUP BY e.group_index
                ) s
                WHERE s.complete
                ORDER BY s.first_seq
                LIMIT %(limit)s
                """,
                {"r": run_id, "limit": limit},
            )
            indices = [row[0] for row in await cursor.fetchall()]
            if not indices:
                return []
            cursor = await conn.execute(
                "SELECT episode_id FROM episodes WHERE run_id = %s AND kind = 'train'"
                " AND group_index = ANY(%s) ORDER BY group_index, member",
                (run_id, indices),
            )
            ids = [row[0] for row in await cursor.fetchall()]
            episodes = await self._episodes(conn, ids, with_turns=True)
        by_group: dict[int, list[EpisodeRecord]] = defaultdict(list)
        for record in episodes:
            by_group[record.group_index].append(record)
        return [GroupRecord(run_id, index, tuple(by_group[index])) for index in indices]

    async def record_train_step(
        self,
        lease: Lease,
        run_id: str,
        step: int,
        group_indices: Sequence[int],
        metrics: dict[str, float],
        checkpoint: CheckpointRecord,
    ) -> bool:
        """Fenced; atomically marks the groups consumed and records the step + checkpoint.

        Idempotent on (run, step): a retry with the same groups returns False.

        Raises:
            StaleFence: the lease was taken over (nothing is written).
            LedgerError: a group is not a complete train group, was consumed by another step,
                or the step was recorded before with other groups, or the checkpoint's version
                was recorded before with another URI.
        """
        if step < 0:
            raise InvalidInput(f"step must be >= 0, got {step!r}")
        if checkpoint.run_id != run_id:
            raise InvalidInput(
                f"checkpoint.run_id {checkpoint.run_id!r} is not the step's run {run_id!r}"
            )
        groups = sorted({int(g) for g in group_indices})
        if len(groups) != len(group_indices):
            raise InvalidInput(f"group_indices repeats a group: {list(group_indices)!r}")
        metrics_json = _metrics("metrics", metrics)
        async with self._pool.connection() as conn, conn.transaction():
            await self._check_fence(conn, lease, "share")
            try:
                cursor = await conn.execute(
                    "INSERT INTO train_steps (run_id, step, group_indices, metrics, lease_name,"
                    " lease_epoch) VALUES (%s, %s, %s, %s, %s, %s)"
                    " ON CONFLICT DO NOTHING RETURNING 1",
                    (run_id, step, groups, metrics_json, lease.name, lease.epoch),
                )
            except pg_errors.ForeignKeyViolation:
                raise NotFound(f"run {run_id!r} not found") from None
            if await cursor.fetchone() is None:
                cursor = await conn.execute(
                    "SELECT group_indices FROM train_steps WHERE run_id = %s AND step = %s",
                    (run_id, step),
                )
                row = await cursor.fetchone()
                recorded = sorted(row[0]) if row is not None else []
                if recorded != groups:
                    raise LedgerError(
                        f"step {step} of run {run_id!r} was recorded before with groups "
                        f"{recorded}, not {groups}"
                    )
                return False
            if groups:
                await self._check_groups(conn, run_id, groups)
                await conn.execute(
                    "INSERT INTO consumed_groups (run_id, group_index, step)"
                    " SELECT %s, g, %s FROM unnest(%s::int4[]) g",
                    (run_id, step, groups),
                )
            await self._insert_checkpoint(conn, lease, checkpoint)
        return True

    async def _check_groups(
        self, conn: AsyncConnection[Any], run_id: str, groups: list[int]
    ) -> None:
        cursor = await conn.execute(
            "SELECT group_index, step FROM consumed_groups"
            " WHERE run_id = %s AND group_index = ANY(%s) ORDER BY group_index",
            (run_id, groups),
        )
        consumed = await cursor.fetchall()
        if consumed:
            index, by_step = consumed[0]
            raise LedgerError(
                f"group {index} of run {run_id!r} was already consumed by step {by_step}"
            )
        cursor = await conn.execute(
            "SELECT e.group_index, bool_and(s.done) FROM episodes e"
            " JOIN seats s ON s.episode_id = e.episode_id"
            " WHERE e.run_id = %s AND e.kind = 'train' AND e.group_index = ANY(%s)"
            " GROUP BY e.group_index",
            (run_id, groups),
        )
        complete = dict(await cursor.fetchall())
        for index in groups:
            if index not in complete:
                raise LedgerError(f"group {index} of run {run_id!r} has no train episodes")
            if not complete[index]:
                raise LedgerError(f"group {index} of run {run_id!r} is not complete")

    async def _insert_checkpoint(
        self, conn: AsyncConnection[Any], lease: Lease, checkpoint: CheckpointRecord
    ) -> bool:
        if checkpoint.version < 0:
            raise InvalidInput(f"checkpoint.version must be >= 0, got {checkpoint.version!r}")
        try:
            cursor = await conn.execute(
                # created_at: the clock at the transaction's last statement, not its start, so
                # it is within a commit of when the checkpoint became visible (max_lag checks).
                "INSERT INTO checkpoints (run_id, version, parent_version, uri, kind, metadata,"
                " lease_epoch, created_at) VALUES (%s, %s, %s, %s, %s, %s, %s, clock_timestamp())"
                " ON CONFLICT DO NOTHING RETURNING 1",
                (
                    checkpoint.run_id,
                    checkpoint.version,
                    checkpoint.parent_version,
                    checkpoint.uri,
                    checkpoint.kind,
                    _json("checkpoint.metadata", checkpoint.metadata),
                    lease.epoch,
                ),
            )
        except pg_errors.ForeignKeyViolation:
            raise NotFound(f"run {checkpoint.run_id!r} not found") from None
        if await cursor.fetchone() is not None:
            return True
        cursor = await conn.execute(
            "SELECT uri FROM checkpoints WHERE run_id = %s AND version = %s",
            (checkpoint.run_id, checkpoint.version),
        )
        row = await cursor.fetchone()
        if row is not None and row[0] != checkpoint.uri:
            raise LedgerError(
                f"checkpoint version {checkpoint.version} of run {checkpoint.run_id!r} was "
                f"recorded before at {row[0]!r}, not {checkpoint.uri!r}"
            )
        return False

    async def record_checkpoint(self, lease: Lease, checkpoint: CheckpointRecord) -> bool:
        """Fenced; record a checkpoint outside a train step (for example the base model as
        version 0). Idempotent on (run, version). True if new."""
        async with self._pool.connection() as conn, conn.transaction():
            await self._check_fence(conn, lease, "share")
            return await self._insert_checkpoint(conn, lease, checkpoint)

    async def latest_checkpoint(self, run_id: str) -> CheckpointRecord | None:
        async with self._pool.connection() as conn:
            cursor = await conn.execute(
                f"SELECT {_CHECKPOINT_COLUMNS} FROM checkpoints WHERE run_id = %s"
                " ORDER BY version DESC LIMIT 1",
                (run_id,),
            )
            row = await cursor.fetchone()
        return _checkpoint_from_row(row) if row is not None else None

    async def checkpoints(self, run_id: str) -> list[CheckpointRecord]:
        """The run's checkpoints, oldest version first."""
        async with self._pool.connection() as conn:
            cursor = await conn.execute(
                f"SELECT {_CHECKPOINT_COLUMNS} FROM checkpoints WHERE run_id = %s ORDER BY version",
                (run_id,),
            )
            return [_checkpoint_from_row(row) for row in await cursor.fetchall()]

    async def train_steps(self, run_id: str) -> list[TrainStepRecord]:
        """The run's train steps, in step order."""
        async with self._pool.connection() as conn:
            cursor = await conn.execute(
                "SELECT run_id, step, group_indices, metrics,"
                " extract(epoch FROM created_at)::float8"
                " FROM train_steps WHERE run_id = %s ORDER BY step",
                (run_id,),
            )
            return [
                TrainStepRecord(row[0], row[1], tuple(row[2]), row[3], row[4])
                for row in await cursor.fetchall()
            ]

    # ------------------------------------------------------------------------------------------
    # conversions and serving

    async def record_conversion(self, run_id: str, version: int, backend: str, uri: str) -> bool:
        """Idempotent on (run, version, backend). True if new."""
        if not backend:
            raise InvalidInput(f"backend must not be empty, got {backend!r}")
        async with self._pool.connection() as conn:
            try:
                cursor = await conn.execute(
                    "INSERT INTO conversions (run_id, version, backend, uri)"
                    " VALUES (%s, %s, %s, %s) ON CONFLICT DO NOTHING RETURNING 1",
                    (run_id, version, backend, uri),
                )
            except pg_errors.ForeignKeyViolation:
                raise NotFound(f"run {run_id!r} not found") from None
            return await cursor.fetchone() is not None

    async def conversions(self, run_id: str, version: int) -> dict[str, str]:
        """Backend name -> URI of the checkpoint `version` converted for it."""
        async with self._pool.connection() as conn:
            cursor = await conn.execute(
                "SELECT backend, uri FROM conversions WHERE run_id = %s AND version = %s",
                (run_id, version),
            )
            return {backend: uri for backend, uri in await cursor.fetchall()}

    async def set_serving(self, lease: Lease, record: ServingRecord) -> bool:
        """Fenced; append what should be served. False (nothing appended) when the latest
        serving record of the run already says the same version and URIs."""
        uris = _json("record.uris", record.uris)
        async with self._pool.connection() as conn, conn.transaction():
            await self._check_fence(conn, lease, "update")  # also serialises serving writes
            try:
                cursor = await conn.execute(
                    "INSERT INTO serving (run_id, version, uris, lease_epoch)"
                    " SELECT %(r)s, %(v)s, %(u)s, %(e)s"
                    " WHERE NOT EXISTS (SELECT 1 FROM (SELECT version, uris FROM serving"
                    "   WHERE run_id = %(r)s ORDER BY id DESC LIMIT 1) last"
                    "   WHERE last.version = %(v)s AND last.uris = %(u)s)"
                    " RETURNING 1",
                    {"r": record.run_id, "v": record.version, "u": uris, "e": lease.epoch},
                )
            except pg_errors.ForeignKeyViolation:
                raise NotFound(f"run {record.run_id!r} not found") from None
            return await cursor.fetchone() is not None

    async def serving(self, run_id: str) -> ServingRecord | None:
        """The latest serving record of the run."""
        async with self._pool.connection() as conn:
            cursor = await conn.execute(
                "SELECT run_id, version, uris, extract(epoch FROM created_at)::float8"
                " FROM serving WHERE run_id = %s ORDER BY id DESC LIMIT 1",
                (run_id,),
            )
            row = await cursor.fetchone()
        return ServingRecord(row[0], row[1], row[2], row[3]) if row is not None else None

    async def ack_serving(self, run_id: str, server: str, version: int) -> bool:
        """Record that `server` serves `version` now. False when that was its latest ack."""
        if not server:
            raise InvalidInput(f"server must not be empty, got {server!r}")
        async with self._pool.connection() as conn:
            try:
                cursor = await conn.execute(
                    "INSERT INTO serving_acks (run_id, server, version)"
                    " SELECT %(r)s, %(s)s, %(v)s"
                    " WHERE (SELECT version FROM serving_acks WHERE run_id = %(r)s"
                    "        AND server = %(s)s ORDER BY id DESC LIMIT 1) IS DISTINCT FROM %(v)s"
                    " RETURNING 1",
                    {"r": run_id, "s": server, "v": version},
                )
            except pg_errors.ForeignKeyViolation:
                raise NotFound(f"run {run_id!r} not found") from None
            return await cursor.fetchone() is not None

    async def lag_view(self, run_id: str) -> tuple[int | None, int | None, Any]:
        """In one round trip: the newest checkpoint version, the lowest version the run's
        servers acknowledge serving, and the run's `max_lag` setting (None where absent)."""
        async with self._pool.connection() as conn:
            cursor = await conn.execute(
                "SELECT (SELECT max(version) FROM checkpoints WHERE run_id = %(r)s),"
                " (SELECT min(version) FROM current_serving_acks WHERE run_id = %(r)s),"
                " (SELECT value FROM current_settings WHERE run_id = %(r)s AND key = 'max_lag')",
                {"r": run_id},
            )
            row = await cursor.fetchone()
        assert row is not None
        return row[0], row[1], row[2]

    async def serving_acks(self, run_id: str) -> dict[str, int]:
        """Server -> the version it last said it serves."""
        return {ack.server: ack.version for ack in await self.serving_ack_records(run_id)}

    async def serving_ack_records(self, run_id: str) -> list[ServingAck]:
        """The latest acknowledgement of each server, with its time."""
        async with self._pool.connection() as conn:
            cursor = await conn.execute(
                "SELECT run_id, server, version, extract(epoch FROM created_at)::float8"
                " FROM current_serving_acks WHERE run_id = %s ORDER BY server",
                (run_id,),
            )
            return [ServingAck(*row) for row in await cursor.fetchall()]

    # ------------------------------------------------------------------------------------------
    # wake-ups

    async def listen(self, timeout: float = 10.0) -> bool:  # noqa: ASYNC109
        """Start the listening connection now, so notifications from here on are not missed
        by the first `wait`. True once it listens."""
        return await self._listener.ready(timeout)

    async def wait(
        self,
        channel: str | Sequence[str],
        timeout: float,  # noqa: ASYNC109 - the contract's signature
        *,
        run_id: str | None = None,
    ) -> bool:
        """Wait for a NOTIFY on `channel` (or time out: polling fallback). True if notified.

        A notification that arrived since this ledger's previous wait on the same channel
        counts (it returns True at once), so a follower's loop of "query, then wait" misses
        nothing. With `run_id`, only that run's notifications count.

        Args:
            channel: One of `CHANNELS`, or several (any of them wakes).
            timeout: Seconds to wait at most.
            run_id: Only wake for this run.
        """
        channels = [channel] if isinstance(channel, str) else list(channel)
        for name in channels:
            if name not in CHANNELS:
                raise InvalidInput(f"channel must be one of {CHANNELS}, got {name!r}")
        return await self._listener.wait(channels, run_id, timeout)

    async def notify(self, channel: str, payload: str = "") -> None:
        """Send a notification yourself (for example to wake followers in a test)."""
        if channel not in CHANNELS:
            raise InvalidInput(f"channel must be one of {CHANNELS}, got {channel!r}")
        async with self._pool.connection() as conn:
            await conn.execute("SELECT pg_notify(%s, %s)", (channel, payload))
