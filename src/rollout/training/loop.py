"""The trainer role (`rollout trainer --run RUN`): the training loop of one run.

One trainer per run holds the run's fenced lease (`trainer_lease(run)`: `trainer:<run>`). It:

1. restores the latest checkpoint (weights, optimizer, step) from the blob store, or starts from
   the base model, running the format warm-up first when the run asks for one (the warm-up
   result is version 0);
2. keeps enough groups of episodes queued for runners to stay busy: `(max_lag + 1)` steps'
   worth, so episodes keep playing while it trains;
3. takes `groups_per_step` complete groups, computes group-relative advantages, builds
   segments, takes one optimizer step with per-token importance weights from the recorded
   sampling logprobs, saves the checkpoint and records step + checkpoint atomically (fenced);
4. publishes a serving record for the newest checkpoint once the bridge has converted it.

Two trainers at once: a trainer that was paused and revived after another took its lease over
is refused at its next lease renewal (`LeaseHeld`) or fenced write (`StaleFence`: checkpoint,
train step, serving record); it then stands down with one line (`FencedOut`) and writes nothing
more. Its checkpoint files never replace the new holder's: each upload's key carries the lease
epoch (`checkpoint_uri`). A restarted trainer resumes from the last recorded checkpoint.

Several policies (`RunConfig.policies`): the one trainer steps each policy in turn, under the
run's one lease (so fencing holds for every policy's writes). Each policy has its own provider
(its LoRA rank and learning rate), version chain, checkpoints (`checkpoint_uri(..., policy)`)
and serving record; its step takes the complete groups its own steps have not trained yet and
trains only the turns of its own agents (`rollout.training.batch.policy_group`). The run
finishes once every policy reached `steps`.

Publish order: the checkpoint folder is uploaded and checked (`rollout.blobs.upload_dir`,
retried with backoff) before its record is written, so a checkpoint record never points at a
missing or partial folder; a serving record is written only when its files exist.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import random
import shutil
import tempfile
import time
from contextlib import AbstractAsyncContextManager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from rollout.blobs import UPLOAD_ATTEMPTS, BlobError, BlobStore, upload_dir
from rollout.contracts import DEFAULT_POLICY, Message
from rollout.harness.core import Environment
from rollout.harness.loading import load_environment
from rollout.harness.seeds import episode_seed
from rollout.ledger import (
    CheckpointRecord,
    EpisodeSpec,
    GroupRecord,
    Lease,
    LeaseHeld,
    Ledger,
    ServingRecord,
    StaleFence,
)
from rollout.ledger.leases import trainer_lease
from rollout.procs import process_label
from rollout.runs import live
from rollout.runs.config import TARGET_WINDOW, EvalSchedule, RunConfig, reached_target
from rollout.runs.policies import PolicyMap
from rollout.runs.spec import RunSpec
from rollout.training import retention
from rollout.training.advantages import AdvantageConfig
from rollout.training.batch import policy_group, segments_of_groups
from rollout.training.errors import FencedOut
from rollout.training.loss import LossConfig
from rollout.training.providers.base import TrainBatch, TrainingProvider
from rollout.training.providers.torch import TorchProvider
from rollout.training.segments import UNSAMPLED_VERSION

log = logging.getLogger("rollout.trainer")

LEASE_SECONDS = 30.0
RENEW_SECONDS = 2.0
"""The lease is renewed when its last renewal is older than this (one UPDATE): a trainer
revived after a pause renews before its next step and stands down at once if it was taken over."""
ANALYZE_FIRST_GROUPS = 32
"""The ledger's tables are analysed once this many groups are queued, then each time the queued
groups grow `ANALYZE_GROWTH`-fold (32, 128, 512, 2,048, ...: four times in a 300-step parity run),
so the planner's statistics follow a young run's tables (`Ledger.analyze_run_tables`)."""
ANALYZE_GROWTH = 4
SETTINGS_SECONDS = 1.0
"""Between steps, the run's settings (max_lag: how many steps of groups to queue) are read again
after this long; a step reads them at once. The trainer wakes at every seat end of a step (a
dozen times), and each wake-up read them before."""
RETENTION_SECONDS = 2.0
"""Checkpoint retention runs after a step when its last pass is older than this, and once more
when the run finishes: a pass reads the run's checkpoints, settings, serving and evals (about ten
statements), so after every step of a run stepping several times a second it was a good part of
the trainer's own work; where a step takes longer than this, it runs after every step."""


