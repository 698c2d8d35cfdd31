"""Checkpoint retention: which of a run's checkpoints keep their files.

Every step writes a checkpoint (and the bridge a conversion of it) to the blob store; kept
forever they pile up (180 MB after one README run). Each policy of a run
(`rollout.runs.policies`) has a version chain of its own, and retention applies to each chain
on its own: of each policy's versions, a run keeps

- the last `keep_checkpoints` versions (a run setting, `rollout.runs.live`, from the preset;
  `rollout runs set RUN --keep-checkpoints N`), the newest always, since a restarted trainer
  resumes from it;
- versions marked to keep (the run setting `keep_versions`, a list, `rollout runs set RUN
  --keep-version V`; in every policy's chain);
- whatever a server serves or is told to serve (the policy's serving record and every
  acknowledgement of it);
- versions an eval still has to play (a request without a scored job; in every policy's chain,
  since an eval of version V plays each policy's checkpoint V).

The others' files (the checkpoint and its conversions) are deleted and the deletion is recorded
as a fact: the run setting `deleted_checkpoints` lists the default policy's versions whose files
are gone and `deleted_policy_checkpoints` each other policy's (`RunSettings.deleted_of`), so
`rollout runs show` can say which are kept. The trainer applies this after a step it records
(at most once every `RETENTION_SECONDS`, and when the run finishes: `rollout.training.loop`);
`rollout gc` applies it to every run.

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
from rollout.contracts import DEFAULT_POLICY
from rollout.ledger import Ledger
from rollout.runs import live

log = logging.getLogger("rollout.retention")


def kept_versions(versions: Iterable[int], *, keep: int, pinned: set[int]) -> set[int]:
    """The last `keep` (at least one) of `versions`, plus those in `pinned` that exist."""
    ordered = sorted(set(versions))
    return set(ordered[-max(1, keep) :]) | (pinned & set(ordered))


@dataclass(frozen=True)
class Retention:
    """One policy's checkpoints of a run as retention sees them."""

    run_id: str
    kept: list[int]
    """Versions whose files stay."""
    deleted: list[int]
    """Versions whose files were deleted earlier."""
    to_delete: list[int]
    """Versions whose files retention deletes now."""
    policy: str = DEFAULT_POLICY
    """The policy whose version chain this is."""


async def pinned_versions(ledger: Ledger, run_id: str, policy: str = DEFAULT_POLICY) -> set[int]:
    """`policy`'s versions kept whatever their age: marked, served, or still to be evaluated
    (an eval of version V plays every policy's checkpoint V)."""
    pinned = set((await ledger.run_settings(run_id)).keep_versions)
    serving = await ledger.serving(run_id, policy=policy)
    if serving is not None:
        pinned.add(serving.version)
    pinned |= set((await ledger.serving_acks(run_id, policy=policy)).values())
    pinned |= {r.version for r in await ledger.eval_requests(run_id) if r.job_id is None}
    pinned |= {job.version for job in await ledger.eval_jobs(run_id) if not job.scored}
    return pinned


async def plan(ledger: Ledger, run_id: str, policy: str = DEFAULT_POLICY) -> Retention:
    """What the run keeps of `policy`'s chain and what it may delete now (nothing is
    changed)."""
    settings = await ledger.run_settings(run_id)
    keep = settings.keep_checkpoints
    deleted = sorted(settings.deleted_of(policy))
    versions = [c.version for c in await ledger.checkpoints(run_id, policy=policy)]
    pinned = await pinned_versions(ledger, run_id, policy)
    kept = kept_versions(versions, keep=keep, pinned=pinned)
    gone = set(deleted)
    to_delete = sorted(v for v in versions if v not in kept and v not in gone)
    return Retention(run_id, sorted(kept), deleted, to_delete, policy)


async def policies(ledger: Ledger, run_id: str) -> list[str]:
    """The policies with checkpoints in the run, the default policy first (the default policy
    alone before any checkpoint)."""
    names = {c.policy for c in await ledger.checkpoints(run_id, policy=None)}
    return sorted(names | {DEFAULT_POLICY}, key=lambda name: (name != DEFAULT_POLICY, name))


async def plans(ledger: Ledger, run_id: str) -> list[Retention]:
    """`plan` of each policy's chain (`policies`): a run with one policy has one."""
    return [await plan(ledger, run_id, policy) for policy in await policies(ledger, run_id)]


async def apply(ledger: Ledger, blobs: BlobStore, run_id: str, *, dry_run: bool = False) -> int:
    """Delete the files of the checkpoints retention lets go, in each policy's chain, and
    record it; return bytes freed (with `dry_run`, bytes that would be freed, measured by
    deleting nothing)."""
    freed = 0
    for retention in await plans(ledger, run_id):
        freed += await _apply(ledger, blobs, retention, dry_run=dry_run)
    return freed


async def _apply(ledger: Ledger, blobs: BlobStore, retention: Retention, *, dry_run: bool) -> int:
    if not retention.to_delete:
        return 0
    run_id, policy = retention.run_id, retention.policy
    uris = {c.version: c.uri for c in await ledger.checkpoints(run_id, policy=policy)}
    freed = 0
    for version in retention.to_delete:
        conversions = await ledger.conversions(run_id, version, policy=policy)
        for uri in [uris[version], *conversions.values()]:
            if dry_run:
                freed += await asyncio.to_thread(_size, blobs, uri)
            else:
                freed += await asyncio.to_thread(blobs.delete, uri)
    if not dry_run:
        deleted = sorted(set(retention.deleted) | set(retention.to_delete))
        if policy == DEFAULT_POLICY:
            await ledger.set_setting(run_id, live.DELETED_CHECKPOINTS, deleted)
        else:
            others = dict((await ledger.run_settings(run_id)).deleted_policy_checkpoints)
            others[policy] = tuple(deleted)
            await ledger.set_setting(run_id, live.DELETED_POLICY_CHECKPOINTS, others)
        shown = "" if policy == DEFAULT_POLICY else f" of policy {policy}"
        log.info(
            "deleted the files of checkpoints %s%s (%d bytes)", retention.to_delete, shown, freed
        )
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
