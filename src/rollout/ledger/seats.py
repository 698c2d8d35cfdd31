"""Episodes and their agent seats: adding episodes, claims, heartbeats, keys and seat ends.

Each episode has one seat per agent. A seat row is the seat's lease: `attempt` counts claims (0:
never claimed), `runner` and `expires_at` say who plays it until when, and `done` caches "a
`seat_ends` row exists" (written in the same transaction). A runner claims a seat attempt
(`claim_seats`, which also hands out the attempt's API key), keeps it with `heartbeat` and ends
it with `end_seat`; a claim that expires is handed out again as the next attempt, and every
write of an older attempt is refused with `StaleFence`. The first end of a seat wins.
"""

from __future__ import annotations

import secrets
import time
from collections.abc import Sequence
from typing import Any, LiteralString

from psycopg.rows import class_row, dict_row

from rollout.ledger.connection import Conn, LedgerConnection, Pool, fetch_all
from rollout.ledger.errors import InvalidInput, LedgerError, NotFound, StaleFence
from rollout.ledger.inputs import finite, jsonb, known_run, metrics_jsonb, without_nul
from rollout.ledger.records import (
    EPISODE_KINDS,
    SEAT_STATUSES,
    EpisodeSpec,
    KeyInfo,
    LagView,
    SeatClaim,
)
from rollout.ledger.serving import lag_columns
from rollout.ledger.turn_writer import Batcher, BatchWriter, Outcome

