"""What the web monitor reads from the ledger, paged and JSON-ready, and its three run controls.

`MonitorStore` holds a `Ledger` (its existing reads, and the only writes the monitor makes:
pause, resume, max_lag) and a second, small connection pool opened read-only in Postgres
(`default_transaction_read_only`), which runs the monitor's own display queries. Every list
is paged with a bounded `limit` and a cursor, and no query reads a whole run: a run of 100,000
turns opens as fast as a run of ten (see benchmarks/monitor_bench.py).

Abstractions:

- runs: `runs` (a page of runs with their state and latest reward), `run` (one run's record,
  settings, counts and serving state), `steps` (train steps after a step, with episodes/s and
  tokens/s derived from the time between steps);
- checkpoints: `checkpoints` (versions with parents, conversions per backend, when each was
  published and which servers serve it), `evals` (eval scores per checkpoint, suite version
  and environment, where the ledger records evals);
- machines: `machines` (trainer leases, runners, inference servers and gateways, each with
  its host, last sign of life and state: 'alive', 'idle' or 'dead');
- controls: `pause`, `resume`, `set_max_lag`.

Transcripts (episodes, turns, tokens) are in `rollout.monitor.transcripts`.
"""

from __future__ import annotations

import re
import time
from typing import Any, LiteralString
from urllib.parse import urlsplit

from psycopg import AsyncConnection
from psycopg_pool import AsyncConnectionPool

from rollout.ledger import Ledger, RunRecord
from rollout.ledger.leases import lease_role, trainer_lease, trainer_run
from rollout.ledger.runs import shown_settings
from rollout.monitor.errors import BadParameter, bounded
from rollout.monitor.queries import _run_state as run_state

MAX_RUNS = 200
MAX_STEPS = 5000
MAX_CHECKPOINTS = 1000
STALE_SECONDS = 60.0
"""A runner or server with no sign of life for this long is shown dead (or idle)."""

_ROLE_ID = re.compile(r"^(?P<role>[a-z]+)-(?P<host>.+)-(?P<pid>\d+)$")


def host_of(identity: str) -> str:
    """The host in a process identity: a URL's host, or HOST in `role-HOST-PID` ids (a
    number there is a local supervisor's index, not a host).

    Example:
        >>> host_of("runner-gpu-node-3-4242"), host_of("http://10.0.0.5:8001")
        ('gpu-node-3', '10.0.0.5')
        >>> host_of("runner-0-4242"), host_of("x")
        ('', '')
    """
    if "://" in identity:
        return urlsplit(identity).hostname or ""
    match = _ROLE_ID.match(identity)
    return match["host"] if match and not match["host"].isdigit() else ""


def _float(value: Any) -> float | None:
    return None if value is None else float(value)


