"""What a learning run's ledger shows about asynchronous training (`check_off_policy`).

Asserted on the parity run to the cpu-tiny preset's target (the README's main run, in
tests/launch/test_many_hosts.py across hosts): episodes kept playing while the trainer stepped,
some turns were sampled by a version older than the one that trained on them (off-policy
happened), no turn began beyond max_lag, and the reward of the last steps clearly exceeds that of
the first.
"""

from __future__ import annotations

import asyncio
from bisect import bisect_right
from collections.abc import Sequence
from itertools import pairwise

import psycopg

from rollout.contracts import Turn
from rollout.ledger import Ledger, TrainStepRecord

COMMIT_SLACK_S = 0.25
"""A checkpoint's `created_at` is its INSERT, the last statement before its COMMIT: until the
commit is flushed, a turn that starts is rightly gated on the checkpoint before it. Turns that
start within this much of a checkpoint's `created_at` are measured against the one before, and
within half the run's median step at most (`commit_slack`): cpu-tiny's steps take about 0.2 s, so
a gate that let a whole step through is still seen in the second half of every step."""


def commit_slack(times: list[float]) -> float:
    """The slack for checkpoints recorded at `times`: `COMMIT_SLACK_S`, or half the median gap
    between them where that is less (`test_off_policy_check.py`)."""
    gaps = sorted(b - a for a, b in pairwise(times))
    if not gaps:
        return COMMIT_SLACK_S
    return round(min(COMMIT_SLACK_S, gaps[len(gaps) // 2] / 2), 6)


STEP_BUDGET = 600
"""The step budget of the tests that train the parity run to its target. The preset's own is 300;
a platform run's steps to the target are a draw (105-295 for seeds 0-4 in this day's runs in
benchmarks/README.md, and once more than 300; a turn's weights are 0 or 1 step old by timing), so
a test that ran the preset's budget would fail on the tail of that draw, not on a regression: a
run that does not learn stays far below 0.9 for 600 steps too."""


COLLAPSE_WINDOW = 100
"""The last steps `collapsed` reads."""
COLLAPSE_SKIPPED = 0.8
"""The share of them whose optimizer step was skipped that `collapsed` calls a collapse."""


def collapsed(
    skipped: Sequence[bool], window: int = COLLAPSE_WINDOW, share: float = COLLAPSE_SKIPPED
) -> bool:
    """Whether a run ended in the parity recipe's known collapse, not in a slow climb, from its RL
    steps' `optim/skipped` flags in order (`skipped_steps`): the policy became nearly
    deterministic before it found the task, so every episode of a group gives the same answer,
    every group's advantages are 0 and the trainer skips its optimizer step in at least
    `COLLAPSE_SKIPPED` of the last `COLLAPSE_WINDOW` steps, from which nothing recovers (seen in CI
    through vLLM: from step ~150 of 600, reward ~0.5). It is a draw of the run's sampling, not of
    the serving path, so a learning test that meets it trains once more with another seed and says
    so. A shorter run reads its last `window` steps and calls `share` of them a collapse."""
    last = list(skipped)[-window:]
    return len(last) == window and sum(last) >= share * len(last)


def collapsed_so_far(database_url: str, name: str) -> bool:
    """Whether the live run named `name` has met the collapse already (`collapsed` on the RL
    steps it recorded so far): a learning test stops such a run there and trains another seed,
    instead of waiting out the rest of `STEP_BUDGET`, from which nothing recovers (the collapse
    seen in CI through vLLM began at step ~150 of 600: about 450 steps, 7 min there, for
    nothing)."""
    with psycopg.connect(database_url) as conn:
        rows = conn.execute(
            "SELECT coalesce((t.metrics->>'optim/skipped')::float8, 0) >= 1 FROM train_steps t"
            " JOIN runs r USING (run_id) WHERE r.name = %s AND t.step > 0"
            " ORDER BY t.step DESC LIMIT %s",
            (name, COLLAPSE_WINDOW),
        ).fetchall()
    return collapsed([bool(skip) for (skip,) in reversed(rows)])


def skipped_steps(steps: Sequence[TrainStepRecord]) -> list[bool]:
    """Each RL step's `optim/skipped` flag (nothing trained), in step order."""
    ordered = sorted((s for s in steps if s.step > 0), key=lambda s: s.step)
    return [s.metrics.get("optim/skipped", 0.0) >= 1.0 for s in ordered]


def reward_curve(rewards: list[float], every: int = 20) -> str:
    """The mean reward of each `every` steps, for an assertion's message (a list of 300 floats is
    cut by pytest's repr).

    >>> reward_curve([0.0, 0.5, 1.0, 1.0], every=2)
    '4 steps, mean reward per 2: 0.25 1.00'
    """
    means = [
        sum(rewards[i : i + every]) / len(rewards[i : i + every])
        for i in range(0, len(rewards), every)
    ]
    return f"{len(rewards)} steps, mean reward per {every}: " + " ".join(f"{m:.2f}" for m in means)


async def run_turns(ledger: Ledger, run_id: str) -> list[Turn]:
    """Every turn of run `run_id`, read page by page."""
    turns: list[Turn] = []
    cursor = 0
    while page := await ledger.turns_for_run(run_id, since=cursor, limit=5000):
        cursor = page[-1][0]
        turns.extend(turn for _, turn in page)
    return turns


def check_off_policy(database_url: str, run_id: str, *, steps: int, max_lag: int) -> None:
    """Assert the module docstring's points on the finished run `run_id` of `steps` steps."""
    asyncio.run(_check(database_url, run_id, steps, max_lag))


async def _check(database_url: str, run_id: str, steps_taken: int, max_lag: int) -> None:
    ledger = await Ledger.connect(database_url)
    try:
        checkpoints = sorted(await ledger.checkpoints(run_id), key=lambda c: c.created_at)
        steps = await ledger.train_steps(run_id)
        turns = await run_turns(ledger, run_id)
    finally:
        await ledger.close()
    assert [c.version for c in checkpoints] == list(range(steps_taken + 1))
    times = [c.created_at for c in checkpoints]

    def newest_at(moment: float) -> int:
        index = bisect_right(times, moment) - 1
        return checkpoints[index].version if index >= 0 else -1

    assert turns
    slack = commit_slack(times)
    committed = [t.started_at - slack for t in turns]
    behind = [newest_at(moment) - t.version for t, moment in zip(turns, committed, strict=True)]
    # No turn began on a version more than max_lag behind the newest committed checkpoint.
    late = [
        (round(t.started_at - times[bisect_right(times, t.started_at) - 1], 4), t.version, b)
        for t, b in zip(turns, behind, strict=True)
        if b > max_lag
    ]
    assert not late, late[:10]  # (seconds after the newest checkpoint, version, behind)
    # Off-policy happened: some steps trained on turns sampled by an older version than the
    # weights being updated (lag is measured per trained turn by the trainer).
    assert max(step.metrics["lag_max"] for step in steps if step.step > 0) >= 1
    # Episodes kept playing while the trainer stepped: turns ran during train steps.
    during = 0
    for step in steps:
        if step.step == 0:
            continue
        began = step.created_at - step.metrics["step_seconds"]
        during += sum(1 for t in turns if t.started_at < step.created_at and t.ended_at > began)
    assert during > 0
    rewards = [s.metrics["reward"] for s in sorted(steps, key=lambda s: s.step) if s.step > 0]
    first, last = sum(rewards[:3]) / 3, sum(rewards[-5:]) / 5
    assert first < 0.75, rewards  # starts near chance
    assert last >= first + 0.25, rewards  # and clearly learns