def checkpoint_uri(
    run_id: str, version: int, epoch: int | None = None, policy: str = DEFAULT_POLICY
) -> str:
    """The blob key of a checkpoint; with the writer's lease `epoch` in it, two trainers (a
    revived old one and its successor) never write the same key. A policy other than the
    default has a folder of its own.

    Example:
        >>> checkpoint_uri("r1", 3, 2), checkpoint_uri("r1", 3, 2, policy="scout")
        ('runs/r1/checkpoints/v000003-e2', 'runs/r1/checkpoints/scout/v000003-e2')
    """
    suffix = "" if epoch is None else f"-e{epoch}"
    folder = "" if policy == DEFAULT_POLICY else f"{policy}/"
    return f"runs/{run_id}/checkpoints/{folder}v{version:06d}{suffix}"


def make_provider(config: RunConfig, model_dir: Path, policy: str = DEFAULT_POLICY) -> Any:
    """The training provider of `policy` (the run's only one by default): `torch` (this
    machine) or `tinker` (hosted), with the policy's LoRA rank and learning rate."""
    if config.provider == "tinker":
        from rollout.training.providers.tinker import TinkerProvider

        return TinkerProvider.from_config(config)
    return TorchProvider(
        model_dir,
        lora_rank=config.lora_rank_of(policy),
        lr=config.learning_rate_of(policy),
        grad_clip=config.grad_clip,
        betas=(config.adam_beta1, config.adam_beta2),
        eps=config.adam_eps,
        device=config.device,
        dtype=config.dtype,
        seed=config.seed,
        micro_batch_tokens=config.micro_batch_tokens,
        gradient_checkpointing=config.gradient_checkpointing,
    )


@dataclass
class _PolicyState:
    """One policy's training state in the trainer (see the module docstring)."""

    name: str
    agents: tuple[int, ...] | None
    """The agents it trains on (None: every agent, the run's only policy)."""
    provider: Any
    version: int = 0
    recent: list[float] = field(default_factory=list)
    idle_since: float = field(default_factory=time.monotonic)

    def trained_group(self, group: GroupRecord) -> GroupRecord:
        return group if self.agents is None else policy_group(group, self.agents)


