"""Runs and their settings.

A run is created once per name (`create_run` is idempotent on it) and looked up by id or name.
Settings are facts too: `set_setting` appends a value and the latest value per key wins (the
`current_settings` view). Each key is a field of `rollout.runs.live.RunSettings`, and each value
is checked against it before it is stored; `run_settings` reads them back typed. Roles read them:
`max_lag` (the gateway's admission), `paused` and `finished` (no more seat claims), the addresses
roles advertise.

The ledger is append-only with one exception: `delete_run` removes every fact of one run, for
`rollout runs delete` (the caller checks the run is not training).
"""

from __future__ import annotations

import json
import secrets
from typing import Any, LiteralString

from psycopg import sql
from psycopg.rows import class_row, dict_row

from rollout.ledger.connection import LedgerConnection, fetch_all, fetch_one
from rollout.ledger.episodes import EPISODE_COUNTS
from rollout.ledger.errors import InvalidInput, LedgerError, NotFound
from rollout.ledger.inputs import jsonb, known_run, not_empty
from rollout.ledger.records import RunRecord
from rollout.runs import live
from rollout.runs.config import RunConfig

SECRET_SETTINGS = live.SECRET_SETTINGS
"""Settings that are credentials: roles read them, displays show them hidden (`shown_settings`)."""


def shown_settings(settings: dict[str, Any]) -> dict[str, Any]:
    """`settings` as a display may show them: credentials replaced by "(hidden)".

    >>> shown_settings({"max_lag": 1, "internal_secret": "s3cr3t"})
    {'max_lag': 1, 'internal_secret': '(hidden)'}
    """
    return {k: "(hidden)" if k in SECRET_SETTINGS else v for k, v in settings.items()}


RUN_COLUMNS: LiteralString = (
    "run_id, name, environment, config, extract(epoch FROM created_at)::float8 AS created_at"
)
INSERT_RUN: LiteralString = (
    "INSERT INTO runs (run_id, name, environment, config)"
    " VALUES (%(run_id)s, %(name)s, %(environment)s, %(config)s)"
    " ON CONFLICT DO NOTHING RETURNING " + RUN_COLUMNS
)
RUN_BY_NAME: LiteralString = "SELECT " + RUN_COLUMNS + " FROM runs WHERE name = %(name)s"
# An id wins over a name that happens to equal another run's id.
RUN_BY_ID_OR_NAME: LiteralString = (
    "SELECT " + RUN_COLUMNS + " FROM runs WHERE run_id = %(run)s OR name = %(run)s"
    " ORDER BY run_id = %(run)s DESC LIMIT 1"
)
LIST_RUNS: LiteralString = "SELECT " + RUN_COLUMNS + " FROM runs ORDER BY created_at, run_id"
# Appends nothing when the key's latest value is already this one.
APPEND_SETTING: LiteralString = """
INSERT INTO settings (run_id, key, value)
SELECT %(run)s, %(key)s, %(value)s
WHERE (SELECT value FROM settings WHERE run_id = %(run)s AND key = %(key)s
       ORDER BY id DESC LIMIT 1) IS DISTINCT FROM %(value)s
RETURNING true AS appended
"""
# The latest value of each of a run's keys (`current_settings`), found by walking the keys in
# the index `settings_latest` (run, key, newest first): a probe per key. The view sorts every
# value the run ever set, and the trainer appends some each step (`groups_queued`,
# `deleted_checkpoints`): 602 rows and 1.1 ms a read at 300 steps of the parity run, read by
# every role about once a second.
RUN_SETTINGS: LiteralString = """
WITH RECURSIVE k AS (
    (SELECT key, value FROM settings WHERE run_id = %(run)s
     ORDER BY run_id, key, id DESC LIMIT 1)
    UNION ALL
    SELECT n.key, n.value FROM k CROSS JOIN LATERAL (
        SELECT s.key, s.value FROM settings s WHERE s.run_id = %(run)s AND s.key > k.key
        ORDER BY s.run_id, s.key, s.id DESC LIMIT 1) n
)
SELECT key, value FROM k
"""
# Every table that holds a run's facts, children before the tables their keys reference.
RUN_TABLES: tuple[LiteralString, ...] = (
    "seat_ends",
    "turns",
    "seat_claims",
    "seats",
    "episodes",
    "consumed_groups",
    "train_steps",
    "serving_acks",
    "serving",
    "conversions",
    "checkpoints",
    "eval_scores",
    "eval_request_jobs",
    "eval_jobs",
    "eval_requests",
    "settings",
)
# A sandbox instance outlives the run that started it: it only forgets the run.
FORGET_SANDBOXES: LiteralString = "UPDATE sandboxes SET run_id = NULL WHERE run_id = %(run)s"
# Leases of a run are named `<role>:<run_id>` (the trainer's, the evaluators').
DELETE_LEASES: LiteralString = "DELETE FROM leases WHERE name LIKE '%%:' || %(run)s"
DELETE_RUN: LiteralString = "DELETE FROM runs WHERE run_id = %(run)s"


