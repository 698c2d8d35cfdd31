"""asyncio tasks that stop when asked, even when a library swallowed the request.

Libraries under the platform can swallow a cancel that lands at the wrong moment (psycopg_pool's
connection check while it tests a connection; Python 3.11's `wait_for` when its wait ends at the
same time as the cancel). A loop that went on after that would never end, and whoever awaited
it would wait forever (a seat whose heartbeat renewed its claim forever never ended). So:

- a long-lived loop calls `raise_if_cancelled()` at the top of each round, and
- whoever stops a task uses `stop_task(task)`: cancel it and wait a bounded time, without
  swallowing a cancel of its own.

Example:
    >>> import asyncio
    >>> async def swallows() -> None:
    ...     while True:
    ...         raise_if_cancelled()
    ...         try:
    ...             await asyncio.sleep(3600)
    ...         except asyncio.CancelledError:
    ...             pass  # what a misbehaving library does
    >>> async def main() -> bool:
    ...     task = asyncio.create_task(swallows())
    ...     await asyncio.sleep(0)
    ...     return await stop_task(task, timeout=5.0)
    >>> asyncio.run(main())
    True
"""

from __future__ import annotations

import asyncio
import logging
from typing import Any

log = logging.getLogger(__name__)

STOP_WAIT_S = 10.0
"""How long `stop_task` waits for a cancelled task to end."""


def raise_if_cancelled() -> None:
    """Raise CancelledError if the current task was asked to stop.

    For a task's own loop (one never run inside `asyncio.timeout`, whose cancel is its own).
    """
    task = asyncio.current_task()
    if task is not None and task.cancelling():
        raise asyncio.CancelledError


async def stop_task(task: asyncio.Task[Any], timeout: float = STOP_WAIT_S) -> bool:  # noqa: ASYNC109
    """Cancel `task` and wait up to `timeout` seconds for it to end; whether it ended.

    Its result or exception is left on the task (retrieved here, so never reported as lost); a
    cancel of the caller while it waits is not swallowed.
    """
    task.cancel()
    done, _ = await asyncio.wait({task}, timeout=timeout)
    if not done:
        log.warning("task %s did not stop within %g s; left behind", task.get_name(), timeout)
        return False
    if not task.cancelled():
        task.exception()  # retrieved: an error at stop time is not worth a warning
    return True
