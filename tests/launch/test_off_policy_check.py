"""The off-policy check's own arithmetic (`tests/launch/off_policy.py`)."""

from __future__ import annotations

from tests.launch.off_policy import COMMIT_SLACK_S, commit_slack


def test_the_commit_slack_is_at_most_half_a_step() -> None:
    assert commit_slack([0.0, 0.2, 0.4, 0.6]) == 0.1  # cpu-tiny's 0.2 s steps
    assert commit_slack([0.0, 1.0, 2.0]) == COMMIT_SLACK_S == 0.25  # slower steps: the cap
    assert commit_slack([0.0, 0.1, 0.2, 5.0]) == 0.05  # the median gap, not a stall
    assert commit_slack([3.0]) == COMMIT_SLACK_S  # one checkpoint: no gap to measure
