"""How fast the ledger records turns, against a raw INSERT of the same rows.

    uv run python benchmarks/ledger_turns.py [--json] [--turns N] [--url URL]

Records realistic turns (about 200 prompt tokens, 50 completion tokens with float64 logprobs, a
small request document) into a fresh database on the embedded Postgres (started in a temporary
state folder and stopped afterwards, unless --url or --state-dir is given), from this one
process, in several ways:

- `one_at_a_time`: `await ledger.record_turn(turn)` in a loop (one fenced statement each);
- `concurrent_16`: the same from 16 tasks at once, different seats (a gateway); concurrent
  calls are batched into one statement by the ledger;
- `batched_100` / `batched_500`: `await ledger.record_turns(batch)` (one transaction each),
  a batch holding several consecutive turns of each seat (written in waves: one statement per
  turn of a seat, so that each turn is stored against the one before it);
- `batched_500_one_per_seat`: the same, one turn of each of 500 seats a batch (one statement,
  as a gateway's concurrent calls are batched);
- `batched_500_one_per_seat_copy`: the same by binary COPY into a staging table and one fenced
  INSERT from it (`rollout.ledger.turn_copy`, off by default);
- `batched_all_in_one_call_copy`: all the turns in one `record_turns` call by COPY (one
  transaction: a COPY and an INSERT per wave of 500 seats);
- `baseline_executemany`: the raw INSERT of the same rows, no fence and no NOTIFY, into a copy
  of the turns table, by `executemany` in one transaction (psycopg pipelines it);
- `baseline_executemany_bytea`: the same with the token arrays packed as bytea (int32), to
  compare the storage format;
- `baseline_executemany_fast_arrays`: the same as int4[]/float8[] through the ledger's binary
  array dumpers (what the ledger's own writes use);
- `read_seat_turns`: reading a seat's turns back (the trainer's path).

Each figure is turns per second of wall time and the client's CPU seconds per 1,000 turns; the
ratio is against `baseline_executemany`. The goal is >= 25,000 turns/s on one core;
`client_cpu_s_per_1k` is the client's share of that core. With the server on this machine (the
embedded one), `server_cpu_s_per_1k` is the CPU of its postmaster and every backend (WAL writer,
checkpointer included) over the same section, and `one_core_turns_per_s` is turns per CPU second
of both together: what one otherwise idle core would record (it does not move with the
machine's load as wall time does; time spent waiting on fsync is not in it).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import random
import shutil
import struct
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
from rollout.ledger import turns as turns_module
from rollout.ledger.adapters import Float8s, Int4s, register_dumpers
from rollout.ledger.embedded import database_url, stop_embedded, with_database

PROMPT_TOKENS = 200
COMPLETION_TOKENS = 50
TURNS_PER_SEAT = 20


# The turns table before migration 0007 (whole prompts and requests), with its indexes.
BASELINE_TABLE = """
CREATE TABLE {name} (
    episode_id text NOT NULL, agent integer NOT NULL, attempt integer NOT NULL,
    turn_index integer NOT NULL, run_id text NOT NULL, prompt_tokens {tokens} NOT NULL,
    completion_tokens {tokens} NOT NULL, logprobs float8[] NOT NULL, version integer NOT NULL,
    stop_reason text NOT NULL, extends_previous boolean NOT NULL, started_at float8 NOT NULL,
    ended_at float8 NOT NULL, temperature float8 NOT NULL, request jsonb NOT NULL,
    seq bigint GENERATED ALWAYS AS IDENTITY, recorded_at timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (episode_id, agent, attempt, turn_index)
);
CREATE INDEX ON {name} (run_id, seq);
"""


def make_turns(claims: list[SeatClaim], count: int, offset: int, rng: random.Random) -> list[Turn]:
    """`count` turns spread over the claimed seats; indices start at `offset` per seat."""
    turns = []
    now = time.time()
    per_seat = -(-count // len(claims))
    for claim in claims:
        for index in range(offset, offset + per_seat):
            if len(turns) == count:
                return turns
            turns.append(
                Turn(
                    episode_id=claim.episode_id,
                    agent=claim.agent,
                    attempt=claim.attempt,
                    index=index,
                    prompt_tokens=tuple(rng.randrange(150_000) for _ in range(PROMPT_TOKENS)),
                    completion_tokens=tuple(
                        rng.randrange(150_000) for _ in range(COMPLETION_TOKENS)
                    ),
                    logprobs=tuple(-rng.expovariate(2.0) for _ in range(COMPLETION_TOKENS)),
                    version=3,
                    stop_reason="stop",
                    extends_previous=index > 0,
                    started_at=now,
                    ended_at=now + 0.25,
                    temperature=1.0,
                    request={"protocol": "chat.completions", "model": "policy", "n": index},
                )
            )
    return turns


def _cpu_seconds(pid: int, children: bool = False) -> float:
    """CPU seconds of a local process (with `children`: plus those of its exited children)."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    ticks = int(fields[11]) + int(fields[12])  # utime, stime
    if children:
        ticks += int(fields[13]) + int(fields[14])  # cutime, cstime: reaped backends
    return ticks / os.sysconf("SC_CLK_TCK")


