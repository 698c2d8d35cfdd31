"""Stopping a `rollout train` that a benchmark started in its own process group."""

from __future__ import annotations

import os
import signal
import subprocess
from typing import Any


def stop_group(process: subprocess.Popen[Any], grace: float = 60.0) -> None:
    """SIGTERM `process`'s group (`rollout train` stops on it as on Ctrl-C, which a background
    job ignores), then SIGKILL it if it is still there after `grace` seconds."""
    os.killpg(process.pid, signal.SIGTERM)
    try:
        process.wait(grace)
    except subprocess.TimeoutExpired:
        os.killpg(process.pid, signal.SIGKILL)
        process.wait()