# A batch of episodes in one statement (one round trip, one firing of the `episodes` wake-up
# trigger), in the order given.
INSERT_EPISODES: LiteralString = """
INSERT INTO episodes (episode_id, run_id, kind, group_index, member, parameters, seed, agents)
SELECT v.episode_id, %(run_id)s, v.kind, v.group_index, v.member, v.parameters, v.seed, v.agents
FROM unnest(%(episode_id)s::text[], %(kind)s::text[], %(group_index)s::int4[],
            %(member)s::int4[], %(parameters)s::jsonb[], %(seed)s::int8[], %(agents)s::int4[])
     WITH ORDINALITY AS v(episode_id, kind, group_index, member, parameters, seed, agents, ord)
ORDER BY v.ord
ON CONFLICT DO NOTHING
"""
# Seats for the episodes just inserted (and any missing), in episode order.
INSERT_SEATS: LiteralString = """
INSERT INTO seats (episode_id, agent, run_id, kind)
SELECT e.episode_id, a, e.run_id, e.kind
FROM episodes e CROSS JOIN LATERAL generate_series(0, e.agents - 1) a
WHERE e.episode_id = ANY(%(episode_ids)s)
ORDER BY e.seq, a
ON CONFLICT DO NOTHING
"""
# Oldest seat first, of runs neither paused nor finished; SKIP LOCKED so that concurrent
# claimers never get the same seat attempt. Every claim is a `seat_claims` fact with its key.
CLAIM_SEATS: LiteralString = """
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
    RETURNING s.run_id, s.episode_id, s.agent, s.attempt, s.runner, pick.seq
), keyed AS (
    SELECT c.*, (%(keys)s::text[])[row_number() OVER (ORDER BY c.seq)] AS api_key
    FROM claimed c
), fact AS (
    INSERT INTO seat_claims (episode_id, agent, attempt, run_id, runner, api_key, lease_s)
    SELECT episode_id, agent, attempt, run_id, runner, api_key, %(lease)s FROM keyed
)
SELECT k.run_id, k.episode_id, k.agent, k.attempt, k.runner, e.parameters, e.seed, e.agents,
       k.api_key, e.kind, e.group_index, e.member
FROM keyed k JOIN episodes e ON e.episode_id = k.episode_id
ORDER BY k.seq
"""
HEARTBEAT: LiteralString = """
UPDATE seats SET expires_at = now() + make_interval(secs => %(lease)s)
WHERE episode_id = %(episode_id)s AND agent = %(agent)s AND attempt = %(attempt)s AND NOT done
RETURNING true AS extended
"""
# The claims of a batch (one holder's seats in play), extended in one statement; the rows
# answered are the claims still current (a superseded attempt, or an ended seat, is not).
HEARTBEATS: LiteralString = """
UPDATE seats s SET expires_at = now() + make_interval(secs => %(lease)s)
FROM unnest(%(episode_ids)s::text[], %(agents)s::int4[], %(attempts)s::int4[])
     AS v(episode_id, agent, attempt)
WHERE s.episode_id = v.episode_id AND s.agent = v.agent AND s.attempt = v.attempt AND NOT s.done
RETURNING s.episode_id, s.agent
"""
# The current attempt of each of a batch of seats.
SEAT_ATTEMPTS: LiteralString = """
SELECT s.episode_id, s.agent, s.attempt
FROM unnest(%(episode_ids)s::text[], %(agents)s::int4[]) AS v(episode_id, agent)
JOIN seats s ON s.episode_id = v.episode_id AND s.agent = v.agent
"""
SEAT: LiteralString = (
    "SELECT run_id, kind, attempt, done FROM seats"
    " WHERE episode_id = %(episode_id)s AND agent = %(agent)s"
)
SEAT_FOR_UPDATE: LiteralString = SEAT + " FOR UPDATE"
# A key of the seat's current attempt works while the seat is open and its claim unexpired; a
# superseded attempt's key still resolves, so its writes fail with StaleFence (a 409). The lag
# view of the key's run's default policy ('main', rollout.contracts.DEFAULT_POLICY) comes with
# it: the gateway admits a turn of that policy on it without another round trip. A batch of keys
# in one statement, the lag view read once per run among them (not once per key); one answer row
# per key found, by its position (`ord`, from 1). The claim and the seat of each key are probes of
# their keys in lateral subqueries (a LIMIT keeps them from being flattened into joins), so a
# young run's statistics cannot turn the join into a scan of every seat (measured mid-run: a hash
# join over a sequential scan of `seats`, several times a second).
KEYS: LiteralString = (
    """
WITH found AS MATERIALIZED (
    SELECT k.ord, c.run_id, c.episode_id, c.agent, c.attempt
    FROM unnest(%(api_keys)s::text[]) WITH ORDINALITY AS k(api_key, ord)
    CROSS JOIN LATERAL (SELECT * FROM seat_claims c WHERE c.api_key = k.api_key LIMIT 1) c
    CROSS JOIN LATERAL (SELECT * FROM seats s
                        WHERE s.episode_id = c.episode_id AND s.agent = c.agent LIMIT 1) s
    WHERE s.attempt <> c.attempt
       OR (NOT s.done AND (s.expires_at IS NULL OR s.expires_at > now()))
), lag AS (
    SELECT r.run_id, """
    + lag_columns("r.run_id", "'main'")
    + """
    FROM (SELECT DISTINCT run_id FROM found) r
)
SELECT f.ord, f.run_id, f.episode_id, f.agent, f.attempt, lag.newest, lag.serving, lag.max_lag
FROM found f JOIN lag ON lag.run_id = f.run_id
"""
)
# Ends of a batch of seats in one statement (one commit): each fenced by its attempt (the seat
# row locked FOR UPDATE, as a claim would), the first end of a seat wins, the seat is marked
# done and `groups` notified once per run with a train seat ended; one answer row per end.
END_SEATS: LiteralString = """
WITH v AS (
    SELECT * FROM unnest(%(episode_id)s::text[], %(agent)s::int4[], %(attempt)s::int4[],
                         %(status)s::text[], %(reward)s::float8[], %(score)s::jsonb[],
                         %(metrics)s::jsonb[], %(error)s::text[], %(turn_rewards)s::jsonb[])
        WITH ORDINALITY AS v(episode_id, agent, attempt, status, reward, score, metrics, error,
                             turn_rewards, ord)
), seat AS (
    SELECT s.episode_id, s.agent, s.run_id, s.kind, s.attempt, s.done FROM seats s
    WHERE (s.episode_id, s.agent) IN (SELECT episode_id, agent FROM v)
    FOR UPDATE OF s
), ins AS (
    INSERT INTO seat_ends (episode_id, agent, attempt, run_id, status, reward, score, metrics,
                           error, turn_rewards)
    SELECT v.episode_id, v.agent, v.attempt, seat.run_id, v.status, v.reward, v.score,
           v.metrics, v.error,
           CASE WHEN v.turn_rewards IS NOT NULL THEN ARRAY(
               SELECT r.value::float8 FROM jsonb_array_elements_text(v.turn_rewards)
                   WITH ORDINALITY AS r(value, ord)
               ORDER BY r.ord) END
    FROM v JOIN seat ON seat.episode_id = v.episode_id AND seat.agent = v.agent
    WHERE seat.attempt = v.attempt AND NOT seat.done
    ON CONFLICT DO NOTHING
    RETURNING episode_id, agent
), done AS (
    UPDATE seats s SET done = true, expires_at = NULL FROM ins
    WHERE s.episode_id = ins.episode_id AND s.agent = ins.agent
    RETURNING s.run_id, s.kind
), notified AS (
    SELECT pg_notify('groups', r.run_id) FROM (
        SELECT DISTINCT run_id FROM done WHERE kind = 'train') r
)
SELECT v.ord, seat.attempt AS latest, ins.episode_id IS NOT NULL AS inserted
FROM v
LEFT JOIN seat ON seat.episode_id = v.episode_id AND seat.agent = v.agent
LEFT JOIN ins ON ins.episode_id = v.episode_id AND ins.agent = v.agent
CROSS JOIN (SELECT count(*) FROM notified) n
"""


