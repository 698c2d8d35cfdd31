"""Learnability of the multi-agent gridworld through the whole platform (`rollout train`).

Two agents share one grid (a sandbox process per episode, claimed through the ledger); each
reads a short text view and calls the `move` tool; reward is half its own progress toward its
goal and half the team's success. The run is `rollout train` on the cpu-tiny preset with the
default character alphabet (the view has letters) and a larger vocabulary, a format-only
warm-up (random directions in the right tool-call shape), then group-relative policy gradient.

The baseline is the same run's first steps: the benchmark reports the mean reward of the first
`--window` steps and of the last `--window` steps, and their difference.

Run: `uv run python benchmarks/gridworld_learning.py` (about 10-40 minutes on a 2-core CPU;
`--steps`, `--warmup-steps`, `--set KEY=VALUE` pass through to `rollout train`).
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

OVERRIDES = [
    "model.init.alphabet=null",
    "model.init.vocab_size=160",
    "runner_concurrency=32",
    "stop_at_reward=null",
    "warmup_learning_rate=0.005",  # the long tools prompt needs a stronger format warm-up
]


def main() -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--steps", type=int, default=80)
    parser.add_argument("--warmup-steps", type=int, default=100)
    parser.add_argument("--window", type=int, default=10)
    parser.add_argument("--set", action="append", default=[], dest="overrides")
    parser.add_argument("--state-dir", default=None, help="default: a new temporary folder")
    args = parser.parse_args()
    state = Path(args.state_dir or tempfile.mkdtemp(prefix="gridworld-bench-"))
    command = [
        sys.executable,
        "-m",
        "rollout.cli",
        "train",
        "gridworld.environment:environment",
        "--preset",
        "cpu-tiny",
        "--steps",
        str(args.steps),
        "--json",
    ]
    overrides = [*OVERRIDES, "groups_per_step=8", f"warmup_steps={args.warmup_steps}"]
    for override in [*overrides, *args.overrides]:
        command += ["--set", override]
    env = dict(os.environ, ROLLOUT_STATE_DIR=str(state))
    env.pop("ROLLOUT_DATABASE_URL", None)
    began = time.monotonic()
    result = subprocess.run(command, capture_output=True, text=True, env=env, check=False)
    if result.returncode != 0:
        sys.exit(f"rollout train failed:\n{result.stderr[-3000:]}")
    summary = json.loads(result.stdout)
    rewards = _step_rewards(state, summary["run_id"])
    first = sum(rewards[: args.window]) / max(1, len(rewards[: args.window]))
    last = sum(rewards[-args.window :]) / max(1, len(rewards[-args.window :]))
    print(
        json.dumps(
            {
                "steps": summary["steps"],
                "seconds": round(time.monotonic() - began, 1),
                "rewards": [round(r, 3) for r in rewards],
                f"first_{args.window}_mean": round(first, 3),
                f"last_{args.window}_mean": round(last, 3),
                "rise": round(last - first, 3),
                "state_dir": str(state),
            },
            indent=2,
        )
    )


def _step_rewards(state: Path, run_id: str) -> list[float]:
    """Each RL step's mean reward, read from the run's ledger (the embedded Postgres)."""
    import asyncio

    from rollout.ledger import Ledger

    async def read() -> list[float]:
        ledger = await Ledger.connect(state_dir=state)
        try:
            steps = await ledger.train_steps(run_id)
        finally:
            await ledger.close()
        return [s.metrics["reward"] for s in sorted(steps, key=lambda s: s.step) if s.step > 0]

    return asyncio.run(read())


if __name__ == "__main__":
    main()
