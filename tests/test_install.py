"""Installed as a user installs it: the wheels the release builds, in a fresh virtual environment
with no access to the checkout, run from a folder outside it.

The three packages are built as the release workflow builds them (`uv build`: an sdist, then the
wheel from it), installed with the versions uv.lock pins (the same wheels the workspace uses, so
uv's cache serves them), and the user's first commands run there: `rollout env check` and
`rollout run` of a built-in environment, a run created with the cpu-tiny preset, and the built-in
parity suite on its base checkpoint. The embedded Postgres starts in the user's folder.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import zipfile
from collections.abc import Iterator
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
PACKAGES = ("rolloutlib", "rollout-environments", "rollout")

pytestmark = pytest.mark.slow  # building and installing: about 30 s before the first command


def _uv() -> str:
    found = shutil.which("uv") or shutil.which("uv", path=str(Path.home() / ".local" / "bin"))
    if found is None:
        pytest.fail("uv is needed to build the wheels (CONTRIBUTING.md: the checks install it)")
    return found


def _run(args: list[str], cwd: Path, env: dict[str, str], timeout: float = 600) -> str:
    result = subprocess.run(args, cwd=cwd, env=env, capture_output=True, text=True, timeout=timeout)
    assert result.returncode == 0, f"{args} exited {result.returncode}:\n{result.stderr[-3000:]}"
    assert "Traceback" not in result.stderr, result.stderr
    return result.stdout


def _outside_env(home: Path) -> dict[str, str]:
    """This process' environment less everything that points into the checkout or its venv."""
    env = {
        key: value
        for key, value in os.environ.items()
        if not key.startswith(("ROLLOUT_", "UV_", "PYTHON", "VIRTUAL_ENV"))
    }
    env["HOME"] = str(home)  # nothing read from the user's own configuration
    env["UV_CACHE_DIR"] = os.environ.get("UV_CACHE_DIR") or str(Path.home() / ".cache" / "uv")
    return env


@pytest.fixture(scope="module")
def installed(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Path, Path]]:
    """(the fresh environment's bin folder, the user's project folder); built once."""
    uv = _uv()
    base = tmp_path_factory.mktemp("install")
    dist, venv, user = base / "dist", base / "venv", base / "my-project"
    user.mkdir()
    checkout_env = {k: v for k, v in os.environ.items() if not k.startswith("VIRTUAL_ENV")}
    _run([uv, "build", "--all-packages", "--out-dir", str(dist), "-q"], ROOT, checkout_env)
    # The third-party versions the lock pins; the packages themselves come from the wheels.
    constraints = base / "constraints.txt"
    _run(
        [uv, "export", "--frozen", "--no-dev", "--no-emit-workspace", "--no-hashes", "-q",
         "--output-file", str(constraints)],
        ROOT,
        checkout_env,
    )  # fmt: skip
    env = _outside_env(base)
    _run([uv, "venv", "-q", "--python", sys.executable, str(venv)], base, env)
    wheels = sorted(str(path) for path in dist.glob("*.whl"))
    assert len(wheels) == len(PACKAGES), wheels
    _run(
        [uv, "pip", "install", "-q", "--python", str(venv / "bin" / "python"),
         "--constraints", str(constraints), *wheels],
        base,
        env,
    )  # fmt: skip
    try:
        yield venv / "bin", user
    finally:
        subprocess.run(
            [str(venv / "bin" / "rollout"), "down"], cwd=user, env=env, capture_output=True
        )


def test_the_wheels_carry_the_presets_and_the_eval_suites(installed: tuple[Path, Path]) -> None:
    bin_dir, _ = installed
    (wheel,) = (bin_dir.parent.parent / "dist").glob("rollout-*.whl")
    names = set(zipfile.ZipFile(wheel).namelist())
    assert {"rollout/presets/cpu-tiny.yaml", "rollout/suites/parity.yaml"} <= names
    assert "rollout/suites/data/gsm8k-sample.jsonl" in names  # math-sample's items


def test_a_user_checks_plays_and_evaluates_from_their_own_folder(
    installed: tuple[Path, Path],
) -> None:
    bin_dir, user = installed
    env = _outside_env(user.parent)
    rollout = str(bin_dir / "rollout")

    where = _run(
        [str(bin_dir / "python"), "-c", "import rollout; print(rollout.__file__)"], user, env
    )
    assert Path(where.strip()).is_relative_to(bin_dir.parent), where  # not the checkout's

    checked = _run([rollout, "env", "check", "arithmetic.environment:environment"], user, env)
    assert checked.strip().endswith("ok"), checked

    played = _run([rollout, "run", "arithmetic.environment:environment"], user, env)
    assert "reward 1 (completed, 1 turn(s))" in played, played  # the scripted model's answer
    assert (user / ".rollout" / "postgres").is_dir()  # the embedded database, in this folder

    created = _run(
        [rollout, "train", "parity.environment:environment", "--preset", "cpu-tiny",
         "--steps", "1", "--create-only", "--name", "short"],
        user,
        env,
    )  # fmt: skip
    assert "run short" in created, created

    scored = _run(
        [rollout, "evals", "run", "parity", "--checkpoint", "base", "--run", "short", "--json"],
        user,
        env,
    )
    report = json.loads(scored)
    assert report["job"]["state"] == "done", report["job"]
    (score,) = report["scores"]
    assert (score["checkpoint"], score["environment"], score["episodes"]) == ("base", "parity", 128)
