"""Checkpoint retention: which of a run's checkpoints keep their files.

Every step writes a checkpoint (and the bridge a conversion of it) to the blob store; kept
forever they pile up (180 MB after one README run). A run keeps:

- the last `keep_checkpoints` versions (a run setting, `rollout.runs.live`, from the preset;
  `rollout runs set RUN --keep-checkpoints N`), the newest always, since a restarted trainer
  resumes from it;
- versions marked to keep (the run setting `keep_versions`, a list, `rollout runs set RUN
  --keep-version V`);
- whatever a server serves or is told to serve (the serving record and every acknowledgement);
- versions an eval still has to play (a request without a scored job).

The others' files (the checkpoint and its conversions) are deleted and the deletion is recorded
as a fact: the run setting `deleted_checkpoints` lists the versions whose files are gone, so
`rollout runs show` can say which are kept. The trainer applies this after each step it
records; `rollout gc` applies it to every run.

Example:
    >>> sorted(kept_versions(range(10), keep=3, pinned={2}))
    [2, 7, 8, 9]
    >>> sorted(kept_versions([0, 1], keep=3, pinned=set()))
    [0, 1]
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Iterable
from dataclasses import dataclass

from rollout.blobs import BlobStore
from rollout.ledger import Ledger
from rollout.runs import live

log = logging.getLogger("rollout.retention")


def kept_versions(versions: Iterable[int], *, keep: int, pinned: set[int]) -> set[int]:
    """The last `keep` (at least one) of `versions`, plus those in `pinned` that exist."""
    ordered = sorted(set(versions))
    return set(ordered[-max(1, keep) :]) | (pinned & set(ordered))


@dataclass(frozen=True)
class Retention:
    """A run's checkpoints as retention sees them."""

    run_id: str
    kept: list[int]
    """Versions whose files stay."""
    deleted: list[int]
    """Versions whose files were deleted earlier."""
    to_delete: list[int]
    """Versions whose files this policy deletes now."""


async def pinned_versions(ledger: Ledger, run_id: str) -> set[int]:
    """Versions kept whatever their age: marked, served, or still to be evaluated."""
    pinned = set((await ledger.run_settings(run_id)).keep_versions)
    serving = await ledger.serving(run_id)
    if serving is not None:
        pinned.add(serving.version)
    pinned |= set((await ledger.serving_acks(run_id)).values())
    pinned |= {r.version for r in await ledger.eval_requests(run_id) if r.job_id is None}
    pinned |= {job.version for job in await ledger.eval_jobs(run_id) if not job.scored}
    return pinned


async def plan(ledger: Ledger, run_id: str) -> Retention:
    """What the run keeps and what it may delete now (nothing is changed)."""
    settings = await ledger.run_settings(run_id)
    keep = settings.keep_checkpoints
    deleted = sorted(settings.deleted_checkpoints)
    versions = [c.version for c in await ledger.checkpoints(run_id)]
    kept = kept_versions(versions, keep=keep, pinned=await pinned_versions(ledger, run_id))
    gone = set(deleted)
    to_delete = sorted(v for v in versions if v not in kept and v not in gone)
    return Retention(run_id, sorted(kept), deleted, to_delete)


async def apply(ledger: Ledger, blobs: BlobStore, run_id: str, *, dry_run: bool = False) -> int:
    """Delete the files of the checkpoints the policy lets go and record it; return bytes
    freed (with `dry_run`, bytes that would be freed, measured by deleting nothing)."""
    retention = await plan(ledger, run_id)
    if not retention.to_delete:
        return 0
    uris = {c.version: c.uri for c in await ledger.checkpoints(run_id)}
    freed = 0
    for version in retention.to_delete:
        targets = [uris[version], *(await ledger.conversions(run_id, version)).values()]
        for uri in targets:
            if dry_run:
                freed += await asyncio.to_thread(_size, blobs, uri)
            else:
                freed += await asyncio.to_thread(blobs.delete, uri)
    if not dry_run:
        deleted = sorted(set(retention.deleted) | set(retention.to_delete))
        await ledger.set_setting(run_id, live.DELETED_CHECKPOINTS, deleted)
        log.info("deleted the files of checkpoints %s (%d bytes)", retention.to_delete, freed)
    return freed


def _size(blobs: BlobStore, uri: str) -> int:
    """Bytes under `uri` (local stores; other stores report 0 in a dry run)."""
    path = getattr(blobs, "path", None)
    if path is None:
        return 0
    from pathlib import Path

    target = path(uri)
    if not isinstance(target, Path) or not target.exists():
        return 0
    if target.is_file():
        return target.stat().st_size
    return sum(p.stat().st_size for p in target.rglob("*") if p.is_file())
