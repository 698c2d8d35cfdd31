"""Concurrent claimers (tasks on separate connections, and separate OS processes) never get
the same seat attempt, and together claim every seat exactly once."""

from __future__ import annotations

import asyncio
import json
import os
import sys
import time
from pathlib import Path

import pytest

from rollout.ledger import EpisodeSpec, Ledger, RunRecord, SeatClaim

EPISODES = 50
AGENTS = 2


@pytest.mark.parametrize(("claimers", "batch"), [(8, None), (4, 7)], ids=["one", "batch"])
async def test_concurrent_claimers_get_every_seat_exactly_once(
    make_ledger, run: RunRecord, ledger: Ledger, claimers: int, batch: int | None
) -> None:
    """Tasks claiming side by side, one seat at a time (`claim_seat`) or in batches."""
    await ledger.add_episodes(
        run.run_id, [EpisodeSpec(g, m, {}, g, agents=AGENTS) for g in range(25) for m in range(2)]
    )
    claimer = await make_ledger(min_size=claimers, max_size=claimers)
    start = asyncio.Event()

    async def claim_some(name: str) -> list[SeatClaim]:
        if batch is None:
            claim = await claimer.claim_seat(name, run_id=run.run_id)
            return [] if claim is None else [claim]
        return await claimer.claim_seats(name, limit=batch, run_id=run.run_id)

    async def claim_all(name: str) -> list[SeatClaim]:
        await start.wait()
        mine: list[SeatClaim] = []
        while claims := await claim_some(name):
            mine.extend(claims)
        return mine

    tasks = [asyncio.create_task(claim_all(f"task-{i}")) for i in range(claimers)]
    await asyncio.sleep(0.05)
    start.set()
    results = await asyncio.gather(*tasks)
    seats = [(c.episode_id, c.agent, c.attempt) for claims in results for c in claims]
    assert len(seats) == EPISODES * AGENTS
    assert len(set(seats)) == len(seats)
    assert {attempt for _, _, attempt in seats} == {1}
    assert len({c.api_key for claims in results for c in claims}) == len(seats)
    assert sum(1 for claims in results if claims) >= 2  # they really ran side by side


_CLAIMER = """
import asyncio, json, os, sys, time
from pathlib import Path
from rollout.ledger import Ledger

async def main():
    ledger = await Ledger.connect(os.environ["ROLLOUT_DATABASE_URL"])
    go = Path(sys.argv[2])
    Path(sys.argv[3]).touch()
    while not go.exists():
        await asyncio.sleep(0.01)
    claims = []
    while (claim := await ledger.claim_seat(sys.argv[1], run_id=sys.argv[4])) is not None:
        claims.append([claim.episode_id, claim.agent, claim.attempt])
    await ledger.close()
    print(json.dumps(claims))

asyncio.run(main())
"""


@pytest.mark.slow
async def test_processes_claim_every_seat_exactly_once(
    database_url: str, ledger: Ledger, run: RunRecord, tmp_path: Path
) -> None:
    await ledger.add_episodes(
        run.run_id, [EpisodeSpec(g, m, {}, g, agents=AGENTS) for g in range(25) for m in range(2)]
    )
    env = dict(os.environ, ROLLOUT_DATABASE_URL=database_url)
    go = tmp_path / "go"
    readies = [tmp_path / f"ready-{i}" for i in range(3)]
    processes = [
        await asyncio.create_subprocess_exec(
            sys.executable,
            "-c",
            _CLAIMER,
            f"proc-{i}",
            str(go),
            str(ready),
            run.run_id,
            env=env,
            stdout=asyncio.subprocess.PIPE,
            stderr=asyncio.subprocess.PIPE,
        )
        for i, ready in enumerate(readies)
    ]
    deadline = time.monotonic() + 60
    while not all(ready.exists() for ready in readies):
        assert time.monotonic() < deadline, "claimer processes did not start"
        assert all(p.returncode is None for p in processes)
        await asyncio.sleep(0.05)
    go.touch()  # all start claiming together
    seats = []
    for process in processes:
        out, err = await asyncio.wait_for(process.communicate(), timeout=120)
        assert process.returncode == 0, err.decode()
        seats.extend(tuple(seat) for seat in json.loads(out))
    assert len(seats) == EPISODES * AGENTS
    assert len(set(seats)) == len(seats)
    counts = await ledger.episode_counts(run.run_id)
    assert counts["pending"] == 0 and counts["running"] == EPISODES
