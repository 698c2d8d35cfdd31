"""What the learning benchmarks share: one `rollout train` in a fresh state folder (the
embedded Postgres, as a new user gets it), and the statistics they report.

- `train_fresh(environment, preset, args, label)`: runs `rollout train ENVIRONMENT --preset
  PRESET --json ARGS...`; exits naming `label` if it fails.
- `mean(values)`, `sem(values)`: the mean and its standard error (step-to-step spread: the noise
  a rise is compared with); NaN where there are too few values.
"""

from __future__ import annotations

import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from rollout.ledger import stop_embedded


@dataclass(frozen=True)
class PlatformRun:
    """A finished `rollout train`. Its embedded Postgres is left running in `state` for the
    caller to read the run's ledger; stop it with `rollout.ledger.stop_embedded(state)`."""

    state: Path
    summary: dict[str, Any]
    """What `--json` printed."""
    seconds: float
    load: float
    """The higher 1-minute load average of the run's start and end."""
    command: str
    """The command's arguments from `train` on, for the report."""


def train_fresh(environment: str, preset: str, args: Sequence[str], label: str) -> PlatformRun:
    """`rollout train ENVIRONMENT --preset PRESET --json ARGS...` in a fresh state folder, with
    no `ROLLOUT_DATABASE_URL`. Exits naming `label` if the run fails."""
    state = Path(tempfile.mkdtemp(prefix="rollout-bench-"))
    command = [
        *(sys.executable, "-m", "rollout.cli", "train", environment, "--preset", preset),
        *("--json", *args),
    ]
    env = dict(os.environ, ROLLOUT_STATE_DIR=str(state))
    env.pop("ROLLOUT_DATABASE_URL", None)
    load = os.getloadavg()[0]
    began = time.monotonic()
    result = subprocess.run(command, capture_output=True, text=True, env=env, check=False)
    seconds = time.monotonic() - began
    load = max(load, os.getloadavg()[0])
    if result.returncode != 0:
        stop_embedded(state)  # the run's Postgres outlives `rollout train`: nothing reads it now
        sys.exit(f"rollout train failed ({label}):\n{result.stderr[-3000:]}")
    return PlatformRun(state, json.loads(result.stdout), seconds, load, " ".join(command[2:]))


def sets(overrides: Sequence[str]) -> list[str]:
    """`--set OVERRIDE` for each override."""
    return [arg for override in overrides for arg in ("--set", override)]


def mean(values: Sequence[float]) -> float:
    return statistics.fmean(values) if values else float("nan")


def sem(values: Sequence[float]) -> float:
    """Standard error of the mean."""
    return statistics.stdev(values) / len(values) ** 0.5 if len(values) > 1 else float("nan")
