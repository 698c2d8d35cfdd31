"""`rollout gc` and `rollout runs delete`: state that does not pile up.

`collect` (behind `rollout gc`) frees what nothing needs any more:

- each run's checkpoints past retention (`rollout.training.retention`: of each policy's
  chain, the last `keep_checkpoints`, marked, served and still-to-evaluate ones stay);
- blob folders under `runs/` that no fact references: those of deleted runs, and those of
  existing runs that no checkpoint or conversion names (older than `ORPHAN_AGE` seconds, so a
  checkpoint uploaded but not yet recorded is never taken);
- cache folders (`<state>/cache/<run_id>/...`) of deleted runs, of deleted checkpoints
  (`weights/<backend>/v<N>`, and `<policy>-v<N>` of a policy other than the default), and
  per-process folders (`trainer-<pid>`) of processes gone.

`delete_run` (behind `rollout runs delete`) removes one run: its blobs, its cache and every fact
of it in the ledger. A run that may still be training (not finished, stopped or failed) is
refused: `rollout runs stop RUN` first.

Both return what they did with the bytes freed; `dry_run` measures without deleting.
"""

from __future__ import annotations

import asyncio
import re
import shutil
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from rollout.blobs import BlobStore
from rollout.contracts import DEFAULT_POLICY
from rollout.errors import RolloutError
from rollout.inference.weights_cache import WEIGHTS
from rollout.ledger import Ledger
from rollout.procs import process_alive
from rollout.training import retention

ORPHAN_AGE = 600.0
"""Seconds a blob folder of an existing run must be unreferenced and old before gc takes it."""
_PROCESS_FOLDER = re.compile(r"^[a-z]+-(\d+)$")  # trainer-1234, vllm-1234: a process's scratch
# v12 (the default policy's), scout-v12 (another's: weights_cache.version_folder)
_CACHED_CHECKPOINT = re.compile(r"^(?:([a-z][a-z0-9_-]*)-)?v(\d+)$")


@dataclass
class Collected:
    """What `collect` or `delete_run` freed (or, in a dry run, would free)."""

    dry_run: bool
    bytes_freed: int = 0
    checkpoints: dict[str, list[int]] = field(default_factory=dict)
    """Run name -> checkpoint versions whose files go by retention (`name/policy` for a
    policy other than the default)."""
    blobs: list[str] = field(default_factory=list)
    """Blob folders no fact references."""
    caches: list[str] = field(default_factory=list)
    """Local cache folders."""

    def as_json(self) -> dict[str, Any]:
        return {
            "dry_run": self.dry_run,
            "bytes_freed": self.bytes_freed,
            "checkpoints": self.checkpoints,
            "blobs": self.blobs,
            "caches": self.caches,
        }


def folder_size(path: Path) -> int:
    """Bytes of the files under `path` (0 when it is missing)."""
    if path.is_file():
        return path.stat().st_size
    if not path.is_dir():
        return 0
    return sum(p.stat().st_size for p in path.rglob("*") if p.is_file() and not p.is_symlink())


def _remove(path: Path, collected: Collected) -> None:
    collected.bytes_freed += folder_size(path)
    collected.caches.append(str(path))
    if not collected.dry_run:
        shutil.rmtree(path, ignore_errors=True)


async def collect(
    ledger: Ledger, blobs: BlobStore, cache_dir: Path, *, dry_run: bool = False
) -> Collected:
    """Free checkpoints past retention, unreferenced blobs and stale caches (module docstring)."""
    collected = Collected(dry_run)
    runs = {run.run_id: run for run in await ledger.list_runs()}
    referenced: set[str] = set()
    kept: dict[str, set[tuple[str, int]]] = {}
    folders: set[str] = set()
    for run in runs.values():
        plans = await retention.plans(ledger, run.run_id)
        for plan in plans:
            if plan.to_delete:
                key = run.name if plan.policy == DEFAULT_POLICY else f"{run.name}/{plan.policy}"
                collected.checkpoints[key] = plan.to_delete
        collected.bytes_freed += await retention.apply(ledger, blobs, run.run_id, dry_run=dry_run)
        kept[run.run_id] = set()
        for plan in plans:
            if plan.policy != DEFAULT_POLICY:  # a folder of its own (training.checkpoint_uri)
                folders.add(f"runs/{run.run_id}/checkpoints/{plan.policy}")
            gone = set(plan.deleted) | set(plan.to_delete)
            chain = await ledger.checkpoints(run.run_id, policy=plan.policy)
            checkpoints = [c for c in chain if c.version not in plan.deleted]
            kept[run.run_id] |= {(plan.policy, c.version) for c in chain if c.version not in gone}
            # Retention's own deletions are counted above, not again as unreferenced blobs.
            for checkpoint in checkpoints:
                conversions = await ledger.conversions(
                    run.run_id, checkpoint.version, policy=plan.policy
                )
                referenced |= {blobs.uri(uri) for uri in [checkpoint.uri, *conversions.values()]}
    await asyncio.to_thread(_collect_blobs, blobs, set(runs), referenced, folders, collected)
    await asyncio.to_thread(_collect_caches, cache_dir, kept, collected)
    return collected


