"""The bridge role: follow checkpoints and convert each for every backend its run serves on."""

from __future__ import annotations

import asyncio
import logging

from rollout.blobs import BlobStore
from rollout.bridges.convert import convert_checkpoint
from rollout.ledger import CheckpointRecord, Ledger, RunRecord
from rollout.runs.errors import RunError
from rollout.runs.policies import PolicyMap
from rollout.runs.spec import RunSpec

log = logging.getLogger("rollout.bridge")


class Bridge:
    def __init__(self, ledger: Ledger, blobs: BlobStore, *, poll: float = 2.0) -> None:
        self.ledger = ledger
        self.blobs = blobs
        self.poll = poll
        self._done: set[tuple[str, str, int, str]] = set()
        self._specs: dict[str, RunSpec | None] = {}
        self._finished: set[str] = set()
        """Runs seen finished: their trainer has stopped, no checkpoint is recorded after."""
        self._handled: dict[tuple[str, str], int] = {}
        """(run, policy) -> the newest version converted or skipped (deleted) in order: a wake-up
        reads only the checkpoints after the oldest of these over the run's policies."""

    def _spec(self, run: RunRecord) -> RunSpec | None:
        """The run's spec; None for runs with nothing to convert (warned about once)."""
        if run.run_id not in self._specs:
            try:
                spec: RunSpec | None = RunSpec.of(run)
            except RunError as error:
                log.warning("%s; not converting its checkpoints", error)
                spec = None
            self._specs[run.run_id] = spec if spec is None or spec.kind == "train" else None
        return self._specs[run.run_id]

    async def sync_once(self) -> int:
        """Convert every checkpoint that lacks a conversion. Returns how many were made.

        What it reads does not grow with the ledger's history: a run seen finished is not read
        again, and of the others only the checkpoints after those handled before (at the first
        wake-up of this process, every checkpoint of each unfinished run).
        """
        made = 0
        for run in await self.ledger.list_runs():
            if run.run_id in self._finished:
                continue
            spec = self._spec(run)
            if spec is None:
                continue
            settings = await self.ledger.run_settings(run.run_id)
            if settings.finished:
                self._finished.add(run.run_id)
                continue
            backends = [spec.backend]
            names = PolicyMap.recorded(spec.training.policies if spec.training else {}).names
            after = min(self._handled.get((run.run_id, name), -1) for name in names)
            # Every policy's checkpoints (a run with several policies has a chain for each),
            # but those whose files retention deleted (training.retention).
            for checkpoint in await self.ledger.checkpoints(run.run_id, policy=None, after=after):
                policy = checkpoint.policy
                if checkpoint.version not in settings.deleted_of(policy):
                    for backend in backends:
                        made += await self._convert(run, checkpoint, backend)
                key = (run.run_id, policy)
                self._handled[key] = max(self._handled.get(key, -1), checkpoint.version)
        return made

    async def _convert(self, run: RunRecord, checkpoint: CheckpointRecord, backend: str) -> int:
        """Convert `checkpoint` for `backend` unless that is done; 1 if this made it."""
        policy = checkpoint.policy
        key = (run.run_id, policy, checkpoint.version, backend)
        if key in self._done:
            return 0
        made = 0
        done = await self.ledger.conversions(run.run_id, checkpoint.version, policy=policy)
        if backend not in done:
            uri = await asyncio.to_thread(convert_checkpoint, self.blobs, checkpoint.uri, backend)
            await self.ledger.record_conversion(
                run.run_id, checkpoint.version, backend, uri, policy=policy
            )
            made = 1
            log.info("converted %s %s v%s for %s", run.run_id, policy, checkpoint.version, backend)
        self._done.add(key)
        return made

    async def run(self, stop: asyncio.Event) -> None:
        while not stop.is_set():
            try:
                await self.sync_once()
            except Exception:
                log.exception("conversion failed; retrying")
            await self.ledger.wait("checkpoints", timeout=self.poll)
