"""A newcomer's own text environment trains on the preset the guides name.

The walk-through of docs/write-an-environment.md, as written: its `first_letter.py` block is
saved in a fresh project folder and its console commands run from there, with the output piped
(a line must come at least every 10 s). Under `cpu-text` the
run needs no other setting and its reward rises; under `cpu-tiny` (whose model reads only
parity's characters) `env check` and `train` say so in one line before any step, naming
cpu-text. The page's block and commands are read from the page, so the guide cannot drift.
"""

from __future__ import annotations

import itertools
import json
import os
import re
import shlex
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests.docs.blocks import page_blocks

ROOT = Path(__file__).resolve().parents[2]
GUIDE = ROOT / "docs" / "write-an-environment.md"
MODULE = "first_letter"


def _guide() -> tuple[str, list[list[str]]]:
    """The page's `first_letter.py` block and the rollout commands of the console block whose
    no-test reason says this test runs it."""
    found = page_blocks(GUIDE)
    source = [b.body for b in found if b.body.startswith(f"# {MODULE}.py\n")]
    assert len(source) == 1, f"{GUIDE.name} needs one block starting `# {MODULE}.py`"
    runs = [b for b in found if (b.skipped or "").startswith("tests/launch/test_train_text.py")]
    assert len(runs) == 1, f"{GUIDE.name} needs one block marked as run by this test"
    commands = [shlex.split(line)[3:] for line in runs[0].body.splitlines() if line.strip()]
    return source[0], commands


@pytest.fixture
def project(tmp_path: Path, database_url: str) -> tuple[Path, dict[str, str]]:
    """A user's project folder holding only the guide's file, and the commands' environment."""
    folder = tmp_path / "project"
    folder.mkdir()
    (folder / f"{MODULE}.py").write_text(_guide()[0])
    (folder / "pyproject.toml").write_text('[project]\nname = "mine"\nversion = "0"\n')
    env = dict(
        os.environ,
        ROLLOUT_DATABASE_URL=database_url,
        ROLLOUT_STATE_DIR=str(folder / ".rollout"),
        COLUMNS="300",
    )
    return folder, env


def _rollout(
    folder: Path, env: dict[str, str], *args: str, timeout: float
) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "rollout.cli", *args],
        cwd=folder,
        env=env,
        capture_output=True,
        text=True,
        timeout=timeout,
    )


def test_the_guides_commands_are_the_ones_run_here() -> None:
    _, commands = _guide()
    laptop = [
        block
        for block in page_blocks(ROOT / "docs" / "laptop.md")
        if (block.skipped or "").startswith("tests/launch/test_train_text.py")
    ]
    assert [shlex.split(line)[3:] for line in laptop[0].body.splitlines()] == commands
    assert commands == [
        ["env", "check", f"{MODULE}:environment", "--preset", "cpu-text"],
        ["train", f"{MODULE}:environment", "--preset", "cpu-text"],
    ]


@pytest.mark.slow
def test_train_under_cpu_tiny_says_in_one_line_that_it_cannot_read_the_words(
    project: tuple[Path, dict[str, str]],
) -> None:
    """`rollout train` says it before it creates anything that steps (--create-only: no roles);
    `env check`'s line is tested in tests/cli/test_commands.py."""
    folder, env = project
    spec = f"{MODULE}:environment"
    created = _rollout(
        folder, env, "train", spec, "--preset", "cpu-tiny", "--create-only", timeout=300
    )
    assert created.returncode == 0, created.stderr[-2000:]
    assert [line for line in created.stdout.splitlines() if "cannot read" in line] == [
        "preset cpu-tiny's model cannot read 'abcdeikloprw' in first-letter's text (it becomes "
        "<unk>); train it with --preset cpu-text, whose model reads any text"
    ], created.stdout
    assert "Traceback" not in created.stdout + created.stderr


PIPED_GAP_S = 10.0
"""The longest a piped `rollout train` may go without printing a line (it prints every 5 s)."""
STEPS_SEEN = 40
"""Steps the learning test watches before it stops the run (Ctrl-C), unless the run reached the
preset's `stop_at_reward` first: enough for the reward to rise, far fewer than the preset's 300."""


@pytest.mark.slow
@pytest.mark.timeout(660)
def test_the_guides_environment_learns_on_cpu_text_with_no_other_setting(
    project: tuple[Path, dict[str, str]],
) -> None:
    folder, env = project
    _, commands = _guide()
    train = subprocess.Popen(
        [sys.executable, "-m", "rollout.cli", *commands[1], "--json"],
        cwd=folder,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    assert train.stderr is not None
    shown, arrivals = [], []
    interrupted = False
    try:
        for line in train.stderr:  # piped: whole plain lines, one per change or every 5 s
            shown.append(line)
            if line.startswith(("training step ", "stopping the roles")):
                arrivals.append(time.monotonic())
            step = re.match(r"training step (\d+)/", line)
            if step and int(step.group(1)) >= STEPS_SEEN and not interrupted:
                train.send_signal(signal.SIGINT)  # then read on: the roles stop, still saying so
                interrupted = True
        out, err = train.communicate(timeout=120)
    finally:
        if train.poll() is None:
            train.kill()
    shown.append(err)
    assert train.returncode == 0, "".join(shown)[-3000:]
    text = "".join(shown)
    assert "cannot read" not in text and "no format warm-up" not in text, text[:2000]
    # `rollout train ... | cat`: from the first progress line until the roles have stopped (the
    # run finished or was stopped), a reader of the pipe is never left 10 s without a line.
    assert any(line.startswith("stopping the roles") for line in shown), shown[-5:]
    gaps = [later - earlier for earlier, later in itertools.pairwise(arrivals)]
    assert max(gaps) <= PIPED_GAP_S, f"{max(gaps):.1f} s without a progress line: {shown}"
    summary = json.loads(out)
    print("first-letter on cpu-text:", json.dumps(summary), f"longest gap {max(gaps):.1f} s")
    # From a random a or b after the warm-up (about 0.5) to clearly better.
    assert summary["first_rewards_mean"] + 0.15 < summary["last_rewards_mean"], summary
