"""`rollout.procs`: a running process, a zombie nobody reaped, a process gone."""

from __future__ import annotations

import subprocess
import sys
import time

import pytest

from rollout.procs import process_alive, process_state

pytestmark = pytest.mark.skipif(sys.platform != "linux", reason="reads Linux's /proc")


def test_a_zombie_counts_as_gone_and_a_reaped_process_is_gone() -> None:
    child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(30)"])
    try:
        assert process_state(child.pid) == "running" and process_alive(child.pid)
        child.kill()
        # Not reaped (no wait, no poll): it stays a zombie, which still answers signal 0.
        deadline = time.monotonic() + 10
        while process_state(child.pid) == "running" and time.monotonic() < deadline:
            time.sleep(0.01)
        assert process_state(child.pid) == "zombie"
        assert not process_alive(child.pid)
    finally:
        child.kill()
        child.wait()
    assert process_state(child.pid) == "gone" and not process_alive(child.pid)
