"""The summary `rollout train` prints (and returns as JSON) when a run ends or is stopped.

Example:
    >>> from rollout.ledger import TrainStepRecord
    >>> rewards = [0.0, 0.1, 0.2, 0.3, 0.5, 0.9, 1.0, 1.0]  # step 0 is the warm-up
    >>> steps = [
    ...     TrainStepRecord("r", step, (), {"reward": reward, "lag_mean": 0.5}, 100.0 + step)
    ...     for step, reward in enumerate(rewards)
    ... ]
    >>> summary = summarize(steps, began=90.0)
    >>> summary["steps"], summary["seconds_to_target"], summary["lag_mean"]
    (7, 17.0, 0.5)
    >>> round(summary["first_rewards_mean"], 2), round(summary["last_rewards_mean"], 2)
    (0.4, 0.74)
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from rich.console import Console

from rollout.launch.progress import rl_steps
from rollout.ledger import TrainStepRecord
from rollout.runs.config import TARGET_WINDOW, reached_target

TARGET_REWARD = 0.9
HEAD = 5
"""Steps averaged for the first and the last reward."""


def summarize(
    steps: Sequence[TrainStepRecord], began: float, target: float = TARGET_REWARD
) -> dict[str, Any]:
    """Steps taken, the mean reward of the first and last few steps, when the target was
    first reached (seconds after `began`, a Unix time): the step at which the mean reward of the
    last three steps reached it (`reached_target`, the rule that stops a run at
    `stop_at_reward`), and the mean lag."""
    rl = rl_steps(steps)
    rewards = [float(step.metrics.get("reward", 0.0)) for step in rl]
    window = max(1, min(HEAD, len(rewards)))
    head, tail = rewards[:window], rewards[-window:]
    reached = next(
        (
            step.created_at - began
            for end, step in enumerate(rl, start=1)
            if reached_target(rewards[max(0, end - TARGET_WINDOW) : end], target)
        ),
        None,
    )
    return {
        "steps": len(rl),
        "first_rewards_mean": sum(head) / len(head) if head else None,
        "last_rewards_mean": sum(tail) / len(tail) if tail else None,
        "seconds_to_target": reached,
        "target": target,
        "lag_mean": (
            sum(float(step.metrics.get("lag_mean", 0.0)) for step in rl) / len(rl) if rl else None
        ),
    }


def print_summary(console: Console, summary: dict[str, Any]) -> None:
    """What happened (and how many episodes failed), then the next commands, one per line."""

    def fmt(value: float | None) -> str:
        return "-" if value is None else f"{value:.3f}"

    name = summary["name"]
    reached = summary["seconds_to_target"]
    console.print(
        f"[bold]{name}[/] {summary['status']} after {summary['seconds']:.0f} s: "
        f"{summary['steps']} steps, reward {fmt(summary['first_rewards_mean'])} (first steps) -> "
        f"{fmt(summary['last_rewards_mean'])} (last steps)"
        + (f", reached {summary['target']} after {reached:.0f} s" if reached is not None else "")
    )
    failed = summary.get("episodes_failed") or 0
    if failed:
        console.print(
            f"[red]{failed} of {summary.get('episodes_ended', 0)} episodes failed[/]: "
            f"`uv run rollout episodes list {name}` marks them",
            highlight=False,
            soft_wrap=True,
        )
    if summary["status"] == "stopped":
        hint(console, f"uv run rollout up --run {name} --until-finished", "to continue")
    hint(console, f"uv run rollout runs show {name}")
    hint(console, f"uv run rollout episodes list {name}")


def hint(console: Console, command: str, why: str = "") -> None:
    """One "next:" line: a command that works as printed, never wrapped in its middle."""
    console.print(
        f"next: {command}" + (f"  ({why})" if why else ""),
        markup=False,
        highlight=False,
        soft_wrap=True,
    )
