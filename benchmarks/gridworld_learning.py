"""Learnability of the multi-agent gridworld through the whole platform (`rollout train`).

Two agents share a 3x3 grid (a sandbox process per episode, claimed through the ledger). The run
is `rollout train gridworld.environment:compact` on the cpu-tiny preset: each agent reads a short
view (`mate -1,0. goal 1r.`), answers with a direction letter and moves once; its reward is 0.7
if the move brought it closer to its goal (-0.35 for a reply that is no move) plus 0.3 if both
agents reached their goals. Chance is about 0.19. The recipe: the default character alphabet
(the view has letters) with a larger vocabulary, a 30-step format-only warm-up (random letters),
then group-relative policy gradient with 16 groups of 4 episodes (8 agents, one layout per group)
per step.

The baseline is the same run's first steps: for each seed the benchmark prints the mean reward
of the first and last `--window` steps with their standard errors, and the share of moves that
went toward the goal by sampling checkpoint (the task alone: chance 0.25; the reward also rises
when replies that are no move, common right after the warm-up, die out). `--out` writes the
per-step curve (a JSON file, and a CSV next to it) for a plot.

Run: `uv run python benchmarks/gridworld_learning.py --out /tmp/gridworld.json` (about 10-15
minutes per seed on a loaded 2-core CPU; `--seeds`, `--steps`, `--env`, `--set KEY=VALUE` pass
through to `rollout train`).
"""

from __future__ import annotations

import argparse
import asyncio
import csv
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from rollout.ledger import stop_embedded

OVERRIDES = [
    "model.init.alphabet=null",
    "model.init.vocab_size=160",
    "runner_concurrency=32",
    "stop_at_reward=null",
    # Format warm-up: 30 steps at 3e-3 make a fresh model answer with a direction letter (20 at
    # 1e-3, the preset's, leave it answering gibberish: every reward 0).
    "warmup_steps=30",
    "warmup_learning_rate=0.003",
    # Small groups, many of them, and a larger step than parity's: the most steps in a few minutes.
    "group_size=4",
    "learning_rate=0.003",
]


def run_seed(args: argparse.Namespace, seed: int) -> dict[str, Any]:
    """One `rollout train` run in a fresh state folder; its per-step rewards and duration."""
    state = Path(tempfile.mkdtemp(prefix=f"gridworld-bench-{seed}-"))
    command = [
        *(sys.executable, "-m", "rollout.cli", "train", args.env, "--preset", "cpu-tiny"),
        *("--steps", str(args.steps), "--json"),
    ]
    overrides = [*OVERRIDES, f"groups_per_step={args.groups}", f"seed={seed}"]
    for override in [*overrides, *args.overrides]:
        command += ["--set", override]
    env = dict(os.environ, ROLLOUT_STATE_DIR=str(state))
    env.pop("ROLLOUT_DATABASE_URL", None)
    began = time.monotonic()
    result = subprocess.run(command, capture_output=True, text=True, env=env, check=False)
    seconds = time.monotonic() - began
    if result.returncode != 0:
        sys.exit(f"rollout train failed (seed {seed}):\n{result.stderr[-3000:]}")
    summary = json.loads(result.stdout)
    try:
        rewards = _step_rewards(state, summary["run_id"])
        closer = _closer_by_version(state, summary["run_id"])
    finally:
        stop_embedded(state)  # the run's Postgres outlives it; this folder is not used again
    first, last = rewards[: args.window], rewards[-args.window :]
    return {
        "seed": seed,
        "steps": len(rewards),
        "seconds": round(seconds, 1),
        "first_mean": _mean(first),
        "first_sem": _sem(first),
        "last_mean": _mean(last),
        "last_sem": _sem(last),
        "rise": _mean(last) - _mean(first),
        "rewards": rewards,
        "closer_by_version": closer,
        "closer_first_mean": _mean(closer[: args.window]),
        "closer_last_mean": _mean(closer[-args.window :]),
        "state_dir": str(state),
    }


def _mean(values: list[float]) -> float:
    return statistics.fmean(values) if values else float("nan")


