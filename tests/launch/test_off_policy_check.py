"""The off-policy check's own arithmetic (`tests/launch/off_policy.py`), and its reading of a live
run's ledger."""

from __future__ import annotations

from rollout.ledger import CheckpointRecord, Ledger, TrainStepRecord
from rollout.ledger.leases import trainer_lease
from tests.launch.off_policy import (
    COMMIT_SLACK_S,
    collapsed,
    collapsed_so_far,
    commit_slack,
    skipped_steps,
)


def test_the_commit_slack_is_at_most_half_a_step() -> None:
    assert commit_slack([0.0, 0.2, 0.4, 0.6]) == 0.1  # cpu-tiny's 0.2 s steps
    assert commit_slack([0.0, 1.0, 2.0]) == COMMIT_SLACK_S == 0.25  # slower steps: the cap
    assert commit_slack([0.0, 0.1, 0.2, 5.0]) == 0.05  # the median gap, not a stall
    assert commit_slack([3.0]) == COMMIT_SLACK_S  # one checkpoint: no gap to measure


def _steps(skipped: list[bool]) -> list[TrainStepRecord]:
    return [
        TrainStepRecord("r", step, (step,), {"optim/skipped": float(s)}, float(step))
        for step, s in enumerate([False, *skipped])  # step 0: the warm-up's checkpoint
    ]


def test_a_run_collapsed_when_its_last_steps_trained_nothing() -> None:
    def run(skipped: list[bool]) -> bool:
        return collapsed(skipped_steps(_steps(skipped)))

    # The CI run through vLLM: 38-49 of every 50 steps skipped from step ~150 of 600.
    assert run([False] * 150 + [True] * 450)
    assert run([False] * 500 + [True, True, True, True, False] * 20)  # 80% of the last 100
    assert not run([False] * 500 + [True, True, True, False, False] * 20)  # 60%
    assert not run([True] * 99)  # too short a run to tell
    assert not run([False] * 600)  # a slow climb trains every step
    assert skipped_steps(_steps([True, False])) == [True, False]  # step 0 (warm-up) left out


async def test_a_live_run_is_seen_collapsed_from_the_steps_it_has_recorded(
    database_url: str,
) -> None:
    ledger = await Ledger.connect(database_url)
    try:
        run = await ledger.create_run("watched", "parity.environment:environment", {})
        lease = await ledger.acquire_lease(trainer_lease(run.run_id), "test-trainer")

        async def record(step: int, skipped: bool) -> None:
            parent = step - 1 if step else None
            uri = f"file:///checkpoints/v{step}"
            checkpoint = CheckpointRecord(run.run_id, step, parent, uri, "full", 0.0, {}, "main")
            metrics = {"optim/skipped": float(skipped), "reward": 0.5}
            await ledger.record_train_step(lease, run.run_id, step, [], metrics, checkpoint)

        for step in range(0, 121):  # the warm-up's checkpoint, then a slow climb
            await record(step, False)
        assert not collapsed_so_far(database_url, "watched")
        for step in range(121, 200):  # 79 steps of nothing trained: not yet a window of them
            await record(step, True)
        assert not collapsed_so_far(database_url, "watched")
        await record(200, True)  # 80 of the last 100
        assert collapsed_so_far(database_url, "watched")
        assert not collapsed_so_far(database_url, "not-yet-created")
    finally:
        await ledger.close()
