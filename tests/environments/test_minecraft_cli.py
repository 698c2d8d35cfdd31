"""`rollout env check minecraft_team.environment:environment`: a real server and four bots that
play the environment's demonstration (`builder_script`) with the scripted model: each places
its block, which the reward reads from the world. (A demonstration that earns nothing failing
with exit 2 and one line per agent is checked in process, in tests/cli/test_commands.py: a
second Minecraft server here would cost CI a minute for the same code path.)

`rollout train minecraft_team.environment:compact --preset minecraft-cpu-tiny` trains two steps
with the preset's four runners (learning itself: benchmarks/README.md)."""

from __future__ import annotations

import asyncio
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from rollout.ledger import Ledger

ROOT = Path(__file__).resolve().parents[2]
SPEC = "minecraft_team.environment:environment"
NODE_PACKAGES = ROOT / "environments" / "minecraft_team" / "node_modules" / "flying-squid"

pytestmark = [
    pytest.mark.slow,
    pytest.mark.skipif(
        shutil.which("node") is None or not NODE_PACKAGES.is_dir(),
        reason="needs node and `npm ci` in environments/minecraft_team (.ci/run does it)",
    ),
]


def env_check(spec: str, *flags: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [*(sys.executable, "-m", "rollout.cli", "env", "check"), spec, *flags],
        capture_output=True,
        text=True,
        cwd=ROOT,
        env=dict(os.environ, COLUMNS="400"),
        timeout=900,
        check=False,
    )


def test_env_check_plays_the_demonstration_and_each_bot_places_its_block() -> None:
    result = env_check(SPEC, "--json")
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    report = json.loads(result.stdout)
    assert report["ok"] and report["problems"] == [] and report["demonstration"] is True
    assert [seat["agent"] for seat in report["seats"]] == [0, 1, 2, 3]
    for seat in report["seats"]:
        assert seat["reward"] == 1.0 and seat["metrics"]["own_built"] == 1.0, seat
        assert seat["metrics"]["actions"] == 3.0


@pytest.mark.timeout(1200)
def test_minecraft_cpu_tiny_trains_the_compact_team_with_four_runners(
    database_url: str, tmp_path: Path
) -> None:
    steps = 2
    env = dict(os.environ, ROLLOUT_DATABASE_URL=database_url, ROLLOUT_STATE_DIR=str(tmp_path))
    result = subprocess.run(
        [
            *(sys.executable, "-m", "rollout.cli", "train", "minecraft_team.environment:compact"),
            *("--preset", "minecraft-cpu-tiny", "--steps", str(steps), "--json"),
            # Two episodes a step (the pool's two servers at once): the wiring, not learning.
            *("--set", "warmup_steps=2", "--set", "groups_per_step=1", "--set", "group_size=2"),
        ],
        capture_output=True,
        text=True,
        cwd=ROOT,
        env=env,
        timeout=900,
        check=False,
    )
    assert result.returncode == 0, result.stderr[-3000:]
    summary = json.loads(result.stdout)
    assert summary["status"] == "finished" and summary["steps"] == steps

    async def ends() -> list[tuple[int, str, float, dict[str, float]]]:
        ledger = await Ledger.connect(database_url, migrate=False)
        try:
            episodes = await ledger.list_episodes(str(summary["run_id"]), limit=100)
            return [
                (e.agents, end.status, end.reward, dict(end.metrics))
                for e in episodes
                for end in e.ends
            ]
        finally:
            await ledger.close()

    seats = asyncio.run(ends())
    # Each trained group: 2 episodes of 4 bots (the preset starts 4 runner processes).
    assert len(seats) >= 2 * 4 * steps
    assert all(agents == 4 and status == "completed" for agents, status, _, _ in seats), seats
    # The team reward is the world's: each seat saw the four bots finish and read the spots;
    # a bot whose reply was no letter is charged 0.5 of its own.
    assert all(m["team_finished"] == 4.0 for _, _, _, m in seats)
    for _, _, reward, m in seats:
        assert reward == pytest.approx(m["team_built"] - 0.5 * m["invalid"]), (reward, m)
