"""On-demand evals (`rollout evals run SUITE --checkpoint VERSION|latest|base [--run RUN]`).

`evaluate` records a 'demand' request for the checkpoint, turns it into a job (registering the
suite version), and, unless asked only to queue it, plays the job in this process with its own
`Evaluator` (any evaluator role of the run may share the work) until it is scored.

A run with several policies is evaluated at a version every policy has (`run_versions`), each
agent's seats on its own policy's checkpoint of it.
"""

from __future__ import annotations

import asyncio
from pathlib import Path

from rollout.blobs import BlobStore
from rollout.evals.errors import EvalError
from rollout.evals.jobs import episode_specs
from rollout.launch.evaluator.worker import Evaluator, check_agents, run_policies, run_versions
from rollout.ledger import Ledger, RunRecord
from rollout.ledger.evals import BASE_VERSION, EvalJob
from rollout.runs.errors import RunError
from rollout.runs.spec import RunSpec


async def pick_run(ledger: Ledger, run: str | None) -> RunRecord:
    """The run named (id or name), or else the newest train run."""
    if run is not None:
        return await ledger.get_run(run)
    for record in reversed(await ledger.list_runs()):
        try:
            if RunSpec.of(record).kind == "train":
                return record
        except RunError:
            continue
    raise EvalError("there is no train run to evaluate: pass --run RUN")


async def checkpoint_version(ledger: Ledger, run: RunRecord, checkpoint: str) -> int:
    """`base` -> -1, `latest` -> the newest checkpoint, `N` or `vN` -> N (it must exist and
    still have its files: retention may have deleted them). For a run with several policies, a
    version every policy has, with its files in every policy's chain."""
    if checkpoint == "base":
        return BASE_VERSION
    versions = await run_versions(ledger, run)
    if checkpoint == "latest":
        if not versions:
            raise EvalError(f"run {run.name!r} has no checkpoint yet: evaluate 'base'")
        return versions[-1]
    text = checkpoint[1:] if checkpoint.startswith("v") else checkpoint
    if not text.isdigit():
        raise EvalError(f"--checkpoint must be a version, 'latest' or 'base', got {checkpoint!r}")
    version = int(text)
    if version not in versions:
        raise EvalError(
            f"--checkpoint {checkpoint!r}: run {run.name!r} has checkpoints "
            f"{versions[0] if versions else '-'}..{versions[-1] if versions else '-'}, "
            f"not {version}"
        )
    settings = await ledger.run_settings(run.run_id)
    deleted = {v for policy in run_policies(run).names for v in settings.deleted_of(policy)}
    if version in deleted:
        kept = [v for v in versions if v not in deleted]
        raise EvalError(
            f"--checkpoint {checkpoint!r}: run {run.name!r} deleted the files of checkpoint "
            f"{version} (it keeps {', '.join(map(str, kept))}; `rollout runs set "
            f"{run.name} --keep-version V` keeps one from now on); evaluate a kept one or 'base'"
        )
    return version


async def queue_eval(
    evaluator: Evaluator, run: RunRecord, suite: str, version: int, trigger: str = "demand"
) -> EvalJob:
    """Request, register and create the job of `suite` on checkpoint `version` of `run`."""
    ledger = evaluator.ledger
    resolved = await evaluator.register(suite)
    check_agents(run, resolved)
    await ledger.request_eval(run.run_id, suite, version, trigger)
    job = await ledger.create_eval_job(
        run.run_id,
        resolved.name,
        resolved.version,
        version,
        episodes=resolved.episodes,
        trigger=trigger,
        request=suite,
    )
    await ledger.add_episodes(run.run_id, episode_specs(job, resolved))
    return await ledger.eval_job(job.job_id)


async def evaluate(
    ledger: Ledger,
    blobs: BlobStore,
    suite: str,
    *,
    checkpoint: str = "latest",
    run: str | None = None,
    play: bool = True,
    concurrency: int = 16,
    cache_dir: Path | None = None,
) -> EvalJob:
    """Evaluate a checkpoint with a suite now (or only queue it, with `play=False`)."""
    record = await pick_run(ledger, run)
    version = await checkpoint_version(ledger, record, checkpoint)
    evaluator = Evaluator(
        ledger, blobs, run_id=record.run_id, concurrency=concurrency, cache_dir=cache_dir
    )
    try:
        job = await queue_eval(evaluator, record, suite, version)
        if play and not job.scored:
            evaluator.only_jobs = {job.job_id}
            await evaluator.run(asyncio.Event(), until_idle=True)
            job = await ledger.eval_job(job.job_id)
    finally:
        await evaluator.close()
    return job