class RunsMixin(LedgerConnection):
    """Runs and settings (see the module docstring)."""

    async def create_run(self, name: str, environment: str, config: dict[str, Any]) -> RunRecord:
        """Create a run. Idempotent on `name`: the same name, environment and config returns the
        existing run; a different environment or config under a taken name is an error."""
        if not name or not name.strip():
            raise InvalidInput(f"run name must not be empty, got {name!r}")
        not_empty("environment", environment)
        params = {"name": name, "environment": environment, "config": jsonb("config", config)}
        as_run = class_row(RunRecord)
        async with self._pool.connection() as conn:
            for _ in range(5):
                params["run_id"] = secrets.token_hex(4)
                created = await fetch_one(conn, as_run, INSERT_RUN, params)
                if created is not None:
                    return created
                run = await fetch_one(conn, as_run, RUN_BY_NAME, params)
                if run is None:
                    continue  # the random id collided; draw another
                # Compare as stored: tuples are lists in JSON.
                if run.environment != environment or run.config != json.loads(json.dumps(config)):
                    raise LedgerError(
                        f"run name {name!r} is taken by run {run.run_id} with a different "
                        "environment or config; choose another name"
                    )
                return run
        raise LedgerError("could not draw a free run id")  # pragma: no cover

    async def get_run(self, run: str) -> RunRecord:
        """By id or name; raises NotFound."""
        async with self._pool.connection() as conn:
            record = await fetch_one(conn, class_row(RunRecord), RUN_BY_ID_OR_NAME, {"run": run})
        if record is None:
            raise NotFound(f"run {run!r} not found (neither a run id nor a run name)")
        return record

    async def list_runs(self) -> list[RunRecord]:
        """Every run, oldest first."""
        async with self._pool.connection() as conn:
            return await fetch_all(conn, class_row(RunRecord), LIST_RUNS)

    async def set_setting(self, run_id: str, key: str, value: Any) -> bool:
        """Append a setting fact (`rollout.runs.live`: max_lag, paused, ...); the latest per key
        wins.

        Returns False (and appends nothing) when the key already has this value.

        Raises:
            InvalidSetting: `key` is not a run setting, or `value` does not fit it.
        """
        not_empty("setting key", key)
        stored = jsonb(f"setting {key!r}", live.check_setting(key, value))
        params = {"run": run_id, "key": key, "value": stored}
        async with self._pool.connection() as conn:
            with known_run(run_id):
                cursor = await conn.execute(APPEND_SETTING, params)
            return await cursor.fetchone() is not None

    async def settings(self, run_id: str) -> dict[str, Any]:
        """The latest value of every setting of the run, as stored."""
        async with self._pool.connection() as conn:
            cursor = await conn.execute(RUN_SETTINGS, {"run": run_id})
            return {row["key"]: row["value"] for row in await cursor.fetchall()}

    async def run_settings(self, run_id: str, config: RunConfig | None = None) -> live.RunSettings:
        """The run's settings, typed; one never set takes the value of the run's `config`
        where it has one, else its default (`rollout.runs.live.RunSettings.of`)."""
        return live.RunSettings.of(await self.settings(run_id), config)

    async def pause_run(self, run_id: str) -> bool:
        """Stop handing out seats of the run (seats already claimed play on).

        Returns False when the run was paused already.
        """
        return await self.set_setting(run_id, live.PAUSED, True)

    async def resume_run(self, run_id: str) -> bool:
        """Hand out the run's seats again.

        A run that paused itself past its failure threshold (`status: failed`, see
        `rollout.launch.failures`) is cleared too: its episode counts now (and the database's
        time, `at`) become the baseline the threshold is judged from (`failures_baseline`),
        then `error` is cleared and `status` set to running, so supervisors train it again.

        Returns False when the run's latest `paused` setting already says false.
        """
        if (await self.run_settings(run_id)).status == "failed":
            async with self._pool.connection() as conn:
                (counts,) = await fetch_all(conn, dict_row, EPISODE_COUNTS, {"run_id": run_id})
                now = await fetch_one(conn, dict_row, "SELECT extract(epoch FROM now()) AS at")
            at = float(now["at"]) if now else 0.0
            baseline = live.FailuresBaseline(ended=counts["ended"], failed=counts["failed"], at=at)
            await self.set_setting(run_id, live.FAILURES_BASELINE, baseline.model_dump())
            await self.set_setting(run_id, live.ERROR, None)
            await self.set_setting(run_id, live.STATUS, "running")
        return await self.set_setting(run_id, live.PAUSED, False)

    async def delete_run(self, run_id: str) -> dict[str, int]:
        """Delete every fact of the run in one transaction; return rows deleted per table.

        Raises:
            NotFound: no run has this id.
        """
        params = {"run": run_id}
        deleted: dict[str, int] = {}
        async with self._pool.connection() as conn, conn.transaction():
            for table in RUN_TABLES:
                query = sql.SQL("DELETE FROM {} WHERE run_id = %(run)s").format(
                    sql.Identifier(table)
                )
                cursor = await conn.execute(query, params)
                deleted[table] = cursor.rowcount
            await conn.execute(FORGET_SANDBOXES, params)
            deleted["leases"] = (await conn.execute(DELETE_LEASES, params)).rowcount
            deleted["runs"] = (await conn.execute(DELETE_RUN, params)).rowcount
            if not deleted["runs"]:
                raise NotFound(f"run {run_id!r} not found")
        return deleted