def _blob_folder(key: str, policy_folders: set[str]) -> str:
    """The folder of blob `key` that one fact names: `runs/<run>/<kind>/<name>`, one level
    deeper under a policy's checkpoint folder (`policy_folders`).

    Example:
        >>> _blob_folder("runs/r1/checkpoints/v000003-e2/model.safetensors", set())
        'runs/r1/checkpoints/v000003-e2'
        >>> _blob_folder("runs/r1/checkpoints/scout/v000003-e2/a", {"runs/r1/checkpoints/scout"})
        'runs/r1/checkpoints/scout/v000003-e2'
    """
    parts = key.split("/")
    depth = 5 if "/".join(parts[:4]) in policy_folders else 4
    return "/".join(parts[:depth])


def _collect_blobs(
    blobs: BlobStore,
    run_ids: set[str],
    referenced: set[str],
    policy_folders: set[str],
    collected: Collected,
) -> None:
    keys = blobs.list("runs")
    folders = sorted({_blob_folder(key, policy_folders) for key in keys})
    now = time.time()
    for folder in folders:
        parts = folder.split("/")
        if len(parts) < 4 or blobs.uri(folder) in referenced:
            continue
        local = getattr(blobs, "path", None)
        if parts[1] in run_ids:
            # An existing run's folder: only once old (it may be uploaded and not yet recorded),
            # and only where its age can be read (a local store).
            path = local(folder) if local is not None else None
            if not isinstance(path, Path) or now - path.stat().st_mtime < ORPHAN_AGE:
                continue
        collected.blobs.append(folder)
        if collected.dry_run:
            path = local(folder) if local is not None else None
            collected.bytes_freed += folder_size(path) if isinstance(path, Path) else 0
        else:
            collected.bytes_freed += blobs.delete(folder)


def _cached_checkpoint(name: str) -> tuple[str, int] | None:
    """The policy and version of a weights cache folder (`v<N>`: the default policy's,
    `<policy>-v<N>`: another's), or None.

    Example:
        >>> _cached_checkpoint("v12"), _cached_checkpoint("scout-v3"), _cached_checkpoint("x")
        (('main', 12), ('scout', 3), None)
    """
    match = _CACHED_CHECKPOINT.match(name)
    if match is None:
        return None
    return match.group(1) or DEFAULT_POLICY, int(match.group(2))


def _collect_caches(
    cache_dir: Path, kept: dict[str, set[tuple[str, int]]], collected: Collected
) -> None:
    if not cache_dir.is_dir():
        return
    for run_folder in sorted(cache_dir.iterdir()):
        if run_folder.name not in kept:  # a deleted run's (or a pre-run scratch) folder
            _remove(run_folder, collected)
            continue
        for entry in sorted(run_folder.iterdir()):
            match = _PROCESS_FOLDER.match(entry.name)
            if match and not process_alive(int(match.group(1))):
                _remove(entry, collected)
        for backend in sorted((run_folder / WEIGHTS).glob("*")):
            for version in sorted(backend.iterdir()):
                checkpoint = _cached_checkpoint(version.name)
                if checkpoint is not None and checkpoint not in kept[run_folder.name]:
                    _remove(version, collected)


async def delete_run(
    ledger: Ledger, blobs: BlobStore, cache_dir: Path, run: str, *, dry_run: bool = False
) -> Collected:
    """Delete a run that is not training: its blobs, its cache folder, its facts.

    Raises:
        RolloutError: the run may still be training (stop it first).
        NotFound: no run has this id or name.
    """
    record = await ledger.get_run(run)
    settings = await ledger.run_settings(record.run_id)
    if not settings.finished and not settings.stopped:
        raise RolloutError(
            f"run {record.name!r} may still be training; stop it first: "
            f"uv run rollout runs stop {record.name}"
        )
    collected = Collected(dry_run)
    folder = f"runs/{record.run_id}"
    collected.blobs.append(folder)
    if dry_run:
        local = getattr(blobs, "path", None)
        path = local(folder) if local is not None else None
        collected.bytes_freed += folder_size(path) if isinstance(path, Path) else 0
    else:
        collected.bytes_freed += await asyncio.to_thread(blobs.delete, folder)
    if (cache_dir / record.run_id).exists():
        await asyncio.to_thread(_remove, cache_dir / record.run_id, collected)
    if not dry_run:
        await ledger.delete_run(record.run_id)
    return collected
