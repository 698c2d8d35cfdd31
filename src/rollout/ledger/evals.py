"""Eval facts: suite versions, eval requests, eval jobs, claims of their episodes, and scores.

A job plays one version of a suite on one checkpoint of a run (version -1: the run's base
model). Its episodes are ordinary ledger episodes of kind 'eval' whose `group_index` is the job
id and whose `member` is the episode's place in the suite, so seat claims, turns and seat ends
work exactly as for training; the trainer reads kind 'train' only. Scores are facts written
once per (job, policy, environment), all of a job's in one transaction: a run with several
policies (`rollout.runs.policies`) gets a score per policy and environment, a run with one
policy its scores under the policy 'main'.

- `register_eval_suite`: record a suite version's content; the same name and version with
  another content hash is refused (`SuiteVersionConflict`): a changed suite needs a new version.
- `request_eval` (the trainer's schedule, a user), `eval_requests`;
- `create_eval_job` (idempotent on run, suite, suite version and checkpoint), `eval_jobs`,
  `eval_job`;
- `claim_eval_seats`: every claimable seat of up to `limit` episodes of one job, whatever the
  run's state (a finished run's checkpoints can still be evaluated); heartbeats and seat ends
  go through the ordinary seat methods, fenced by the claim's attempt;
- `eval_seat_ends`, `record_eval_scores`, `eval_scores`.

`EvalsMixin` is one concept of the `Ledger` facade (a mixin of `LedgerConnection`).
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import asdict, dataclass
from typing import Any, LiteralString

from psycopg import AsyncConnection
from psycopg import errors as pg_errors
from psycopg.rows import class_row, dict_row
from psycopg.types.json import Jsonb

from rollout.contracts import DEFAULT_POLICY
from rollout.ledger.connection import LedgerConnection
from rollout.ledger.errors import InvalidInput, LedgerError, NotFound
from rollout.ledger.records import SeatClaim

BASE_VERSION = -1
"""The checkpoint version that names a run's base model (its model folder, untrained)."""

EVAL_TRIGGERS = ("schedule", "demand")


class SuiteVersionConflict(LedgerError):
    """A suite version was recorded before with other content (its version was not bumped)."""


@dataclass(frozen=True)
class EvalSuiteRecord:
    name: str
    version: str
    content_hash: str
    definition: dict[str, Any]
    created_at: float


@dataclass(frozen=True)
class EvalRequest:
    run_id: str
    suite: str
    """The suite as the request names it: a file path, a suite name, or MODULE:ATTR."""
    version: int
    trigger: str
    created_at: float
    job_id: int | None
    """The job that answers the request, once an evaluator has created it."""


@dataclass(frozen=True)
class EvalJob:
    job_id: int
    run_id: str
    suite: str
    suite_version: str
    version: int
    episodes: int
    trigger: str
    created_at: float
    seats: int
    """Seats of the job's episodes added so far (0 until they are added)."""
    seats_ended: int
    scored: bool
    """Whether its scores are recorded (the job is done)."""


@dataclass(frozen=True)
class EvalSeatEnd:
    member: int
    """The episode's place in the suite."""
    agent: int
    status: str
    reward: float


@dataclass(frozen=True)
class EvalScore:
    """One environment's score in one job: the mean episode reward and its 95% interval (of
    one policy's agents' seats, in a run with several policies)."""

    environment: str
    position: int
    score: float
    ci_low: float
    ci_high: float
    episodes: int
    failed: int
    method: str
    policy: str = DEFAULT_POLICY
    """The policy whose agents' seats the score averages (`rollout.runs.policies`)."""


@dataclass(frozen=True)
class EvalScoreRecord:
    job_id: int
    run_id: str
    suite: str
    suite_version: str
    version: int
    environment: str
    position: int
    score: float
    ci_low: float
    ci_high: float
    episodes: int
    failed: int
    method: str
    created_at: float
    backend: str | None = None
    """The inference backend that sampled the job (None: recorded before backends were named)."""
    policy: str = DEFAULT_POLICY
    """The policy whose agents' seats the score averages ('main' in a run with one policy)."""