def episode_id_for(run_id: str, spec: EpisodeSpec) -> str:
    """The deterministic id of an episode: run, kind, group and member.

    Example:
        >>> episode_id_for("ab12", EpisodeSpec(group_index=3, member=1, parameters={}, seed=0))
        'ab12-train-g3-m1'
    """
    return f"{run_id}-{spec.kind}-g{spec.group_index}-m{spec.member}"


def seat_not_found(episode_id: str, agent: int) -> NotFound:
    return NotFound(f"seat {agent} of episode {episode_id!r} not found")


def seat_taken_over(episode_id: str, agent: int, attempt: int, latest: int) -> StaleFence:
    return StaleFence(
        f"attempt {attempt} of seat {agent} of episode {episode_id!r} was taken over "
        f"by attempt {latest}"
    )


def _seat_key(claim: SeatClaim) -> dict[str, Any]:
    return {"episode_id": claim.episode_id, "agent": claim.agent, "attempt": claim.attempt}


def _episode_row(run_id: str, position: int, spec: EpisodeSpec) -> dict[str, Any]:
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
    return {
        "episode_id": episode_id_for(run_id, spec),
        "run_id": run_id,
        "kind": spec.kind,
        "group_index": spec.group_index,
        "member": spec.member,
        "parameters": jsonb(f"episodes[{position}].parameters", spec.parameters),
        "seed": int(spec.seed),
        "agents": spec.agents,
    }


