"""Issue 10, "output a person can read": --version, help that names the ROLLOUT_* variables and
explains --max-lag, and `model init` that refuses to overwrite a folder."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from rollout.settings import ENVIRONMENT_VARIABLES


def _rollout(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "rollout.cli", *args],
        capture_output=True,
        text=True,
        env=dict(os.environ, COLUMNS="200"),
        timeout=120,
    )


def test_version_and_help() -> None:
    version = _rollout("--version")
    assert version.returncode == 0 and version.stdout.startswith("rollout 0.")
    top = _rollout("--help")
    assert top.returncode == 0
    assert all(name in top.stdout for name in ENVIRONMENT_VARIABLES)
    train = _rollout("train", "--help")
    assert "--max-lag" in train.stdout and "optimizer steps older" in train.stdout
    assert "max_lag." not in train.stdout


def test_model_init_refuses_to_overwrite_a_folder_unless_forced(tmp_path: Path) -> None:
    folder = tmp_path / "model"
    folder.mkdir()
    (folder / "notes.txt").write_text("mine")
    refused = _rollout("model", "init", "tiny", "--out", str(folder), "--hidden", "16")
    assert refused.returncode == 2 and "--force" in refused.stderr
    assert (folder / "notes.txt").read_text() == "mine" and len(list(folder.iterdir())) == 1
    forced = _rollout("model", "init", "tiny", "--out", str(folder), "--hidden", "16", "--force")
    assert forced.returncode == 0, forced.stderr
    assert (folder / "config.json").is_file()