INSERT_SUITE: LiteralString = """
INSERT INTO eval_suites (name, version, content_hash, definition)
VALUES (%(name)s, %(version)s, %(hash)s, %(definition)s)
ON CONFLICT DO NOTHING RETURNING 1
"""
SELECT_SUITE: LiteralString = """
SELECT name, version, content_hash, definition,
       extract(epoch FROM created_at)::float8 AS created_at
FROM eval_suites WHERE name = %(name)s AND version = %(version)s
"""
INSERT_REQUEST: LiteralString = """
INSERT INTO eval_requests (run_id, suite, version, trigger)
VALUES (%(run)s, %(suite)s, %(version)s, %(trigger)s)
ON CONFLICT DO NOTHING RETURNING 1
"""
SELECT_REQUESTS: LiteralString = """
SELECT r.run_id, r.suite, r.version, r.trigger,
       extract(epoch FROM r.created_at)::float8 AS created_at, j.job_id
FROM eval_requests r LEFT JOIN eval_request_jobs j USING (run_id, suite, version)
WHERE (%(run)s::text IS NULL OR r.run_id = %(run)s)
  AND (NOT %(pending)s OR j.job_id IS NULL)
ORDER BY r.created_at, r.version, r.suite
"""
INSERT_JOB: LiteralString = """
INSERT INTO eval_jobs (run_id, suite, suite_version, version, episodes, trigger)
VALUES (%(run)s, %(suite)s, %(suite_version)s, %(version)s, %(episodes)s, %(trigger)s)
ON CONFLICT DO NOTHING
"""
LINK_REQUEST: LiteralString = """
INSERT INTO eval_request_jobs (run_id, suite, version, job_id)
SELECT %(run)s, %(request)s, %(version)s, job_id FROM eval_jobs
WHERE run_id = %(run)s AND suite = %(suite)s AND suite_version = %(suite_version)s
  AND version = %(version)s
ON CONFLICT DO NOTHING
"""
# A job with its progress: seats of its episodes, how many ended, and whether it is scored.
SELECT_JOBS: LiteralString = """
SELECT j.job_id, j.run_id, j.suite, j.suite_version, j.version, j.episodes, j.trigger,
       extract(epoch FROM j.created_at)::float8 AS created_at,
       coalesce(p.seats, 0)::int AS seats, coalesce(p.seats_ended, 0)::int AS seats_ended,
       EXISTS (SELECT 1 FROM eval_scores s WHERE s.job_id = j.job_id) AS scored
FROM eval_jobs j
LEFT JOIN LATERAL (
    SELECT count(*) AS seats, count(*) FILTER (WHERE st.done) AS seats_ended
    FROM seats st JOIN episodes e ON e.episode_id = st.episode_id
    WHERE e.run_id = j.run_id AND e.kind = 'eval' AND e.group_index = j.job_id
) p ON true
WHERE (%(run)s::text IS NULL OR j.run_id = %(run)s)
  AND (%(job)s::int IS NULL OR j.job_id = %(job)s)
  AND (%(key_suite)s::text IS NULL OR (j.suite = %(key_suite)s
       AND j.suite_version = %(key_suite_version)s AND j.version = %(key_version)s))
ORDER BY j.job_id
"""
# Every claimable seat (unended, never claimed or its claim expired) of the job's first
# `limit` episodes that have one, oldest first. No paused/finished filter: evaluating a
# checkpoint of a finished run is what evals are for. SKIP LOCKED as in `claim_seats`.
CLAIM_EVAL_SEATS: LiteralString = """
WITH open_episodes AS (
    SELECT e.episode_id, e.seq FROM episodes e
    WHERE e.run_id = %(run)s AND e.kind = 'eval' AND e.group_index = %(job)s
      AND EXISTS (SELECT 1 FROM seats s WHERE s.episode_id = e.episode_id AND NOT s.done
                  AND (s.expires_at IS NULL OR s.expires_at <= now()))
    ORDER BY e.seq
    LIMIT %(limit)s
), pick AS (
    SELECT s.episode_id, s.agent, s.seq FROM seats s JOIN open_episodes o USING (episode_id)
    WHERE NOT s.done AND (s.expires_at IS NULL OR s.expires_at <= now())
    ORDER BY s.seq
    FOR UPDATE OF s SKIP LOCKED
), claimed AS (
    UPDATE seats s
    SET attempt = s.attempt + 1, runner = %(evaluator)s,
        expires_at = now() + make_interval(secs => %(lease)s)
    FROM pick
    WHERE s.episode_id = pick.episode_id AND s.agent = pick.agent
    RETURNING s.run_id, s.episode_id, s.agent, s.attempt, pick.seq
), keyed AS (
    SELECT c.*, 'rk-' || replace(gen_random_uuid()::text || gen_random_uuid()::text, '-', '')
           AS api_key
    FROM claimed c
), fact AS (
    INSERT INTO seat_claims (episode_id, agent, attempt, run_id, runner, api_key, lease_s)
    SELECT episode_id, agent, attempt, run_id, %(evaluator)s, api_key, %(lease)s FROM keyed
    RETURNING 1
)
SELECT k.run_id, k.episode_id, k.agent, k.attempt, %(evaluator)s AS runner, e.parameters,
       e.seed, e.agents, k.api_key, e.kind, e.group_index, e.member,
       (SELECT count(*) FROM fact) AS _facts
FROM keyed k JOIN episodes e ON e.episode_id = k.episode_id
ORDER BY k.seq
"""
SELECT_SEAT_ENDS: LiteralString = """
SELECT e.member, se.agent, se.status, se.reward
FROM episodes e JOIN seat_ends se ON se.episode_id = e.episode_id
WHERE e.run_id = %(run)s AND e.kind = 'eval' AND e.group_index = %(job)s
ORDER BY e.member, se.agent
"""
INSERT_SCORE: LiteralString = """
INSERT INTO eval_scores (job_id, environment, position, run_id, score, ci_low, ci_high,
                         episodes, failed, method, backend, policy)
VALUES (%(job)s, %(environment)s, %(position)s, %(run)s, %(score)s, %(ci_low)s, %(ci_high)s,
        %(episodes)s, %(failed)s, %(method)s, %(backend)s, %(policy)s)
ON CONFLICT DO NOTHING RETURNING 1
"""
SELECT_SCORES: LiteralString = """
SELECT s.job_id, j.run_id, j.suite, j.suite_version, j.version, s.environment, s.position,
       s.score, s.ci_low, s.ci_high, s.episodes, s.failed, s.method,
       extract(epoch FROM s.created_at)::float8 AS created_at, s.backend, s.policy
FROM eval_scores s JOIN eval_jobs j ON j.job_id = s.job_id
WHERE (%(run)s::text IS NULL OR j.run_id = %(run)s)
ORDER BY j.run_id, j.suite, j.suite_version, j.version, s.position, s.policy, s.job_id
"""


