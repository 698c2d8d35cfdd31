"""The evaluator role (`rollout evaluator [--run RUN]`): plays eval requests and jobs.

The local supervisor starts one per run whose preset has an `evals:` schedule; it can also be
started by hand for one run or for every run. See `rollout.launch.evaluator.worker`.
"""

from __future__ import annotations

import asyncio
import os
from collections.abc import Callable
from typing import Any

from rich.console import Console

from rollout.blobs import BlobStore
from rollout.contracts import DEFAULT_POLICY
from rollout.errors import RolloutError
from rollout.ledger import Ledger, RunRecord
from rollout.settings import get_settings


async def evaluator(
    stop: asyncio.Event,
    *,
    run: str | None,
    concurrency: int = 16,
    lease_seconds: float = 30.0,
    name: str | None = None,
) -> None:
    """Run an `Evaluator` until `stop` is set."""
    from rollout.launch.evaluator.worker import Evaluator, default_evaluator_id

    ledger = await Ledger.connect()
    try:
        run_id = (await ledger.get_run(run)).run_id if run else None
        await ledger.start_heartbeat("evaluator", run_id=run_id, status="evaluating")
        worker = Evaluator(
            ledger,
            BlobStore.from_url(),
            run_id=run_id,
            evaluator_id=f"{name}-{os.getpid()}" if name else default_evaluator_id(),
            concurrency=concurrency,
            lease_seconds=lease_seconds,
            cache_dir=get_settings().cache_dir,  # shared per run (inference.weights_cache)
        )
        try:
            await worker.run(stop)
        finally:
            await worker.close()
    finally:
        await ledger.close()


async def wait_for_evals(
    ledger: Ledger, run: RunRecord, console: Console, *, stopped: Callable[[], str | None]
) -> None:
    """After a run with an eval schedule finished training: wait until its evaluator has scored
    the scheduled evals (it marks the run `evaluated`), then print each suite's first and last
    scores per environment (and policy, for a run with several).

    Raises:
        RolloutError: `stopped` reported that the local roles stopped before that.
    """
    from rollout.evals.report import score_rows

    with console.status("playing the scheduled evals..."):
        while not (await ledger.run_settings(run.run_id)).evaluated:
            problem = stopped()
            if problem is not None and not (await ledger.run_settings(run.run_id)).evaluated:
                raise RolloutError(problem)
            await ledger.wait("settings", 1.0, run_id=run.run_id)
    rows = score_rows(await ledger.eval_scores(run.run_id))
    series: dict[tuple[str, str, str], list[dict[str, Any]]] = {}
    for row in rows:
        key = (f"{row['suite']}@{row['suite_version']}", row["environment"], row["policy"])
        series.setdefault(key, []).append(row)
    for (suite, environment, policy), points in series.items():
        first, last = points[0], points[-1]
        shown = "" if policy == DEFAULT_POLICY else f" {policy}"
        console.print(
            f"eval {suite} {environment}{shown}: {first['score']:.3f} ({first['checkpoint']}) -> "
            f"{last['score']:.3f} ({last['checkpoint']})"
        )
    console.print(f"eval scores per checkpoint: `rollout evals show {run.name}`")
