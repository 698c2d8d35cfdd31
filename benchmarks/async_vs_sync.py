"""Synchronous vs asynchronous training on episodes with long-tailed lengths.

Runs `rollout train` twice on `benchmarks.longtail:environment` with the cpu-tiny preset and the
same number of steps: once synchronously (max_lag 0: each step's episodes are queued only after
the previous step, every turn waits for the newest weights, nothing overlaps), once
asynchronously (max_lag 3: runners keep playing up to four steps of groups ahead while the
trainer steps, or `--queue-steps N`; no turn starts more than three versions behind). Both runs
use the same runner concurrency. It reports the wall time from the first to the last train step
of each and their ratio.

    uv run python benchmarks/async_vs_sync.py [--steps 30] [--max-lag 3] [--queue-steps N] [--json]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import platform
import subprocess
import sys
import tempfile

from rollout.ledger import Ledger
from rollout.ledger.embedded import stop_embedded


def train(state_dir: str, steps: int, max_lag: int, extra: list[str]) -> dict[str, object]:
    env = dict(os.environ, ROLLOUT_STATE_DIR=state_dir)
    env.pop("ROLLOUT_DATABASE_URL", None)
    result = subprocess.run(
        [
            sys.executable,
            "-m",
            "rollout.cli",
            "train",
            "benchmarks.longtail:environment",
            "--preset",
            "cpu-tiny",
            "--steps",
            str(steps),
            "--max-lag",
            str(max_lag),
            "--set",
            "groups_per_step=4",
            "--set",
            "warmup_steps=20",
            *(arg for setting in extra for arg in ("--set", setting)),
            "--json",
        ],
        capture_output=True,
        text=True,
        env=env,
        check=False,
    )
    if result.returncode != 0:
        raise SystemExit(f"rollout train failed:\n{result.stderr[-3000:]}")
    return json.loads(result.stdout)


async def step_times(state_dir: str, run_id: str) -> list[float]:
    ledger = await Ledger.connect(state_dir=state_dir)
    try:
        steps = await ledger.train_steps(run_id)
    finally:
        await ledger.close()
    return [s.created_at for s in sorted(steps, key=lambda s: s.step)]


def measure(state_dir: str, args: argparse.Namespace, lag: int) -> dict[str, object]:
    extra = [f"runner_concurrency={args.concurrency}"]
    if args.queue_steps is not None:
        extra.append(f"queue_steps={args.queue_steps}")
    summary = train(state_dir, args.steps, lag, extra)
    times = asyncio.run(step_times(state_dir, str(summary["run_id"])))
    # times[0] is the base checkpoint (after the warm-up); measure step 1 .. step N.
    return {
        "max_lag": lag,
        "steps": args.steps,
        "seconds": times[-1] - times[0],
        "seconds_per_step": (times[-1] - times[0]) / args.steps,
        "lag_mean": summary["lag_mean"],
        "last_rewards_mean": summary["last_rewards_mean"],
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").split("\n\n")[0])
    parser.add_argument("--steps", type=int, default=30)
    parser.add_argument("--max-lag", type=int, default=3)
    parser.add_argument(
        "--queue-steps", type=int, default=None, help="async: steps of groups kept queued"
    )
    parser.add_argument("--concurrency", type=int, default=128, help="seats a runner plays")
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()
    state_dir = tempfile.mkdtemp(prefix="rollout-bench-", dir="/var/tmp")
    results = {}
    try:
        for mode, lag in (("sync", 0), ("async", args.max_lag)):
            results[mode] = measure(state_dir, args, lag)
    finally:
        stop_embedded(state_dir)  # rollout train leaves the embedded Postgres running
    ratio = results["sync"]["seconds"] / results["async"]["seconds"]
    report = {
        "machine": (
            f"{platform.machine()}, {os.cpu_count()} cores, Python {platform.python_version()}"
        ),
        "results": results,
        "speedup_async_over_sync": ratio,
    }
    if args.json:
        print(json.dumps(report, indent=2))
        return
    print(f"machine: {report['machine']}")
    for mode, r in results.items():
        print(
            f"{mode:>5} (max_lag {r['max_lag']}): {r['seconds']:.1f} s for {r['steps']} steps "
            f"({r['seconds_per_step']:.2f} s/step), mean lag {r['lag_mean']:.2f}"
        )
    print(f"async is {ratio:.2f}x faster than sync (goal >= 3x)")


if __name__ == "__main__":
    main()
