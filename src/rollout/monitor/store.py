"""What the web monitor reads from the ledger, paged and JSON-ready, and its three run controls.

`MonitorStore` holds a `Ledger` (its existing reads, and the only writes the monitor makes:
pause, resume, max_lag) and the ledger's `MonitorReads`, the display queries on a second, small
pool that Postgres holds read-only. The monitor writes no SQL and reads rows by column name; it
shapes them into JSON. Every list is paged with a bounded `limit` and a cursor, and no query
reads a whole run: a run of 100,000 turns opens as fast as a run of ten (see
benchmarks/monitor_bench.py).

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
from typing import Any
from urllib.parse import urlsplit

from rollout.ledger import Ledger, RunRecord
from rollout.ledger.leases import lease_role, trainer_lease, trainer_run
from rollout.ledger.monitor import MonitorReads
from rollout.ledger.runs import shown_settings
from rollout.monitor.errors import BadParameter, bounded
from rollout.monitor.queries import run_state, trains
from rollout.runs.live import MAX_LAG, parse_max_lag

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

    def __init__(self, ledger: Ledger, reads: MonitorReads) -> None:
        self.ledger = ledger
        self.reads = reads
        """The display queries, on a read-only pool of their own."""

    @classmethod
    async def open(cls, url: str | None = None, *, max_size: int = 6) -> MonitorStore:
        """Connect to `url` (else ROLLOUT_DATABASE_URL, else the embedded Postgres)."""
        ledger = await Ledger.connect(url, min_size=1, max_size=2)
        try:
            reads = await MonitorReads.open(ledger, max_size=max_size)
        except BaseException:
            await ledger.close()
            raise
        return cls(ledger, reads)

    async def close(self) -> None:
        await self.reads.close()
        await self.ledger.close()

    # ------------------------------------------------------------------------------------------
    # runs

    async def get_run(self, run: str) -> RunRecord:
        """By id or name; the ledger's NotFound otherwise."""
        return await self.ledger.get_run(run)

    async def runs(self, *, offset: int = 0, limit: int = 50) -> dict[str, Any]:
        """A page of runs, newest first."""
        bounded("limit", limit, 1, MAX_RUNS)
        bounded("offset", offset, 0, 10**9)
        rows = await self.reads.runs(offset=offset, limit=limit + 1)
        items = [
            {
                "run_id": row["run_id"],
                "name": row["name"],
                "environment": row["environment"],
                "created_at": row["created_at"],
                "state": run_state(row["settings"]),
                "max_lag": row["settings"].get(MAX_LAG),
                "steps": row["steps"],
                "last_reward": _float(row["last_reward"]),
                "episodes": row["episodes"],
                "latest_version": row["latest_version"],
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
        row = await self.reads.run_counts(run_id, trainer_lease(run_id))
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
            "trains": trains(record),
            "max_lag": settings.get(MAX_LAG),
            "episodes": counts,
            "counts": {name: row[name] for name in names},
            "latest_version": row["latest_version"],
            "serving": None
            if serving is None
            else {"version": serving.version, "uris": serving.uris, "at": serving.created_at},
            "servers": row["servers"] or [],
            "trainer": row["trainer"],
            "has_evals": await self.reads.has_evals(run_id),
        }

    async def steps(self, run: str, *, after: int = -1, limit: int = 1000) -> dict[str, Any]:
        """Train steps after step `after`, oldest first, with throughput per step.

        `episodes_per_s` and `tokens_per_s` divide the step's trained episodes and tokens
        (`is/tokens`) by the wall-clock time since the previous step was recorded.
        """
        bounded("limit", limit, 1, MAX_STEPS)
        record = await self.get_run(run)
        rows = await self.reads.steps(record.run_id, after=after, limit=limit + 1)
        more = len(rows) > limit
        rows = rows[:limit]
        previous: float | None = None
        if rows and after >= 0:
            previous = await self.reads.step_time(record.run_id, after)
        items: list[dict[str, Any]] = []
        for row in rows:
            step, metrics, created = row["step"], row["metrics"], row["created_at"]
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
        rows = await self.reads.checkpoints(run_id, after=after, limit=limit + 1)
        more = len(rows) > limit
        rows = rows[:limit]
        if not rows:
            return {"items": [], "next": None}
        low, high = rows[0]["version"], rows[-1]["version"]
        conversions: dict[int, dict[str, str]] = {}
        for row in await self.reads.conversions(run_id, low, high):
            conversions.setdefault(row["version"], {})[row["backend"]] = row["uri"]
        published = await self.reads.published(run_id, low, high)
        served: dict[int, list[str]] = {}
        for server, version in (await self.ledger.serving_acks(run_id)).items():
            served.setdefault(version, []).append(server)
        items = [
            {
                "version": row["version"],
                "parent_version": row["parent_version"],
                "kind": row["kind"],
                "uri": row["uri"],
                "created_at": row["created_at"],
                "metadata": row["metadata"],
                "conversions": conversions.get(row["version"], {}),
                "published_at": published.get(row["version"]),
                "served_by": served.get(row["version"], []),
            }
            for row in rows
        ]
        return {"items": items, "next": high if more else None}

    async def evals(self, run: str) -> dict[str, Any]:
        """The run's eval scores per checkpoint, suite version and environment (empty where
        the ledger records no evals). Version -1 is the base model."""
        record = await self.get_run(run)
        if not await self.reads.has_evals(record.run_id):
            return {"items": []}
        return {"items": await self.reads.eval_scores(record.run_id)}

    # ------------------------------------------------------------------------------------------
    # machines

    async def machines(self, *, stale_seconds: float = STALE_SECONDS) -> dict[str, Any]:
        """Every process the ledger has seen, newest sign of life first within each role."""
        if not 0 < stale_seconds <= 86400:
            raise BadParameter(f"stale_s must be in (0, 86400], got {stale_seconds!r}")
        now = time.time()
        items: list[dict[str, Any]] = []
        for lease in await self.reads.leases():
            name, holder, expires = lease["name"], lease["holder"], lease["expires_at"]
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
                        "epoch": lease["epoch"],
                        "expires_at": expires,
                        "acquired_at": lease["acquired_at"],
                    },
                }
            )
        items.extend(await self._runners(now, stale_seconds))
        items.extend(await self._servers(now, stale_seconds))
        return {"now": now, "stale_seconds": stale_seconds, "items": items}

    async def _runners(self, now: float, stale: float) -> list[dict[str, Any]]:
        return [
            {
                "role": "runner",
                "id": row["runner"],
                "host": host_of(row["runner"]),
                "run_id": row["run_id"],
                "last_seen": row["last_seen"],
                "state": "alive" if row["seats_held"] or now - row["last_seen"] < stale else "dead",
                "detail": {
                    "claims": row["claims"],
                    "seats_held": row["seats_held"],
                    "last_claim": row["last_claim"],
                },
            }
            for row in await self.reads.runners()
        ]

    async def _servers(self, now: float, stale: float) -> list[dict[str, Any]]:
        out: list[dict[str, Any]] = []
        for row in await self.reads.servers():
            # Servers acknowledge each new version: one still behind a record older than
            # `stale` seconds has stopped following it.
            version, serving = row["version"], row["published_version"]
            published = row["published_at"]
            behind = serving is not None and version != serving
            dead = behind and published is not None and now - published > stale
            out.append(
                {
                    "role": "inference",
                    "id": row["server"],
                    "host": host_of(row["server"]),
                    "run_id": row["run_id"],
                    "last_seen": row["acked_at"],
                    "state": "dead" if dead else ("loading" if behind else "alive"),
                    "detail": {"serving_version": version, "published_version": serving},
                }
            )
        for row in await self.reads.gateways():
            # A gateway leaves only the turns it records: quiet is idle, not dead.
            last_turn = row["last_turn"]
            recent = last_turn is not None and now - last_turn < stale
            out.append(
                {
                    "role": "gateway",
                    "id": row["url"],
                    "host": host_of(row["url"]),
                    "run_id": row["run_id"],
                    "last_seen": last_turn,
                    "state": "alive" if recent else "idle",
                    "detail": {"url": row["url"]},
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
        lag = parse_max_lag(value)
        record = await self.get_run(run)
        await self.ledger.set_setting(record.run_id, MAX_LAG, lag)
        return await self.controls(record.run_id)

    async def controls(self, run: str) -> dict[str, Any]:
        """The run's state and max_lag (what the controls show)."""
        record = await self.get_run(run)
        settings = await self.ledger.settings(record.run_id)
        return {
            "run_id": record.run_id,
            "name": record.name,
            "state": run_state(settings),
            "max_lag": settings.get(MAX_LAG),
        }
