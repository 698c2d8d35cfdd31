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
  published and which servers serve it), `evals` (eval scores per checkpoint, suite version,
  environment and policy, where the ledger records evals);
- policies (`rollout.runs.policies`): `steps` and `checkpoints` are one policy's chain, the
  run's only policy's unless a `policy` is named (a run with several must name one); `run`
  lists a run's several policies with each one's agents, newest version and serving state
  (`policies`, empty for a run with one policy, whose figures are the run's);
- machines: `machines` (every role process from its heartbeats, with its host, state, 'alive',
  'finished', 'stopped' or 'dead', and the ledger's facts about it: a trainer's lease, a
  server's version, a runner's claims, a gateway's last turn);
- controls: `pause`, `resume`, `set_max_lag`.

Transcripts (episodes, turns, tokens) are in `rollout.monitor.transcripts`.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

from rollout.ledger import Ledger, RunRecord
from rollout.ledger.leases import trainer_lease
from rollout.ledger.monitor import MonitorReads
from rollout.ledger.runs import shown_settings
from rollout.monitor.errors import BadParameter, bounded
from rollout.monitor.queries import policy_map, run_state, trains
from rollout.runs.live import FINISHED, MAX_LAG, RunSettings, parse_max_lag

MAX_RUNS = 200
MAX_STEPS = 5000
MAX_CHECKPOINTS = 1000
RECENT_SECONDS = 600.0
"""The machines page lists the processes that beat within this many seconds."""


def process_state(row: dict[str, Any]) -> str:
    """What the machines page calls a process: 'finished' when its run has finished and it is
    no longer running (or it says it finished), else 'alive', 'stopped' or 'dead' (no heartbeat
    for three of its intervals).

    Example:
        >>> process_state({"state": "stopped", "status": "stopped",
        ...                "run_settings": {"finished": True}})
        'finished'
        >>> process_state({"state": "dead", "status": "training", "run_settings": {}})
        'dead'
        >>> process_state({"state": "running", "status": "finished", "run_settings": {}})
        'finished'
    """
    if row["state"] == "running":
        return "finished" if row["status"] == FINISHED else "alive"
    if row["run_settings"] and RunSettings.of(row["run_settings"]).finished:
        return "finished"
    return str(row["state"])


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
            "policies": await self._policies(record),
        }

    async def _policies(self, record: RunRecord) -> dict[str, Any]:
        """A run with several policies: each one's agents, newest version, serving record and
        servers (empty for a run with one policy)."""
        mapping = policy_map(record)
        if not mapping.several:
            return {}
        policies: dict[str, Any] = {}
        for name in mapping.names:
            latest = await self.ledger.latest_checkpoint(record.run_id, policy=name)
            serving = await self.ledger.serving(record.run_id, policy=name)
            acks = await self.ledger.serving_acks(record.run_id, policy=name)
            policies[name] = {
                "agents": list(mapping.agents_of(name)),
                "latest_version": None if latest is None else latest.version,
                "serving": None
                if serving is None
                else {"version": serving.version, "uris": serving.uris, "at": serving.created_at},
                "servers": [{"server": s, "version": v} for s, v in sorted(acks.items())],
            }
        return policies

    def policy_of(self, record: RunRecord, policy: str | None) -> str:
        """The policy whose chain a request means: `policy`, which the run must train, or the
        run's only one when None.

        Raises:
            BadParameter: the run trains no policy `policy`, or several and none was named.
        """
        names = policy_map(record).names
        if policy is None:
            if len(names) == 1:
                (only,) = names
                return only
            raise BadParameter(
                f"run {record.name!r} has several policies ({', '.join(names)}): pass policy=NAME"
            )
        if policy not in names:
            raise BadParameter(
                f"policy must be one of run {record.name!r}'s policies "
                f"({', '.join(names)}), got {policy!r}"
            )
        return policy

    async def steps(
        self, run: str, *, after: int = -1, limit: int = 1000, policy: str | None = None
    ) -> dict[str, Any]:
        """A policy's train steps after step `after`, oldest first, with throughput per step
        (`policy_of`: the run's only policy unless one is named).

        `episodes_per_s` and `tokens_per_s` divide the step's trained episodes and tokens
        (`is/tokens`) by the wall-clock time since the policy's previous step was recorded.
        """
        bounded("limit", limit, 1, MAX_STEPS)
        record = await self.get_run(run)
        name = self.policy_of(record, policy)
        rows = await self.reads.steps(record.run_id, after=after, limit=limit + 1, policy=name)
        more = len(rows) > limit
        rows = rows[:limit]
        previous: float | None = None
        if rows and after >= 0:
            previous = await self.reads.step_time(record.run_id, after, policy=name)
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

    async def checkpoints(
        self, run: str, *, after: int = -1, limit: int = 200, policy: str | None = None
    ) -> dict[str, Any]:
        """A policy's checkpoints after version `after` (`policy_of`: the run's only policy
        unless one is named): parents, conversions, publication, servers."""
        bounded("limit", limit, 1, MAX_CHECKPOINTS)
        record = await self.get_run(run)
        run_id = record.run_id
        name = self.policy_of(record, policy)
        rows = await self.reads.checkpoints(run_id, after=after, limit=limit + 1, policy=name)
        more = len(rows) > limit
        rows = rows[:limit]
        if not rows:
            return {"items": [], "next": None}
        low, high = rows[0]["version"], rows[-1]["version"]
        conversions: dict[int, dict[str, str]] = {}
        for row in await self.reads.conversions(run_id, low, high, policy=name):
            conversions.setdefault(row["version"], {})[row["backend"]] = row["uri"]
        published = await self.reads.published(run_id, low, high, policy=name)
        served: dict[int, list[str]] = {}
        for server, version in (await self.ledger.serving_acks(run_id, policy=name)).items():
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

    async def machines(self, *, recent_seconds: float = RECENT_SECONDS) -> dict[str, Any]:
        """Every role process whose last heartbeat is within `recent_seconds`, by run and role:
        its host (the machine's name), pid, state, status and the ledger's facts about it."""
        if not 0 < recent_seconds <= 86400:
            raise BadParameter(f"recent_s must be in (0, 86400], got {recent_seconds!r}")
        facts = await self._process_facts()
        items = [
            {
                "role": row["role"],
                "id": row["process_id"],
                "host": row["host"],
                "run_id": row["run_id"],
                "last_seen": row["beat_at"],
                "state": process_state(row),
                "detail": {
                    "pid": row["pid"],
                    "status": row["status"],
                    "started_at": row["started_at"],
                    **facts(row),
                },
            }
            for row in await self.reads.processes_seen(recent_seconds)
        ]
        return {"now": time.time(), "recent_seconds": recent_seconds, "items": items}

    async def _process_facts(self) -> Callable[[dict[str, Any]], dict[str, Any]]:
        """What the ledger's facts say of a process: a trainer's lease (its holder names the
        host and pid), an inference server's served version (its status names its URL), a
        runner's claims (its id ends with its pid), a gateway's last recorded turn."""
        leases = {lease["holder"]: lease for lease in await self.reads.leases()}
        servers = await self.reads.servers()
        runners = await self.reads.runners()
        turns = {row["run_id"]: row["last_turn"] for row in await self.reads.gateways()}

        def facts(row: dict[str, Any]) -> dict[str, Any]:
            role, pid, run = row["role"], row["pid"], row["run_id"]
            if role == "trainer":
                lease = leases.get(f"trainer-{row['host']}-{pid}")
                if lease is not None:
                    return {"epoch": lease["epoch"], "lease_expires_at": lease["expires_at"]}
            elif role == "inference":
                for server in servers:
                    if server["run_id"] == run and server["server"] in row["status"]:
                        return {"serving_version": server["version"]}
            elif role == "runner":
                for runner in runners:
                    if runner["runner"].endswith(f"-{row['host']}-{pid}") and (
                        runner["run_id"] == run
                    ):
                        return {"claims": runner["claims"], "seats_held": runner["seats_held"]}
            elif role == "gateway" and turns.get(run) is not None:
                return {"last_turn_at": turns[run]}
            return {}

        return facts

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
