"""Learnability of the multi-agent gridworld through the whole platform (`rollout train`).

Two agents share a 3x3 grid (a sandbox process per episode, claimed through the ledger). The run
is `rollout train gridworld.environment:compact --preset cpu-text` with the preset's recipe as
it is (its byte-level model, format warm-up, 16 groups of 8 episodes per step, lr 2e-3 and one
step of sampling lag, `max_lag: 1`, corrected by `clip`); only the early stop is off. Each agent
reads a short view (`mate -1,0. goal 1r.`), answers with a direction letter and moves once; its
reward is 0.7 if the move brought it closer to its goal (-0.35 for a reply that is no move) plus
0.3 if both agents reached their goals. Chance is about 0.19.

The baseline is the same run's first steps: for each seed the benchmark prints the mean reward
of the first and last `--window` steps with their standard errors, and the share of moves that
went toward the goal by sampling checkpoint (the task alone: chance 0.25; the reward also rises
when replies that are no move, common right after the warm-up, die out). `--out` writes the
per-step curve (a JSON file, and a CSV next to it) for a plot.

Measured (2026-12-05, load 2-5, 587-758 s per seed for 300 steps): moves toward the goal 0.215
-> 0.999, 0.237 -> 1.000 and 0.251 -> 1.000 for seeds 0-2 (first vs last 10 steps). The curve is
a plateau at chance, then an escape within ~50 steps: the model must learn to attend to the
goal's letter and copy it. The plateau's length is a draw (about 150, 75 and 50 checkpoints in
that run; at 120 steps, the same day, two of three seeds were still at chance). On cpu-text as it
was on 2026-12-02 (hidden 64, full attention, `tis`) 120 steps took each of three seeds to
0.91-0.99. Before 2026-12-02 this benchmark ran cpu-tiny with its own recipe
(8 groups, lr 3e-3 and `max_lag=0`): one step of lag at lr 3e-3 collapsed the policy, which was
read as "lag stops learning"; at the preset's step size (16 groups, lr 1e-3 to 2e-3) one step
of lag learns (`benchmarks/gridworld_lag.py --in-process`, benchmarks/README.md).

`--in-process` asks the question first: is the direction choice learnable by this model at all?
It trains on the exact text `compact` produces (chat template, warm-up, one move, reward 1 for a
move toward the goal) with the training pieces in one process (no sandbox, ledger or lag) and
cpu-tiny's character model (vocab 160), 8 groups and lr 3e-3 unless told (`--groups`, `--lr`),
at about 0.2 s a step. It is, but late and at a seed-dependent step: the share of right moves
sits at chance (0.25) and then rises within ~30 steps to 0.6-0.9. With that recipe the rise
began at step ~50-55 and ~75 for seeds 1 and 0 (seed 1: 0.232 +- 0.011 -> 0.752 +- 0.053, first
vs last 10 of 100 steps) and at ~95 for seed 2; with the teammate left out of the view
(`goal 1r.`) not within 100-120 steps in 4 runs; at 5e-3 it collapsed. The platform's trainer
forgets Adam's moments after the warm-up; `--reset-adam` does the same in process, and it
delays the rise (seed 1: at step ~85 instead of ~50; 0.232 +- 0.015 -> 0.534 +- 0.012). The
platform's episode text is the in-process one token for token (prompt `<|im_start|>user\nmate
+1,+2. goal 1r.<|im_end|>\n<|im_start|>assistant\n`, reply `r` and the stop token). Sampling
lag and its corrections are measured by `benchmarks/gridworld_lag.py`.

Run: `uv run python benchmarks/gridworld_learning.py --seeds 3 --out /tmp/gridworld.json` (10-13
minutes per seed of 300 steps at load 2-5; `--preset`, `--seeds`, `--steps`, `--env`, `--set
KEY=VALUE` pass through to `rollout train`); `uv run python benchmarks/gridworld_learning.py
--in-process --seeds 3` (about a minute per seed).
"""

