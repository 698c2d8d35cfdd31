"""How fast the web monitor opens a large run: 100,000 turns against 1,000 in the same ledger.

    uv run python benchmarks/monitor_bench.py [--json] [--turns N] [--repeat R] [--url URL]

Writes two synthetic runs into a fresh database (`tests/monitor/synthetic.py`: the large one
with `--turns` turns, default 100,000, and a baseline of 1,000 turns, both 20 turns per
episode and 200 train steps) on a temporary embedded Postgres (or the server at --url), serves
the monitor over real HTTP on 127.0.0.1, and times each request a person's first clicks make,
the median of `--repeat` (default 7) after one warm-up:

- `run_api`: `GET /api/runs/RUN` (counts over every turn, episode and seat of the run);
- `run_page`: `GET /runs/RUN` (the HTML page, same reads);
- `steps_api`: `GET /api/runs/RUN/steps?limit=1000` (what the plots load first);
- `open_run`: the three above one after another: what opening a run costs before the
  browser draws it;
- `episodes_api` / `episodes_page`: the newest 50 episodes, with status, reward and versions;
- `episodes_filtered`: failed episodes with reward >= 0, at a version, 50 of them;
- `conversation_api`: the first 50 turns of one agent of one episode;
- `tokens_api`: one turn's tokens;
- `search_api`: a text search that matches one episode among all of the run's requests
  (scans the requests' text; the one request here that is not bounded by an index);
- `checkpoints_api`, `machines_api`.

Each figure is milliseconds for the large run and, as `ratio`, large over baseline: a paged
API keeps the ratio near 1 for everything but the search.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import shutil
import statistics
import sys
import tempfile
import time
import uuid
from pathlib import Path
from typing import Any

import httpx
import psycopg
from psycopg import sql

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # tests.monitor.synthetic

from rollout.ledger.embedded import database_url, stop_embedded, with_database
from rollout.ledger.migrate import apply_migrations
from rollout.monitor.app import create_app
from rollout.monitor.store import MonitorStore
from rollout.net.server import AppServer
from tests.monitor.synthetic import Synthetic, fill


def requests_for(run: Synthetic) -> dict[str, list[str]]:
    name = run.name
    last_group = run.episodes // 8 - 1
    episode = f"{run.run_id}-train-g{last_group}-m3"
    turns = f"/api/episodes/{episode}/agents/0/turns"
    needle = f"needle-{run.episodes // 3} turn"
    opening = [f"/api/runs/{name}", f"/runs/{name}", f"/api/runs/{name}/steps?limit=1000"]
    return {
        "run_api": opening[:1],
        "run_page": opening[1:2],
        "steps_api": opening[2:],
        "open_run": opening,
        "episodes_api": [f"/api/episodes?run={name}&limit=50"],
        "episodes_page": [f"/episodes?run={name}"],
        "episodes_filtered": [
            f"/api/episodes?run={name}&status=failed&reward_min=0&version={run.steps // 2}"
        ],
        "conversation_api": [f"{turns}?limit=50"],
        "tokens_api": [f"{turns}/3"],
        "search_api": [f"/api/episodes?run={name}&q={needle}&limit=10"],
        "checkpoints_api": [f"/api/runs/{name}/checkpoints?limit=200"],
        "machines_api": ["/api/machines"],
    }


async def time_requests(client: httpx.AsyncClient, paths: list[str], repeat: int) -> float:
    """Median milliseconds to GET `paths` one after another (after one warm-up)."""
    samples = []
    for attempt in range(repeat + 1):
        began = time.perf_counter()
        for path in paths:
            response = await client.get(path)
            response.raise_for_status()
        if attempt:
            samples.append((time.perf_counter() - began) * 1000)
    return statistics.median(samples)


async def bench(url: str, turns: int, repeat: int) -> dict[str, Any]:
    await apply_migrations(url)
    began = time.perf_counter()
    large = await asyncio.to_thread(fill, url, turns=turns, name="large", run_id="large000")
    fill_seconds = time.perf_counter() - began
    small = await asyncio.to_thread(fill, url, turns=1000, name="small", run_id="small000")
    store = await MonitorStore.open(url)
    server = AppServer(create_app(store))
    await server.start()
    results: dict[str, dict[str, float]] = {}
    try:
        async with httpx.AsyncClient(base_url=server.url, timeout=60) as client:
            wanted = requests_for(large)
            baseline = requests_for(small)
            for label, paths in wanted.items():
                ms = await time_requests(client, paths, repeat)
                base_ms = await time_requests(client, baseline[label], repeat)
                results[label] = {
                    "ms": round(ms, 2),
                    "baseline_ms": round(base_ms, 2),
                    "ratio": round(ms / base_ms, 2),
                }
    finally:
        await server.stop()
        await store.close()
    return {
        "turns": large.turns,
        "baseline_turns": small.turns,
        "fill_seconds": round(fill_seconds, 1),
        "repeat": repeat,
        "results": results,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").split("\n\n")[0])
    parser.add_argument("--json", action="store_true", help="print JSON")
    parser.add_argument("--turns", type=int, default=100_000, help="turns of the large run")
    parser.add_argument("--repeat", type=int, default=7, help="timed requests per figure")
    parser.add_argument("--url", help="a Postgres server URL (default: a temporary embedded one)")
    args = parser.parse_args()

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
        report = asyncio.run(bench(with_database(server_url, name), args.turns, args.repeat))
    finally:
        with psycopg.connect(server_url, autocommit=True) as conn:
            conn.execute(sql.SQL("DROP DATABASE {} WITH (FORCE)").format(sql.Identifier(name)))
        if temporary is not None:
            stop_embedded(temporary)
            shutil.rmtree(temporary, ignore_errors=True)

    report["cpu_count"] = os.cpu_count()
    if args.json:
        json.dump(report, sys.stdout, indent=2)
        sys.stdout.write("\n")
        return
    print(
        f"monitor: a run of {report['turns']:,} turns against {report['baseline_turns']:,} "
        f"(median of {report['repeat']}; built in {report['fill_seconds']} s)"
    )
    for label, figures in report["results"].items():
        print(
            f"  {label:18s} {figures['ms']:8.1f} ms   baseline {figures['baseline_ms']:7.1f} ms"
            f"   ratio {figures['ratio']:.2f}"
        )


if __name__ == "__main__":
    main()
