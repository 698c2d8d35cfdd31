"""`--cluster` means the ledger of the cluster of the current kube context, and nothing else:
`rollout train --cluster` and `rollout monitor --cluster` reach it (here through a stand-in
kubectl that port-forwards to a real Postgres, tests/launch/kubectl.py) or stop with one line
and exit 2, creating nothing in the local ledger or the local state folder.

`rollout train --create-only` is the local way to create a run for roles started elsewhere.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import psycopg
import pytest

from rollout.ledger.embedded import with_database
from tests.cli_helpers import rollout
from tests.launch.kubectl import fake_kubectl

PARITY = "parity.environment:environment"


def _runs(url: str) -> list[str]:
    with psycopg.connect(url) as conn:
        return [str(row[0]) for row in conn.execute("SELECT name FROM runs ORDER BY name")]


def _add_run(url: str, run_id: str, name: str) -> None:
    with psycopg.connect(url, autocommit=True) as conn:
        conn.execute(
            "INSERT INTO runs (run_id, name, environment, config) VALUES (%s, %s, %s, '{}')",
            (run_id, name, PARITY),
        )


@pytest.fixture
def local(monkeypatch: pytest.MonkeyPatch, database_url: str, tmp_path: Path) -> str:
    """This machine's ledger (ROLLOUT_DATABASE_URL) holding one run, and a fresh state folder."""
    monkeypatch.setenv("ROLLOUT_DATABASE_URL", database_url)
    (tmp_path / "state").mkdir()
    monkeypatch.setenv("ROLLOUT_STATE_DIR", str(tmp_path / "state"))
    monkeypatch.delenv("KUBERNETES_SERVICE_HOST", raising=False)
    _add_run(database_url, "m1", "mine")
    return database_url


@pytest.fixture
def cluster(pg_server_url: str, _databases: Any) -> Iterator[str]:
    """The cluster's ledger: a database of its own, reached only through (fake) kubectl."""
    name = _databases.take()
    try:
        yield with_database(pg_server_url, name)
    finally:
        _databases.release(name)


@pytest.mark.parametrize("command", [("train", PARITY, "--name", "there"), ("monitor",)])
def test_without_a_reachable_cluster_one_line_exit_2_and_nothing_local(
    command: tuple[str, ...],
    local: str,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    state = tmp_path / "state"
    before = sorted(p.relative_to(state) for p in state.rglob("*"))
    monkeypatch.setenv("PATH", "/nonexistent")  # no kubectl, no kube context
    code, out, err = rollout(capsys, *command, "--cluster")
    assert code == 2, (out, err)
    assert len(err.strip().splitlines()) == 1 and "Traceback" not in err
    assert "--cluster needs kubectl on PATH" in err
    assert _runs(local) == ["mine"]  # the local ledger's runs, unchanged
    assert sorted(p.relative_to(state) for p in state.rglob("*")) == before  # no model built


def test_train_creates_the_run_in_the_cluster_ledger_or_only_creates_it_here(
    local: str,
    cluster: str,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    bin_dir = fake_kubectl(tmp_path / "bin", cluster)
    monkeypatch.setenv("PATH", f"{bin_dir}{os.pathsep}{os.environ['PATH']}")
    # The test is where the run lands: a model folder the cluster would find (not built here).
    model = tmp_path / "model"
    model.mkdir()
    (model / "config.json").write_text("{}")
    code, out, err = rollout(
        capsys, "train", PARITY, "--cluster", "--name", "there", "--model", str(model), "--json"
    )
    assert code == 0, err
    assert json.loads(out)["status"] == "created"
    assert _runs(cluster) == ["there"]
    assert _runs(local) == ["mine"]
    # --create-only: the run in this machine's ledger, for roles started elsewhere; no role runs.
    code, out, err = rollout(
        capsys, "train", PARITY, "--create-only", "--name", "here", "--model", str(model), "--json"
    )
    assert code == 0, err
    assert json.loads(out)["status"] == "created" and "rollout up" in err
    assert _runs(local) == ["here", "mine"]
    with psycopg.connect(local) as conn:
        assert conn.execute("SELECT count(*) FROM processes").fetchone() == (0,)


@pytest.mark.slow
def test_monitor_cluster_serves_the_cluster_ledger(
    local: str, cluster: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    _add_run(cluster, "c1", "in-the-cluster")
    bin_dir = fake_kubectl(tmp_path / "bin", cluster)
    env = dict(os.environ, PATH=f"{bin_dir}{os.pathsep}{os.environ['PATH']}")
    from rollout.net.server import free_port

    port = free_port()
    monitor = subprocess.Popen(
        [sys.executable, "-m", "rollout.cli", "monitor", "--cluster", "--port", str(port)],
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    try:
        deadline = time.monotonic() + 60
        while True:
            assert monitor.poll() is None, monitor.communicate()[0][-2000:]
            assert time.monotonic() < deadline, "the monitor did not answer in 60 s"
            try:
                runs = httpx.get(f"http://127.0.0.1:{port}/api/runs", timeout=5).json()
                break
            except httpx.HTTPError:
                time.sleep(0.2)
        assert [run["name"] for run in runs["items"]] == ["in-the-cluster"]
    finally:
        monitor.terminate()
        monitor.wait(30)
