"""minecraft_team end to end: four runner processes play the four agents of one episode in one
real Minecraft server (flying-squid), through a real gateway serving the scripted builder.

Each runner process claims one seat; the first to arrive starts the server (a sandbox
instance) and the others join the episode's claim. Every bot walks to its spot, places
cobblestone on it and says so. The test then reads the world from the server itself: exactly
the spots the agents placed on hold cobblestone, on the gold markers, and the cells beside them
are untouched.
"""

from __future__ import annotations

import shutil
from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from rollout.ledger import EpisodeSpec, Ledger
from tests.environments.minecraft_world import check_built
from tests.environments.runner_processes import play_in_processes, scripted_gateway, seat_claimers

ROOT = Path(__file__).resolve().parents[2]
NODE_PACKAGES = ROOT / "environments" / "minecraft_team" / "node_modules" / "flying-squid"
SEED = 7

pytestmark = pytest.mark.skipif(
    shutil.which("node") is None or not NODE_PACKAGES.is_dir(),
    reason="needs node and `npm ci` in environments/minecraft_team (.ci/run does it)",
)


@pytest.fixture
async def builder_gateway(ledger: Ledger) -> AsyncIterator[str]:
    from minecraft_team.environment import builder_script

    async with scripted_gateway(ledger, builder_script) as url:
        yield url


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
    try:
        await play_in_processes(database_url, builder_gateway, run.run_id, 4, tmp_path, 300)
        [instance] = await ledger.list_sandboxes(pool="minecraft")
        record = await ledger.episode(episode)
        ends = sorted(record.ends, key=lambda end: end.agent)
        assert [end.status for end in ends] == ["completed"] * 4, [e.error for e in ends]
        assert [end.reward for end in ends] == [1.0] * 4
        assert all(end.metrics["actions"] == 3 and end.metrics["team_built"] == 1 for end in ends)
        claimers = await seat_claimers(database_url, episode)
        assert claimers == {f"runner-{index}" for index in range(4)}  # four processes
        events = [e.event for e in await ledger.sandbox_events(instance.instance_id)]
        assert events == ["started", "claimed", "released"]

        # The world, read from the server: each agent's spot holds the block it placed, on its
        # marker; the cells the scripted builders stood beside are untouched.
        await check_built("127.0.0.1", instance.details["control_port"], SEED)
        assert environment.agents == 4
    finally:  # the world the runners left, also when they failed or hung
        for instance in await ledger.list_sandboxes(pool="minecraft"):
            await MinecraftPool().stop(instance.details)
