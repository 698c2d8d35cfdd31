"""A vLLM server dies with the process that started it (`tied_command`), even when that process
is killed with SIGKILL and never calls `stop()`. Checked with a stand-in command (a sleeping
Python), started exactly as `VllmServer` starts vLLM; no vLLM needed."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time

import pytest

from rollout.procs import process_alive

pytestmark = pytest.mark.skipif(sys.platform != "linux", reason="a Linux parent-death signal")

OWNER = """
import subprocess, sys, time
from rollout.inference.vllm_server import tied_command
command = [sys.executable, "-c", "import time; time.sleep(120)"]
child = subprocess.Popen(tied_command(command) if sys.argv[1] == "tied" else command,
                         start_new_session=True)
print(child.pid, flush=True)
time.sleep(120)
"""


def _orphan_after_owner_killed(mode: str, wait: float) -> tuple[int, bool]:
    """Start an owner that starts a child, SIGKILL the owner: (child pid, alive `wait` s later,
    or gone before)."""
    owner = subprocess.Popen([sys.executable, "-c", OWNER, mode], stdout=subprocess.PIPE, text=True)
    try:
        assert owner.stdout is not None
        child = int(owner.stdout.readline())
        time.sleep(0.5)  # the child has become the sleeping command (or has not: still counts)
        assert process_alive(child)
    finally:
        owner.kill()
        owner.wait()
    deadline = time.monotonic() + wait
    while process_alive(child) and time.monotonic() < deadline:
        time.sleep(0.1)
    return child, process_alive(child)


def test_a_tied_server_gets_sigterm_when_its_starter_is_killed() -> None:
    _, alive = _orphan_after_owner_killed("tied", wait=10)
    assert not alive


@pytest.mark.slow
def test_an_untied_one_would_have_been_orphaned() -> None:
    child, alive = _orphan_after_owner_killed("plain", wait=2)
    try:
        assert alive  # what tied_command prevents
    finally:
        os.kill(child, signal.SIGKILL)
