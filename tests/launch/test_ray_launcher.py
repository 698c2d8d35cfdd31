"""`rollout up --launcher ray`: the roles as Ray actors on a local Ray cluster.

The slow tests run the README's parity training (cpu-tiny) with every role placed by Ray, to
its target, and SIGKILL the trainer actor's process mid-run: Ray restarts it, the new trainer
takes the run's lease with a higher epoch and the run finishes with every version exactly once.
"""

from __future__ import annotations

import asyncio
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import psycopg
import pytest

from rollout.launch.ray import RayLauncher, RayLaunchError
from rollout.ledger import Ledger
from rollout.settings import Settings
from tests.cli_helpers import rollout
from tests.test_train_e2e import _check_ledger

MAX_STEPS = 260


def _env(database_url: str, state: Path) -> dict[str, str]:
    return dict(
        os.environ,
        ROLLOUT_DATABASE_URL=database_url,
        ROLLOUT_STATE_DIR=str(state),
        RAY_AUTH_MODE="disabled",
    )


def _create_run(env: dict[str, str], *options: str) -> dict[str, str]:
    """`rollout train --cluster`: only create the run, for the launcher to pick up."""
    result = subprocess.run(
        [
            sys.executable, "-m", "rollout.cli", "train", "parity.environment:environment",
            "--preset", "cpu-tiny", "--cluster", "--json", *options,
        ],
        capture_output=True, text=True, env=env, timeout=300, check=False,
    )  # fmt: skip
    assert result.returncode == 0, result.stderr[-3000:]
    return json.loads(result.stdout)


def _up(env: dict[str, str], run: str, log: Path) -> subprocess.Popen[bytes]:
    with log.open("wb") as out:
        return subprocess.Popen(
            [
                sys.executable, "-m", "rollout.cli", "up", "--launcher", "ray", "--run", run,
                "--until-finished",
            ],
            stdout=out, stderr=subprocess.STDOUT, env=env, start_new_session=True,
        )  # fmt: skip


def _finish(up: subprocess.Popen[bytes], log: Path, timeout: float) -> None:
    try:
        up.wait(timeout)
    except subprocess.TimeoutExpired:
        os.killpg(up.pid, signal.SIGTERM)
        up.wait(60)
        raise AssertionError(f"the launcher did not finish: {log.read_text()[-3000:]}") from None
    assert up.returncode == 0, log.read_text()[-3000:]


def _role_pids(role: str, database_url: str) -> list[int]:
    """Processes whose environment names this role and this test's ledger (Ray's workers)."""
    found = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            environ = (entry / "environ").read_bytes().split(b"\0")
        except OSError:
            continue
        if (
            f"ROLLOUT_ROLE={role}".encode() in environ
            and f"ROLLOUT_DATABASE_URL={database_url}".encode() in environ
        ):
            found.append(int(entry.name))
    return found


@pytest.mark.slow
@pytest.mark.timeout(1500)
def test_parity_trains_to_its_target_on_ray(database_url: str, tmp_path: Path) -> None:
    """The README's parity command with `--launcher ray`: `rollout up --launcher ray` places
    every role as a Ray actor and the run reaches its target."""
    result = subprocess.run(
        [
            sys.executable, "-m", "rollout.cli", "train", "parity.environment:environment",
            "--preset", "cpu-tiny", "--steps", str(MAX_STEPS), "--set", "stop_at_reward=0.9",
            "--launcher", "ray", "--json",
        ],
        capture_output=True, text=True, env=_env(database_url, tmp_path), timeout=1400,
        check=False,
    )  # fmt: skip
    logs = "".join(p.read_text()[-3000:] for p in (tmp_path / "logs").glob("up-*.log"))
    assert result.returncode == 0, result.stderr[-2000:] + logs
    summary = json.loads(result.stdout)
    print("ray train summary:", json.dumps(summary))
    assert summary["status"] == "finished" and 3 <= summary["steps"] <= MAX_STEPS
    assert summary["seconds_to_target"] is not None  # finished by reaching 0.9, not running out
    asyncio.run(_check_ledger(database_url, summary["run_id"], summary["steps"]))
    assert not _role_pids(f"trainer-{summary['name']}", database_url)  # no actor left behind


@pytest.mark.slow
@pytest.mark.timeout(1500)
def test_a_killed_trainer_actor_is_restarted_by_ray_and_fenced(
    database_url: str, tmp_path: Path
) -> None:
    steps = 10
    env = _env(database_url, tmp_path / "state")
    created = _create_run(
        env, "--steps", str(steps), "--set", "groups_per_step=4", "--set", "stop_at_reward=2"
    )
    run_id, trainer = created["run_id"], f"trainer-{created['name']}"
    up = _up(env, run_id, tmp_path / "up.log")
    deadline = time.monotonic() + 600
    with psycopg.connect(database_url, autocommit=True) as conn:
        while not conn.execute(
            "SELECT 1 FROM train_steps WHERE run_id = %s AND step >= 2", (run_id,)
        ).fetchone():
            assert time.monotonic() < deadline and up.poll() is None, "no step 2"
            time.sleep(0.5)
    pids = _role_pids(trainer, database_url)
    assert len(pids) == 1, pids
    os.kill(pids[0], signal.SIGKILL)
    killed_at = time.time()
    deadline = time.monotonic() + 300
    while not [p for p in _role_pids(trainer, database_url) if p != pids[0]]:
        assert time.monotonic() < deadline, "Ray did not restart the trainer actor"
        time.sleep(0.5)
    _finish(up, tmp_path / "up.log", timeout=900)
    with psycopg.connect(database_url) as conn:
        versions = [
            row[0]
            for row in conn.execute(
                "SELECT version FROM checkpoints WHERE run_id = %s ORDER BY version", (run_id,)
            )
        ]
        assert versions == list(range(steps + 1))  # no step lost, none taken twice
        rows = conn.execute(
            "SELECT lease_epoch, extract(epoch FROM created_at)::float8 FROM train_steps"
            " WHERE run_id = %s ORDER BY step",
            (run_id,),
        ).fetchall()
    epochs = [epoch for epoch, _ in rows]
    assert epochs == sorted(epochs)  # the killed trainer never wrote after its successor
    after = [epoch for epoch, at in rows if at > killed_at]
    assert after and min(after) > epochs[0]  # the restarted actor took over with a new epoch


def test_up_refuses_an_unknown_launcher_and_ray_options_without_ray(
    capsys: pytest.CaptureFixture[str],
) -> None:
    code, _, err = rollout(capsys, "up", "--launcher", "kubernetes")
    assert code == 2 and "--launcher must be local or ray, got 'kubernetes'" in err
    code, _, err = rollout(capsys, "up", "--role", "trainer")
    assert code == 2 and "--role and --ray-address need --launcher ray" in err


async def test_the_launcher_refuses_an_unknown_role(ledger: Ledger) -> None:
    settings = Settings.from_environ({})
    with pytest.raises(RayLaunchError, match="role 'evaluator' is not one of inference"):
        RayLauncher(ledger, settings, roles=frozenset({"trainer", "evaluator"}))
