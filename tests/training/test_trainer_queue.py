"""How many groups the trainer keeps queued: one step when synchronous, deeper when asked."""

from __future__ import annotations

import pytest

from rollout.harness.loading import load_environment
from rollout.ledger import Ledger
from rollout.runs.config import RunConfig
from rollout.training.loop import Trainer


@pytest.mark.parametrize(
    ("max_lag", "queue_steps", "version", "groups"),
    [
        (0, None, 0, 2),  # synchronous: only the next step's groups
        (0, 5, 3, 8),  # max_lag 0 ignores queue_steps: nothing may overlap
        (2, None, 0, 6),  # default: max_lag + 1 steps ahead
        (1, 5, 2, 14),  # deeper on request: (version + queue_steps) steps in all
    ],
)
async def test_groups_queued_ahead_of_training(
    ledger: Ledger, max_lag: int, queue_steps: int | None, version: int, groups: int
) -> None:
    config = RunConfig.model_validate(
        {"groups_per_step": 2, "max_lag": max_lag, "queue_steps": queue_steps, "steps": 50}
    )
    run = await ledger.create_run("q", "parity.environment:environment", {})
    await ledger.set_setting(run.run_id, "max_lag", max_lag)
    trainer = Trainer(ledger, blobs=None, run_id=run.run_id)  # type: ignore[arg-type]
    environment = load_environment("parity.environment:environment")
    await trainer._queue_groups(environment, config, 3, version)
    episodes = await ledger.list_episodes(run.run_id, limit=1000, with_turns=False)
    assert sorted({e.group_index for e in episodes}) == list(range(groups))
    assert len(episodes) == groups * 3
    await trainer._queue_groups(environment, config, 3, version)  # idempotent
    assert len(await ledger.list_episodes(run.run_id, limit=1000, with_turns=False)) == groups * 3


async def test_the_queue_never_passes_the_run_s_last_step(ledger: Ledger) -> None:
    config = RunConfig.model_validate({"groups_per_step": 2, "queue_steps": 10, "steps": 3})
    run = await ledger.create_run("q", "parity.environment:environment", {})
    trainer = Trainer(ledger, blobs=None, run_id=run.run_id)  # type: ignore[arg-type]
    await trainer._queue_groups(load_environment("parity.environment:environment"), config, 2, 0)
    episodes = await ledger.list_episodes(run.run_id, limit=1000, with_turns=False)
    assert len({e.group_index for e in episodes}) == 6
