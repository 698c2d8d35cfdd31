"""Failures show: a broken environment fails `rollout train` in seconds with the
task's error; failed episodes stop a run as `failed` past the threshold (and the supervisor
retires it); stopped runs are resumed only on purpose; the summary counts failed episodes and its
hints work as printed."""

from __future__ import annotations

import io
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest
from rich.console import Console

from rollout.errors import RolloutError
from rollout.launch.failures import check_failures
from rollout.launch.local import LocalSupervisor
from rollout.launch.progress import TrainingProgress, watch_training
from rollout.launch.summary import print_summary
from rollout.ledger import EpisodeSpec, Ledger
from rollout.settings import get_settings
from tests.launch.failed_runs import BROKEN, BROKEN_GRADER, new_run, play

ROOT = Path(__file__).resolve().parents[2]


def _rollout(database_url: str, state: Path, *args: str) -> subprocess.CompletedProcess[str]:
    env = dict(os.environ, ROLLOUT_DATABASE_URL=database_url, ROLLOUT_STATE_DIR=str(state))
    return subprocess.run(
        [sys.executable, "-m", "rollout.cli", *args],
        capture_output=True,
        text=True,
        env=env,
        cwd=ROOT,
        timeout=120,
    )


@pytest.mark.parametrize(
    ("spec", "error"),
    [
        (BROKEN, "Broken.start raised RuntimeError: the broken task cannot start"),
        pytest.param(
            BROKEN_GRADER,
            "BrokenGrader.respond raised RuntimeError: the broken task cannot grade",
            marks=pytest.mark.slow,  # 3.3 s, as the first case; the fast layer keeps one
        ),
    ],
)
def test_train_of_a_broken_environment_exits_non_zero_in_seconds_with_its_error(
    database_url: str, tmp_path: Path, spec: str, error: str
) -> None:
    began = time.monotonic()
    result = _rollout(database_url, tmp_path, "train", spec, "--steps", "3")
    assert time.monotonic() - began < 30
    assert result.returncode == 2, result.stderr
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1, result.stderr
    assert error in lines[0] and "Traceback" not in result.stderr
    assert not (tmp_path / "models").exists()  # nothing was built or started


@pytest.mark.slow
def test_run_of_a_broken_environment_exits_non_zero(database_url: str, tmp_path: Path) -> None:
    result = _rollout(database_url, tmp_path, "run", BROKEN)
    assert result.returncode == 1, result.stderr
    assert "failed" in result.stdout and "the broken task cannot start" in result.stdout


async def test_a_run_past_the_failure_threshold_is_marked_failed_with_the_first_error(
    ledger: Ledger, tmp_path: Path
) -> None:
    healthy = await new_run(ledger, tmp_path, "healthy")
    await play(ledger, healthy, 0, failed=4, completed=6)
    assert await check_failures(ledger, healthy) is None  # 4 of 10: under the default 0.5

    broken = await new_run(ledger, tmp_path, "broken")
    await play(ledger, broken, 0, failed=9, completed=1)
    error = await check_failures(ledger, broken)
    assert error is not None and "9 of 10 episodes failed" in error
    assert "the first error: Broken.start raised RuntimeError: group 0 number 0" in error
    assert "Traceback" not in error  # one line
    settings = await ledger.settings(broken)
    assert settings["status"] == "failed" and settings["error"] == error

    # The threshold is a run setting: 1.0 turns it off.
    tolerant = await new_run(ledger, tmp_path, "tolerant")
    await ledger.set_setting(tolerant, "max_failure_fraction", 1.0)
    await play(ledger, tolerant, 0, failed=10, completed=0)
    assert await check_failures(ledger, tolerant) is None

    # `rollout train`'s progress shows the failed count and ends with the run's error.
    progress = TrainingProgress(broken)
    out = io.StringIO()
    with pytest.raises(RolloutError, match="run failed: 9 of 10 episodes failed"):
        await watch_training(ledger, progress, 3, Console(file=out, width=200), interval=0.01)
    assert "9 failed" in out.getvalue()
    assert progress.counts["failed"] == 9


async def test_the_supervisor_skips_failed_and_stopped_runs_unless_named(
    ledger: Ledger, tmp_path: Path
) -> None:
    broken = await new_run(ledger, tmp_path, "broken")
    await play(ledger, broken, 0, failed=10, completed=0)
    stopped = await new_run(ledger, tmp_path, "stopped")
    await ledger.set_setting(stopped, "status", "stopped")
    supervisor = LocalSupervisor(ledger, get_settings())
    for run_id in (broken, stopped):
        run = await ledger.get_run(run_id)
        assert not await supervisor._wanted(run, await ledger.run_settings(run_id))
    assert (await ledger.settings(broken))["status"] == "failed"

    named = LocalSupervisor(ledger, get_settings(), runs=["stopped"])
    run = await ledger.get_run(stopped)
    assert await named._wanted(
        run, await ledger.run_settings(stopped)
    )  # `rollout up --run stopped`
    assert (await ledger.settings(stopped))["status"] == "running"
    run = await ledger.get_run(broken)
    assert not await named._wanted(run, await ledger.run_settings(broken))


