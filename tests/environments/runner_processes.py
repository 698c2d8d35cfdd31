"""Playing one multi-agent episode with runner processes, through a scripted gateway (shared
by the end-to-end tests of the sandboxed examples)."""

from __future__ import annotations

import asyncio
import contextlib
import os
import subprocess
import sys
import time
from collections.abc import AsyncIterator, Callable
from pathlib import Path

import psycopg

from rollout.gateway.app import create_app
from rollout.inference.scripted import ScriptedBackend
from rollout.ledger import Ledger
from rollout.models import default_tokenizer_dir
from rollout.net.server import AppServer
from rollout.rendering import HFRenderer

ROOT = Path(__file__).resolve().parents[2]

# A runner process that plays one seat and exits without stopping the sandbox, so that the
# test can read the world the episode left.
RUNNER = """
import asyncio, logging, sys
from rollout.ledger import Ledger
from rollout.runners.runner import Runner

async def main():
    logging.basicConfig(level=logging.INFO)
    ledger = await Ledger.connect(sys.argv[1], migrate=False)
    runner = Runner(ledger, sys.argv[2], runner_id=sys.argv[3], run_id=sys.argv[4],
                    concurrency=1, lease_seconds=30.0, idle_wait=0.2)
    await runner.run(asyncio.Event(), max_seats=1)

asyncio.run(main())
"""


@contextlib.asynccontextmanager
async def scripted_gateway(ledger: Ledger, script: Callable[[str], str]) -> AsyncIterator[str]:
    """A gateway (its OpenAI base URL) whose model answers with `script`."""
    folder = default_tokenizer_dir()
    backend = ScriptedBackend.from_model_dir(folder, script)
    server = await AppServer(
        create_app(ledger, HFRenderer(folder), backend, model_name="scripted")
    ).start()
    try:
        yield f"{server.url}/v1"
    finally:
        await server.stop()


def _start(argv: list[str], log: Path) -> subprocess.Popen[bytes]:
    with log.open("wb") as output:
        return subprocess.Popen(
            argv, cwd=ROOT, env=dict(os.environ), stdout=output, stderr=subprocess.STDOUT
        )


async def play_in_processes(
    database_url: str, gateway: str, run_id: str, count: int, logs: Path, seconds: float
) -> None:
    """`count` runner processes (`runner-0`, ...), one seat each; all must exit 0 within
    `seconds` (less than the test's timeout, so that a hang fails with every runner's log)."""
    files = [logs / f"runner-{index}.log" for index in range(count)]
    runners = [
        _start([sys.executable, "-c", RUNNER, database_url, gateway, f"runner-{i}", run_id], log)
        for i, log in enumerate(files)
    ]
    deadline = time.monotonic() + seconds
    try:
        for process, log in zip(runners, files, strict=True):
            try:
                code = await asyncio.to_thread(process.wait, max(0.0, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                # A hang says where each runner was: the tail of every runner's log.
                tails = "\n".join(f"== {f.name}\n{f.read_text()[-1500:]}" for f in files)
                raise AssertionError(f"runners still playing after {seconds} s:\n{tails}") from None
            assert code == 0, log.read_text()[-3000:]
    finally:
        for process in runners:
            if process.poll() is None:
                process.kill()
                process.wait()


async def seat_claimers(database_url: str, episode_id: str) -> set[str]:
    """The runners that claimed a seat of the episode."""
    async with await psycopg.AsyncConnection.connect(database_url) as conn:
        cursor = await conn.execute(
            "SELECT DISTINCT runner FROM seat_claims WHERE episode_id = %s", (episode_id,)
        )
        return {row[0] for row in await cursor.fetchall()}
