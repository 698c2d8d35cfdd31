"""Role logs are rotated by size while their role keeps writing, and keep three older files.

The role is a real child process started by the local supervisor (`LocalSupervisor._keep`,
as `rollout up` starts every role), printing numbered lines as fast as it can into its log.
"""

from __future__ import annotations

import asyncio
import dataclasses
import itertools
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from rollout.launch.local import LocalSupervisor
from rollout.launch.role_logs import rotated
from rollout.ledger import Ledger
from rollout.settings import Settings, SettingsError, get_settings

CHATTY = "import itertools\nfor n in itertools.count():\n    print(f'line {n:09d}', flush=True)"


def _numbers(path: Path) -> list[int]:
    text = path.read_bytes()
    assert b"\0" not in text  # the role appends: after a truncation it writes at the start
    lines = text.decode().splitlines()
    # The rotation can cut a line in two (the role writes a line and its newline separately).
    if lines and len(lines[0]) != len("line 000000000"):
        lines.pop(0)
    if lines and len(lines[-1]) != len("line 000000000"):
        lines.pop()
    assert all(line.startswith("line ") for line in lines), lines[:3]
    return [int(line.split()[1]) for line in lines]


async def test_a_writing_role_s_log_is_rotated_in_place_keeping_three_older_files(
    ledger: Ledger, tmp_path: Path
) -> None:
    # The supervisor's own loop calls rotate_logs in a thread; here the test is that loop.
    settings = dataclasses.replace(get_settings(), state_dir=tmp_path, log_max_bytes=20_000)
    supervisor = LocalSupervisor(ledger, settings)
    role = supervisor._keep("chatty", [sys.executable, "-c", CHATTY])  # pyright: ignore[reportPrivateUsage]
    try:
        assert role.log_path == tmp_path / "logs" / "chatty.log"
        rotations = 0
        deadline = time.monotonic() + 30.0
        while rotations < 6:
            assert time.monotonic() < deadline, f"{rotations} rotations in 30 s"
            before = rotated(role.log_path, 1).stat().st_mtime_ns if rotations else None
            supervisor.rotate_logs()
            if rotated(role.log_path, 1).exists():
                rotations += rotated(role.log_path, 1).stat().st_mtime_ns != before
            await asyncio.sleep(0.01)
        assert role.alive()  # the role never noticed
    finally:
        supervisor.stop_all(grace=5.0)
    files = sorted(role.log_path.parent.iterdir())
    assert [f.name for f in files] == ["chatty.log", *(f"chatty.log.{n}" for n in (1, 2, 3))]
    # Newest last: each file's lines in order, each file after the one it replaced.
    chunks = [_numbers(rotated(role.log_path, n)) for n in (3, 2, 1)]
    assert all(chunks), [len(chunk) for chunk in chunks]  # each rotated file held whole lines
    # The live log may hold no whole line yet: the role can be stopped right after a rotation
    # (seen on a loaded machine).
    chunks += [live] if (live := _numbers(role.log_path)) else []
    for chunk in chunks:
        assert chunk == sorted(chunk), chunk[:3]
    for older, newer in itertools.pairwise(chunks):
        assert older[-1] < newer[0]
    # Each rotated file holds what the log had reached (a little more: the role kept writing).
    assert all(rotated(role.log_path, n).stat().st_size >= 20_000 for n in (1, 2, 3))


def test_a_small_log_or_a_zero_limit_is_left_alone(tmp_path: Path) -> None:
    from rollout.launch.role_logs import rotate_if_large

    log = tmp_path / "runner-0.log"
    assert not rotate_if_large(log, max_bytes=10)  # no log yet
    log.write_text("x" * 50)
    assert not rotate_if_large(log, max_bytes=0)  # 0: never
    assert not rotate_if_large(log, max_bytes=51)
    assert log.read_text() == "x" * 50 and not rotated(log, 1).exists()


@pytest.mark.parametrize("value", ["-1", "lots", "nan", "inf"])
def test_a_bad_log_size_is_refused_naming_the_variable(value: str) -> None:
    with pytest.raises(SettingsError, match=f"ROLLOUT_LOG_MAX_MB .*got '{value}'"):
        Settings.from_environ({"ROLLOUT_LOG_MAX_MB": value})


@pytest.mark.slow
def test_the_supervisors_own_log_is_rotated_too(database_url: str, tmp_path: Path) -> None:
    """`rollout up` appending to a file (as `rollout train` starts it: `up-<run>.log`) rotates
    that file like its roles' logs."""
    log = tmp_path / "logs" / "up-test.log"
    log.parent.mkdir(parents=True)
    env = {
        **os.environ,
        "ROLLOUT_DATABASE_URL": database_url,
        "ROLLOUT_STATE_DIR": str(tmp_path),
        "ROLLOUT_LOG_MAX_MB": "0.00005",  # 50 bytes: its first line
    }
    with log.open("ab") as out:
        up = subprocess.Popen(
            [sys.executable, "-m", "rollout.cli", "up"],
            stdout=out,
            stderr=subprocess.STDOUT,
            env=env,
            start_new_session=True,
        )
    try:
        deadline = time.monotonic() + 60
        while not rotated(log, 1).exists():
            assert up.poll() is None, log.read_text()
            assert time.monotonic() < deadline, "the supervisor's log was not rotated in 60 s"
            time.sleep(0.2)
    finally:
        up.send_signal(signal.SIGTERM)
        up.wait(60)
    assert "rollout.up" in rotated(log, 1).read_text()  # its own lines, moved aside
