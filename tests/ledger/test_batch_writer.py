"""BatchWriter: a batch whose writing task ends without answering fails its waiters, and close()
returns (it used to spin forever when a batch task was cancelled before it ran)."""

from __future__ import annotations

import asyncio
from collections.abc import Sequence

import pytest

from rollout.ledger.errors import LedgerError
from rollout.ledger.turn_writer import BatchWriter, Outcome


async def test_a_batch_cancelled_before_it_ran_fails_its_waiters_and_close_returns() -> None:
    written: list[list[int]] = []

    async def write(items: Sequence[int]) -> list[Outcome]:
        written.append(list(items))
        return [True] * len(items)

    writer = BatchWriter(write, max_in_flight=1)
    first = asyncio.create_task(writer.record(1))
    await asyncio.sleep(0)  # record() queued its item and started the batch's task
    for task in list(writer._tasks):
        task.cancel()  # before the task's first step: its body never runs
    second = asyncio.create_task(writer.record(2))
    await asyncio.wait_for(writer.close(), 5)
    with pytest.raises(LedgerError, match="not recorded"):
        await first
    assert await second is True  # the next batch was still written
    assert written == [[2]]


async def test_close_writes_what_is_pending() -> None:
    async def write(items: Sequence[int]) -> list[Outcome]:
        await asyncio.sleep(0.01)
        return [True] * len(items)

    writer = BatchWriter(write, max_in_flight=1)
    calls = [asyncio.create_task(writer.record(i)) for i in range(5)]
    await asyncio.sleep(0)
    await asyncio.wait_for(writer.close(), 5)
    assert all(call.done() for call in calls)
    assert [await call for call in calls] == [True] * 5
