"""The bridge role: follow checkpoints and convert each for every backend its run serves on."""

from __future__ import annotations

import asyncio
import logging

from rollout.blobs import BlobStore
from rollout.bridges.convert import convert_checkpoint
from rollout.ledger import Ledger, RunRecord
from rollout.runs.errors import RunError
from rollout.runs.spec import RunSpec

log = logging.getLogger("rollout.bridge")


class Bridge:
    def __init__(self, ledger: Ledger, blobs: BlobStore, *, poll: float = 2.0) -> None:
        self.ledger = ledger
        self.blobs = blobs
        self.poll = poll
        self._done: set[tuple[str, str, int, str]] = set()
        self._specs: dict[str, RunSpec | None] = {}

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
        """Convert every checkpoint that lacks a conversion. Returns how many were made."""
        made = 0
        for run in await self.ledger.list_runs():
            settings = await self.ledger.run_settings(run.run_id)
            if settings.finished:
                continue
            spec = self._spec(run)
            if spec is None:
                continue
            backends = [spec.backend]
            # Every policy's checkpoints (a run with several policies has a chain for each),
            # but those whose files retention deleted (training.retention).
            for checkpoint in await self.ledger.checkpoints(run.run_id, policy=None):
                policy = checkpoint.policy
                if checkpoint.version in settings.deleted_of(policy):
                    continue
                for backend in backends:
                    key = (run.run_id, policy, checkpoint.version, backend)
                    if key in self._done:
                        continue
                    done = await self.ledger.conversions(
                        run.run_id, checkpoint.version, policy=policy
                    )
                    if backend not in done:
                        uri = await asyncio.to_thread(
                            convert_checkpoint, self.blobs, checkpoint.uri, backend
                        )
                        await self.ledger.record_conversion(
                            run.run_id, checkpoint.version, backend, uri, policy=policy
                        )
                        made += 1
                        log.info(
                            "converted %s %s v%s for %s",
                            run.run_id,
                            policy,
                            checkpoint.version,
                            backend,
                        )
                    self._done.add(key)
        return made

    async def run(self, stop: asyncio.Event) -> None:
        while not stop.is_set():
            try:
                await self.sync_once()
            except Exception:
                log.exception("conversion failed; retrying")
            await self.ledger.wait("checkpoints", timeout=self.poll)