from __future__ import annotations

import argparse
import asyncio
import csv
import json
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from platform_run import mean, sem, sets, train_fresh

from rollout.ledger import stop_embedded

OVERRIDES = ["stop_at_reward=null"]
"""The preset's recipe as it is; only the early stop is off, so every seed runs `--steps`."""


def run_seed(args: argparse.Namespace, seed: int) -> dict[str, Any]:
    """One `rollout train` run in a fresh state folder; its per-step rewards and duration."""
    overrides = [*OVERRIDES, f"seed={seed}", *args.overrides]
    run = train_fresh(
        args.env, args.preset, ["--steps", str(args.steps), *sets(overrides)], f"seed {seed}"
    )
    state, summary, seconds = run.state, run.summary, run.seconds
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
        "first_mean": mean(first),
        "first_sem": sem(first),
        "last_mean": mean(last),
        "last_sem": sem(last),
        "rise": mean(last) - mean(first),
        "rewards": rewards,
        "closer_by_version": closer,
        "closer_first_mean": mean(closer[: args.window]),
        "closer_last_mean": mean(closer[-args.window :]),
        "state_dir": str(state),
    }


def in_process(args: argparse.Namespace, seed: int) -> dict[str, Any]:
    """The direction choice alone, in one process: is it learnable by this model at all?

    The exact text `compact` produces (`mate +1,-2. goal 1r.` through the chat template), one
    move, reward 1 for the move toward the goal, 0 for another move, -0.5 for a reply that is
    no move; the cpu-tiny model (vocab 160, default alphabet), `compact`'s warm-up, then
    group-relative policy gradient with 2 x `--groups` views (a platform group has two agents)
    x `--samples` samples per step. No sandbox, ledger, lag or team part.
    """
    import random

    import torch
    from gridworld.environment import SHORT, compact_example, describe

    from rollout.contracts import Message, Turn
    from rollout.models import init_model
    from rollout.rendering import HFRenderer
    from rollout.training.advantages import group_advantages
    from rollout.training.loss import LossConfig
    from rollout.training.providers.base import TrainBatch
    from rollout.training.providers.torch import TorchProvider
    from rollout.training.sampler import sample_batch
    from rollout.training.segments import build_segments
    from rollout.training.warmup import warmup_segments

    torch.manual_seed(seed)
    torch.set_num_threads(1)
    rng = random.Random(seed)
    began = time.monotonic()
    folder = init_model(
        tempfile.mkdtemp(prefix="gridworld-model-"),
        **{"arch": "qwen3", "hidden": 64, "layers": 2, "heads": 4, "kv_heads": 2},
        **{"vocab_size": 160, "tokenizer": "chars", "alphabet": None, "seed": seed},
    )
    renderer = HFRenderer(folder)
    stop = renderer.stop_token_ids[0]
    goals = {"u": [0, 1], "d": [0, -1], "l": [-1, 0], "r": [1, 0]}
    provider = TorchProvider(
        folder, lora_rank=None, lr=args.warmup_lr, weight_decay=0.0, grad_clip=args.grad_clip,
        device="cpu", seed=seed, compute_entropy=False,
    )  # fmt: skip
    for _ in range(args.warmup):
        examples = [compact_example(rng) for _ in range(128)]
        batch = TrainBatch(tuple(warmup_segments(renderer, examples)), LossConfig("supervised"))
        provider.forward_backward(batch)
        provider.optim_step()
    if args.reset_adam:  # as the platform's trainer does after its warm-up
        provider.reset_optimizer()
    provider.lr = args.lr
    generator = torch.Generator().manual_seed(seed)
    closer: list[float] = []
    for step in range(args.steps):
        views = []
        for _ in range(2 * args.groups):
            letter = rng.choice(tuple(SHORT))
            mate = [1, rng.randint(-2, 2), rng.randint(-2, 2)]
            view = {"goal": goals[letter], "mates": [mate], "heard": [], "at_goal": False}
            views.append((renderer.render([Message.user(describe(view, short=True))]), letter))
        prompts = [tuple(p) for p, _ in views for _ in range(args.samples)]
        samples = sample_batch(
            provider.model, prompts, max_new_tokens=4, stop_token_ids=[stop],
            pad_token_id=stop, temperature=1.0, generator=generator,
        )  # fmt: skip
        rewards = []
        for i, sample in enumerate(samples):
            text = renderer.decode([t for t in sample.tokens if t != stop]).strip()
            right = text == views[i // args.samples][1]
            rewards.append(1.0 if right else 0.0 if text in SHORT else -0.5)
        segments = []
        for g in range(2 * args.groups):
            members = range(g * args.samples, (g + 1) * args.samples)
            advantages = group_advantages([rewards[i] for i in members])
            for i, advantage in zip(members, advantages, strict=True):
                if not advantage:
                    continue
                turn = Turn(
                    episode_id=f"{step}-{i}", agent=0, attempt=0, index=0,
                    prompt_tokens=prompts[i], completion_tokens=samples[i].tokens,
                    logprobs=samples[i].logprobs, version=provider.step,
                    stop_reason=samples[i].stop_reason,
                )  # fmt: skip
                segments.extend(build_segments([turn], advantage, stop_token_ids=[stop]))
        if segments:
            provider.forward_backward(TrainBatch(segments=tuple(segments), loss=LossConfig()))
            provider.optim_step()
        closer.append(sum(r == 1.0 for r in rewards) / len(rewards))
    first, last = closer[: args.window], closer[-args.window :]
    return {
        "seed": seed,
        "steps": len(closer),
        "seconds": round(time.monotonic() - began, 1),
        "closer": [round(c, 3) for c in closer],
        "first_mean": mean(first),
        "first_sem": sem(first),
        "last_mean": mean(last),
        "last_sem": sem(last),
    }


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
        return [round(mean(totals[v]), 3) for v in sorted(totals)]

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
    parser.add_argument("--steps", type=int, default=300)
    parser.add_argument("--preset", default="cpu-text", help="the preset, with its own recipe")
    parser.add_argument("--groups", type=int, default=8, help="--in-process: groups per step")
    parser.add_argument("--window", type=int, default=10)
    parser.add_argument("--seeds", type=int, default=1, help="seeds 0..N-1, one run each")
    parser.add_argument("--seed-offset", type=int, default=0)
    parser.add_argument("--out", default=None, help="write the curve here (JSON, and .csv)")
    parser.add_argument("--set", action="append", default=[], dest="overrides")
    parser.add_argument(
        "--in-process",
        action="store_true",
        help="the direction choice alone, in one process (no platform): is it learnable?",
    )
    parser.add_argument("--samples", type=int, default=8, help="--in-process: per prompt")
    parser.add_argument("--lr", type=float, default=3e-3, help="--in-process")
    parser.add_argument("--warmup", type=int, default=30, help="--in-process: warm-up steps")
    parser.add_argument("--warmup-lr", type=float, default=3e-3, help="--in-process")
    parser.add_argument("--grad-clip", type=float, default=1.0, help="--in-process")
    parser.add_argument(
        "--reset-adam", action="store_true", help="--in-process: as the platform after warm-up"
    )
    args = parser.parse_args()
    if args.in_process:
        for seed in range(args.seed_offset, args.seed_offset + args.seeds):
            run = in_process(args, seed)
            print(
                f"in-process seed {seed}: {run['steps']} steps in {run['seconds']:.0f} s; moves "
                f"toward the goal first {args.window} {run['first_mean']:.3f} +- "
                f"{run['first_sem']:.3f}, last {args.window} {run['last_mean']:.3f} +- "
                f"{run['last_sem']:.3f}",
                flush=True,
            )
            print("  per step: " + " ".join(f"{c:.2f}" for c in run["closer"]), flush=True)
        return
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
