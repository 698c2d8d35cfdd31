"""Heartbeats (migration 0008): a process beats, is listed with its age, and is shown as dead
once it misses more than STALE_BEATS beats; a clean close shows it stopped."""

from __future__ import annotations

import asyncio
import os
from collections.abc import Awaitable, Callable

import pytest

from rollout.ledger import Ledger
from rollout.ledger.errors import InvalidInput
from rollout.ledger.processes import STALE_BEATS


async def test_a_beating_process_is_listed_running_with_its_status(ledger: Ledger) -> None:
    process_id = await ledger.start_heartbeat("runner", run_id=None, interval=0.2)
    ledger.set_process_status("playing 3 seats")
    await asyncio.sleep(0.5)
    [row] = await ledger.processes()
    assert row.process_id == process_id
    assert (row.role, row.pid, row.state) == ("runner", os.getpid(), "running")
    assert row.status == "playing 3 seats"
    assert 0 <= row.age_s < 0.5


async def test_a_process_that_stops_beating_is_dead_and_a_closed_one_stopped(
    make_ledger: Callable[..., Awaitable[Ledger]],
) -> None:
    observer = await make_ledger()
    frozen = await make_ledger()
    closed = await make_ledger()
    await closed.start_heartbeat("gateway", interval=0.2)
    frozen_id = await frozen.start_heartbeat("trainer", interval=0.2)
    # Freeze the beating task without a clean close: what kill -9 leaves behind.
    assert frozen._beat_task is not None
    frozen._beat_task.cancel()
    frozen._beat_task = None
    await closed.close()
    await asyncio.sleep(0.2 * STALE_BEATS + 0.3)
    states = {row.role: row.state for row in await observer.processes(everything=True)}
    assert states == {"trainer": "dead", "gateway": "stopped"}
    # Without `everything`, stopped processes are left out; dead ones are shown.
    assert [row.process_id for row in await observer.processes()] == [frozen_id]


async def test_bad_heartbeat_input_is_refused(ledger: Ledger) -> None:
    with pytest.raises(InvalidInput, match="role"):
        await ledger.start_heartbeat("")
    with pytest.raises(InvalidInput, match="interval"):
        await ledger.start_heartbeat("runner", interval=0)
