"""The off-policy check's own arithmetic (`tests/launch/off_policy.py`)."""

from __future__ import annotations

from rollout.ledger import TrainStepRecord
from tests.launch.off_policy import COMMIT_SLACK_S, collapsed, commit_slack, skipped_steps


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
