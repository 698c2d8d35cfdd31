"""Latency of the trainer's and the monitor's reads on runs of 10^4, 10^5 and 10^6 turns.

    uv run python benchmarks/ledger_queries.py [--json] [--sizes 10000,100000,1000000]
        [--repeat R] [--url URL] [--plans]

Writes synthetic runs with generate_series (`tests/monitor/synthetic.py`: 20 turns per episode,
one agent, groups of 8, every seat ended) into one fresh database on a temporary embedded
Postgres (or the server at --url), the smallest first; every group but the newest four is
marked consumed, as in a long run. After each run is written, each read is timed on it (the
median of --repeat, default 5, after one warm-up), so a figure is for a run of that size in a
database of about that many turns:

- trainer: `complete_groups(limit=4)` (trainable groups and their episodes with turns),
  `turns_for_run` (a page of 1,000 at the end), `seat_turns` and `last_turn` of one seat;
- monitor: `store.run` (the run page: counts over the run's seats, ends and turns),
  `episodes` (newest 50), `conversation` (50 turns of one agent), `turn_tokens`, and the
  runner's claims (`seat_claims` by runner, newest 50).

The ratio is the largest run over the smallest: flat reads stay near 1; the run page's counts
grow with the run (they count it). With --plans, EXPLAIN ANALYZE of each read's main statement
on the largest run is printed.
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

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # tests.monitor.synthetic

from rollout.ledger import Ledger, apply_migrations
from rollout.ledger.embedded import database_url, stop_embedded, with_database
from rollout.ledger.episodes import WINNING_TURNS
from rollout.ledger.training import TRAINABLE_GROUPS
from rollout.ledger.turns import RUN_TURNS_SINCE, SEAT_TURNS
from rollout.monitor import transcripts
from rollout.monitor.store import MonitorStore
from tests.monitor.synthetic import fill

RUNNER_CLAIMS = (
    "SELECT episode_id, agent, attempt, claimed_at FROM seat_claims"
    " WHERE runner = %(runner)s ORDER BY claimed_at DESC LIMIT 50"
)
SEAT_COUNTS = (
    "SELECT (SELECT count(*) FROM seats WHERE run_id = %(run_id)s),"
    " (SELECT count(*) FROM seat_ends WHERE run_id = %(run_id)s)"
)


async def median_ms(fn: Callable[[], Awaitable[Any]], repeat: int) -> float:
    await fn()
    times = []
    for _ in range(repeat):
        start = time.perf_counter()
        await fn()
        times.append(time.perf_counter() - start)
    return round(statistics.median(times) * 1000, 2)


async def plans(url: str, run_id: str, episode_id: str) -> dict[str, str]:
    params: dict[str, Any] = {
        "run_id": run_id,
        "limit": 1000,
        "since": 0,
        "episode_id": episode_id,
        "agent": 0,
        "attempt": 1,
        "ids": [episode_id],
        "runner": f"runner-{run_id}",
    }
    statements = {
        "trainable_groups": TRAINABLE_GROUPS,
        "winning_turns": WINNING_TURNS,
        "turns_for_run": RUN_TURNS_SINCE,
        "seat_turns": SEAT_TURNS,
        "seat_counts": SEAT_COUNTS,
        "runner_claims": RUNNER_CLAIMS,
    }
    found: dict[str, str] = {}
    async with await psycopg.AsyncConnection.connect(url, autocommit=True) as conn:
        for name, statement in statements.items():
            query = sql.SQL("EXPLAIN (ANALYZE, COSTS OFF, SUMMARY OFF) ") + sql.SQL(statement)  # type: ignore[arg-type]
            cursor = await conn.execute(query, params)
            found[name] = "\n".join(row[0] for row in await cursor.fetchall())
    return found


async def measure(url: str, size: int, repeat: int) -> tuple[dict[str, float], str, str]:
    run_id = f"q{size}"
    synthetic = await asyncio.to_thread(
        fill, url, turns=size, name=f"queries-{size}", run_id=run_id, steps=20
    )
    async with await psycopg.AsyncConnection.connect(url, autocommit=True) as conn:
        # A long run has trained all but its newest groups; its claims name its runner.
        await conn.execute(
            "INSERT INTO consumed_groups (run_id, group_index, step)"
            " SELECT %(r)s, g, 0 FROM generate_series(0, %(n)s - 5) g",
            {"r": run_id, "n": max(synthetic.episodes // 8, 5)},
        )
        await conn.execute(
            "UPDATE seat_claims SET runner = 'runner-' || run_id WHERE run_id = %(r)s",
            {"r": run_id},
        )
        await conn.execute("ANALYZE")
        cursor = await conn.execute("SELECT max(seq) FROM turns WHERE run_id = %s; ", (run_id,))
        row = await cursor.fetchone()
        last_seq = int(row[0]) if row and row[0] is not None else 0
        cursor = await conn.execute(
            "SELECT episode_id FROM episodes WHERE run_id = %s ORDER BY seq LIMIT 1 OFFSET %s",
            (run_id, synthetic.episodes // 2),
        )
        row = await cursor.fetchone()
        assert row is not None
        episode_id = str(row[0])

    ledger = await Ledger.connect(url)
    store = await MonitorStore.open(url)
    try:

        async def raw(statement: str) -> None:
            async with await psycopg.AsyncConnection.connect(url, autocommit=True) as conn:
                await conn.execute(statement, {"run_id": run_id, "runner": f"runner-{run_id}"})  # type: ignore[arg-type]

        reads: dict[str, Callable[[], Awaitable[Any]]] = {
            "trainer_complete_groups": lambda: ledger.complete_groups(run_id, 4),
            "trainer_turns_for_run_tail": lambda: ledger.turns_for_run(
                run_id, since=max(last_seq - 1000, 0), limit=1000
            ),
            "trainer_seat_turns": lambda: ledger.seat_turns(episode_id, 0, 1),
            "gateway_last_turn": lambda: ledger.last_turn(episode_id, 0, 1),
            "monitor_run_page": lambda: store.run(run_id),
            "monitor_episodes": lambda: transcripts.episodes(store, run=run_id, limit=50),
            "monitor_conversation": lambda: transcripts.conversation(store, episode_id, 0),
            "monitor_turn_tokens": lambda: transcripts.turn_tokens(store, episode_id, 0, 3),
            "monitor_runner_claims": lambda: raw(RUNNER_CLAIMS),
        }
        figures = {name: await median_ms(fn, repeat) for name, fn in reads.items()}
    finally:
        await store.close()
        await ledger.close()
    return figures, run_id, episode_id


async def bench(url: str, sizes: list[int], repeat: int, with_plans: bool) -> dict[str, Any]:
    await apply_migrations(url)
    results: dict[str, dict[str, float]] = {}
    last: tuple[str, str] = ("", "")
    for size in sorted(sizes):
        start = time.perf_counter()
        figures, run_id, episode_id = await measure(url, size, repeat)
        figures["fill_and_measure_s"] = round(time.perf_counter() - start, 1)
        results[str(size)] = figures
        last = (run_id, episode_id)
    small, large = results[str(min(sizes))], results[str(max(sizes))]
    ratios = {
        name: round(large[name] / small[name], 2) if small[name] else None
        for name in large
        if name != "fill_and_measure_s"
    }
    report: dict[str, Any] = {"ms": results, "ratio_largest_over_smallest": ratios}
    if with_plans:
        report["plans"] = await plans(url, *last)
    return report


def main() -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").split("\n\n")[0])
    parser.add_argument("--json", action="store_true", help="print JSON")
    parser.add_argument("--sizes", default="10000,100000,1000000", help="turns per run")
    parser.add_argument("--repeat", type=int, default=5, help="timed repeats per read")
    parser.add_argument("--plans", action="store_true", help="EXPLAIN ANALYZE on the largest run")
    parser.add_argument("--url", help="a Postgres server URL (default: a temporary embedded one)")
    args = parser.parse_args()
    sizes = [int(n) for n in args.sizes.split(",")]

    temporary: Path | None = None
    if args.url:
        server_url = args.url
    else:
        temporary = Path(tempfile.mkdtemp(prefix="rollout-bench-"))
        server_url = database_url(temporary, database="postgres")
    name = f"bench_{uuid.uuid4().hex[:12]}"
    with psycopg.connect(server_url, autocommit=True) as conn:
        conn.execute(sql.SQL("CREATE DATABASE {}").format(sql.Identifier(name)))
    try:
        report = asyncio.run(bench(with_database(server_url, name), sizes, args.repeat, args.plans))
    finally:
        with psycopg.connect(server_url, autocommit=True) as conn:
            conn.execute(sql.SQL("DROP DATABASE {} WITH (FORCE)").format(sql.Identifier(name)))
        if temporary is not None:
            stop_embedded(temporary)
            shutil.rmtree(temporary, ignore_errors=True)

    if args.json:
        json.dump(report, sys.stdout, indent=2)
        sys.stdout.write("\n")
        return
    sizes_s = list(report["ms"])
    print("ledger reads, median ms per call, by run size (turns):")
    print(f"  {'read':30s}" + "".join(f"{s:>12s}" for s in sizes_s) + "   largest/smallest")
    for read, ratio in report["ratio_largest_over_smallest"].items():
        cells = "".join(f"{report['ms'][s][read]:>12.2f}" for s in sizes_s)
        print(f"  {read:30s}{cells}   x{ratio}")
    print(
        "  fill + measure s: "
        + ", ".join(f"{report['ms'][s]['fill_and_measure_s']}" for s in sizes_s)
    )
    for read, plan in report.get("plans", {}).items():
        print(f"\nEXPLAIN ANALYZE {read}:\n{plan}")


if __name__ == "__main__":
    main()
