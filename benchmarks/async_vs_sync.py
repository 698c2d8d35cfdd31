"""Synchronous vs asynchronous training on episodes with long-tailed lengths.

Runs `rollout train` twice on `benchmarks.longtail:environment` with the cpu-tiny preset and the
same number of steps: once synchronously (max_lag 0: each step's episodes are queued only after
the previous step, every turn waits for the newest weights, nothing overlaps), once
asynchronously (max_lag 3: runners keep playing up to four steps of groups ahead while the
trainer steps, or `--queue-steps N`; no turn starts more than three versions behind). Both runs
use the same runner concurrency. It reports the wall time from the first to the last train step
of each and their ratio.

`--rollout-only` adds a third run, the baseline for "the trainer is hidden": the same episodes
(the same seed, so the same groups) played with no training. It starts the run with every step's
groups queued at once and no lag limit, stops the trainer process (SIGSTOP) once checkpoint v0 is
served and the groups are queued, and times the runners from then to the end of the last of
those episodes (the async run is timed from checkpoint v0 too). The trainer is hidden when the
async run takes at most 1.1x as long.

    uv run python benchmarks/async_vs_sync.py [--steps 30] [--max-lag 3] [--queue-steps N]
        [--rollout-only] [--json]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import platform
import signal
import subprocess
import sys
import tempfile
import time
import uuid

from procs import processes, role_of, stop_group

from rollout.ledger import Ledger
from rollout.ledger.embedded import stop_embedded

GROUPS_PER_STEP = 4


def _environment(state_dir: str) -> dict[str, str]:
    env = dict(os.environ, ROLLOUT_STATE_DIR=state_dir)
    env.pop("ROLLOUT_DATABASE_URL", None)
    return env


def _command(steps: int, max_lag: int, extra: list[str]) -> list[str]:
    """`rollout train` of the long-tail environment with the benchmark's recipe."""
    return [
        sys.executable, "-m", "rollout.cli", "train", "benchmarks.longtail:environment",
        "--preset", "cpu-tiny", "--steps", str(steps), "--max-lag", str(max_lag),
        "--set", f"groups_per_step={GROUPS_PER_STEP}", "--set", "warmup_steps=20",
        *(arg for setting in extra for arg in ("--set", setting)),
    ]  # fmt: skip


