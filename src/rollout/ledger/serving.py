"""Serving: checkpoint conversions, what should be served, and what each server serves.

A bridge converts each checkpoint for each inference backend (`record_conversion`); the trainer
appends what should be served now (`set_serving`, fenced by its lease); each inference server
acknowledges the version it serves (`ack_serving`). The gateway's max_lag admission reads the
newest version, the servers' lowest acknowledged version and the run's `max_lag` in one round
trip (`lag_view`). Each of these is per policy (`rollout.runs.policies`; `main` for a run that
names none): a server acknowledges each policy's version it serves, and max_lag admits a turn on
its agent's policy's versions.
"""

from __future__ import annotations

import time
from typing import LiteralString

from psycopg.rows import class_row, dict_row

from rollout.contracts import DEFAULT_POLICY
from rollout.ledger.connection import LedgerConnection, fetch_all, fetch_one
from rollout.ledger.inputs import jsonb, known_run, not_empty
from rollout.ledger.leases import check_fence
from rollout.ledger.records import LagView, Lease, ServingRecord

INSERT_CONVERSION: LiteralString = """
INSERT INTO conversions (run_id, policy, version, backend, uri)
VALUES (%(run_id)s, %(policy)s, %(version)s, %(backend)s, %(uri)s)
ON CONFLICT DO NOTHING
RETURNING true AS inserted
"""
CONVERSIONS: LiteralString = (
    "SELECT backend, uri FROM conversions"
    " WHERE run_id = %(run_id)s AND policy = %(policy)s AND version = %(version)s"
)
# Appends nothing when the run's latest serving record says the same.
APPEND_SERVING: LiteralString = """
INSERT INTO serving (run_id, policy, version, uris, lease_epoch)
SELECT %(run_id)s, %(policy)s, %(version)s, %(uris)s, %(lease_epoch)s
WHERE NOT EXISTS (SELECT 1 FROM (SELECT version, uris FROM serving
                                 WHERE run_id = %(run_id)s AND policy = %(policy)s
                                 ORDER BY id DESC LIMIT 1) last
                  WHERE last.version = %(version)s AND last.uris = %(uris)s)
RETURNING true AS inserted
"""
LATEST_SERVING: LiteralString = """
SELECT run_id, version, uris, extract(epoch FROM created_at)::float8 AS created_at, policy
FROM serving WHERE run_id = %(run_id)s AND policy = %(policy)s ORDER BY id DESC LIMIT 1
"""
# Appends nothing when it is the server's latest acknowledgement already.
APPEND_ACK: LiteralString = """
INSERT INTO serving_acks (run_id, server, policy, version)
SELECT %(run_id)s, %(server)s, %(policy)s, %(version)s
WHERE (SELECT version FROM serving_acks
       WHERE run_id = %(run_id)s AND server = %(server)s AND policy = %(policy)s
       ORDER BY id DESC LIMIT 1) IS DISTINCT FROM %(version)s
RETURNING true AS inserted
"""
SERVING_ACKS: LiteralString = (
    "SELECT server, version FROM current_serving_acks"
    " WHERE run_id = %(run_id)s AND policy = %(policy)s ORDER BY server"
)


def lag_columns(run: LiteralString, policy: LiteralString) -> LiteralString:
    """The lag view's columns (newest, serving, max_lag) for the run whose id is the SQL
    expression `run` and its policy `policy` (an SQL expression too): one fragment, read by
    `LAG_VIEW` for a run and policy given as parameters and by `seats.KEYS` for the default
    policy of the run of the keys it resolves.

    `serving` is the oldest of the versions the policy's servers serve now (each server's newest
    acknowledgement, as `current_serving_acks`), found by walking the servers in the index
    `serving_acks_by_policy` (migration 0020): a probe per server, however many versions each
    acknowledged (the view sorts every acknowledgement of the run)."""
    acks: LiteralString = "serving_acks a WHERE a.run_id = " + run + " AND a.policy = " + policy
    return (
        "(SELECT max(version) FROM checkpoints"
        " WHERE run_id = " + run + " AND policy = " + policy + ") AS newest,"
        " (WITH RECURSIVE srv(server) AS ("
        " (SELECT a.server FROM " + acks + " ORDER BY a.server LIMIT 1)"
        " UNION ALL"
        " SELECT (SELECT a.server FROM " + acks + " AND a.server > srv.server"
        " ORDER BY a.server LIMIT 1) FROM srv WHERE srv.server IS NOT NULL)"
        " SELECT min((SELECT a.version FROM " + acks + " AND a.server = srv.server"
        " ORDER BY a.run_id, a.policy, a.server, a.id DESC LIMIT 1))"
        " FROM srv WHERE srv.server IS NOT NULL) AS serving,"
        " (SELECT value FROM current_settings WHERE run_id = " + run + " AND key = 'max_lag')"
        " AS max_lag"
    )


