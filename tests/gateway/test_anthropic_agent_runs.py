"""An `anthropic` SDK agent (tests/gateway/anthropic_agent_env.py) under `rollout run` and
`rollout train`: both give it a `RunContext.gateway_url` it can use (the root is that URL minus
`/v1`), and both record its Messages API calls as the episodes' turns in the ledger."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from rollout.ledger import Ledger

SPEC = "tests.gateway.anthropic_agent_env:environment"
ROOT = Path(__file__).resolve().parents[2]

pytestmark = [pytest.mark.slow]


def rollout(args: list[str], database_url: str, tmp_path: Path) -> dict[str, object]:
    environ = {
        **os.environ,
        "ROLLOUT_DATABASE_URL": database_url,
        "ROLLOUT_STATE_DIR": str(tmp_path / "state"),
    }
    result = subprocess.run(
        [sys.executable, "-m", "rollout.cli", *args, "--json"],
        cwd=ROOT,  # the fixture environment is imported as tests.gateway.anthropic_agent_env
        env=environ,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    return json.loads(result.stdout)


async def run_turns(database_url: str, run_id: str) -> list[str]:
    ledger = await Ledger.connect(database_url)
    try:
        turns = await ledger.turns_for_run(run_id, limit=100_000)
    finally:
        await ledger.close()
    return [turn.request["protocol"] for _, turn in turns]


async def test_rollout_run_records_the_agents_messages_call(
    database_url: str, tmp_path: Path
) -> None:
    outcome = rollout(["run", SPEC], database_url, tmp_path)
    (seat,) = outcome["seats"]  # type: ignore[misc]
    assert seat["status"] == "completed" and seat["reward"] == 1.0, seat  # scripted: the sum
    assert seat["turns"] == 1
    assert await run_turns(database_url, str(outcome["run_id"])) == ["messages"]


@pytest.mark.timeout(660)
async def test_rollout_train_records_the_agents_messages_calls(
    database_url: str, tmp_path: Path
) -> None:
    small = ["--set", "groups_per_step=4", "--set", "group_size=2"]  # wiring, not learning
    summary = rollout(
        ["train", SPEC, "--preset", "cpu-tiny", "--steps", "2", *small], database_url, tmp_path
    )
    assert summary["status"] == "finished" and summary["steps"] == 2, summary
    assert summary["episodes_failed"] == 0, summary
    protocols = await run_turns(database_url, str(summary["run_id"]))
    # Every ended episode made its one call through the anthropic SDK, recorded as a turn.
    assert len(protocols) >= int(summary["episodes_ended"]) > 0  # type: ignore[arg-type]
    assert set(protocols) == {"messages"}
