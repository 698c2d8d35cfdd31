"""Two policies in one run: the two-role gridworld (`gridworld.environment:pair`) through
`rollout train` on the cpu-text preset, one policy per role.

The walker (agent 0) is rewarded for a move toward its goal, the avoider (agent 1) for a move
away from its own; both read views of the same shape (`mate -1,0. goal 1r.`), so one shared
policy could not serve both. The run names a policy per role (`policies: {walker: {agents:
[walker]}, avoider: {agents: [avoider]}}`); the trainer steps each in turn on its own agents'
turns. Chance: the walker 0.25 (one of four moves is right), the avoider about 0.75 (three of
four take it farther, less where a wall blocks). Replies that are no move cost 0.5 each.

The benchmark prints, per policy, the mean reward of the first and last `--window` steps with
their standard errors (the baseline is the same run's first steps) and writes the per-step
curves with `--out`. The recipe is `benchmarks/gridworld_learning.py`'s.

Run: `uv run python benchmarks/gridworld_policies.py --steps 40 --out /tmp/policies.json`
"""

from __future__ import annotations

import argparse
import asyncio
import json
from pathlib import Path
from typing import Any

from gridworld_learning import OVERRIDES  # the same recipe
from platform_run import mean, sem, sets, train_fresh

from rollout.ledger import stop_embedded

POLICIES = "policies={walker: {agents: [walker]}, avoider: {agents: [avoider]}}"


def policy_rewards(state: Path, run_id: str) -> dict[str, list[float]]:
    """Each policy's per-step mean reward (its agents' seats only), from the run's ledger."""
    from rollout.ledger import Ledger

    async def read() -> dict[str, list[float]]:
        ledger = await Ledger.connect(state_dir=state)
        try:
            steps = await ledger.train_steps(run_id, policy=None)
        finally:
            await ledger.close()
        rewards: dict[str, list[float]] = {}
        for step in sorted(steps, key=lambda s: (s.policy, s.step)):
            if step.step > 0:
                rewards.setdefault(step.policy, []).append(step.metrics["reward"])
        return rewards

    return asyncio.run(read())


def main() -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--steps", type=int, default=40)
    parser.add_argument("--preset", default="cpu-text", help="the preset, with its own recipe")
    parser.add_argument("--window", type=int, default=5)
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--set", dest="overrides", action="append", default=[])
    parser.add_argument("--out", type=Path)
    args = parser.parse_args()
    overrides = [*OVERRIDES, f"seed={args.seed}", POLICIES]
    run = train_fresh(
        "gridworld.environment:pair",
        args.preset,
        ["--steps", str(args.steps), *sets([*overrides, *args.overrides])],
        "two policies",
    )
    state, summary, seconds = run.state, run.summary, run.seconds
    try:
        rewards = policy_rewards(state, summary["run_id"])
    finally:
        stop_embedded(state)
    report: dict[str, Any] = {"seconds": round(seconds, 1), "policies": {}}
    for policy, values in rewards.items():
        first, last = values[: args.window], values[-args.window :]
        report["policies"][policy] = {
            "steps": len(values),
            "first_mean": mean(first),
            "first_sem": sem(first),
            "last_mean": mean(last),
            "last_sem": sem(last),
            "rewards": values,
        }
        print(
            f"{policy}: {len(values)} steps, reward {mean(first):.3f} +- {sem(first):.3f} -> "
            f"{mean(last):.3f} +- {sem(last):.3f} (first vs last {args.window} steps)"
        )
    print(f"{seconds:.0f} s")
    if args.out is not None:
        args.out.write_text(json.dumps(report, indent=1))


if __name__ == "__main__":
    main()