def _claim_row(row: dict[str, Any]) -> SeatClaim:
    return SeatClaim(**{k: v for k, v in row.items() if not k.startswith("_")})


def _version(version: int) -> int:
    if isinstance(version, bool) or not isinstance(version, int) or version < BASE_VERSION:
        raise InvalidInput(
            f"checkpoint version must be an integer >= {BASE_VERSION} ({BASE_VERSION}: the base "
            f"model), got {version!r}"
        )
    return version


def _trigger(trigger: str) -> str:
    if trigger not in EVAL_TRIGGERS:
        raise InvalidInput(f"trigger must be one of {EVAL_TRIGGERS}, got {trigger!r}")
    return trigger


class EvalsMixin(LedgerConnection):
    """The eval facts of the `Ledger` facade."""

    async def register_eval_suite(
        self, name: str, version: str, content_hash: str, definition: dict[str, Any]
    ) -> bool:
        """Record a suite version's content. True if new, False if recorded before as is.

        Raises:
            SuiteVersionConflict: the name and version were recorded with another content hash.
        """
        if not name or not version or not content_hash:
            raise InvalidInput(
                f"suite name, version and content hash must not be empty, got {name!r}, "
                f"{version!r}, {content_hash!r}"
            )
        try:
            payload = Jsonb(json.loads(json.dumps(definition, allow_nan=False)))
        except (TypeError, ValueError) as error:
            raise InvalidInput(f"suite definition must be JSON: {error}") from None
        params = {"name": name, "version": version, "hash": content_hash, "definition": payload}
        async with self._pool.connection() as conn:
            cursor = await conn.execute(INSERT_SUITE, params)
            if await cursor.fetchone() is not None:
                return True
            recorded = await self._suite(conn, name, version)
        if recorded is not None and recorded.content_hash != content_hash:
            raise SuiteVersionConflict(
                f"suite {name!r} version {version!r} was recorded before with other content "
                f"(hash {recorded.content_hash}, now {content_hash}): give the changed suite a "
                "new version"
            )
        return False

    async def _suite(
        self, conn: AsyncConnection[Any], name: str, version: str
    ) -> EvalSuiteRecord | None:
        async with conn.cursor(row_factory=class_row(EvalSuiteRecord)) as cursor:
            await cursor.execute(SELECT_SUITE, {"name": name, "version": version})
            return await cursor.fetchone()

    async def eval_suite(self, name: str, version: str) -> EvalSuiteRecord:
        """A recorded suite version; raises NotFound."""
        async with self._pool.connection() as conn:
            record = await self._suite(conn, name, version)
        if record is None:
            raise NotFound(f"eval suite {name!r} version {version!r} not found")
        return record

    async def request_eval(
        self, run_id: str, suite: str, version: int, trigger: str = "schedule"
    ) -> bool:
        """Ask for checkpoint `version` of the run to be evaluated with `suite` (a path, a suite
        name or MODULE:ATTR, resolved by the evaluator). Idempotent; True if new."""
        if not suite:
            raise InvalidInput(f"suite must not be empty, got {suite!r}")
        params = {
            "run": run_id,
            "suite": suite,
            "version": _version(version),
            "trigger": _trigger(trigger),
        }
        async with self._pool.connection() as conn:
            try:
                cursor = await conn.execute(INSERT_REQUEST, params)
            except pg_errors.ForeignKeyViolation:
                raise NotFound(f"run {run_id!r} not found") from None
            return await cursor.fetchone() is not None

    async def eval_requests(
        self, run_id: str | None = None, *, pending: bool = False
    ) -> list[EvalRequest]:
        """Requests (of one run, or all), oldest first; `pending`: only those with no job yet."""
        async with (
            self._pool.connection() as conn,
            conn.cursor(row_factory=class_row(EvalRequest)) as cursor,
        ):
            await cursor.execute(SELECT_REQUESTS, {"run": run_id, "pending": pending})
            return await cursor.fetchall()

    async def create_eval_job(
        self,
        run_id: str,
        suite: str,
        suite_version: str,
        version: int,
        *,
        episodes: int,
        trigger: str = "demand",
        request: str | None = None,
    ) -> EvalJob:
        """The job for (run, suite, suite version, checkpoint version), created if new.

        Args:
            run_id: The run whose checkpoint is evaluated.
            suite: The suite's name (recorded with `register_eval_suite` first).
            suite_version: The suite's version.
            version: The checkpoint version; -1 for the base model.
            episodes: How many episodes the suite plays.
            trigger: 'schedule' or 'demand'.
            request: The `suite` of the request this job answers (linked in the same
                transaction), if any.
        """
        if episodes < 1:
            raise InvalidInput(f"episodes must be >= 1, got {episodes!r}")
        params = {
            "run": run_id,
            "suite": suite,
            "suite_version": suite_version,
            "version": _version(version),
            "episodes": episodes,
            "trigger": _trigger(trigger),
            "request": request,
        }
        async with self._pool.connection() as conn, conn.transaction():
            try:
                await conn.execute(INSERT_JOB, params)
                if request is not None:
                    await conn.execute(LINK_REQUEST, params)
            except pg_errors.ForeignKeyViolation as error:
                raise NotFound(
                    f"run {run_id!r}, suite {suite!r} version {suite_version!r} or request "
                    f"{request!r} not found: {error.diag.message_detail}"
                ) from None
            jobs = await self._jobs(
                conn, key_suite=suite, key_suite_version=suite_version, key_version=version
            )
        jobs = [job for job in jobs if job.run_id == run_id]
        if not jobs:  # pragma: no cover - inserted or present above
            raise LedgerError(f"eval job for run {run_id!r} vanished")
        return jobs[0]

    async def _jobs(self, conn: AsyncConnection[Any], **where: Any) -> list[EvalJob]:
        params = {
            "run": None,
            "job": None,
            "key_suite": None,
            "key_suite_version": None,
            "key_version": None,
            **where,
        }
        async with conn.cursor(row_factory=class_row(EvalJob)) as cursor:
            await cursor.execute(SELECT_JOBS, params)
            return await cursor.fetchall()

    async def eval_jobs(self, run_id: str | None = None) -> list[EvalJob]:
        """Jobs (of one run, or all) with their progress, oldest first."""
        async with self._pool.connection() as conn:
            return await self._jobs(conn, run=run_id)

    async def eval_job(self, job_id: int) -> EvalJob:
        """One job with its progress; raises NotFound."""
        async with self._pool.connection() as conn:
            jobs = await self._jobs(conn, job=job_id)
        if not jobs:
            raise NotFound(f"eval job {job_id!r} not found")
        return jobs[0]

    async def claim_eval_seats(
        self, job: EvalJob, evaluator: str, *, limit: int, lease_seconds: float = 30.0
    ) -> list[SeatClaim]:
        """Claim every claimable seat of up to `limit` episodes of `job` (see the module
        docstring). Each claim has its own API key for the gateway and is fenced by its
        attempt like a runner's."""
        if limit < 1:
            raise InvalidInput(f"limit must be >= 1, got {limit!r}")
        if lease_seconds <= 0:
            raise InvalidInput(f"lease_seconds must be > 0, got {lease_seconds!r}")
        params = {
            "run": job.run_id,
            "job": job.job_id,
            "limit": limit,
            "evaluator": evaluator,
            "lease": float(lease_seconds),
        }
        async with (
            self._pool.connection() as conn,
            conn.cursor(row_factory=dict_row) as cursor,
        ):
            await cursor.execute(CLAIM_EVAL_SEATS, params)
            rows = await cursor.fetchall()
        return [_claim_row(row) for row in rows]

    async def eval_seat_ends(self, job: EvalJob) -> list[EvalSeatEnd]:
        """The seat ends of the job's episodes (one per seat: the first end wins)."""
        async with (
            self._pool.connection() as conn,
            conn.cursor(row_factory=class_row(EvalSeatEnd)) as cursor,
        ):
            await cursor.execute(SELECT_SEAT_ENDS, {"run": job.run_id, "job": job.job_id})
            return await cursor.fetchall()

    async def record_eval_scores(
        self, job: EvalJob, scores: Sequence[EvalScore], *, backend: str
    ) -> bool:
        """Record a finished job's scores, one per policy and environment, in one transaction,
        naming the inference `backend` that sampled them. True if new; a retry (or a second
        evaluator) finds them recorded and changes nothing."""
        if not scores:
            raise InvalidInput(f"scores of job {job.job_id} must not be empty")
        if not backend:
            raise InvalidInput(f"backend of job {job.job_id} must be named, got {backend!r}")
        new = False
        async with self._pool.connection() as conn, conn.transaction():
            # Serialise concurrent scorers of one job: the first writes all rows, others none.
            await conn.execute(
                "SELECT 1 FROM eval_jobs WHERE job_id = %s FOR UPDATE", (job.job_id,)
            )
            for score in scores:
                cursor = await conn.execute(
                    INSERT_SCORE,
                    {"job": job.job_id, "run": job.run_id, "backend": backend, **asdict(score)},
                )
                new = (await cursor.fetchone() is not None) or new
        return new

    async def eval_scores(self, run_id: str | None = None) -> list[EvalScoreRecord]:
        """Every recorded score (of one run, or all), by run, suite, checkpoint, position and
        policy."""
        async with (
            self._pool.connection() as conn,
            conn.cursor(row_factory=class_row(EvalScoreRecord)) as cursor,
        ):
            await cursor.execute(SELECT_SCORES, {"run": run_id})
            return await cursor.fetchall()