class Trainer:
    def __init__(
        self,
        ledger: Ledger,
        blobs: BlobStore,
        run_id: str,
        *,
        holder: str | None = None,
        work_dir: Path | None = None,
    ) -> None:
        self.ledger = ledger
        self.blobs = blobs
        self.run_id = run_id
        self.holder = holder or process_label("trainer")
        self.work_dir = work_dir or Path(tempfile.mkdtemp(prefix="rollout-trainer-"))
        self.lease: Lease | None = None
        self.backend = "local"
        """The run's inference backend (read from the run when `run` starts)."""
        self._lease_renewed = 0.0
        self._served: dict[str, int] = {}
        """Each policy's version known to be served (its serving record needs no read)."""
        self._analyze_at = ANALYZE_FIRST_GROUPS
        """Queued groups at which the ledger's tables are analysed next."""
        self._queued_at: tuple[int, float] | None = None
        """The version groups were last queued for, and when (`SETTINGS_SECONDS`)."""
        self._retained_at: float | None = None
        """When checkpoint retention last ran (`RETENTION_SECONDS`)."""
        self.evals: list[EvalSchedule] = []
        """The run's eval schedule (read from the run when `run` starts)."""
        self.policy_names: tuple[str, ...] = (DEFAULT_POLICY,)
        """The run's policies (read from the run when `run` starts)."""
        self.upload_attempts = UPLOAD_ATTEMPTS
        """Attempts at uploading a checkpoint before the trainer gives up (and exits)."""
        self.upload_delay = 0.5
        """Seconds before the first retry of an upload (doubled after each)."""

    async def _renew(self) -> Lease:
        now = time.monotonic()
        if self.lease is None or now - self._lease_renewed > RENEW_SECONDS:
            lease = await self.ledger.acquire_lease(
                trainer_lease(self.run_id), self.holder, LEASE_SECONDS
            )
            if self.lease is not None and lease.epoch != self.lease.epoch:
                # Lapsed, held by another trainer meanwhile, then taken again: the ledger may
                # have moved past what this process holds in memory.
                raise StaleFence(
                    f"lease {lease.name!r} epoch {self.lease.epoch} lapsed and another trainer "
                    f"held it before this one took it again at epoch {lease.epoch}"
                )
            self.lease = lease
            self._lease_renewed = now
        return self.lease

    async def run(self, stop: asyncio.Event) -> None:
        """Train the run until its last step (or `stop`); see the module docstring.

        Raises:
            FencedOut: another trainer took the lease over; nothing more was written.
        """
        try:
            await self._run(stop)
        except (StaleFence, LeaseHeld) as error:
            epoch = self.lease.epoch if self.lease is not None else None
            raise FencedOut(
                f"trainer {self.holder!r} of run {self.run_id!r} (lease epoch {epoch}) stands "
                f"down: {error}; it writes nothing more"
            ) from None

    async def _run(self, stop: asyncio.Event) -> None:
        run = await self.ledger.get_run(self.run_id)
        spec = RunSpec.of(run)
        self.backend = spec.backend
        config = spec.require_training(run.name)
        self.evals = config.evals
        environment = load_environment(run.environment)
        model_dir = Path(spec.model)
        lease = await self._wait_for_lease(stop)
        if lease is None:
            return
        mapping = PolicyMap.recorded(config.policies)
        self.policy_names = mapping.names
        policies: list[_PolicyState] = []
        for name in mapping.names:
            provider = await asyncio.to_thread(make_provider, config, model_dir, name)
            agents = mapping.agents_of(name) if mapping.several else None
            state = _PolicyState(name, agents, provider)
            latest = await self.ledger.latest_checkpoint(self.run_id, policy=name)
            if latest is not None:
                local = self.work_dir / f"restore-{name}-v{latest.version}"
                await asyncio.to_thread(self.blobs.get_dir, latest.uri, local, link=True)
                await asyncio.to_thread(provider.load, local)
                state.version = latest.version
                log.info("resumed %s policy %s at v%s", self.run_id, name, state.version)
            else:
                metrics = await asyncio.to_thread(
                    self._warmup, provider, environment, config, model_dir
                )
                await self._save(provider, lease, 0, None, [], metrics, policy=name)
            policies.append(state)
        group_size = config.group_size or environment.group_size
        target = config.stop_at_reward
        while not stop.is_set():
            active = [p for p in policies if p.version < config.steps]
            if not active:
                break
            if target is not None and all(reached_target(p.recent, target) for p in policies):
                log.info("mean reward of the last %s steps reached %s", TARGET_WINDOW, target)
                break
            lease = await self._renew()
            for policy in policies:
                if self._served.get(policy.name) != policy.version:
                    await self._publish_serving(lease, policy=policy.name)
            slowest = min(p.version for p in policies)  # groups are queued for every policy
            await self._queue_groups(environment, config, group_size, slowest)
            stepped = False
            for policy in active:  # each policy in turn, on the groups it has not trained
                groups = await self.ledger.complete_groups(
                    self.run_id, config.groups_per_step, policy=policy.name, only_if_full=True
                )
                if len(groups) < config.groups_per_step:
                    continue
                await self._train_step(policy, groups, config, environment)
                stepped = True
            if not stepped:
                await self.ledger.wait(["groups", "conversions"], 1.0, run_id=self.run_id)
        if not stop.is_set():
            for policy in policies:
                await self._publish_until_served(stop, policy=policy.name)
            await self._retain(every=0.0)  # what the last passes let be, before finishing
            await self.ledger.set_setting(self.run_id, live.FINISHED, True)

    def _engines_asleep(self, config: RunConfig) -> AbstractAsyncContextManager[None]:
        """The run's vLLM engines asleep while a step trains, when the preset asks for it.

        Imported only then: the vLLM serving module (FastAPI and the vLLM client with it) costs
        a trainer that needs none of it a quarter of a second at start-up.
        """
        if not (config.backend == "vllm" and config.vllm.sleep_while_training):
            return contextlib.nullcontext()
        from rollout.inference.vllm_serving import engines_asleep

        return engines_asleep(self.ledger, self.run_id)

    async def _train_step(
        self,
        policy: _PolicyState,
        groups: list[GroupRecord],
        config: RunConfig,
        environment: Environment,
    ) -> None:
        """One step of `policy` on `groups` (only its agents' turns), saved and recorded."""
        began = time.monotonic()
        trained = [policy.trained_group(group) for group in groups]
        async with self._engines_asleep(config):  # colocated GPU
            metrics = await asyncio.to_thread(
                self._step, policy.provider, trained, config, policy.version, environment
            )
        metrics["step_seconds"] = time.monotonic() - began  # forward, backward, optimizer
        metrics["wait_seconds"] = began - policy.idle_since  # groups, queueing, serving
        lease = await self._renew()
        await self._save(
            policy.provider,
            lease,
            policy.version + 1,
            policy.version,
            groups,
            metrics,
            policy=policy.name,
        )
        policy.idle_since = time.monotonic()
        policy.version += 1
        policy.recent.append(metrics["reward"])

    async def _wait_for_lease(self, stop: asyncio.Event) -> Lease | None:
        while not stop.is_set():
            try:
                return await self._renew()
            except Exception as error:  # held by a live trainer: wait for it to expire
                log.info("trainer lease busy (%s); waiting", error)
                await asyncio.sleep(1.0)
        return None

    def _warmup(
        self,
        provider: Any,
        environment: Environment,
        config: RunConfig,
        model_dir: Path,
    ) -> dict[str, float]:
        if not config.warmup_steps or environment.warmup is None:
            return {}
        from rollout.rendering import HFRenderer
        from rollout.training.warmup import warmup_segment

        renderer = HFRenderer(model_dir)
        stop = renderer.stop_token_ids[:1]
        rng = random.Random(config.seed)
        losses: list[float] = []
        began = time.monotonic()
        lr = provider.lr
        provider.lr = config.warmup_learning_rate
        for _ in range(config.warmup_steps):
            segments = []
            for _ in range(config.warmup_batch):
                messages, answer = environment.warmup(rng)
                conversation = list(messages)
                if environment.system_prompt and (
                    not conversation or conversation[0].role != "system"
                ):  # render exactly as episodes will, system prompt included
                    conversation.insert(0, Message.system(environment.system_prompt))
                prompt = renderer.render(conversation)
                segments.append(warmup_segment(prompt, [*renderer.encode(answer), *stop]))
            result = provider.forward_backward(
                TrainBatch(tuple(segments), loss=LossConfig(kind="supervised"))
            )
            provider.optim_step()
            losses.append(result.metrics.get("loss", float("nan")))
        provider.reset_optimizer()
        provider.lr = lr
        return {
            "warmup_steps": float(config.warmup_steps),
            "warmup_loss": losses[-1] if losses else float("nan"),
            "warmup_seconds": time.monotonic() - began,
        }

    def _step(
        self,
        provider: TrainingProvider,
        groups: list[GroupRecord],
        config: RunConfig,
        version: int,
        environment: Environment,
    ) -> dict[str, float]:
        advantage_config = AdvantageConfig(
            normalize_std=config.normalize_advantages, discount=config.discount
        )
        per_group = segments_of_groups(
            groups, advantage_config, drop_zero_advantage=True, roles=environment.role
        )
        segments = [segment for group in per_group for segment in group.segments]
        rewards = [
            seat.reward for group in per_group for seat in group.seats if seat.status == "completed"
        ]
        # Lag of trained samples: versions between the one that sampled and the one now updated.
        lags = [
            float(version - v)
            for segment in segments
            for v in sorted(set(segment.versions))
            if v != UNSAMPLED_VERSION
        ]
        episodes = sum(len(group.episodes) for group in groups)
        metrics: dict[str, float] = {
            "reward": sum(rewards) / len(rewards) if rewards else 0.0,
            "episodes": float(episodes),
            "segments": float(len(segments)),
            "lag_mean": sum(lags) / len(lags) if lags else 0.0,
            "lag_max": max(lags) if lags else 0.0,
        }
        if segments:
            loss = LossConfig(
                kind="policy_gradient",
                importance=config.importance,
                entropy_coef=config.entropy_coef,
            )
            result = provider.forward_backward(TrainBatch(tuple(segments), loss=loss))
            metrics.update(result.metrics)
            metrics.update(provider.optim_step())
        else:  # every group was uniform: nothing to learn, but the step still counts
            metrics["loss"] = 0.0
            metrics.update(provider.optim_step())
        return metrics

    async def _save(
        self,
        provider: TrainingProvider,
        lease: Lease,
        version: int,
        parent: int | None,
        groups: list[GroupRecord],
        metrics: dict[str, float],
        *,
        policy: str = DEFAULT_POLICY,
    ) -> None:
        began = time.monotonic()
        local = self.work_dir / f"{policy}-v{version}"
        await asyncio.to_thread(shutil.rmtree, local, True)  # left by a failed earlier try
        saved = await asyncio.to_thread(provider.save, local)
        uri = checkpoint_uri(self.run_id, version, lease.epoch, policy)
        # Uploaded and checked before it is recorded: a record never names a partial folder.
        await asyncio.to_thread(
            upload_dir,
            self.blobs,
            local,
            uri,
            attempts=self.upload_attempts,
            delay=self.upload_delay,
            move=True,  # the local save is only the upload's source
        )
        checkpoint = CheckpointRecord(
            run_id=self.run_id,
            version=version,
            parent_version=parent,
            uri=uri,
            kind=saved.kind,
            created_at=time.time(),
            metadata=dict(saved.metadata),
            policy=policy,
        )
        metrics["save_seconds"] = time.monotonic() - began  # save + upload, before the record
        await self.ledger.record_train_step(
            lease,
            self.run_id,
            version,
            [g.group_index for g in groups],
            {k: float(v) for k, v in metrics.items()},
            checkpoint,
        )
        log.info(
            "step %s%s: %s", version, "" if policy == DEFAULT_POLICY else f" {policy}", metrics
        )
        # Scheduled evals (the evaluator role plays them): of version V once every policy has
        # it (an eval plays each policy's checkpoint V).
        due = [schedule for schedule in self.evals if schedule.due(version)]
        if due and await self._every_policy_has(version, policy):
            for schedule in due:
                await self.ledger.request_eval(self.run_id, schedule.suite, version)
        # The local save was only the upload's source; old checkpoints' files go by retention.
        await asyncio.to_thread(shutil.rmtree, local, True)
        await self._retain()

    async def _retain(self, every: float = RETENTION_SECONDS) -> None:
        """Delete the files of the checkpoints retention lets go, unless it ran in the last
        `every` seconds."""
        now = time.monotonic()
        if self._retained_at is not None and now - self._retained_at < every:
            return
        self._retained_at = now
        try:
            await retention.apply(self.ledger, self.blobs, self.run_id)
        except Exception:  # files left behind are `rollout gc`'s to delete, never a failed step
            log.exception("checkpoint retention failed")

    async def _every_policy_has(self, version: int, saved: str) -> bool:
        """Whether every policy of the run has checkpoint `version` (`saved` just recorded it)."""
        for name in self.policy_names:
            if name != saved:
                latest = await self.ledger.latest_checkpoint(self.run_id, policy=name)
                if latest is None or latest.version < version:
                    return False
        return True

    async def _queue_groups(
        self, environment: Environment, config: RunConfig, group_size: int, version: int
    ) -> None:
        """Keep `queue_steps` (default max_lag + 1) steps of groups queued beyond those trained.

        With max_lag 0 that is exactly the next step's groups: nothing overlaps (synchronous).
        Between steps (the same `version`) the settings are read again after `SETTINGS_SECONDS`.
        """
        now = time.monotonic()
        if self._queued_at is not None:
            queued_version, queued_time = self._queued_at
            if queued_version == version and now - queued_time < SETTINGS_SECONDS:
                return
        self._queued_at = (version, now)
        settings = await self.ledger.run_settings(self.run_id, config)
        max_lag = settings.max_lag
        ahead = max_lag + 1 if max_lag == 0 or config.queue_steps is None else config.queue_steps
        total = config.steps * config.groups_per_step
        wanted = min(total, (version + ahead) * config.groups_per_step)
        have = settings.groups_queued
        if have >= wanted:
            return
        specs: list[EpisodeSpec] = []
        for group_index in range(have, wanted):
            parameters = environment.draw_parameters(group_index, config.seed)
            for member in range(group_size):
                specs.append(
                    EpisodeSpec(
                        group_index=group_index,
                        member=member,
                        parameters=parameters,
                        seed=episode_seed(config.seed, group_index, member),
                        agents=environment.agents,
                    )
                )
        await self.ledger.add_episodes(self.run_id, specs)
        await self.ledger.set_setting(self.run_id, live.GROUPS_QUEUED, wanted)
        if wanted >= self._analyze_at:
            self._analyze_at = wanted * ANALYZE_GROWTH
            await self.ledger.analyze_run_tables()

    async def _publish_serving(self, lease: Lease, *, policy: str = DEFAULT_POLICY) -> bool:
        """Serve `policy`'s newest checkpoint once every backend has a conversion of it."""
        latest = await self.ledger.latest_checkpoint(self.run_id, policy=policy)
        if latest is None:
            return False
        current = await self.ledger.serving(self.run_id, policy=policy)
        if current is not None and current.version >= latest.version:
            self._served[policy] = latest.version
            return True
        conversions = await self.ledger.conversions(self.run_id, latest.version, policy=policy)
        if self.backend not in conversions:
            return False
        missing = await asyncio.to_thread(self._missing_blobs, conversions.values())
        if missing:  # deleted or never landed: a server must never be told to load it
            log.warning("not serving v%s: no files at %s", latest.version, ", ".join(missing))
            return False
        await self.ledger.set_serving(
            lease,
            ServingRecord(
                run_id=self.run_id,
                version=latest.version,
                uris=dict(conversions),
                created_at=time.time(),
                policy=policy,
            ),
        )
        self._served[policy] = latest.version
        return True

    def _missing_blobs(self, uris: Any) -> list[str]:
        """The URIs of the blob store that name nothing there (others are not checked)."""
        missing = []
        for uri in uris:
            try:
                if not self.blobs.exists(uri):
                    missing.append(uri)
            except BlobError:  # not this store's URI (a hosted provider's): not ours to check
                continue
        return missing

    async def _publish_until_served(
        self, stop: asyncio.Event, *, policy: str = DEFAULT_POLICY
    ) -> None:
        """Publish `policy`'s newest checkpoint and wait (a minute at most) until a server
        says it serves it: a run is finished only once its last checkpoints were served."""
        deadline = time.monotonic() + 60
        latest = await self.ledger.latest_checkpoint(self.run_id, policy=policy)
        while not stop.is_set() and time.monotonic() < deadline:
            if await self._publish_serving(await self._renew(), policy=policy):
                acks = await self.ledger.serving_acks(self.run_id, policy=policy)
                if latest is None or max(acks.values(), default=-1) >= latest.version:
                    return
            await self.ledger.wait(["conversions", "serving_acks"], 1.0, run_id=self.run_id)
