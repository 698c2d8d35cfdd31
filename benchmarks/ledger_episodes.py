"""Commits and wall time of the ledger's writes for one step of cheap one-turn episodes.

    uv run python benchmarks/ledger_episodes.py [--json] [--episodes 128] [--repeat 3]

A step of the parity recipe plays `--episodes` one-turn episodes at once: the trainer adds the
groups, a runner claims the seats, the gateway records one turn per seat, the runner ends each
seat, and the trainer reads the complete groups. This replays those ledger calls concurrently
(as the roles make them) on a fresh database of a temporary embedded Postgres and reports the
writing transactions (transaction ids taken: each a commit that waits for the WAL to reach
disk; reads take none) and the wall time of each phase, for:

- `after`: the ledger as it is (concurrent `record_turn` and `end_seat` calls each share one
  statement and one commit per batch);
- `before`: the same, with each seat end written as `end_seat` did before batching: its own
  transaction of five statements (lock the seat, insert the end, mark the seat done, notify),
  one commit each.

The figures are the medians of --repeat steps.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import shutil
import statistics
import sys
import tempfile
import time
import uuid
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import psycopg
from psycopg import sql
from psycopg.types.json import Jsonb

from rollout.contracts import Turn
from rollout.ledger import EpisodeSpec, Ledger, SeatClaim
from rollout.ledger.embedded import database_url, stop_embedded, with_database

GROUP = 8


async def old_end_seat(ledger: Ledger, claim: SeatClaim, reward: float) -> None:
    """`end_seat` before ends were batched: a transaction of its own, five statements."""
    key = {"episode_id": claim.episode_id, "agent": claim.agent}
    async with ledger._pool.connection() as conn, conn.transaction():
        cursor = await conn.execute(
            "SELECT run_id, kind, attempt, done FROM seats WHERE episode_id = %(episode_id)s"
            " AND agent = %(agent)s FOR UPDATE",
            key,
        )
        seat = await cursor.fetchone()
        assert seat is not None and seat["attempt"] == claim.attempt and not seat["done"]
        await conn.execute(
            "INSERT INTO seat_ends (episode_id, agent, attempt, run_id, status, reward, score,"
            " metrics, error) VALUES (%s, %s, %s, %s, 'completed', %s, NULL, %s, NULL)",
            (claim.episode_id, claim.agent, claim.attempt, seat["run_id"], reward, Jsonb({})),
        )
        await conn.execute(
            "UPDATE seats SET done = true, expires_at = NULL WHERE episode_id = %(episode_id)s"
            " AND agent = %(agent)s",
            key,
        )
        await conn.execute("SELECT pg_notify('groups', %s)", (seat["run_id"],))


async def commits(url: str) -> int:
    """The next transaction id: each writing transaction (a commit that waits for the WAL to
    reach disk) takes one; reads take none."""
    async with await psycopg.AsyncConnection.connect(url, autocommit=True) as conn:
        cursor = await conn.execute("SELECT pg_snapshot_xmax(pg_current_snapshot())::text")
        row = await cursor.fetchone()
        return int(row[0]) if row else 0


async def step(ledger: Ledger, run_id: str, first_group: int, episodes: int, old: bool) -> dict:
    phases: dict[str, float] = {}
    counts: dict[str, int] = {}

    async def phase(name: str, fn: Callable[[], Awaitable[Any]]) -> Any:
        before = await commits(ledger.url)
        start = time.perf_counter()
        result = await fn()
        phases[name] = time.perf_counter() - start
        counts[name] = await commits(ledger.url) - before
        return result

    groups = range(first_group, first_group + episodes // GROUP)
    specs = [EpisodeSpec(g, m, {"x": m}, m) for g in groups for m in range(GROUP)]
    await phase("add_episodes", lambda: ledger.add_episodes(run_id, specs))
    claims: list[SeatClaim] = await phase(
        "claim_seats", lambda: ledger.claim_seats("runner", limit=episodes, run_id=run_id)
    )
    now = time.time()
    turns = [
        Turn(c.episode_id, c.agent, c.attempt, 0, (1, 2, 3, 4), (5, 6), (-0.1, -0.2), 0, "stop",
             started_at=now, ended_at=now, request={"messages": [{"role": "user"}]})
        for c in claims
    ]  # fmt: skip
    await phase("record_turns", lambda: asyncio.gather(*map(ledger.record_turn, turns)))
    if old:
        ends = [old_end_seat(ledger, c, 1.0) for c in claims]
    else:
        ends = [ledger.end_seat(c, reward=1.0) for c in claims]
    await phase("end_seats", lambda: asyncio.gather(*ends))
    await phase("complete_groups", lambda: ledger.complete_groups(run_id, len(groups)))
    return {
        "seconds": {k: round(v, 4) for k, v in phases.items()},
        "commits": counts,
        "total_s": round(sum(phases.values()), 4),
        "total_commits": sum(counts.values()),
    }


async def bench(url: str, episodes: int, repeat: int) -> dict[str, Any]:
    ledger = await Ledger.connect(url, min_size=16, max_size=16)
    try:
        report: dict[str, Any] = {}
        group = 0
        for mode in ("before", "after"):
            run = await ledger.create_run(f"steps-{uuid.uuid4().hex[:6]}", "bench:env", {})
            await step(ledger, run.run_id, group, episodes, mode == "before")  # warm-up
            runs = []
            for _ in range(repeat):
                group += episodes // GROUP
                runs.append(await step(ledger, run.run_id, group, episodes, mode == "before"))
            report[mode] = {
                "total_s": statistics.median(r["total_s"] for r in runs),
                "total_commits": statistics.median(r["total_commits"] for r in runs),
                "phases": runs[len(runs) // 2],
            }
        report["speedup"] = round(report["before"]["total_s"] / report["after"]["total_s"], 2)
        return {"episodes": episodes, **report}
    finally:
        await ledger.close()


def main() -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").split("\n\n")[0])
    parser.add_argument("--json", action="store_true", help="print JSON")
    parser.add_argument("--episodes", type=int, default=128, help="one-turn episodes a step")
    parser.add_argument("--repeat", type=int, default=3, help="steps measured per mode")
    args = parser.parse_args()
    temporary = Path(tempfile.mkdtemp(prefix="rollout-bench-"))
    server_url = database_url(temporary, database="postgres")
    name = f"bench_{uuid.uuid4().hex[:12]}"
    with psycopg.connect(server_url, autocommit=True) as conn:
        conn.execute(sql.SQL("CREATE DATABASE {}").format(sql.Identifier(name)))
    try:
        report = asyncio.run(bench(with_database(server_url, name), args.episodes, args.repeat))
    finally:
        with psycopg.connect(server_url, autocommit=True) as conn:
            conn.execute(sql.SQL("DROP DATABASE {} WITH (FORCE)").format(sql.Identifier(name)))
        stop_embedded(temporary)
        shutil.rmtree(temporary, ignore_errors=True)
    if args.json:
        json.dump(report, sys.stdout, indent=2)
        sys.stdout.write("\n")
        return
    print(f"ledger writes for a step of {report['episodes']} one-turn episodes (median):")
    for mode in ("before", "after"):
        figures = report[mode]
        phases = figures["phases"]
        detail = ", ".join(
            f"{k} {phases['seconds'][k] * 1000:.0f} ms/{phases['commits'][k]} commits"
            for k in phases["seconds"]
        )
        print(
            f"  {mode:6s} {figures['total_s'] * 1000:7.0f} ms  {figures['total_commits']:5.0f}"
            f" commits  ({detail})"
        )
    print(f"  before/after: x{report['speedup']}")


if __name__ == "__main__":
    main()
