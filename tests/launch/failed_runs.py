"""Runs of the broken test environment whose episodes the test plays through the ledger, some
failed: what the failure threshold (rollout.launch.failures) judges."""

from __future__ import annotations

from pathlib import Path

from rollout.launch.new_run import create_run, training_config
from rollout.ledger import EpisodeSpec, Ledger

BROKEN = "tests.launch.broken_env:environment"
BROKEN_GRADER = "tests.launch.broken_env:broken_grader"


async def new_run(ledger: Ledger, tmp_path: Path, name: str) -> str:
    """A 3-step cpu-tiny run of the broken environment; its id."""
    config = training_config("cpu-tiny", [], steps=3, max_lag=1)
    return (await create_run(ledger, BROKEN, config, tmp_path, name)).run_id


async def play(ledger: Ledger, run_id: str, group: int, failed: int, completed: int) -> None:
    """Add a group of `failed + completed` episodes and play each: the first `failed` fail."""
    specs = [EpisodeSpec(group, m, {"number": "12"}, seed=m) for m in range(failed + completed)]
    await ledger.add_episodes(run_id, specs)
    for index in range(failed + completed):
        claim = await ledger.claim_seat("test-runner", run_id=run_id)
        assert claim is not None
        if index < failed:
            error = f"Broken.start raised RuntimeError: group {group} number {index}\nTraceback"
            await ledger.end_seat(claim, reward=0.0, status="failed", error=error)
        else:
            await ledger.end_seat(claim, reward=1.0)