def train(state_dir: str, steps: int, max_lag: int, extra: list[str]) -> dict[str, object]:
    result = subprocess.run(
        [*_command(steps, max_lag, extra), "--json"],
        capture_output=True,
        text=True,
        env=_environment(state_dir),
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


ROLLOUT_ONLY_SQL = """
SELECT count(*), count(se.episode_id), extract(epoch FROM max(se.created_at))
FROM episodes e
LEFT JOIN seat_ends se ON se.episode_id = e.episode_id
WHERE e.run_id = %s AND e.kind = 'train' AND e.group_index < %s
"""


def _trainer_pid(run_id: str) -> int | None:
    for pid, proc in processes().items():
        if role_of(proc) == "trainer" and run_id in proc.argv:
            return pid
    return None


def rollout_only(state_dir: str, args: argparse.Namespace) -> dict[str, object]:
    """Seconds for the runners to play `args.steps` steps' episodes with the trainer stopped."""
    import psycopg

    from rollout.ledger import ledger_url

    groups = args.steps * GROUPS_PER_STEP
    name = f"rollout-only-{uuid.uuid4().hex[:8]}"
    extra = [
        f"runner_concurrency={args.concurrency}",
        f"queue_steps={args.steps}",
        "stop_at_reward=null",
    ]
    process = subprocess.Popen(
        [*_command(args.steps + 1000, 1000, extra), "--name", name],
        env=_environment(state_dir),
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        start_new_session=True,
    )
    os.environ["ROLLOUT_STATE_DIR"] = state_dir
    stopped: int | None = None
    began = 0.0
    try:
        with psycopg.connect(ledger_url(), autocommit=True) as conn:
            deadline = time.time() + args.timeout
            run_id = None
            while stopped is None:  # v0 published and every group queued: stop the trainer
                if time.time() > deadline or process.poll() is not None:
                    raise SystemExit("rollout-only: the run did not queue its groups in time")
                try:
                    found = conn.execute("SELECT run_id FROM runs WHERE name = %s", (name,))
                except psycopg.errors.UndefinedTable:  # the run's command is still migrating
                    time.sleep(0.2)
                    continue
                row = found.fetchone()
                run_id = row[0] if row else None
                if run_id is not None:
                    queued = conn.execute(
                        "SELECT (SELECT count(DISTINCT group_index) FROM episodes"
                        "        WHERE run_id = %(run)s AND kind = 'train'),"
                        " EXISTS (SELECT 1 FROM serving_acks WHERE run_id = %(run)s)",
                        {"run": run_id},
                    ).fetchone()
                    if queued and queued[0] >= groups and queued[1]:  # v0 served too
                        stopped = _trainer_pid(run_id)
                        if stopped is not None:
                            os.kill(stopped, signal.SIGSTOP)
                            began = time.time()
                time.sleep(0.05)
            while True:
                total, ended, last = conn.execute(ROLLOUT_ONLY_SQL, (run_id, groups)).fetchone()  # type: ignore[misc]
                if total and ended >= total:
                    break
                if time.time() > deadline:
                    raise SystemExit(f"rollout-only: {ended} of {total} episodes ended in time")
                time.sleep(0.2)
    finally:
        if stopped is not None:
            os.kill(stopped, signal.SIGCONT)
        stop_group(process)
    seconds = float(last) - began
    return {
        "steps": args.steps,
        "episodes": int(total),
        "seconds": seconds,
        "seconds_per_step": seconds / args.steps,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").split("\n\n")[0])
    parser.add_argument("--steps", type=int, default=30)
    parser.add_argument("--max-lag", type=int, default=3)
    parser.add_argument(
        "--queue-steps", type=int, default=None, help="async: steps of groups kept queued"
    )
    parser.add_argument("--concurrency", type=int, default=128, help="seats a runner plays")
    parser.add_argument(
        "--rollout-only", action="store_true", help="also time the episodes with no training"
    )
    parser.add_argument("--timeout", type=float, default=900.0, help="rollout-only: seconds")
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()
    state_dir = tempfile.mkdtemp(prefix="rollout-bench-", dir="/var/tmp")
    results = {}
    try:
        for mode, lag in (("sync", 0), ("async", args.max_lag)):
            results[mode] = measure(state_dir, args, lag)
        if args.rollout_only:
            results["rollout_only"] = rollout_only(state_dir, args)
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
    if args.rollout_only:
        report["async_over_rollout_only"] = (
            results["async"]["seconds"] / results["rollout_only"]["seconds"]
        )
    if args.json:
        print(json.dumps(report, indent=2))
        return
    print(f"machine: {report['machine']}")
    for mode, r in results.items():
        if mode == "rollout_only":
            print(
                f"rollout only (trainer stopped): {r['seconds']:.1f} s for {r['episodes']} "
                f"episodes, {r['steps']} steps' worth ({r['seconds_per_step']:.2f} s/step)"
            )
            continue
        print(
            f"{mode:>5} (max_lag {r['max_lag']}): {r['seconds']:.1f} s for {r['steps']} steps "
            f"({r['seconds_per_step']:.2f} s/step), mean lag {r['lag_mean']:.2f}"
        )
    print(f"async is {ratio:.2f}x faster than sync (goal >= 3x)")
    if args.rollout_only:
        hidden = report["async_over_rollout_only"]
        print(f"async takes {hidden:.2f}x the rollouts alone (goal <= 1.10: the trainer hidden)")


if __name__ == "__main__":
    main()