def _sem(values: list[float]) -> float:
    """Standard error of the mean (step to step spread: the noise a rise is compared with)."""
    return statistics.stdev(values) / len(values) ** 0.5 if len(values) > 1 else float("nan")


def _step_rewards(state: Path, run_id: str) -> list[float]:
    """Each RL step's mean reward, read from the run's ledger (the embedded Postgres)."""
    from rollout.ledger import Ledger

    async def read() -> list[float]:
        ledger = await Ledger.connect(state_dir=state)
        try:
            steps = await ledger.train_steps(run_id)
        finally:
            await ledger.close()
        return [s.metrics["reward"] for s in sorted(steps, key=lambda s: s.step) if s.step > 0]

    return asyncio.run(read())


def _closer_by_version(state: Path, run_id: str) -> list[float]:
    """The share of moves that brought an agent closer, by the checkpoint that sampled them.

    The reward also counts replies that are no move; this is the task alone (chance: about 0.25
    in `compact`), so a rise that is only the format coming back after a warm-up shows as flat.
    """
    from rollout.ledger import Ledger

    async def read() -> list[float]:
        ledger = await Ledger.connect(state_dir=state)
        try:
            episodes = await ledger.list_episodes(run_id, limit=1_000_000)
        finally:
            await ledger.close()
        totals: dict[int, list[float]] = {}
        for episode in episodes:
            for end in episode.ends:
                turns = [t for t in episode.turns if t.agent == end.agent]
                if turns and "closer_moves" in end.metrics:
                    totals.setdefault(turns[0].version, []).append(end.metrics["closer_moves"])
        return [round(_mean(totals[v]), 3) for v in sorted(totals)]

    return asyncio.run(read())


def write_curve(path: Path, runs: list[dict[str, Any]], args: argparse.Namespace) -> Path:
    """The per-step rewards as JSON at `path` and as CSV (step, seed, reward) next to it."""
    path.write_text(json.dumps({"command": sys.argv, "args": vars(args), "runs": runs}, indent=2))
    table = path.with_suffix(".csv")
    with table.open("w", newline="") as f:
        writer = csv.writer(f)
        writer.writerow(["step", "seed", "reward"])
        for run in runs:
            for step, value in enumerate(run["rewards"], start=1):
                writer.writerow([step, run["seed"], f"{value:.4f}"])
    return table


def main() -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--env", default="gridworld.environment:compact")
    parser.add_argument("--steps", type=int, default=120)
    parser.add_argument("--groups", type=int, default=16, help="groups per step")
    parser.add_argument("--window", type=int, default=10)
    parser.add_argument("--seeds", type=int, default=1, help="seeds 0..N-1, one run each")
    parser.add_argument("--seed-offset", type=int, default=0)
    parser.add_argument("--out", default=None, help="write the curve here (JSON, and .csv)")
    parser.add_argument("--set", action="append", default=[], dest="overrides")
    args = parser.parse_args()
    runs = []
    for seed in range(args.seed_offset, args.seed_offset + args.seeds):
        run = run_seed(args, seed)
        runs.append(run)
        print(
            f"seed {seed}: {run['steps']} steps in {run['seconds']:.0f} s; reward first "
            f"{args.window} {run['first_mean']:.3f} +- {run['first_sem']:.3f}, last "
            f"{args.window} {run['last_mean']:.3f} +- {run['last_sem']:.3f} (rise "
            f"{run['rise']:+.3f}); moves toward the goal first {run['closer_first_mean']:.3f}, "
            f"last {run['closer_last_mean']:.3f}",
            flush=True,
        )
        print("  per step: " + " ".join(f"{r:.2f}" for r in run["rewards"]), flush=True)
        print(
            "  moves toward the goal, by sampling checkpoint: "
            + " ".join(f"{c:.2f}" for c in run["closer_by_version"]),
            flush=True,
        )
    if args.out:
        table = write_curve(Path(args.out), runs, args)
        print(f"curve: {args.out} and {table}")


if __name__ == "__main__":
    main()
