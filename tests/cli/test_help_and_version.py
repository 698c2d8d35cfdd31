"""Output a person can read: --version, help that names the ROLLOUT_* variables and
explains --max-lag, help without `<bool>`, `<str>` or `{spec}`, and `model init` that refuses
to overwrite a folder."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
import typer

from rollout.cli import app
from rollout.settings import ENVIRONMENT_VARIABLES
from tests.cli_helpers import rollout

CODE_LABELS = re.compile(r"<(bool|str|int|float|list\[str\])>|\{[a-z_]+\}")


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
    assert "train [OPTIONS] SPEC" in train.stdout
    assert not CODE_LABELS.search(train.stdout), CODE_LABELS.findall(train.stdout)


def _commands(command: object, path: tuple[str, ...] = ()) -> list[tuple[str, ...]]:
    found = [path]
    for name, sub in sorted(getattr(command, "commands", {}).items()):
        found += _commands(sub, (*path, name))
    return found


@pytest.mark.slow
def test_no_help_screen_shows_code_labels(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("COLUMNS", "200")
    commands = _commands(typer.main.get_command(app))
    assert ("runs", "show") in commands and len(commands) > 20
    for path in commands:
        code, out, err = rollout(capsys, *path, "--help")
        assert code == 0, (path, err)
        assert "Usage: rollout" in out, path
        assert not CODE_LABELS.search(out), (path, CODE_LABELS.findall(out))


def test_model_init_refuses_to_overwrite_a_folder_unless_forced(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    folder = tmp_path / "model"
    folder.mkdir()
    (folder / "notes.txt").write_text("mine")
    refused = _rollout("model", "init", "tiny", "--out", str(folder), "--hidden", "16")
    assert refused.returncode == 2 and "--force" in refused.stderr
    assert (folder / "notes.txt").read_text() == "mine" and len(list(folder.iterdir())) == 1
    # In process (its torch is imported already): the folder is overwritten when forced.
    # A char tokenizer: a byte-level BPE would be trained first (seconds).
    options = ["--out", str(folder), "--hidden", "16", "--tokenizer", "chars", "--force"]
    code, _, err = rollout(capsys, "model", "init", "tiny", *options)
    assert code == 0, err
    assert (folder / "config.json").is_file()
