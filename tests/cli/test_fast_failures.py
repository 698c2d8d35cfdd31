"""A person's mistake costs seconds and one line: a database that never answered, a port in use,
a read-only state folder and a bad blob URL each end a real `rollout` process with exit 2, one
line on stderr and no traceback."""

from __future__ import annotations

import os
import shutil
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest

from rollout.net.server import free_port
from tests.cli_helpers import rollout

ROOT = Path(__file__).resolve().parents[2]


def _rollout(env: dict[str, str], *args: str, prefix: tuple[str, ...] = ()) -> tuple[float, str]:
    """Run `rollout ARGS`; assert exit 2, one stderr line and no traceback; (seconds, line)."""
    began = time.monotonic()
    result = subprocess.run(
        [*prefix, sys.executable, "-m", "rollout.cli", *args],
        capture_output=True,
        text=True,
        env={**os.environ, **env},
        cwd=ROOT,
        timeout=120,
    )
    took = time.monotonic() - began
    assert result.returncode == 2, (result.returncode, result.stderr)
    assert "Traceback" not in result.stderr and "pgserver" not in result.stderr, result.stderr
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1, result.stderr
    return took, lines[0]


@pytest.mark.parametrize(
    "command",
    [
        ("runs", "list"),
        # 3-7 s each on a busy 2-core machine (two processes start): the fast layer keeps one.
        pytest.param(("runs", "show", "nothing"), marks=pytest.mark.slow),
        pytest.param(("evals", "list"), marks=pytest.mark.slow),
    ],
)
def test_a_database_that_never_answered_fails_a_command_in_five_seconds(
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
    command: tuple[str, ...],
) -> None:
    closed = f"postgresql://nobody@127.0.0.1:{free_port()}/none"
    monkeypatch.setenv("ROLLOUT_DATABASE_URL", closed)
    began = time.monotonic()  # in process: the wait itself, without Python's start-up
    code, _, err = rollout(capsys, *command)
    assert time.monotonic() - began < 5.0
    assert code == 2 and err.startswith("error: cannot reach the database (ROLLOUT_DATABASE_URL)")
    # A real process: one line, no traceback, and nowhere near the outage window (60 s).
    took, line = _rollout({"ROLLOUT_DATABASE_URL": closed}, *command)
    assert took < 15.0, took
    assert line == err.strip(), (line, err)


def test_a_bad_blob_url_is_named_in_one_line(tmp_path: Path) -> None:
    _, line = _rollout(
        {"ROLLOUT_BLOB_URL": "ftp://host/runs", "ROLLOUT_STATE_DIR": str(tmp_path)}, "runs", "list"
    )
    assert "ROLLOUT_BLOB_URL must be a folder, file://... or s3://BUCKET/PREFIX" in line
    assert "'ftp://host/runs'" in line


@pytest.mark.slow  # a process that starts serving: about 4 s
def test_a_port_in_use_is_one_line_naming_it(database_url: str, tmp_path: Path) -> None:
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        _, line = _rollout(
            {"ROLLOUT_DATABASE_URL": database_url, "ROLLOUT_STATE_DIR": str(tmp_path / "fresh")},
            "playground",
            "--port",
            str(port),
        )
    assert f"port {port} on 127.0.0.1 is in use" in line and "--port" in line, line


@pytest.mark.skipif(shutil.which("bwrap") is None, reason="needs bubblewrap for a read-only mount")
def test_a_read_only_state_folder_is_one_line_naming_it(tmp_path: Path) -> None:
    # A real read-only file system (EROFS: root may write anywhere else): bubblewrap mounts
    # tmp_path read-only over an otherwise unchanged view of this machine.
    state = tmp_path / "state"
    _, line = _rollout(
        {"ROLLOUT_STATE_DIR": str(state)},
        "runs",
        "list",
        prefix=("bwrap", "--dev-bind", "/", "/", "--ro-bind", str(tmp_path), str(tmp_path)),
    )
    assert line.startswith("error: Read-only file system"), line
    assert str(state) in line and "ROLLOUT_STATE_DIR" in line, line
