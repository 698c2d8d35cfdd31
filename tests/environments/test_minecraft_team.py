"""minecraft_team end to end: four runner processes play the four agents of one episode in one
real Minecraft server (flying-squid), through a real gateway serving the scripted builder.

Each runner process claims one seat; the first to arrive starts the server (a sandbox
instance) and the others join the episode's claim. Every bot walks to its spot, places
cobblestone on it and says so. The test then reads the world from the server itself: exactly
the spots the agents placed on hold cobblestone, on the gold markers, and the cells beside them
are untouched.
"""

from __future__ import annotations

import asyncio
import os
import shutil
import subprocess
import sys
from collections.abc import AsyncIterator
from pathlib import Path

import psycopg
import pytest

from rollout.gateway.app import create_app
from rollout.inference.scripted import ScriptedBackend
from rollout.ledger import EpisodeSpec, Ledger
from rollout.models import default_tokenizer_dir
from rollout.net.server import AppServer
from rollout.rendering import HFRenderer
from tests.environments.minecraft_world import check_built

ROOT = Path(__file__).resolve().parents[2]
NODE_PACKAGES = ROOT / "environments" / "minecraft_team" / "node_modules" / "flying-squid"
SEED = 7

pytestmark = pytest.mark.skipif(
    shutil.which("node") is None or not NODE_PACKAGES.is_dir(),
    reason="needs node and `npm ci` in environments/minecraft_team (.ci/run does it)",
)

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


@pytest.fixture
async def builder_gateway(ledger: Ledger) -> AsyncIterator[str]:
    from minecraft_team.environment import builder_script

    folder = default_tokenizer_dir()
    backend = ScriptedBackend.from_model_dir(folder, builder_script)
    server = await AppServer(
        create_app(ledger, HFRenderer(folder), backend, model_name="scripted")
    ).start()
    try:
        yield f"{server.url}/v1"
    finally:
        await server.stop()


def _runner(
    database_url: str, gateway: str, name: str, run_id: str, log: Path
) -> subprocess.Popen[bytes]:
    with log.open("wb") as output:
        return subprocess.Popen(
            [sys.executable, "-c", RUNNER, database_url, gateway, name, run_id],
            cwd=ROOT,
            env=dict(os.environ),
            stdout=output,
            stderr=subprocess.STDOUT,
        )


@pytest.mark.slow
async def test_four_runner_processes_build_in_one_world(
    ledger: Ledger, database_url: str, builder_gateway: str, tmp_path: Path
) -> None:
    from minecraft_team.environment import environment
    from minecraft_team.world import MinecraftPool

    run = await ledger.create_run("team", "minecraft_team.environment:environment", {})
    [episode] = await ledger.add_episodes(
        run.run_id, [EpisodeSpec(0, 0, {"reward": "team"}, seed=SEED, agents=4)]
    )
    logs = [tmp_path / f"runner-{index}.log" for index in range(4)]
    runners = [
        _runner(database_url, builder_gateway, f"runner-{index}", run.run_id, log)
        for index, log in enumerate(logs)
    ]
    try:
        for process, log in zip(runners, logs, strict=True):
            code = await asyncio.to_thread(process.wait, 900)
            assert code == 0, log.read_text()[-3000:]
    finally:
        for process in runners:
            if process.poll() is None:
                process.kill()
    [instance] = await ledger.list_sandboxes(pool="minecraft")
    try:
        record = await ledger.episode(episode)
        ends = sorted(record.ends, key=lambda end: end.agent)
        assert [end.status for end in ends] == ["completed"] * 4, [e.error for e in ends]
        assert [end.reward for end in ends] == [1.0] * 4
        assert all(end.metrics["actions"] == 3 and end.metrics["team_built"] == 1 for end in ends)
        async with await psycopg.AsyncConnection.connect(database_url) as conn:
            cursor = await conn.execute(
                "SELECT DISTINCT runner FROM seat_claims WHERE episode_id = %s", (episode,)
            )
            claimers = {row[0] for row in await cursor.fetchall()}
        assert claimers == {f"runner-{index}" for index in range(4)}  # four processes
        events = [e.event for e in await ledger.sandbox_events(instance.instance_id)]
        assert events == ["started", "claimed", "released"]

        # The world, read from the server: each agent's spot holds the block it placed, on its
        # marker; the cells the scripted builders stood beside are untouched.
        await check_built("127.0.0.1", instance.details["control_port"], SEED)
        assert environment.agents == 4
    finally:
        await MinecraftPool().stop(instance.details)
