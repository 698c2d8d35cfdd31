"""A vLLM server's whole process group dies with the process that started it
(`rollout.inference.tie`), even when that process is killed with SIGKILL and never calls
`stop()`. Checked with a stand-in server (a sleeping Python that spawns a worker ignoring
SIGTERM, as an engine core busy loading would), started exactly as `VllmServer` starts vLLM; no
vLLM needed. The real server killed with its inference role:
tests/inference/test_vllm_role_kill.py."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

pytestmark = pytest.mark.skipif(sys.platform != "linux", reason="a Linux parent-death signal")

WORKER = "import signal, time; signal.signal(signal.SIGTERM, signal.SIG_IGN); time.sleep(120)"
SERVER = f"""
import subprocess, sys, time
subprocess.Popen([sys.executable, "-c", {WORKER!r}])
time.sleep(float(sys.argv[1]))
sys.exit(7)
"""
OWNER = """
import subprocess, sys, time
from rollout.inference.tie import tied_command
command = [sys.executable, "-c", sys.argv[3], sys.argv[2]]
group = subprocess.Popen(tied_command(command, grace=1.0) if sys.argv[1] == "tied" else command,
                         start_new_session=True)
print(group.pid, flush=True)
print(group.wait(), flush=True)
time.sleep(120)
"""


def group_members(group: int) -> list[int]:
    """Live (not zombie) processes of process group `group`."""
    members = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            fields = (entry / "stat").read_text(errors="replace").rsplit(")", 1)[1].split()
        except (OSError, IndexError):
            continue
        if int(fields[2]) == group and fields[0] != "Z":
            members.append(int(entry.name))
    return members


def _wait_gone(group: int, wait: float) -> list[int]:
    deadline = time.monotonic() + wait
    while (members := group_members(group)) and time.monotonic() < deadline:
        time.sleep(0.1)
    return members


def _start(mode: str, server_seconds: float) -> tuple[subprocess.Popen[str], int]:
    owner = subprocess.Popen(
        [sys.executable, "-c", OWNER, mode, str(server_seconds), SERVER],
        stdout=subprocess.PIPE,
        text=True,
    )
    assert owner.stdout is not None
    group = int(owner.stdout.readline())
    expected = 3 if mode == "tied" else 2  # (watchdog,) server, worker
    deadline = time.monotonic() + 60  # a loaded machine takes its time
    while len(group_members(group)) < expected and time.monotonic() < deadline:
        time.sleep(0.1)
    return owner, group


def _orphans_after_owner_killed(mode: str, wait: float) -> list[int]:
    owner, group = _start(mode, server_seconds=120)
    try:
        assert group_members(group)
    finally:
        owner.kill()
        owner.wait()
    return _wait_gone(group, wait)


def test_the_whole_group_ends_when_its_starter_is_killed() -> None:
    orphans = _orphans_after_owner_killed("tied", wait=20)
    assert orphans == [], [Path(f"/proc/{pid}/cmdline").read_bytes() for pid in orphans]


def test_a_server_that_exits_takes_its_workers_along_and_its_status_is_kept() -> None:
    owner, group = _start("tied", server_seconds=1)
    try:
        assert owner.stdout is not None
        assert owner.stdout.readline().strip() == "7"  # the server's own exit status
        assert _wait_gone(group, wait=5) == []
    finally:
        owner.kill()
        owner.wait()


@pytest.mark.slow
def test_untied_ones_would_have_been_orphaned() -> None:
    orphans = _orphans_after_owner_killed("plain", wait=2)
    try:
        assert orphans  # what tied_command prevents
    finally:
        for pid in orphans:
            os.kill(pid, signal.SIGKILL)
