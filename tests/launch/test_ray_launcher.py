"""`rollout up --launcher ray`: the roles as Ray actors on a local Ray cluster.

The slow test runs a short parity training (cpu-tiny's recipe, small steps) with every role
placed by Ray and SIGKILLs the trainer actor's process mid-run: Ray restarts it, the new trainer
takes the run's lease with a higher epoch, the run finishes with every version exactly once, and
no actor is left behind. (Learning itself is tested on the local launcher, in
tests/launch/test_train.py: the launcher changes where roles run, not what they compute.)
"""

from __future__ import annotations

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


def _env(database_url: str, state: Path) -> dict[str, str]:
    return dict(
        os.environ,
        ROLLOUT_DATABASE_URL=database_url,
        ROLLOUT_STATE_DIR=str(state),
        RAY_AUTH_MODE="disabled",
    )


def _create_run(env: dict[str, str], *options: str) -> dict[str, str]:
    """`rollout train --create-only`: only create the run, for the launcher to pick up."""
    result = subprocess.run(
        [
            sys.executable, "-m", "rollout.cli", "train", "parity.environment:environment",
            "--preset", "cpu-tiny", "--create-only", "--json", *options,
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
def test_roles_run_as_ray_actors_and_a_killed_trainer_is_restarted_and_fenced(
    database_url: str, tmp_path: Path
) -> None:
    steps = 6
    env = _env(database_url, tmp_path / "state")
    created = _create_run(
        env,
        *("--steps", str(steps), "--set", "stop_at_reward=null"),
        *("--set", "groups_per_step=2", "--set", "warmup_steps=2"),  # small steps: wiring
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
    assert not _role_pids(trainer, database_url)  # no actor left behind


def test_up_refuses_an_unknown_launcher_and_ray_options_without_ray(
    capsys: pytest.CaptureFixture[str],
) -> None:
    code, _, err = rollout(capsys, "up", "--launcher", "kubernetes")
    assert code == 2 and "--launcher must be local or ray, got 'kubernetes'" in err
    code, _, err = rollout(capsys, "up", "--ray-address", "auto")
    assert code == 2 and "--ray-address needs --launcher ray" in err


async def test_the_launcher_refuses_an_unknown_role(ledger: Ledger) -> None:
    settings = Settings.from_environ({})
    with pytest.raises(RayLaunchError, match="role 'evaluator' is not one of inference"):
        RayLauncher(ledger, settings, roles=frozenset({"trainer", "evaluator"}))
