"""A runner killed while holding a sandbox claim: the claim expires, the instance is reset, and
the seat is played again in a fresh world.

Real processes: a runner process (a `Runner` on a real ledger) claims the episode's seat and
its sandbox (a real process instance), marks the world as used and holds on; the test SIGKILLs
it. A second runner then replays the seat: it must wait for the claim to expire, and find the
instance reset (a new process, an empty folder) before the task sees it.
"""

from __future__ import annotations

import asyncio
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from rollout.ledger import EpisodeSpec, Ledger
from rollout.runners.runner import Runner
from rollout.sandboxes.process import process_alive
from tests.sandboxes.worlds import MARKER, FolderServer

LEASE = 2.0
ROOT = Path(__file__).resolve().parents[2]

RUNNER = """
import asyncio, sys
from rollout.ledger import Ledger
from rollout.runners.runner import Runner

async def main():
    ledger = await Ledger.connect(sys.argv[1], migrate=False)
    runner = Runner(ledger, "http://127.0.0.1:9/v1", runner_id="doomed", run_id=sys.argv[2],
                    concurrency=1, lease_seconds=float(sys.argv[3]), idle_wait=0.2)
    await runner.run(asyncio.Event())

asyncio.run(main())
"""


async def _wait_for(predicate, limit: float = 240.0):  # type: ignore[no-untyped-def]
    deadline = time.monotonic() + limit
    while time.monotonic() < deadline:
        value = await predicate()
        if value:
            return value
        await asyncio.sleep(0.1)
    raise AssertionError("timed out waiting")


def _start_runner(database_url: str, run_id: str, log: Path) -> subprocess.Popen[bytes]:
    with log.open("wb") as stderr:
        return subprocess.Popen(
            [sys.executable, "-c", RUNNER, database_url, run_id, str(LEASE)],
            cwd=ROOT,
            env=dict(os.environ),
            stderr=stderr,
        )


async def play_as_survivor(ledger: Ledger, run_id: str, limit: float = 240.0) -> None:
    """A runner (`survivor`) in this process plays one seat of the run, then shuts down
    cleanly (stopping the idle instances on its host)."""
    survivor = Runner(
        ledger,
        "http://127.0.0.1:9/v1",
        runner_id="survivor",
        run_id=run_id,
        concurrency=1,
        lease_seconds=LEASE,
        idle_wait=0.2,
    )
    try:
        await asyncio.wait_for(survivor.run(asyncio.Event(), max_seats=1), timeout=limit)
    finally:
        await survivor.close()


@pytest.mark.slow
async def test_killed_runner_claim_expires_and_instance_is_reset(
    ledger: Ledger, database_url: str, tmp_path: Path
) -> None:
    run = await ledger.create_run("lease", "tests.sandboxes.worlds:holding", {})
    [episode] = await ledger.add_episodes(run.run_id, [EpisodeSpec(0, 0, {"hold": True}, seed=1)])
    child = _start_runner(database_url, run.run_id, tmp_path / "runner.log")
    try:

        async def held() -> object:
            listed = await ledger.list_sandboxes(pool="folder")
            if listed and listed[0].ready:
                marker = Path(listed[0].details["workdir"]) / MARKER
                return listed[0] if marker.exists() else None
            return None

        try:
            first = await _wait_for(held)
        except AssertionError:
            raise AssertionError((tmp_path / "runner.log").read_text()[-3000:]) from None
        assert first.episode_id == episode and first.holder == "doomed" and first.epoch == 1
        old_pid = first.details["pid"]
        os.kill(child.pid, signal.SIGKILL)
        killed_at = time.monotonic()
        child.wait(timeout=10)
    finally:
        if child.poll() is None:
            child.kill()

    # The instance outlives its runner; its claim is still live until it expires.
    assert process_alive(old_pid)
    await play_as_survivor(ledger, run.run_id)
    waited = time.monotonic() - killed_at

    record = await ledger.episode(episode)
    [end] = record.ends
    assert end.attempt == 2 and end.status == "completed"
    assert end.reward == 1.0, "the replayed seat found the killed runner's world, not a fresh one"
    assert waited >= LEASE * 0.5  # it had to wait for the dead claim to expire

    instance = first.instance_id
    events = [
        (e.event, e.epoch, e.episode_id, e.holder) for e in await ledger.sandbox_events(instance)
    ]
    assert events[:6] == [
        ("started", 0, None, None),
        ("claimed", 1, episode, "doomed"),
        ("expired", 1, episode, "doomed"),
        ("claimed", 2, episode, "survivor"),
        ("reset", 2, episode, "survivor"),
        ("released", 2, episode, "survivor"),
    ]
    # The reset replaced the process; the survivor's clean shutdown stopped the idle instance.
    assert not process_alive(old_pid)
    final = await ledger.sandbox(instance)
    assert final.details["pid"] != old_pid and final.retired
    assert not process_alive(final.details["pid"])
    assert FolderServer.name == final.pool
