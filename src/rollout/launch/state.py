"""Where a local installation keeps its state: `.rollout/` (or ROLLOUT_STATE_DIR).

It holds the embedded Postgres, the blob store (checkpoints), tiny models built on demand, and
the supervisor's logs.
"""

from __future__ import annotations

import os
from pathlib import Path


def state_dir() -> Path:
    return Path(os.environ.get("ROLLOUT_STATE_DIR", ".rollout")).resolve()


def blob_url() -> str:
    """ROLLOUT_BLOB_URL (a folder or s3://bucket/prefix), default `<state_dir>/blobs`."""
    return os.environ.get("ROLLOUT_BLOB_URL") or str(state_dir() / "blobs")


def models_dir() -> Path:
    return state_dir() / "models"
