"""gridworld and math_problems train with `rollout train` on the cpu-tiny preset for a few steps.

Real role processes, a real Postgres, the tiny model; gridworld's episodes also claim sandbox
instances (grid server processes) through the ledger. Learning itself is measured by
benchmarks/gridworld_learning.py, not here: these runs check that every part works together.
"""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from rollout.ledger import Ledger

STEPS = 2
COMMON = [
    "--set",
    "model.init.alphabet=null",
    "--set",
    "warmup_steps=2",
    "--set",
    "groups_per_step=2",
    "--set",
    "runner_concurrency=16",
    "--set",
    "stop_at_reward=null",
]


def _train(spec: str, database_url: str, state: Path, *extra: str) -> dict[str, object]:
    env = dict(os.environ, ROLLOUT_DATABASE_URL=database_url, ROLLOUT_STATE_DIR=str(state))
    result = subprocess.run(
        [
            *(sys.executable, "-m", "rollout.cli", "train", spec, "--preset", "cpu-tiny"),
            *("--steps", str(STEPS), "--json", *COMMON, *extra),
        ],
        capture_output=True,
        text=True,
        env=env,
        timeout=1500,
        check=False,
    )
    assert result.returncode == 0, result.stderr[-3000:]
    summary = json.loads(result.stdout)
    assert summary["status"] == "finished" and summary["steps"] == STEPS
    return summary


async def _ends(database_url: str, run_id: str) -> list[tuple[int, int, str]]:
    """(agents of the episode, turns, status) of every ended seat of the run's train episodes."""
    ledger = await Ledger.connect(database_url, migrate=False)
    try:
        episodes = await ledger.list_episodes(run_id, limit=1000, with_turns=False)
        return [
            (record.agents, int(end.metrics.get("turns", 0)), end.status)
            for record in episodes
            for end in record.ends
        ]
    finally:
        await ledger.close()


@pytest.mark.slow
def test_gridworld_trains(database_url: str, tmp_path: Path) -> None:
    summary = _train(
        "gridworld.environment:environment",
        database_url,
        tmp_path,
        "--set",
        "model.init.vocab_size=160",
    )
    ends = asyncio.run(_ends(database_url, str(summary["run_id"])))
    assert ends and all(agents == 2 for agents, _, _ in ends)
    assert all(status == "completed" and turns >= 1 for _, turns, status in ends)


@pytest.mark.slow
def test_math_problems_train(database_url: str, tmp_path: Path) -> None:
    summary = _train("math_problems.environment:environment", database_url, tmp_path)
    ends = asyncio.run(_ends(database_url, str(summary["run_id"])))
    assert ends and all(status == "completed" and turns == 1 for _, turns, status in ends)
