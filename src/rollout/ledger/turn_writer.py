"""`Batcher`: batches concurrent single calls into one statement per batch: writes (`BatchWriter`:
turns, seat ends; `TurnWriter` for turns) and reads (the gateway's key checks).

A call joins the pending batch; when fewer than `max_in_flight` batches are being written, the
pending batch is written at once, and calls that arrive meanwhile form the next batch.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, Sequence
from typing import Generic, TypeVar

from rollout.contracts import Turn
from rollout.ledger.errors import LedgerError
from rollout.ledger.retry import is_disconnect

MAX_BATCH = 500

Outcome = bool | Exception
"""A write's answer: True (new), False (recorded before), or why it was not recorded."""

T = TypeVar("T")
R = TypeVar("R")


class Batcher(Generic[T, R]):
    """Batches concurrent single calls (see the module docstring): `write` takes a batch of
    items and answers each, in order, with its result or the exception it raised."""

    def __init__(
        self,
        write: Callable[[Sequence[T]], Awaitable[Sequence[R | Exception]]],
        *,
        max_in_flight: int = 4,
    ) -> None:
        self._write = write
        self._pending: list[tuple[T, asyncio.Future[R]]] = []
        self._max_in_flight = max_in_flight
        # Each batch being written, by the task writing it (its waiters are failed if the task
        # ends without answering them: cancelled, even before it started).
        self._tasks: dict[asyncio.Task[None], list[tuple[T, asyncio.Future[R]]]] = {}

    async def submit(self, item: T) -> R:
        """`item`'s answer, from the batch it joined; raises the exception it got."""
        future: asyncio.Future[R] = asyncio.get_running_loop().create_future()
        self._pending.append((item, future))
        self._maybe_flush()
        # The batch is written by its own task: a cancelled caller leaves it alone.
        return await future

    def _maybe_flush(self) -> None:
        while self._pending and len(self._tasks) < self._max_in_flight:
            batch, self._pending = self._pending[:MAX_BATCH], self._pending[MAX_BATCH:]
            task = asyncio.create_task(self._flush(batch))
            self._tasks[task] = batch
            task.add_done_callback(self._done)

    def _done(self, task: asyncio.Task[None]) -> None:
        batch = self._tasks.pop(task, [])
        error = "cancelled" if task.cancelled() else repr(task.exception())
        for _, future in batch:
            if not future.done():
                future.set_exception(LedgerError(f"not recorded: {error}"))
        self._maybe_flush()

    async def _flush(self, batch: list[tuple[T, asyncio.Future[R]]]) -> None:
        try:
            outcomes: list[R | BaseException] = list(await self._write([item for item, _ in batch]))
        except Exception as error:
            if len(batch) == 1 or is_disconnect(error):  # a lost connection fails them all
                outcomes = [error] * len(batch)
            else:
                # One bad write (say, a token id out of range) must not fail the others.
                outcomes = []
                for item, _ in batch:
                    try:
                        outcomes.extend(await self._write([item]))
                    except Exception as single:
                        outcomes.append(single)
        for (_, future), outcome in zip(batch, outcomes, strict=True):
            if future.done():
                continue
            if isinstance(outcome, BaseException):
                future.set_exception(outcome)
            else:
                future.set_result(outcome)

    async def close(self) -> None:
        """Wait for the batches being written, and write those still pending."""
        while self._tasks or self._pending:
            self._maybe_flush()
            await asyncio.wait(list(self._tasks))
            await asyncio.sleep(0)  # let the finished tasks' done callbacks run


class BatchWriter(Batcher[T, bool]):
    """Batches concurrent single writes; each answers True (new) or False (recorded before)."""

    async def record(self, item: T) -> bool:
        return await self.submit(item)


TurnWriter = BatchWriter[Turn]
