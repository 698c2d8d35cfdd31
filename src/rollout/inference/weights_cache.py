"""One copy of each served checkpoint per run and machine, shared by the run's roles.

Each inference server and evaluator used to download every checkpoint it loaded into a folder of
its own process (`cache/<run>/inference-<pid>/v3`), so the roles of one run held the same
weights several times over (179 MB duplicated after one README run) and a restarted role
downloaded again. Now the folder is keyed by run, backend and version only
(`weights_folder`): `<cache>/<run_id>/weights/<backend>/v<version>` (`<policy>-v<version>` for
a policy other than the default one, in a run with several), and `fetch` fills it
atomically, downloading beside it and renaming into place, so concurrent roles either find a
complete folder or race to rename and the loser drops its copy. `rollout gc` deletes the
folders of deleted checkpoints and runs.

Example:
    >>> from pathlib import Path
    >>> weights_folder(Path("/state/cache"), "ab12cd34", "local", 3).as_posix()
    '/state/cache/ab12cd34/weights/local/v3'
    >>> weights_folder(Path("/state/cache"), "ab12cd34", "local", 3, policy="scout").name
    'scout-v3'
"""

from __future__ import annotations

import os
import shutil
import uuid
from pathlib import Path

from rollout.blobs import BlobStore
from rollout.contracts import DEFAULT_POLICY

WEIGHTS = "weights"
"""The folder of a run's shared checkpoint copies, under the run's cache folder."""


def backend_folder(cache_dir: Path, run_id: str, backend: str) -> Path:
    """The folder of the run's checkpoints converted for `backend` (one `v<version>` each)."""
    return cache_dir / run_id / WEIGHTS / backend


def version_folder(version: int, policy: str = DEFAULT_POLICY) -> str:
    """The name of `policy`'s checkpoint `version` in a backend's folder (`backend_folder`)."""
    return f"v{version}" if policy == DEFAULT_POLICY else f"{policy}-v{version}"


def weights_folder(
    cache_dir: Path, run_id: str, backend: str, version: int, *, policy: str = DEFAULT_POLICY
) -> Path:
    """Where `policy`'s checkpoint `version` of the run, converted for `backend`, is kept on
    this machine."""
    return backend_folder(cache_dir, run_id, backend) / version_folder(version, policy)


def fetch(blobs: BlobStore, uri: str, folder: Path) -> Path:
    """`folder`, downloaded from `uri` unless another role of this machine already did."""
    if folder.is_dir():
        return folder
    folder.parent.mkdir(parents=True, exist_ok=True)
    partial = folder.with_name(f".{folder.name}.partial-{os.getpid()}-{uuid.uuid4().hex[:8]}")
    try:
        blobs.get_dir(uri, partial, link=True)  # served files are only read
        try:
            os.rename(partial, folder)  # atomic; fails when another role renamed first
        except OSError:
            if not folder.is_dir():
                raise
    finally:
        shutil.rmtree(partial, ignore_errors=True)
    return folder
