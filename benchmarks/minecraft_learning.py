"""The Minecraft team learns: `rollout train minecraft_team.environment:compact --preset
minecraft-cpu-tiny`, one fresh state folder per seed.

Four bots share one flying-squid world (a real server, four mineflayer bots per episode); each
reads `agent1 spot 9 5 4. b w d s?` and answers with one letter: `b` builds its spot (its bot
walks there and places cobblestone), `w` waits, `d` digs the spot, `s` says hello. The reward
is the team's, read from the world: the share of the four spots with cobblestone. A uniformly
random policy builds with probability 1/4 (team reward 0.25); a reply that is no letter builds
nothing and costs its bot 0.5 of its reward (the step's `reward` metric counts that; the team
reward reported here is the world's alone). The preset runs four runner processes, 2 groups of 4
episodes per step.

For each seed the benchmark prints the mean team reward of the first and last `--window` steps
with their standard errors, the steps and the wall time, and the load average.

    uv run python benchmarks/minecraft_learning.py --seeds 3 --steps 20 --out /tmp/minecraft.jsonl
"""

from __future__ import annotations

import argparse
import asyncio
import json
import sys
from pathlib import Path
from typing import Any

from platform_run import mean, sem, sets, train_fresh

from rollout.ledger import stop_embedded

SPEC = "minecraft_team.environment:compact"


def run_seed(args: argparse.Namespace, seed: int) -> dict[str, Any]:
    """One `rollout train` run in a fresh state folder; its per-step team rewards."""
    run = train_fresh(
        SPEC,
        "minecraft-cpu-tiny",
        ["--steps", str(args.steps), *sets([f"seed={seed}", *args.overrides])],
        f"seed {seed}",
    )
    state, summary = run.state, run.summary
    try:
        rewards = asyncio.run(_step_rewards(state, summary["run_id"]))
    finally:
        stop_embedded(state)
    w = args.window
    return {
        "seed": seed,
        "steps": len(rewards),
        "seconds": round(run.seconds, 1),
        "load": round(run.load, 1),
        "first_mean": mean(rewards[:w]),
        "first_sem": sem(rewards[:w]),
        "last_mean": mean(rewards[-w:]),
        "last_sem": sem(rewards[-w:]),
        "rewards": [round(r, 3) for r in rewards],
        "command": run.command,
    }


async def _step_rewards(state: Path, run_id: str) -> list[float]:
    """Each RL step's team reward: the share of spots built (`team_built`, read from the world)
    over the episodes of the groups the step trained on, from the run's ledger. (The step's
    `reward` metric also counts the penalty of replies that were no letter.)"""
    from rollout.ledger import Ledger

    ledger = await Ledger.connect(state_dir=state)
    try:
        steps = await ledger.train_steps(run_id)
        episodes = await ledger.list_episodes(run_id, limit=1_000_000)
    finally:
        await ledger.close()
    by_group: dict[int, list[float]] = {}
    for episode in episodes:
        if episode.kind == "train" and episode.ends:
            built = episode.ends[0].metrics.get("team_built")
            if built is not None:
                by_group.setdefault(episode.group_index, []).append(float(built))
    out = []
    for step in sorted(steps, key=lambda s: s.step):
        if step.step > 0:
            out.append(mean([b for g in step.group_indices for b in by_group.get(g, [])]))
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--seeds", type=int, default=3)
    parser.add_argument("--seed-offset", type=int, default=0)
    parser.add_argument("--steps", type=int, default=20)
    parser.add_argument("--window", type=int, default=5)
    parser.add_argument("--out", default=None, help="append each result as a JSON line here")
    parser.add_argument("--set", action="append", default=[], dest="overrides")
    args = parser.parse_args()
    for seed in range(args.seed_offset, args.seed_offset + args.seeds):
        run = run_seed(args, seed)
        print(
            f"RESULT seed {seed}: {run['steps']} steps in {run['seconds']:.0f} s (load "
            f"{run['load']}); team reward first {args.window} {run['first_mean']:.3f} +- "
            f"{run['first_sem']:.3f}, last {args.window} {run['last_mean']:.3f} +- "
            f"{run['last_sem']:.3f} (chance 0.25)",
            flush=True,
        )
        if args.out:
            with open(args.out, "a") as f:
                f.write(json.dumps({**run, "argv": sys.argv}) + "\n")


if __name__ == "__main__":
    main()