def server_cpu(postmaster: int | None) -> float | None:
    """CPU seconds so far of a local Postgres server: its postmaster and every backend."""
    if postmaster is None:
        return None
    total = _cpu_seconds(postmaster, children=True)
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            if _parent(int(stat.parent.name)) == postmaster:
                total += _cpu_seconds(int(stat.parent.name))
        except (OSError, ValueError, IndexError):
            continue  # exited meanwhile
    return total


async def find_postmaster(url: str) -> int | None:
    """The server's postmaster pid when it runs on this machine (None otherwise)."""
    async with await psycopg.AsyncConnection.connect(url) as conn:
        row = await (await conn.execute("SELECT pg_backend_pid()")).fetchone()
    assert row is not None
    return _parent(row[0])


def _parent(pid: int) -> int | None:
    try:
        return int(Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[1])
    except (OSError, ValueError):
        return None


POSTMASTER: int | None = None


async def timed(fn: Callable[[], Awaitable[Any]], turns: int) -> dict[str, float | None]:
    server = server_cpu(POSTMASTER)
    wall, cpu = time.perf_counter(), time.process_time()
    await fn()
    wall, cpu = time.perf_counter() - wall, time.process_time() - cpu
    figures: dict[str, float | None] = {
        "turns": turns,
        "seconds": round(wall, 4),
        "turns_per_s": round(turns / wall, 1),
        "client_cpu_s_per_1k": round(cpu / turns * 1000, 4),
        "server_cpu_s_per_1k": None,
        "one_core_turns_per_s": None,
    }
    if server is not None:
        await asyncio.sleep(0.2)  # the postmaster reaps a closed connection's backend (its CPU)
    after = server_cpu(POSTMASTER)
    if server is not None and after is not None:
        server = after - server
        figures["server_cpu_s_per_1k"] = round(server / turns * 1000, 4)
        # What one core would record if it ran both sides and nothing else (no waiting).
        figures["one_core_turns_per_s"] = round(turns / max(cpu + server, 1e-9), 1)
    return figures


def baseline_rows(
    turns: list[Turn], run_id: str, packed: bool, fast: bool = False
) -> list[tuple[Any, ...]]:
    def tokens(values: tuple[int, ...]) -> Any:
        if fast:
            return Int4s(values)
        return struct.pack(f"<{len(values)}i", *values) if packed else list(values)

    return [
        (
            run_id,
            t.episode_id,
            t.agent,
            t.attempt,
            t.index,
            tokens(t.prompt_tokens),
            tokens(t.completion_tokens),
            Float8s(t.logprobs) if fast else list(t.logprobs),
            t.version,
            t.stop_reason,
            t.extends_previous,
            t.started_at,
            t.ended_at,
            t.temperature,
            Jsonb(t.request),
        )
        for t in turns
    ]


