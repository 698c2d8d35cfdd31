"""The embedded Postgres: started once under the state folder, reused by every process."""

from __future__ import annotations

import asyncio
import json
import os
import sys
from pathlib import Path

import pytest

from rollout.ledger import Ledger, stop_embedded
from rollout.ledger.embedded import embedded_pid
from rollout.settings import state_dir

_CLIENT = """
import asyncio, json, sys
from rollout.ledger import Ledger
from rollout.ledger.embedded import embedded_pid

async def main():
    ledger = await Ledger.connect()  # no URL: the embedded server under ROLLOUT_STATE_DIR
    run = await ledger.create_run(sys.argv[1], "env:a", {})
    await ledger.close()
    print(json.dumps({"pid": embedded_pid(), "run_id": run.run_id}))

asyncio.run(main())
"""


@pytest.mark.slow
async def test_two_processes_share_one_embedded_server(
    embedded_state_dir: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("ROLLOUT_DATABASE_URL", raising=False)
    monkeypatch.setenv("ROLLOUT_STATE_DIR", str(embedded_state_dir))
    assert state_dir() == embedded_state_dir.resolve()  # noqa: ASYNC240
    assert embedded_pid() is None
    # Started at the same moment: one starts the server, the other waits for it and reuses it.
    processes = [
        await asyncio.create_subprocess_exec(
            sys.executable,
            "-c",
            _CLIENT,
            f"run-{i}",
            env=dict(os.environ),
            stdout=asyncio.subprocess.PIPE,
            stderr=asyncio.subprocess.PIPE,
        )
        for i in range(2)
    ]
    reports = []
    for process in processes:
        out, err = await asyncio.wait_for(process.communicate(), timeout=120)
        assert process.returncode == 0, err.decode()
        reports.append(json.loads(out.decode().strip().splitlines()[-1]))
    pid = embedded_pid()
    assert pid is not None and {r["pid"] for r in reports} == {pid}
    assert (embedded_state_dir / "postgres" / "PG_VERSION").exists()

    ledger = await Ledger.connect()  # this process too
    try:
        assert {r.run_id for r in await ledger.list_runs()} == {r["run_id"] for r in reports}
    finally:
        await ledger.close()
    assert embedded_pid() == pid  # still the same server after every client left

    assert stop_embedded()
    assert embedded_pid() is None
    assert not stop_embedded()
