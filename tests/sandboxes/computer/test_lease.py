"""A runner killed while holding a computer: the claim expires, the computer is reset in place
from its template, and the next claim gets a new secret.

Real processes: a runner process claims the episode's seat and a computer (`ComputerPool`: a
real server, real bubblewrap), changes the computer (a file, a deleted file, a commit) and holds
on; the test SIGKILLs it. A second runner replays the seat: it waits for the claim to expire,
and its task must find the computer as the template made it.
"""

from __future__ import annotations

import os
import signal
import time
from pathlib import Path

import pytest

from rollout.ledger import EpisodeSpec, Ledger
from rollout.sandboxes.computer import Computer
from rollout.sandboxes.process import process_alive
from tests.sandboxes.computer.machines import MARKER, require_computers
from tests.sandboxes.test_sandbox_lease import LEASE, _start_runner, _wait_for, play_as_survivor


@pytest.mark.slow
async def test_killed_runner_computer_is_reset_before_the_next_claim(
    ledger: Ledger, database_url: str, tmp_path: Path
) -> None:
    require_computers()
    run = await ledger.create_run("lease", "tests.sandboxes.computer.machines:holding", {})
    [episode] = await ledger.add_episodes(run.run_id, [EpisodeSpec(0, 0, {"hold": True}, seed=1)])
    child = _start_runner(database_url, run.run_id, tmp_path / "runner.log")
    try:

        async def held() -> object:
            listed = await ledger.list_sandboxes(pool="holding-computer")
            if listed and listed[0].ready:
                async with Computer.of(listed[0].details) as computer:
                    return listed[0] if await computer.exists(MARKER) else None
            return None

        try:
            first = await _wait_for(held, 120)
        except AssertionError:
            raise AssertionError((tmp_path / "runner.log").read_text()[-3000:]) from None
        assert first.holder == "doomed" and first.epoch == 1
        os.kill(child.pid, signal.SIGKILL)
        killed_at = time.monotonic()
        child.wait(timeout=10)
    finally:
        if child.poll() is None:
            child.kill()

    # The computer outlives its runner, changed, until the claim expires.
    server = first.details["pid"]
    assert process_alive(server)
    await play_as_survivor(ledger, run.run_id, 120)
    assert time.monotonic() - killed_at >= LEASE * 0.5  # it waited for the dead claim

    [end] = (await ledger.episode(episode)).ends
    assert end.attempt == 2 and end.status == "completed", end.error
    assert end.reward == 1.0, "the replayed seat found the killed runner's changes"
    events = [(e.event, e.epoch, e.holder) for e in await ledger.sandbox_events(first.instance_id)]
    assert events[:6] == [
        ("started", 0, None),
        ("claimed", 1, "doomed"),
        ("expired", 1, "doomed"),
        ("claimed", 2, "survivor"),
        ("reset", 2, "survivor"),
        ("released", 2, "survivor"),
    ]
    final = await ledger.sandbox(first.instance_id)
    assert final.details["pid"] == server  # reset in place: the same server, a fresh disk
    assert final.details["secret"] != first.details["secret"]  # the doomed claim's is void
    assert final.retired and not process_alive(server)  # the survivor stopped it on leaving