async def baseline(url: str, table: str, rows: list[tuple[Any, ...]], fast: bool = False) -> None:
    async with await psycopg.AsyncConnection.connect(url) as conn:
        if fast:
            register_dumpers(conn)
        async with conn.transaction(), conn.cursor() as cursor:
            await cursor.executemany(
                sql.SQL(
                    "INSERT INTO {} (run_id, episode_id, agent, attempt, turn_index,"
                    " prompt_tokens, completion_tokens, logprobs, version, stop_reason,"
                    " extends_previous, started_at, ended_at, temperature, request)"
                    " VALUES (%s, %s, %s, %s, %s, %s, %s, %s, %s, %s, %s, %s, %s, %s, %s)"
                    " ON CONFLICT DO NOTHING"
                ).format(sql.Identifier(table)),
                rows,
            )


async def bench(url: str, total: int) -> dict[str, Any]:
    global POSTMASTER
    POSTMASTER = await find_postmaster(url)
    ledger = await Ledger.connect(url, min_size=16, max_size=16)
    rng = random.Random(0)
    try:
        run = await ledger.create_run(f"bench-{uuid.uuid4().hex[:6]}", "bench:env", {})
        seats = max(500, total // TURNS_PER_SEAT)
        await ledger.add_episodes(run.run_id, [EpisodeSpec(0, m, {}, m) for m in range(seats)])
        claims = []
        while (claim := await ledger.claim_seat("bench", run_id=run.run_id)) is not None:
            claims.append(claim)
        async with await psycopg.AsyncConnection.connect(url, autocommit=True) as conn:
            await conn.execute(
                BASELINE_TABLE.format(name="turns_baseline", tokens="int4[]").encode()
            )
            await conn.execute(
                BASELINE_TABLE.format(name="turns_baseline_bytea", tokens="bytea").encode()
            )

        results: dict[str, dict[str, float | None]] = {}
        offset = 0

        def next_turns(count: int) -> list[Turn]:
            nonlocal offset
            made = make_turns(claims, count, offset, rng)
            offset += TURNS_PER_SEAT * 10
            return made

        # Warm up: connections, prepared statements.
        for turn in next_turns(64):
            await ledger.record_turn(turn)
        await ledger.record_turns(next_turns(64))

        turns = next_turns(total)

        async def one_at_a_time() -> None:
            for turn in turns:
                await ledger.record_turn(turn)

        results["one_at_a_time"] = await timed(one_at_a_time, len(turns))

        # A gateway's concurrent requests come from different seats: interleave them.
        turns = sorted(next_turns(total), key=lambda t: (t.index, t.episode_id))

        async def concurrent() -> None:
            queue = list(reversed(turns))

            async def worker() -> None:
                while queue:
                    await ledger.record_turn(queue.pop())

            await asyncio.gather(*(worker() for _ in range(16)))

        results["concurrent_16"] = await timed(concurrent, len(turns))

        async def batched(turns: list[Turn], size: int) -> None:
            for start in range(0, len(turns), size):
                await ledger.record_turns(turns[start : start + size])

        for size in (100, 500):
            turns = next_turns(total)
            results[f"batched_{size}"] = await timed(
                lambda t=turns, n=size: batched(t, n), len(turns)
            )
        # As a gateway's flush holds them: one turn of each of 500 seats a batch (one wave).
        turns = sorted(next_turns(total), key=lambda t: (t.index, t.episode_id))
        results["batched_500_one_per_seat"] = await timed(lambda: batched(turns, 500), len(turns))
        turns = sorted(next_turns(total), key=lambda t: (t.index, t.episode_id))
        copy_min, turns_module.COPY_MIN = turns_module.COPY_MIN, 64
        try:
            results["batched_500_one_per_seat_copy"] = await timed(
                lambda: batched(turns, 500), len(turns)
            )
            turns = sorted(next_turns(total), key=lambda t: (t.index, t.episode_id))
            results["batched_all_in_one_call_copy"] = await timed(
                lambda: batched(turns, len(turns)), len(turns)
            )
        finally:
            turns_module.COPY_MIN = copy_min

        turns = next_turns(total)
        rows = baseline_rows(turns, run.run_id, packed=False)
        results["baseline_executemany"] = await timed(
            lambda: baseline(url, "turns_baseline", rows), len(rows)
        )
        rows = baseline_rows(turns, run.run_id, packed=True)
        results["baseline_executemany_bytea"] = await timed(
            lambda: baseline(url, "turns_baseline_bytea", rows), len(rows)
        )
        turns = next_turns(total)
        rows = baseline_rows(turns, run.run_id, packed=False, fast=True)
        results["baseline_executemany_fast_arrays"] = await timed(
            lambda: baseline(url, "turns_baseline", rows, fast=True), len(rows)
        )

        # Reading back: the trainer's path (complete groups load every turn of a seat).
        seat = claims[0]

        async def read_seat() -> None:
            for _ in range(20):
                await ledger.seat_turns(seat.episode_id, seat.agent, seat.attempt)

        stored = len(await ledger.seat_turns(seat.episode_id, seat.agent, seat.attempt))
        results["read_seat_turns"] = await timed(read_seat, 20 * stored)

        base = results["baseline_executemany"]["turns_per_s"]
        assert base is not None
        for figures in results.values():
            assert figures["turns_per_s"] is not None
            figures["ratio_vs_baseline"] = round(figures["turns_per_s"] / base, 3)
        return {
            "prompt_tokens": PROMPT_TOKENS,
            "completion_tokens": COMPLETION_TOKENS,
            "results": results,
        }
    finally:
        await ledger.close()


def main() -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").split("\n\n")[0])
    parser.add_argument("--json", action="store_true", help="print JSON")
    parser.add_argument("--turns", type=int, default=4000, help="turns per measurement")
    parser.add_argument("--url", help="a Postgres server URL (default: a temporary embedded one)")
    parser.add_argument("--state-dir", help="use (and keep) the embedded server in this folder")
    args = parser.parse_args()

    temporary: Path | None = None
    if args.url:
        server_url = args.url
    else:
        if args.state_dir:
            state = Path(args.state_dir)
        else:
            temporary = state = Path(tempfile.mkdtemp(prefix="rollout-bench-"))
        server_url = database_url(state, database="postgres")
    name = f"bench_{uuid.uuid4().hex[:12]}"
    with psycopg.connect(server_url, autocommit=True) as conn:
        conn.execute(sql.SQL("CREATE DATABASE {}").format(sql.Identifier(name)))
    try:
        report = asyncio.run(bench(with_database(server_url, name), args.turns))
    finally:
        with psycopg.connect(server_url, autocommit=True) as conn:
            conn.execute(sql.SQL("DROP DATABASE {} WITH (FORCE)").format(sql.Identifier(name)))
        if temporary is not None:
            stop_embedded(temporary)
            shutil.rmtree(temporary, ignore_errors=True)

    report["cpu_count"] = os.cpu_count()
    report["load_average"] = os.getloadavg()
    if args.json:
        json.dump(report, sys.stdout, indent=2)
        sys.stdout.write("\n")
        return
    print(
        f"ledger turns: {report['prompt_tokens']} prompt + {report['completion_tokens']} "
        f"completion tokens each; load average after: {report['load_average'][0]:.2f}"
    )
    for mode, figures in report["results"].items():
        print(
            f"  {mode:32s} {figures['turns_per_s']:>10,.0f} turns/s"
            f"  {figures['client_cpu_s_per_1k']:.3f} client CPU s/1k"
            f"  x{figures['ratio_vs_baseline']:.2f} vs baseline"
            + (
                f"  {figures['server_cpu_s_per_1k']:.3f} server CPU s/1k"
                f"  {figures['one_core_turns_per_s']:>8,.0f} turns/s of one core's CPU"
                if figures["server_cpu_s_per_1k"] is not None
                else ""
            )
        )


if __name__ == "__main__":
    main()
