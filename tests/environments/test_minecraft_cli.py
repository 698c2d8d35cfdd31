"""`rollout env check minecraft_team.environment:environment`: a real server and four bots that
play the environment's demonstration (`builder_script`) with the scripted model: each places
its block, which the reward reads from the world. A demonstration that does nothing (the bots
finish at once) fails the check with exit 2 and one line per bot."""

from __future__ import annotations

import dataclasses
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from minecraft_team.environment import environment

ROOT = Path(__file__).resolve().parents[2]
SPEC = "minecraft_team.environment:environment"
NODE_PACKAGES = ROOT / "environments" / "minecraft_team" / "node_modules" / "flying-squid"

idle_builders = dataclasses.replace(environment, demonstration=lambda prompt: "Done.")
"""minecraft_team with a broken demonstration: every bot finishes without acting."""

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


def test_a_demonstration_that_does_nothing_fails_with_one_line_per_bot() -> None:
    result = env_check("tests.environments.test_minecraft_cli:idle_builders")
    assert result.returncode == 2, result.stdout[-3000:] + result.stderr[-3000:]
    lines = [line for line in result.stdout.splitlines() if line.startswith("demonstration:")]
    assert len(lines) == 4, result.stdout
    for agent, line in enumerate(lines):
        assert line.startswith(f"demonstration: agent {agent}: the demonstration earned nothing")
        assert "reward 0" in line and "own_built 0" in line
    assert "Traceback" not in result.stderr