class SeatsMixin(LedgerConnection):
    """Episodes, seat claims, heartbeats, keys and seat ends (see the module docstring)."""

    def __init__(self, pool: Pool, url: str) -> None:
        super().__init__(pool, url)
        # One batch in flight: ends that arrive while it is written go together in the next one
        # (with 64 seats in flight, ends came two at a time with four batches in flight).
        self._end_writer = BatchWriter[dict[str, Any]](self._write_ends, max_in_flight=1)
        # Keys checked while a batch is read go together in the next one (one statement for the
        # requests of many seats instead of one each).
        self._key_reader = Batcher[str, KeyInfo | None](self._read_keys, max_in_flight=1)

    async def close(self) -> None:
        await self._end_writer.close()  # the ends being written first, then the pool
        await self._key_reader.close()
        await super().close()

    async def add_episodes(self, run_id: str, episodes: Sequence[EpisodeSpec]) -> list[str]:
        """Idempotent on (run, kind, group_index, member); returns episode ids, in order.

        An episode already present keeps its first parameters, seed and agents.
        """
        rows: list[dict[str, Any]] = []
        seen: set[str] = set()
        for position, spec in enumerate(episodes):
            row = _episode_row(run_id, position, spec)
            if row["episode_id"] in seen:
                raise InvalidInput(f"episodes[{position}] repeats episode {row['episode_id']!r}")
            seen.add(row["episode_id"])
            rows.append(row)
        if not rows:
            return []
        ids = [row["episode_id"] for row in rows]
        columns = ("episode_id", "kind", "group_index", "member", "parameters", "seed", "agents")
        params = {"run_id": run_id, **{c: [row[c] for row in rows] for c in columns}}
        async with self._pool.connection() as conn, conn.transaction():
            with known_run(run_id):
                await conn.execute(INSERT_EPISODES, params)
            await conn.execute(INSERT_SEATS, {"episode_ids": ids})
        return ids

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
        for kind in kinds or ():
            if kind not in EPISODE_KINDS:
                raise InvalidInput(f"kinds must be among {EPISODE_KINDS}, got {kind!r}")
        params = {
            "run": run_id,
            "kinds": list(kinds) if kinds is not None else None,
            "runner": runner,
            "lease": float(lease_seconds),
            "keys": ["rk-" + secrets.token_urlsafe(24) for _ in range(limit)],
            "limit": limit,
        }
        async with self._pool.connection() as conn:
            return await fetch_all(conn, class_row(SeatClaim), CLAIM_SEATS, params)

    async def heartbeat(self, claim: SeatClaim, lease_seconds: float = 60.0) -> None:
        """Extend the claim; StaleFence if another attempt took over.

        A claim that expired but was not taken over is revived. A heartbeat after this attempt
        ended the seat is a no-op.
        """
        if lease_seconds <= 0:
            raise InvalidInput(f"lease_seconds must be > 0, got {lease_seconds!r}")
        params = {**_seat_key(claim), "lease": float(lease_seconds)}
        async with self._pool.connection() as conn:
            cursor = await conn.execute(HEARTBEAT, params)
            if await cursor.fetchone() is not None:
                return
            seat = await _seat(conn, claim, lock=False)
        if seat["attempt"] != claim.attempt:
            raise seat_taken_over(claim.episode_id, claim.agent, claim.attempt, seat["attempt"])
        if not seat["done"]:  # pragma: no cover - the update would have matched
            raise LedgerError(f"seat {claim.agent} of episode {claim.episode_id!r} refused a write")

    async def heartbeats(
        self, claims: Sequence[SeatClaim], lease_seconds: float = 60.0
    ) -> list[SeatClaim]:
        """Extend every claim of `claims` in one statement (see `heartbeat`); the claims that
        were taken over by another attempt (their holder must stop writing for them). A claim
        whose seat this attempt already ended is left alone, and is not among them."""
        if lease_seconds <= 0:
            raise InvalidInput(f"lease_seconds must be > 0, got {lease_seconds!r}")
        if not claims:
            return []
        keys = {
            "episode_ids": [c.episode_id for c in claims],
            "agents": [c.agent for c in claims],
            "attempts": [c.attempt for c in claims],
            "lease": float(lease_seconds),
        }
        async with self._pool.connection() as conn:
            extended = {
                (row["episode_id"], row["agent"])
                for row in await fetch_all(conn, dict_row, HEARTBEATS, keys)
            }
            rest = [c for c in claims if (c.episode_id, c.agent) not in extended]
            if not rest:
                return []
            params = {
                "episode_ids": [c.episode_id for c in rest],
                "agents": [c.agent for c in rest],
            }
            attempts = {
                (row["episode_id"], row["agent"]): row["attempt"]
                for row in await fetch_all(conn, dict_row, SEAT_ATTEMPTS, params)
            }
        return [c for c in rest if attempts.get((c.episode_id, c.agent), c.attempt) != c.attempt]

    async def resolve_key(self, api_key: str) -> KeyInfo | None:
        """The seat attempt an API key was issued for, or None for an unknown key, or the key
        of a seat that has ended or whose claim has expired. Its `lag` is the `lag_view` of the
        key's run's default policy, read in the same statement.

        The key of a superseded attempt still resolves (to its own attempt); its writes are
        refused with StaleFence. Keys asked for while a batch is read are read together, in one
        statement.
        """
        return await self._key_reader.submit(api_key)

    async def _read_keys(self, api_keys: Sequence[str]) -> list[KeyInfo | None]:
        read_at = time.time()
        async with self._pool.connection() as conn:
            rows = await fetch_all(conn, dict_row, KEYS, {"api_keys": list(api_keys)})
        found = {
            row["ord"]: KeyInfo(
                row["run_id"],
                row["episode_id"],
                row["agent"],
                row["attempt"],
                lag=LagView(row["newest"], row["serving"], row["max_lag"], read_at),
            )
            for row in rows
        }
        return [found.get(n) for n in range(1, len(api_keys) + 1)]  # ord counts from 1

    async def end_seat(
        self,
        claim: SeatClaim,
        *,
        reward: float,
        score: dict[str, Any] | None = None,
        metrics: dict[str, float] | None = None,
        status: str = "completed",
        error: str | None = None,
        turn_rewards: Sequence[float | None] | None = None,
    ) -> bool:
        """Fenced by attempt; the first end of a seat wins. True if new.

        Args:
            claim: The seat attempt that ends.
            reward: The seat's whole reward.
            score: The End's rolloutlib `Score`, as JSON.
            metrics: The End's metrics.
            status: 'completed' or 'failed'.
            error: Why the seat failed.
            turn_rewards: The reward of each turn of the attempt, in turn order (None where a
                turn has none), the End's added to the last; None: the End's reward is the
                last turn's and the seat's only one.

        Raises:
            StaleFence: another attempt took the seat over.
        """
        if status not in SEAT_STATUSES:
            raise InvalidInput(f"status must be one of {SEAT_STATUSES}, got {status!r}")
        rewards = None
        if turn_rewards is not None:
            rewards = jsonb(
                "turn_rewards",
                [
                    None if r is None else finite(f"turn_rewards[{i}]", r)
                    for i, r in enumerate(turn_rewards)
                ],
            )
        params = {
            **_seat_key(claim),
            "status": status,
            "reward": finite("reward", reward),
            "score": jsonb("score", score) if score is not None else None,
            "metrics": metrics_jsonb("metrics", metrics),
            "error": without_nul(error),  # a text column cannot hold NUL either
            "turn_rewards": rewards,
        }
        # Concurrent ends (a runner's seats finishing together) share one statement and commit.
        return await self._end_writer.record(params)

    async def _write_ends(self, ends: Sequence[dict[str, Any]]) -> list[Outcome]:
        async with self._pool.connection() as conn:
            return await write_ends(conn, ends)


