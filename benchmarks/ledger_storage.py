"""Bytes the ledger stores per turn of one agent's episode of 10, 50 and 200 turns, before and
after turns were stored as what they add to the previous turn (migration 0007).

    uv run python benchmarks/ledger_storage.py [--json] [--turns 10,50,200] [--url URL]

Each episode is a growing chat as a gateway records it: every prompt is the previous prompt,
the previous completion and NEW_TOKENS new tokens (a tool result, a user message); every
request repeats the previous messages and reply, the tools and the sampling settings, and adds
one message. `after` records the episode through `Ledger.record_turn` (the gateway's path);
`before` inserts the same turns whole (full prompt tokens and request per row, the
representation before 0007) into a table with the old columns. Bytes are the rows' stored size
(`sum(pg_column_size(t.*))`, TOAST-compressed values as stored), per turn. Reading the episode
back (`seat_turns`, rebuilt; the trainer's and gateway's path) is timed against a read of the
whole rows, and the rebuilt turns are checked to be identical to those written; so is reading
only the requests (`Ledger.turn_requests`, the monitor's conversation view).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import random
import shutil
import sys
import tempfile
import time
import uuid
from pathlib import Path
from typing import Any

import psycopg
from psycopg import sql
from psycopg.types.json import Jsonb

from rollout.contracts import Turn
from rollout.ledger import EpisodeSpec, Ledger, SeatClaim
from rollout.ledger.adapters import Float8s, Int4s, register_dumpers
from rollout.ledger.embedded import database_url, stop_embedded, with_database

FIRST_PROMPT = 300
NEW_TOKENS = 120
COMPLETION_TOKENS = 60
TOOLS = [
    {
        "type": "function",
        "function": {
            "name": name,
            "description": f"{name}: " + "does a useful thing with its arguments. " * 4,
            "parameters": {
                "type": "object",
                "properties": {"query": {"type": "string"}, "limit": {"type": "integer"}},
                "required": ["query"],
            },
        },
    }
    for name in ("search", "open_file", "run_tests")
]

BEFORE_TABLE = """
CREATE TABLE turns_before (
    episode_id text NOT NULL, agent integer NOT NULL, attempt integer NOT NULL,
    turn_index integer NOT NULL, run_id text NOT NULL, prompt_tokens integer[] NOT NULL,
    completion_tokens integer[] NOT NULL, logprobs float8[] NOT NULL, version integer NOT NULL,
    stop_reason text NOT NULL, extends_previous boolean NOT NULL, started_at float8 NOT NULL,
    ended_at float8 NOT NULL, temperature float8 NOT NULL, request jsonb NOT NULL,
    seq bigint GENERATED ALWAYS AS IDENTITY, recorded_at timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (episode_id, agent, attempt, turn_index)
)
"""


def words(rng: random.Random, n: int) -> str:
    return " ".join(
        rng.choice(("alpha", "beta", "gamma", "delta", "file.py", "42")) for _ in range(n)
    )


def episode(claim: SeatClaim, turns: int, rng: random.Random) -> list[Turn]:
    """One agent's growing chat of `turns` turns."""
    made: list[Turn] = []
    prompt = tuple(rng.randrange(150_000) for _ in range(FIRST_PROMPT))
    messages: list[dict[str, Any]] = [
        {"role": "system", "content": words(rng, 60)},
        {"role": "user", "content": words(rng, 40)},
    ]
    for index in range(turns):
        completion = tuple(rng.randrange(150_000) for _ in range(COMPLETION_TOKENS))
        reply = {"role": "assistant", "content": words(rng, 30)}
        request = {
            "protocol": "chat.completions",
            "model": "policy",
            "messages": list(messages),
            "tools": TOOLS,
            "reply": reply,
            "fingerprint": uuid.UUID(int=rng.getrandbits(128)).hex,
            "sampling": {"temperature": 1.0, "max_tokens": 256},
            "finish_reason": "stop",
            "stop_sequence": None,
            "reused_turn": None,
            "queued_seconds": 0.001,
        }
        now = time.time()
        made.append(
            Turn(
                episode_id=claim.episode_id,
                agent=claim.agent,
                attempt=claim.attempt,
                index=index,
                prompt_tokens=prompt,
                completion_tokens=completion,
                logprobs=tuple(-rng.expovariate(2.0) for _ in completion),
                version=0,
                stop_reason="stop",
                extends_previous=index > 0,
                started_at=now,
                ended_at=now + 0.1,
                temperature=1.0,
                request=request,
            )
        )
        prompt = (*prompt, *completion, *(rng.randrange(150_000) for _ in range(NEW_TOKENS)))
        messages = [*messages, reply, {"role": "tool", "content": words(rng, 80)}]
    return made


async def stored_bytes(conn: psycopg.AsyncConnection[Any], table: str, claim: SeatClaim) -> int:
    cursor = await conn.execute(
        sql.SQL(
            "SELECT sum(pg_column_size(t.*)) FROM {} t WHERE episode_id = %s AND agent = %s"
            " AND attempt = %s"
        ).format(sql.Identifier(table)),
        (claim.episode_id, claim.agent, claim.attempt),
    )
    row = await cursor.fetchone()
    return int(row[0]) if row and row[0] is not None else 0


