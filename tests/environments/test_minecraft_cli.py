"""`rollout env check minecraft_team.environment:environment`: a real server, four bots played
by the scripted model, one finished episode, success (the command a user runs first)."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
SPEC = "minecraft_team.environment:environment"
NODE_PACKAGES = ROOT / "environments" / "minecraft_team" / "node_modules" / "flying-squid"


@pytest.mark.slow
@pytest.mark.skipif(
    shutil.which("node") is None or not NODE_PACKAGES.is_dir(),
    reason="needs node and `npm ci` in environments/minecraft_team (.ci/run does it)",
)
def test_env_check_minecraft_team() -> None:
    result = subprocess.run(
        [*(sys.executable, "-m", "rollout.cli", "env", "check"), SPEC, "--json"],
        capture_output=True,
        text=True,
        cwd=ROOT,
        env=dict(os.environ),
        timeout=900,
        check=False,
    )
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    report = json.loads(result.stdout)
    assert report["ok"] and report["problems"] == []
    assert [seat["agent"] for seat in report["seats"]] == [0, 1, 2, 3]
    assert all(seat["turns"] >= 1 and seat["reward"] == 0.0 for seat in report["seats"])
