"""The evaluator's worker: turns eval requests into jobs, plays their episodes, records their
scores (the episodes and scores of a job are `rollout.evals.jobs`).

An evaluator holds no state another process depends on. Each pass it:

1. requests what the runs' schedules ask for (a preset's `evals:` entries: every N steps and
   the final checkpoint of a finished run); the trainer requests the same as it steps, and
   both writes are idempotent, so a request lost to a kill is made again here;
2. expands each pending request: resolves the suite, registers its version (a changed suite
   under an old version is refused), creates the job and adds its episodes (kind 'eval');
3. plays an unscored job: serves the job's checkpoint in this process (`CheckpointServer`,
   `rollout.launch.evaluator.serving`),
   claims whole episodes (fenced seat claims with their own gateway keys), plays each seat with
   the suite's sampling and ends it under its attempt; once every seat of the job has ended it
   records one score per environment with a 95% interval.

A run with several policies (`rollout.runs.policies`) is evaluated at version V once every
policy has a checkpoint V (`run_versions`: the trainer steps the policies in turn, so their
chains have the same versions). Its job plays each agent's seats with that agent's policy's
checkpoint V and records a score per policy and environment: the mean reward of that policy's
agents' seats. A suite with an environment of more agents than the run's mapping covers is
refused (logged once, like a suite that cannot load).

A killed evaluator's claims expire and its episodes are played again as new attempts; the
first end of a seat wins and scores are written once per (job, policy, environment), so every
episode counts exactly once. Several evaluators may share work: claims never overlap.
"""

from __future__ import annotations

import asyncio
import logging
import secrets
import tempfile
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from rollout.blobs import BlobStore
from rollout.contracts import DEFAULT_POLICY
from rollout.errors import RolloutError
from rollout.evals.errors import EvalError
from rollout.evals.jobs import episode_specs, job_scores
from rollout.evals.members import member_environment
from rollout.evals.report import version_label
from rollout.evals.suite import ResolvedSuite, resolve
from rollout.harness.core import Environment
from rollout.harness.errors import TaskError
from rollout.harness.play import make_task, play_seat
from rollout.launch.backends import backend_name
from rollout.launch.evaluator.serving import CheckpointServer, seat_policies
from rollout.ledger import Ledger, RunRecord, SeatClaim, StaleFence
from rollout.ledger.evals import EvalJob
from rollout.net.client import TransportError
from rollout.procs import process_label
from rollout.runners.client import GatewayClient, seat_completer, seat_context
from rollout.runners.heartbeat import SeatHeartbeats
from rollout.runs import live
from rollout.runs.errors import RunError
from rollout.runs.policies import PolicyMap
from rollout.runs.spec import RunSpec

log = logging.getLogger("rollout.evaluator")


def run_policies(run: RunRecord) -> PolicyMap:
    """Which policy plays each agent of the run's eval episodes (`seat_policies`; one policy,
    'main', for a run without a valid run spec)."""
    try:
        return seat_policies(RunSpec.of(run))
    except RunError:
        return PolicyMap.recorded({})


async def run_versions(ledger: Ledger, run: RunRecord) -> list[int]:
    """The checkpoint versions an eval of the run may play, oldest first: those every policy
    of the run has (each policy's chain, for a run with several; the run's chain otherwise)."""
    names = run_policies(run).names
    common: set[int] | None = None
    for policy in names:
        versions = {c.version for c in await ledger.checkpoints(run.run_id, policy=policy)}
        common = versions if common is None else common & versions
    return sorted(common or ())


def check_agents(run: RunRecord, suite: ResolvedSuite) -> None:
    """Refuse a suite with an environment of more agents than a run of several policies maps
    (such an agent would have no policy to sample from)."""
    mapping = run_policies(run)
    if not mapping.several:
        return
    for member in suite.members:
        if member.agents > len(mapping.by_agent):
            raise EvalError(
                f"suite {suite.name!r}: environment {member.name!r} has {member.agents} agents, "
                f"but run {run.name!r} maps {len(mapping.by_agent)} to its policies "
                f"({', '.join(mapping.names)})"
            )


