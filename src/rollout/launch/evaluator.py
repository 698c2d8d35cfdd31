"""The evaluator role (`rollout evaluator [--run RUN]`): plays eval requests and jobs.

The local supervisor starts one per run whose preset has an `evals:` schedule; it can also be
started by hand for one run or for every run. See `rollout.evals.evaluator`.
"""

from __future__ import annotations

import asyncio
import os

from rollout.blobs import BlobStore
from rollout.ledger import Ledger
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
    from rollout.evals.evaluator import Evaluator, default_evaluator_id

    ledger = await Ledger.connect()
    try:
        run_id = (await ledger.get_run(run)).run_id if run else None
        worker = Evaluator(
            ledger,
            BlobStore.from_url(),
            run_id=run_id,
            evaluator_id=f"{name}-{os.getpid()}" if name else default_evaluator_id(),
            concurrency=concurrency,
            lease_seconds=lease_seconds,
            cache_dir=get_settings().cache_dir / (run_id or "all") / f"evaluator-{os.getpid()}",
        )
        try:
            await worker.run(stop)
        finally:
            await worker.close()
    finally:
        await ledger.close()