def test_the_summary_counts_failed_episodes_and_hints_commands_that_work_as_printed() -> None:
    out = io.StringIO()
    name = "parity-20261130-051157-b4b7-with-a-long-name"
    summary = {
        "name": name,
        "status": "stopped",
        "seconds": 119.0,
        "steps": 30,
        "first_rewards_mean": 0.1,
        "last_rewards_mean": 0.5,
        "seconds_to_target": None,
        "target": 0.9,
        "episodes_ended": 200,
        "episodes_failed": 3,
    }
    print_summary(Console(file=out, width=40), summary)
    lines = out.getvalue().splitlines()
    assert any("3 of 200 episodes failed" in line for line in lines)
    hints = [line for line in lines if line.startswith("next: ")]
    assert hints[0].startswith(f"next: uv run rollout up --run {name} --until-finished")
    assert f"next: uv run rollout runs show {name}" in hints
    assert all(line.startswith("next: uv run rollout ") for line in hints)


@pytest.mark.parametrize(
    ("env", "args", "expected"),
    [
        (
            # 0: not waited for (tests/ledger/test_ledger_connect_wait.py waits for one).
            {
                "ROLLOUT_DATABASE_URL": "postgresql://nobody@127.0.0.1:1/none",
                "ROLLOUT_DB_OUTAGE_S": "0",
            },
            ["runs", "list"],
            "cannot reach the database (ROLLOUT_DATABASE_URL): connection failed",
        ),
        (
            {"ROLLOUT_DATABASE_URL": "garbage"},
            ["runs", "list"],
            "ROLLOUT_DATABASE_URL is not a PostgreSQL URL",
        ),
        (
            {"ROLLOUT_STATE_DIR": "FILE", "ROLLOUT_DATABASE_URL": ""},
            ["runs", "list"],
            "Not a directory",
        ),
        (
            {},
            ["env", "check", "tests.launch.broken_env:Broken"],
            "tests.launch.broken_env:Broken is a Task class, not an Environment: wrap it",
        ),
    ],
)
def test_errors_of_the_machine_or_the_settings_print_one_line_and_exit_2(
    database_url: str, tmp_path: Path, env: dict[str, str], args: list[str], expected: str
) -> None:
    state_file = tmp_path / "a-file"
    state_file.write_text("")
    env = {key: str(state_file) if value == "FILE" else value for key, value in env.items()}
    full = {
        **os.environ,
        "ROLLOUT_DATABASE_URL": database_url,
        "ROLLOUT_STATE_DIR": str(tmp_path / "state"),
        **env,
    }
    full = {key: value for key, value in full.items() if value}  # "": unset
    result = subprocess.run(
        [sys.executable, "-m", "rollout.cli", *args],
        capture_output=True,
        text=True,
        env=full,
        cwd=ROOT,
        timeout=60,
    )
    assert result.returncode == 2, result.stderr
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and expected in lines[0], result.stderr


@pytest.mark.slow
async def test_episodes_list_marks_failed_episodes_and_lists_the_latest_ended_first(
    ledger: Ledger, database_url: str, tmp_path: Path
) -> None:
    from rollout.monitor.queries import episode_rows, run_summaries

    run_id = await new_run(ledger, tmp_path, "listed")
    await play(ledger, run_id, 0, failed=2, completed=1)
    never = [EpisodeSpec(1, member, {"number": "7"}, seed=member) for member in range(3)]
    await ledger.add_episodes(run_id, never)  # added last, never played
    rows = await episode_rows(ledger, run_id, 4)
    assert [row["state"] for row in rows] == ["ended", "failed", "failed", "pending"]
    assert rows[1]["error"] == "Broken.start raised RuntimeError: group 0 number 1"

    listed = _rollout(database_url, tmp_path, "episodes", "list", "listed", "--limit", "4")
    assert listed.returncode == 0, listed.stderr
    assert listed.stdout.count("failed") >= 2 and "episodes show EPISODE" in listed.stdout

    shown = _rollout(database_url, tmp_path, "runs", "show", "listed", "--steps", "5")
    assert shown.returncode == 0, shown.stderr
    assert "{'" not in shown.stdout and "max_lag" in shown.stdout  # tables, not Python dicts
    assert "wall s" in shown.stdout and "failed" in shown.stdout

    stopped = _rollout(database_url, tmp_path, "runs", "stop", "listed")
    assert stopped.returncode == 0, stopped.stderr
    assert "uv run rollout up --run listed --until-finished" in stopped.stdout
    (summary,) = [row for row in await run_summaries(ledger) if row["run_id"] == run_id]
    assert summary["state"] == "stopped"


async def test_progress_says_paused(ledger: Ledger, tmp_path: Path) -> None:
    run_id = await new_run(ledger, tmp_path, "paused")
    await ledger.pause_run(run_id)
    out = io.StringIO()
    with pytest.raises(RolloutError, match="gone"):
        await watch_training(
            ledger,
            TrainingProgress(run_id),
            3,
            Console(file=out, width=200),
            stopped=lambda: "gone",
            interval=0.01,
        )
    assert "paused: `uv run rollout runs resume RUN`" in out.getvalue()