def default_evaluator_id() -> str:
    return f"{process_label('evaluator')}-{secrets.token_hex(2)}"


class Evaluator:
    """Plays eval jobs until stopped (or, with `until_idle`, until nothing is left to do).

    Args:
        ledger: The ledger.
        blobs: Where checkpoints are.
        run_id: Only this run's requests and jobs (default: every run's).
        jobs: Only these job ids (an on-demand `rollout evals run`); no schedule or request
            expansion then.
        concurrency: Seats played at once.
        lease_seconds: A seat claim expires unless renewed within this time.
        cache_dir: Where downloaded checkpoints go.
    """

    def __init__(
        self,
        ledger: Ledger,
        blobs: BlobStore,
        *,
        run_id: str | None = None,
        jobs: Sequence[int] | None = None,
        evaluator_id: str | None = None,
        concurrency: int = 16,
        lease_seconds: float = 30.0,
        idle_wait: float = 2.0,
        cache_dir: Path | None = None,
    ) -> None:
        if concurrency < 1:
            raise RolloutError(f"concurrency must be >= 1, got {concurrency!r}")
        self.ledger = ledger
        self.run_id = run_id
        self.only_jobs = set(jobs) if jobs is not None else None
        self.evaluator_id = evaluator_id or default_evaluator_id()
        self.concurrency = concurrency
        self.lease_seconds = lease_seconds
        self.idle_wait = idle_wait
        cache = cache_dir or Path(tempfile.mkdtemp(prefix="rollout-evaluator-"))
        self.server = CheckpointServer(ledger, blobs, cache)
        self.heartbeats = SeatHeartbeats(ledger, lease_seconds)
        self.seats_played = 0
        self._suites: dict[tuple[str, str], ResolvedSuite] = {}
        self._environments: dict[tuple[str, str, int], Environment] = {}
        self._runs: dict[str, RunRecord] = {}
        self._broken: set[tuple[str, str]] = set()

    async def close(self) -> None:
        await self.heartbeats.close()
        await self.server.close()

    async def run(self, stop: asyncio.Event, *, until_idle: bool = False) -> None:
        """Work until `stop` is set; with `until_idle`, return once a pass finds nothing to do."""
        while not stop.is_set():
            worked = await self.step(stop)
            if worked:
                continue
            if until_idle:
                return
            # New requests notify 'episodes', due checkpoints 'checkpoints', a finished run
            # 'settings'; not 'ends': a training run ends seats all the time.
            await self.ledger.wait(
                ["episodes", "checkpoints", "settings"],
                self.idle_wait,
                run_id=self.run_id,
            )

    async def step(self, stop: asyncio.Event) -> bool:
        """One pass (see the module docstring). True if a job was played."""
        if self.only_jobs is None:
            await self.request_scheduled()
            await self.expand_requests()
        for job in await self.ledger.eval_jobs(self.run_id):
            if job.scored or (self.only_jobs is not None and job.job_id not in self.only_jobs):
                continue
            if await self.play_job(job, stop):
                return True
        if self.only_jobs is None and self.run_id is not None:
            await self._mark_evaluated()
        return False

    async def _run(self, run_id: str) -> RunRecord:
        if run_id not in self._runs:
            self._runs[run_id] = await self.ledger.get_run(run_id)
        return self._runs[run_id]

    async def request_scheduled(self) -> None:
        """Request what each run's schedule asks for (idempotent; see the module docstring)."""
        runs = [await self._run(self.run_id)] if self.run_id else await self.ledger.list_runs()
        for run in runs:
            try:
                spec = RunSpec.of(run)
            except RunError:
                continue
            if spec.training is None or not spec.training.evals:
                continue
            versions = await run_versions(self.ledger, run)
            if not versions:
                continue
            finished = (await self.ledger.run_settings(run.run_id)).finished
            for schedule in spec.training.evals:
                for version in versions:
                    due = schedule.due(version) or (finished and version == versions[-1])
                    if due:
                        await self.ledger.request_eval(
                            run.run_id, schedule.suite, version, "schedule"
                        )

    async def expand_requests(self) -> None:
        """Create the job of every pending request (a suite that cannot load is logged once)."""
        for request in await self.ledger.eval_requests(self.run_id, pending=True):
            key = (request.run_id, request.suite)
            try:
                suite = await self.register(request.suite)
                check_agents(await self._run(request.run_id), suite)
            except RolloutError as error:
                if key not in self._broken:
                    log.error("eval request %s of run %s: %s", request.suite, request.run_id, error)
                    self._broken.add(key)
                continue
            job = await self.ledger.create_eval_job(
                request.run_id,
                suite.name,
                suite.version,
                request.version,
                episodes=suite.episodes,
                trigger=request.trigger,
                request=request.suite,
            )
            await self.ledger.add_episodes(job.run_id, episode_specs(job, suite))
            log.info(
                "queued eval job %s: %s@%s on %s",
                job.job_id,
                suite.name,
                suite.version,
                version_label(job.version),
            )

    async def register(self, reference: str) -> ResolvedSuite:
        """Resolve a suite and record its version in the ledger (refused if changed)."""
        suite = await asyncio.to_thread(resolve, reference)
        await self.ledger.register_eval_suite(
            suite.name, suite.version, suite.content_hash, suite.definition()
        )
        return suite

    async def suite_of(self, job: EvalJob) -> ResolvedSuite:
        """The suite exactly as registered (what every evaluator of the job plays)."""
        key = (job.suite, job.suite_version)
        if key not in self._suites:
            record = await self.ledger.eval_suite(*key)
            self._suites[key] = ResolvedSuite.from_definition(record.definition)
        return self._suites[key]

    async def play_job(self, job: EvalJob, stop: asyncio.Event) -> bool:
        """Play the job's open seats and score it once every seat has ended.

        Returns True if this evaluator played or scored anything.
        """
        suite = await self.suite_of(job)
        specs = episode_specs(job, suite)
        if job.seats < sum(spec.agents for spec in specs):
            await self.ledger.add_episodes(job.run_id, specs)
            job = await self.ledger.eval_job(job.job_id)
        played = False
        if job.seats_ended < job.seats:
            played = await self._play_open_seats(job, suite, stop)
            job = await self.ledger.eval_job(job.job_id)
        if job.seats_ended < job.seats or job.scored:
            return played
        spec = RunSpec.of(await self._run(job.run_id))
        mapping = seat_policies(spec)
        scores = job_scores(
            suite,
            await self.ledger.eval_seat_ends(job),
            mapping.policy_of if mapping.several else None,
        )
        backend = backend_name(spec)
        if await self.ledger.record_eval_scores(job, scores, backend=backend):
            log.info(
                "eval job %s (%s@%s on %s, %s): %s",
                job.job_id,
                job.suite,
                job.suite_version,
                version_label(job.version),
                backend,
                ", ".join(
                    f"{s.environment}{'' if s.policy == DEFAULT_POLICY else ' ' + s.policy} "
                    f"{s.score:.3f}"
                    for s in scores
                ),
            )
        return True

    async def _play_open_seats(
        self, job: EvalJob, suite: ResolvedSuite, stop: asyncio.Event
    ) -> bool:
        run = await self._run(job.run_id)
        client = GatewayClient(await self.server.serve(run, job.version))
        widest = max(m.agents for m in suite.members)
        active: set[asyncio.Task[None]] = set()
        played = False
        try:
            while not stop.is_set():
                room = (self.concurrency - len(active)) // widest
                claims: list[SeatClaim] = []
                if room >= 1:
                    claims = await self.ledger.claim_eval_seats(
                        job, self.evaluator_id, limit=room, lease_seconds=self.lease_seconds
                    )
                for claim in claims:
                    task = asyncio.create_task(self.play_seat(claim, suite, client))
                    active.add(task)
                    task.add_done_callback(active.discard)
                    played = True
                if claims:
                    continue
                if active:
                    await asyncio.wait(active, return_when=asyncio.FIRST_COMPLETED)
                    continue
                progress = await self.ledger.eval_job(job.job_id)
                if progress.seats_ended >= progress.seats:
                    break
                # Others hold the open seats: wait for their ends, or for their claims to expire.
                await self.ledger.wait(
                    "ends", min(self.idle_wait, self.lease_seconds), run_id=job.run_id
                )
        finally:
            for task in active:
                task.cancel()
            await asyncio.gather(*active, return_exceptions=True)
            await client.close()
        return played

    def _environment(self, suite: ResolvedSuite, position: int) -> Environment:
        key = (suite.name, suite.version, position)
        if key not in self._environments:
            self._environments[key] = member_environment(suite.members[position])
        return self._environments[key]

    def sampling(self, suite: ResolvedSuite, member: int) -> dict[str, Any]:
        """The suite's sampling for episode `member` (seeded per episode when seeded)."""
        settings: dict[str, Any] = {"temperature": suite.sampling.temperature}
        if suite.sampling.max_tokens is not None:
            settings["max_tokens"] = suite.sampling.max_tokens
        if suite.sampling.seed is not None:
            settings["seed"] = suite.sampling.seed + member
        return settings

    async def play_seat(
        self, claim: SeatClaim, suite: ResolvedSuite, client: GatewayClient
    ) -> None:
        """Play one claimed eval seat and end it under its attempt."""
        try:
            async with self.heartbeats.hold(claim):
                outcome = await self._play(claim, suite, client)
        except StaleFence:
            log.warning("eval seat %s/%s was taken over", claim.episode_id, claim.agent)
            return
        except TransportError as error:  # infrastructure: leave the seat to be played again
            log.warning("eval seat %s/%s abandoned: %s", claim.episode_id, claim.agent, error)
            return
        try:
            if isinstance(outcome, str):
                await self.ledger.end_seat(claim, reward=0.0, status="failed", error=outcome)
            else:
                await self.ledger.end_seat(
                    claim,
                    reward=outcome.reward,
                    score=outcome.score_json(),
                    metrics={**outcome.end.metrics, "turns": float(outcome.turns)},
                )
        except StaleFence:
            log.warning("eval seat %s/%s was taken over", claim.episode_id, claim.agent)
            return
        self.seats_played += 1

    async def _play(self, claim: SeatClaim, suite: ResolvedSuite, client: GatewayClient) -> Any:
        position, _member = suite.member_of(claim.member)
        try:
            environment = self._environment(suite, position)
            context = seat_context(claim, client, environment)
            task = make_task(environment, claim.parameters)
            complete = seat_completer(client, claim.api_key)

            return await play_seat(
                environment, task, context, complete, self.sampling(suite, claim.member)
            )
        except (StaleFence, TransportError):
            raise
        except TaskError as error:
            log.warning("eval seat %s/%s failed: %s", claim.episode_id, claim.agent, error)
            return f"{error}\n{error.traceback or ''}".strip()
        except RolloutError as error:
            return str(error)

    async def _mark_evaluated(self) -> None:
        """A finished run with nothing left to evaluate gets the `evaluated` setting (the local
        supervisor keeps its evaluator until then)."""
        assert self.run_id is not None
        settings = await self.ledger.run_settings(self.run_id)
        if not settings.finished or settings.evaluated:
            return
        pending = await self.ledger.eval_requests(self.run_id, pending=True)
        if any((r.run_id, r.suite) not in self._broken for r in pending):
            return
        jobs = await self.ledger.eval_jobs(self.run_id)
        if any(not job.scored for job in jobs):
            return
        await self.ledger.set_setting(self.run_id, live.EVALUATED, True)