LAG_VIEW: LiteralString = "SELECT " + lag_columns("%(run_id)s", "%(policy)s")


class ServingMixin(LedgerConnection):
    """Conversions, serving records and acknowledgements (see the module docstring)."""

    async def record_conversion(
        self, run_id: str, version: int, backend: str, uri: str, *, policy: str = DEFAULT_POLICY
    ) -> bool:
        """Idempotent on (run, policy, version, backend). True if new."""
        not_empty("backend", backend)
        params = {
            "run_id": run_id,
            "policy": policy,
            "version": version,
            "backend": backend,
            "uri": uri,
        }
        async with self._pool.connection() as conn:
            with known_run(run_id):
                return await fetch_one(conn, dict_row, INSERT_CONVERSION, params) is not None

    async def conversions(
        self, run_id: str, version: int, *, policy: str = DEFAULT_POLICY
    ) -> dict[str, str]:
        """Backend name -> URI of `policy`'s checkpoint `version` converted for it."""
        params = {"run_id": run_id, "version": version, "policy": policy}
        async with self._pool.connection() as conn:
            rows = await fetch_all(conn, dict_row, CONVERSIONS, params)
        return {row["backend"]: row["uri"] for row in rows}

    async def set_serving(self, lease: Lease, record: ServingRecord) -> bool:
        """Fenced; append what should be served. False (nothing appended) when the latest
        serving record of the run's policy already says the same version and URIs."""
        params = {
            "run_id": record.run_id,
            "policy": record.policy,
            "version": record.version,
            "uris": jsonb("record.uris", record.uris),
            "lease_epoch": lease.epoch,
        }
        async with self._pool.connection() as conn, conn.transaction():
            await check_fence(conn, lease, exclusive=True)  # also serialises serving writes
            with known_run(record.run_id):
                return await fetch_one(conn, dict_row, APPEND_SERVING, params) is not None

    async def serving(self, run_id: str, *, policy: str = DEFAULT_POLICY) -> ServingRecord | None:
        """The latest serving record of the run's policy."""
        params = {"run_id": run_id, "policy": policy}
        async with self._pool.connection() as conn:
            return await fetch_one(conn, class_row(ServingRecord), LATEST_SERVING, params)

    async def ack_serving(
        self, run_id: str, server: str, version: int, *, policy: str = DEFAULT_POLICY
    ) -> bool:
        """Record that `server` serves `policy`'s `version` now. False when that was its
        latest ack for the policy."""
        not_empty("server", server)
        params = {"run_id": run_id, "server": server, "version": version, "policy": policy}
        async with self._pool.connection() as conn:
            with known_run(run_id):
                return await fetch_one(conn, dict_row, APPEND_ACK, params) is not None

    async def serving_acks(self, run_id: str, *, policy: str = DEFAULT_POLICY) -> dict[str, int]:
        """Server -> the version of `policy` it last said it serves."""
        params = {"run_id": run_id, "policy": policy}
        async with self._pool.connection() as conn:
            rows = await fetch_all(conn, dict_row, SERVING_ACKS, params)
        return {row["server"]: row["version"] for row in rows}

    async def lag_view(self, run_id: str, *, policy: str = DEFAULT_POLICY) -> LagView:
        """In one round trip: `policy`'s newest checkpoint version, the lowest version of it
        the run's servers acknowledge serving, and the run's `max_lag` setting (None where
        absent)."""
        read_at = time.time()
        params = {"run_id": run_id, "policy": policy}
        async with self._pool.connection() as conn:
            row = await fetch_one(conn, dict_row, LAG_VIEW, params)
        assert row is not None  # a SELECT without FROM has one row
        return LagView(row["newest"], row["serving"], row["max_lag"], read_at, policy)