def _end_params(ends: Sequence[dict[str, Any]]) -> dict[str, Any]:
    names = (
        *("episode_id", "agent", "attempt", "status", "reward", "score", "metrics", "error"),
        "turn_rewards",
    )
    return {name: [end[name] for end in ends] for name in names}


async def write_ends(conn: Conn, ends: Sequence[dict[str, Any]]) -> list[Outcome]:
    """Record seat ends (`end_seat`'s parameters each), one statement per wave (a seat named
    twice goes in a later one); one answer each: True (new), False (ended before by this
    attempt), StaleFence or NotFound."""
    outcomes: list[Outcome] = [False] * len(ends)
    waves: list[list[int]] = []
    seen: dict[tuple[str, int], int] = {}
    for i, end in enumerate(ends):
        key = (end["episode_id"], end["agent"])
        seen[key] = seen.get(key, -1) + 1
        if seen[key] == len(waves):
            waves.append([])
        waves[seen[key]].append(i)
    for wave in waves:
        part = [ends[i] for i in wave]
        rows = {
            row["ord"]: row for row in await fetch_all(conn, dict_row, END_SEATS, _end_params(part))
        }
        for n, (i, end) in enumerate(zip(wave, part, strict=True)):
            row = rows.get(n + 1)
            if row is None or row["latest"] is None:
                outcomes[i] = seat_not_found(end["episode_id"], end["agent"])
            elif row["latest"] != end["attempt"]:
                outcomes[i] = seat_taken_over(
                    end["episode_id"], end["agent"], end["attempt"], row["latest"]
                )
            else:
                outcomes[i] = bool(row["inserted"])
    return outcomes


async def _seat(conn: Conn, claim: SeatClaim, *, lock: bool) -> dict[str, Any]:
    """The claim's seat row (run_id, kind, attempt, done); NotFound if there is none."""
    cursor = await conn.execute(SEAT_FOR_UPDATE if lock else SEAT, _seat_key(claim))
    seat = await cursor.fetchone()
    if seat is None:
        raise seat_not_found(claim.episode_id, claim.agent)
    return seat