async def insert_before(conn: psycopg.AsyncConnection[Any], run_id: str, turns: list[Turn]) -> None:
    async with conn.transaction(), conn.cursor() as cursor:
        await cursor.executemany(
            "INSERT INTO turns_before (run_id, episode_id, agent, attempt, turn_index,"
            " prompt_tokens, completion_tokens, logprobs, version, stop_reason, extends_previous,"
            " started_at, ended_at, temperature, request)"
            " VALUES (%s, %s, %s, %s, %s, %s, %s, %s, %s, %s, %s, %s, %s, %s, %s)",
            [
                (
                    run_id,
                    t.episode_id,
                    t.agent,
                    t.attempt,
                    t.index,
                    Int4s(t.prompt_tokens),
                    Int4s(t.completion_tokens),
                    Float8s(t.logprobs),
                    t.version,
                    t.stop_reason,
                    t.extends_previous,
                    t.started_at,
                    t.ended_at,
                    t.temperature,
                    Jsonb(t.request),
                )
                for t in turns
            ],
        )


async def read_before(conn: psycopg.AsyncConnection[Any], claim: SeatClaim) -> int:
    cursor = await conn.execute(
        "SELECT prompt_tokens, completion_tokens, logprobs, request FROM turns_before"
        " WHERE episode_id = %s AND agent = %s AND attempt = %s ORDER BY turn_index",
        (claim.episode_id, claim.agent, claim.attempt),
    )
    return len(await cursor.fetchall())


async def best_of(repeats: int, fn: Any) -> float:
    best = float("inf")
    for _ in range(repeats):
        start = time.perf_counter()
        await fn()
        best = min(best, time.perf_counter() - start)
    return best


async def bench(url: str, lengths: list[int]) -> dict[str, Any]:
    ledger = await Ledger.connect(url)
    rng = random.Random(0)
    results: dict[str, Any] = {}
    try:
        run = await ledger.create_run(f"storage-{uuid.uuid4().hex[:6]}", "bench:env", {})
        specs = [EpisodeSpec(0, m, {}, m) for m in range(len(lengths))]
        await ledger.add_episodes(run.run_id, specs)
        async with await psycopg.AsyncConnection.connect(url, autocommit=True) as conn:
            register_dumpers(conn)
            await conn.execute(BEFORE_TABLE)
            for length in lengths:
                claim = await ledger.claim_seat("bench", run_id=run.run_id)
                assert claim is not None
                turns = episode(claim, length, rng)
                for turn in turns:
                    await ledger.record_turn(turn)
                await insert_before(conn, run.run_id, turns)
                back = await ledger.seat_turns(claim.episode_id, claim.agent, claim.attempt)
                if back != turns:
                    raise SystemExit(f"the {length}-turn episode did not read back identically")
                after = await stored_bytes(conn, "turns", claim)
                before = await stored_bytes(conn, "turns_before", claim)
                read_after = await best_of(
                    3, lambda c=claim: ledger.seat_turns(c.episode_id, c.agent, c.attempt)
                )
                read_before_s = await best_of(3, lambda c=claim: read_before(conn, c))
                requests_s = await best_of(
                    3,
                    lambda c=claim, n=length: ledger.turn_requests(
                        c.episode_id, c.agent, c.attempt, upto=n - 1
                    ),
                )
                results[str(length)] = {
                    "turns": length,
                    "prompt_tokens_whole": sum(len(t.prompt_tokens) for t in turns),
                    "bytes_per_turn_before": round(before / length),
                    "bytes_per_turn_after": round(after / length),
                    "ratio_before_over_after": round(before / after, 2),
                    "read_episode_ms_before": round(read_before_s * 1000, 1),
                    "read_episode_ms_after": round(read_after * 1000, 1),
                    "requests_ms_after": round(requests_s * 1000, 1),
                }
    finally:
        await ledger.close()
    return {
        "first_prompt": FIRST_PROMPT,
        "new_tokens_per_turn": NEW_TOKENS,
        "completion_tokens": COMPLETION_TOKENS,
        "results": results,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").split("\n\n")[0])
    parser.add_argument("--json", action="store_true", help="print JSON")
    parser.add_argument("--turns", default="10,50,200", help="episode lengths, comma-separated")
    parser.add_argument("--url", help="a Postgres server URL (default: a temporary embedded one)")
    args = parser.parse_args()
    lengths = [int(n) for n in args.turns.split(",")]

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
        report = asyncio.run(bench(with_database(server_url, name), lengths))
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
    print(
        f"ledger storage: first prompt {report['first_prompt']} tokens, +"
        f"{report['new_tokens_per_turn']} new and {report['completion_tokens']} completion "
        "tokens a turn"
    )
    for figures in report["results"].values():
        print(
            f"  {figures['turns']:>4} turns: {figures['bytes_per_turn_before']:>10,} B/turn before"
            f"  {figures['bytes_per_turn_after']:>8,} B/turn after"
            f"  x{figures['ratio_before_over_after']:.1f} smaller;"
            f"  read episode {figures['read_episode_ms_before']:.1f} ms before,"
            f" {figures['read_episode_ms_after']:.1f} ms after;"
            f" its requests (monitor) {figures['requests_ms_after']:.1f} ms"
        )


if __name__ == "__main__":
    main()