class MonitorStore:
    """The monitor's reads (paged) and controls, over one ledger database."""

    def __init__(self, ledger: Ledger, pool: AsyncConnectionPool[AsyncConnection[Any]]) -> None:
        self.ledger = ledger
        self._pool = pool

    @classmethod
    async def open(cls, url: str | None = None, *, max_size: int = 6) -> MonitorStore:
        """Connect to `url` (else ROLLOUT_DATABASE_URL, else the embedded Postgres)."""
        ledger = await Ledger.connect(url, min_size=1, max_size=2)
        pool: AsyncConnectionPool[AsyncConnection[Any]] = AsyncConnectionPool(
            ledger.url,
            min_size=1,
            max_size=max_size,
            kwargs={
                "autocommit": True,
                # The monitor reads; Postgres refuses its writes, and no page waits forever.
                "options": "-c default_transaction_read_only=on -c statement_timeout=20000",
            },
            open=False,
            name="rollout-monitor",
        )
        try:
            await pool.open(wait=True, timeout=30.0)
        except BaseException:
            await ledger.close()
            raise
        return cls(ledger, pool)

    async def close(self) -> None:
        await self._pool.close()
        await self.ledger.close()

    async def fetch(self, query: LiteralString, params: Any = None) -> list[tuple[Any, ...]]:
        """Rows of one read-only query (riding out a database outage like a ledger call)."""
        return await self.fetch_sql(query, params)

    async def fetch_sql(self, query: Any, params: Any = None) -> list[tuple[Any, ...]]:
        """Rows of one composed (`psycopg.sql`) read-only query (riding out an outage)."""

        async def read() -> list[tuple[Any, ...]]:
            async with self._pool.connection() as conn:
                cursor = await conn.execute(query, params)
                return list(await cursor.fetchall())

        return await self.ledger.ride_out(read)

    # ------------------------------------------------------------------------------------------
    # runs

    async def get_run(self, run: str) -> RunRecord:
        """By id or name; the ledger's NotFound otherwise."""
        return await self.ledger.get_run(run)

    async def runs(self, *, offset: int = 0, limit: int = 50) -> dict[str, Any]:
        """A page of runs, newest first."""
        bounded("limit", limit, 1, MAX_RUNS)
        bounded("offset", offset, 0, 10**9)
        rows = await self.fetch(
            """
            SELECT r.run_id, r.name, r.environment, extract(epoch FROM r.created_at)::float8,
              COALESCE((SELECT jsonb_object_agg(c.key, c.value) FROM current_settings c
                        WHERE c.run_id = r.run_id), '{}'),
              (SELECT count(*) FROM train_steps s WHERE s.run_id = r.run_id AND s.step > 0),
              (SELECT s.metrics->'reward' FROM train_steps s
               WHERE s.run_id = r.run_id AND s.step > 0 ORDER BY s.step DESC LIMIT 1),
              (SELECT count(*) FROM episodes e WHERE e.run_id = r.run_id),
              (SELECT max(k.version) FROM checkpoints k WHERE k.run_id = r.run_id)
            FROM runs r ORDER BY r.created_at DESC, r.run_id DESC OFFSET %s LIMIT %s
            """,
            (offset, limit + 1),
        )
        items = [
            {
                "run_id": row[0],
                "name": row[1],
                "environment": row[2],
                "created_at": row[3],
                "state": run_state(row[4]),
                "max_lag": row[4].get("max_lag"),
                "steps": row[5],
                "last_reward": _float(row[6]),
                "episodes": row[7],
                "latest_version": row[8],
            }
            for row in rows[:limit]
        ]
        return {"items": items, "next": offset + limit if len(rows) > limit else None}

    async def run(self, run: str) -> dict[str, Any]:
        """One run: its record, settings, state, counts, serving record and servers."""
        record = await self.get_run(run)
        run_id = record.run_id
        settings = await self.ledger.settings(run_id)
        counts = await self.ledger.episode_counts(run_id)
        serving = await self.ledger.serving(run_id)
        (row,) = await self.fetch(
            """
            SELECT
              (SELECT count(*) FROM seats WHERE run_id = %(r)s),
              (SELECT count(*) FROM seats WHERE run_id = %(r)s AND NOT done
                 AND expires_at > now()),
              (SELECT count(*) FROM seat_ends WHERE run_id = %(r)s),
              (SELECT count(*) FROM seat_ends WHERE run_id = %(r)s AND status = 'failed'),
              (SELECT count(*) FROM turns WHERE run_id = %(r)s),
              (SELECT count(*) FROM consumed_groups WHERE run_id = %(r)s),
              (SELECT count(*) FROM train_steps WHERE run_id = %(r)s),
              (SELECT max(version) FROM checkpoints WHERE run_id = %(r)s),
              (SELECT jsonb_agg(jsonb_build_object('server', server, 'version', version,
                 'at', extract(epoch FROM created_at)::float8) ORDER BY server)
               FROM current_serving_acks WHERE run_id = %(r)s),
              (SELECT jsonb_build_object('holder', holder, 'epoch', epoch,
                 'expires_at', extract(epoch FROM expires_at)::float8,
                 'alive', expires_at > now())
               FROM leases WHERE name = %(lease)s)
            """,
            {"r": run_id, "lease": trainer_lease(run_id)},
        )
        names = ("seats", "seats_running", "seats_ended", "seats_failed", "turns")
        names += ("groups_consumed", "train_steps")
        return {
            "run_id": run_id,
            "name": record.name,
            "environment": record.environment,
            "created_at": record.created_at,
            "config": record.config,
            "settings": shown_settings(settings),
            "state": run_state(settings),
            "max_lag": settings.get("max_lag"),
            "episodes": counts,
            "counts": dict(zip(names, row[:7], strict=True)),
            "latest_version": row[7],
            "serving": None
            if serving is None
            else {"version": serving.version, "uris": serving.uris, "at": serving.created_at},
            "servers": row[8] or [],
            "trainer": row[9],
            "has_evals": await self._has_evals(run_id),
        }

    async def steps(self, run: str, *, after: int = -1, limit: int = 1000) -> dict[str, Any]:
        """Train steps after step `after`, oldest first, with throughput per step.

        `episodes_per_s` and `tokens_per_s` divide the step's trained episodes and tokens
        (`is/tokens`) by the wall-clock time since the previous step was recorded.
        """
        bounded("limit", limit, 1, MAX_STEPS)
        record = await self.get_run(run)
        rows = await self.fetch(
            "SELECT step, metrics, extract(epoch FROM created_at)::float8 FROM train_steps"
            " WHERE run_id = %s AND step > %s ORDER BY step LIMIT %s",
            (record.run_id, after, limit + 1),
        )
        more = len(rows) > limit
        rows = rows[:limit]
        previous: float | None = None
        if rows and after >= 0:
            before = await self.fetch(
                "SELECT extract(epoch FROM created_at)::float8 FROM train_steps"
                " WHERE run_id = %s AND step <= %s ORDER BY step DESC LIMIT 1",
                (record.run_id, after),
            )
            previous = before[0][0] if before else None
        items: list[dict[str, Any]] = []
        for step, metrics, created in rows:
            seconds = None if previous is None else created - previous
            previous = created
            rates: dict[str, float | None] = {"episodes_per_s": None, "tokens_per_s": None}
            if step > 0 and seconds is not None and seconds > 0:
                if "episodes" in metrics:
                    rates["episodes_per_s"] = metrics["episodes"] / seconds
                if "is/tokens" in metrics:
                    rates["tokens_per_s"] = metrics["is/tokens"] / seconds
            items.append({"step": step, "created_at": created, "metrics": metrics, **rates})
        return {"items": items, "next": items[-1]["step"] if more else None}

    # ------------------------------------------------------------------------------------------
    # checkpoints and evals

    async def checkpoints(self, run: str, *, after: int = -1, limit: int = 200) -> dict[str, Any]:
        """Checkpoints after version `after`: parents, conversions, publication, servers."""
        bounded("limit", limit, 1, MAX_CHECKPOINTS)
        record = await self.get_run(run)
        run_id = record.run_id
        rows = await self.fetch(
            "SELECT version, parent_version, kind, uri, extract(epoch FROM created_at)::float8,"
            " metadata FROM checkpoints WHERE run_id = %s AND version > %s"
            " ORDER BY version LIMIT %s",
            (run_id, after, limit + 1),
        )
        more = len(rows) > limit
        rows = rows[:limit]
        if not rows:
            return {"items": [], "next": None}
        low, high = rows[0][0], rows[-1][0]
        conversions: dict[int, dict[str, str]] = {}
        for version, backend, uri in await self.fetch(
            "SELECT version, backend, uri FROM conversions"
            " WHERE run_id = %s AND version BETWEEN %s AND %s ORDER BY backend",
            (run_id, low, high),
        ):
            conversions.setdefault(version, {})[backend] = uri
        published = dict(
            await self.fetch(
                "SELECT version, extract(epoch FROM min(created_at))::float8 FROM serving"
                " WHERE run_id = %s AND version BETWEEN %s AND %s GROUP BY version",
                (run_id, low, high),
            )
        )
        served: dict[int, list[str]] = {}
        for server, version in await self.fetch(
            "SELECT server, version FROM current_serving_acks WHERE run_id = %s ORDER BY server",
            (run_id,),
        ):
            served.setdefault(version, []).append(server)
        items = [
            {
                "version": version,
                "parent_version": parent,
                "kind": kind,
                "uri": uri,
                "created_at": created,
                "metadata": metadata,
                "conversions": conversions.get(version, {}),
                "published_at": published.get(version),
                "served_by": served.get(version, []),
            }
            for version, parent, kind, uri, created, metadata in rows
        ]
        return {"items": items, "next": high if more else None}

    async def _has_evals(self, run_id: str) -> bool:
        """True when the run has eval scores (and the ledger has evals at all)."""
        (row,) = await self.fetch("SELECT to_regclass('eval_scores') IS NOT NULL")
        if not row[0]:
            return False
        rows = await self.fetch("SELECT 1 FROM eval_scores WHERE run_id = %s LIMIT 1", (run_id,))
        return bool(rows)

    async def evals(self, run: str) -> dict[str, Any]:
        """The run's eval scores per checkpoint, suite version and environment (empty where
        the ledger records no evals). Version -1 is the base model."""
        record = await self.get_run(run)
        if not await self._has_evals(record.run_id):
            return {"items": []}
        rows = await self.fetch(
            """
            SELECT j.version, j.suite, j.suite_version, s.environment, s.score, s.ci_low,
                   s.ci_high, s.episodes, s.failed, s.method,
                   extract(epoch FROM s.created_at)::float8
            FROM eval_scores s JOIN eval_jobs j ON j.job_id = s.job_id
            WHERE s.run_id = %s ORDER BY j.version, j.suite, j.suite_version, s.position
            LIMIT 10000
            """,
            (record.run_id,),
        )
        keys = ("version", "suite", "suite_version", "environment", "score", "ci_low")
        keys += ("ci_high", "episodes", "failed", "method", "created_at")
        return {"items": [dict(zip(keys, row, strict=True)) for row in rows]}

    # ------------------------------------------------------------------------------------------
    # machines

    async def machines(self, *, stale_seconds: float = STALE_SECONDS) -> dict[str, Any]:
        """Every process the ledger has seen, newest sign of life first within each role."""
        if not 0 < stale_seconds <= 86400:
            raise BadParameter(f"stale_s must be in (0, 86400], got {stale_seconds!r}")
        now = time.time()
        items: list[dict[str, Any]] = []
        for name, holder, epoch, expires, acquired in await self.fetch(
            "SELECT name, holder, epoch, extract(epoch FROM expires_at)::float8,"
            " extract(epoch FROM acquired_at)::float8 FROM leases ORDER BY name LIMIT 1000"
        ):
            items.append(
                {
                    "role": lease_role(name),
                    "id": holder,
                    "host": host_of(holder),
                    "run_id": trainer_run(name),
                    "last_seen": min(now, expires),
                    "state": "alive" if expires > now else "dead",
                    "detail": {
                        "lease": name,
                        "epoch": epoch,
                        "expires_at": expires,
                        "acquired_at": acquired,
                    },
                }
            )
        items.extend(await self._runners(now, stale_seconds))
        items.extend(await self._servers(now, stale_seconds))
        return {"now": now, "stale_seconds": stale_seconds, "items": items}

    async def _runners(self, now: float, stale: float) -> list[dict[str, Any]]:
        rows = await self.fetch(
            """
            WITH claims AS (
                SELECT runner, run_id, max(claimed_at) AS last_claim, count(*) AS claims,
                       max(lease_s) AS lease_s
                FROM seat_claims GROUP BY runner, run_id),
            held AS (
                SELECT runner, run_id, count(*) FILTER (WHERE expires_at > now()) AS live,
                       max(expires_at) AS expires
                FROM seats WHERE NOT done AND runner IS NOT NULL GROUP BY runner, run_id)
            SELECT c.runner, c.run_id, extract(epoch FROM c.last_claim)::float8, c.claims,
                   COALESCE(h.live, 0),
                   extract(epoch FROM GREATEST(c.last_claim, CASE WHEN h.expires IS NOT NULL
                       THEN LEAST(now(), h.expires - make_interval(secs => c.lease_s)) END))::float8
            FROM claims c LEFT JOIN held h USING (runner, run_id)
            ORDER BY 6 DESC LIMIT 1000
            """
        )
        return [
            {
                "role": "runner",
                "id": runner,
                "host": host_of(runner),
                "run_id": run_id,
                "last_seen": last_seen,
                "state": "alive" if live or now - last_seen < stale else "dead",
                "detail": {"claims": claims, "seats_held": live, "last_claim": last_claim},
            }
            for runner, run_id, last_claim, claims, live, last_seen in rows
        ]

    async def _servers(self, now: float, stale: float) -> list[dict[str, Any]]:
        out: list[dict[str, Any]] = []
        for server, run_id, version, acked, serving, published in await self.fetch(
            """
            SELECT a.server, a.run_id, a.version, extract(epoch FROM a.created_at)::float8,
                   s.version, extract(epoch FROM s.created_at)::float8
            FROM current_serving_acks a
            LEFT JOIN LATERAL (SELECT version, created_at FROM serving
                               WHERE run_id = a.run_id ORDER BY id DESC LIMIT 1) s ON true
            ORDER BY a.run_id, a.server LIMIT 1000
            """
        ):
            # Servers acknowledge each new version: one still behind a record older than
            # `stale` seconds has stopped following it.
            behind = serving is not None and version != serving
            dead = behind and published is not None and now - published > stale
            out.append(
                {
                    "role": "inference",
                    "id": server,
                    "host": host_of(server),
                    "run_id": run_id,
                    "last_seen": acked,
                    "state": "dead" if dead else ("loading" if behind else "alive"),
                    "detail": {"serving_version": version, "published_version": serving},
                }
            )
        for run_id, url, last_turn in await self.fetch(
            """
            SELECT c.run_id, c.value #>> '{}',
                   (SELECT extract(epoch FROM t.recorded_at)::float8 FROM turns t
                    WHERE t.run_id = c.run_id ORDER BY t.seq DESC LIMIT 1)
            FROM current_settings c WHERE c.key = 'gateway_url' ORDER BY c.run_id LIMIT 1000
            """
        ):
            # A gateway leaves only the turns it records: quiet is idle, not dead.
            recent = last_turn is not None and now - last_turn < stale
            out.append(
                {
                    "role": "gateway",
                    "id": url,
                    "host": host_of(url),
                    "run_id": run_id,
                    "last_seen": last_turn,
                    "state": "alive" if recent else "idle",
                    "detail": {"url": url},
                }
            )
        return out

    # ------------------------------------------------------------------------------------------
    # controls: the monitor's only writes

    async def pause(self, run: str) -> dict[str, Any]:
        record = await self.get_run(run)
        await self.ledger.pause_run(record.run_id)
        return await self.controls(record.run_id)

    async def resume(self, run: str) -> dict[str, Any]:
        record = await self.get_run(run)
        await self.ledger.resume_run(record.run_id)
        return await self.controls(record.run_id)

    async def set_max_lag(self, run: str, value: Any) -> dict[str, Any]:
        """Set `max_lag` (an integer >= 0), effective for turns that begin afterwards."""
        try:
            lag = int(value)
        except (TypeError, ValueError):
            raise BadParameter(f"max_lag must be an integer >= 0, got {value!r}") from None
        if isinstance(value, float) and value != lag:
            raise BadParameter(f"max_lag must be an integer >= 0, got {value!r}")
        bounded("max_lag", lag, 0, 1_000_000)
        record = await self.get_run(run)
        await self.ledger.set_setting(record.run_id, "max_lag", lag)
        return await self.controls(record.run_id)

    async def controls(self, run: str) -> dict[str, Any]:
        """The run's state and max_lag (what the controls show)."""
        record = await self.get_run(run)
        settings = await self.ledger.settings(record.run_id)
        return {
            "run_id": record.run_id,
            "name": record.name,
            "state": run_state(settings),
            "max_lag": settings.get("max_lag"),
        }
