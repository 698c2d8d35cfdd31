"""The state folder is found: commands find the project's state folder by walking up (like
git finds `.git`), say where they create one, and `rollout down` stops the embedded Postgres."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from rollout.ledger.embedded import embedded_pid


def _rollout(cwd: Path, *args: str, **env: str) -> subprocess.CompletedProcess[str]:
    environ = {k: v for k, v in os.environ.items() if not k.startswith("ROLLOUT_")}
    return subprocess.run(
        [sys.executable, "-m", "rollout.cli", *args],
        capture_output=True,
        text=True,
        env={**environ, **env},
        cwd=cwd,
        timeout=120,
    )


def test_a_command_in_a_subfolder_uses_the_workspace_state_folder(tmp_path: Path) -> None:
    (tmp_path / "pyproject.toml").write_text("[tool.uv.workspace]\nmembers = []\n")
    deep = tmp_path / "environments" / "parity"
    deep.mkdir(parents=True)
    result = _rollout(deep, "down")
    assert result.returncode == 0, result.stderr
    assert f"no embedded Postgres running in {tmp_path / '.rollout'}" in result.stdout
    assert not (deep / ".rollout").exists() and not (tmp_path / ".rollout").exists()


@pytest.mark.slow
def test_down_stops_the_embedded_postgres_a_command_started(embedded_state_dir: Path) -> None:
    state = embedded_state_dir / "state"
    listed = _rollout(embedded_state_dir, "runs", "list", ROLLOUT_STATE_DIR=str(state))
    assert listed.returncode == 0, listed.stderr
    assert f"created the state folder {state}" in listed.stderr
    assert "pgserver" not in listed.stderr  # no INFO lines
    assert embedded_pid(state) is not None
    down = _rollout(embedded_state_dir, "down", ROLLOUT_STATE_DIR=str(state))
    assert down.returncode == 0, down.stderr
    assert f"stopped the embedded Postgres in {state}" in down.stdout
    assert embedded_pid(state) is None
