"""The supervisor's watch on the embedded Postgres: restarted on its data folder when it dies.

With the embedded default the server is a process like the roles, and everything depends on it:
`rollout up` (and so `rollout train`) checks it every half second and, when it is gone (a
crash, an OOM kill, a kill -9), starts it again on the same folder, where Postgres replays its
write-ahead log (crash recovery), so no committed fact is lost. Meanwhile every role's ledger
calls wait and retry (rollout.ledger.retry) and their LISTEN connections come back by
themselves. An external database (`ROLLOUT_DATABASE_URL` pointing elsewhere) is not watched:
its restarts and failovers are its operator's; the roles ride them out for up to
`ROLLOUT_DB_OUTAGE_S`. A server stopped on purpose (`rollout down`) is left stopped.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os

from rollout.ledger.embedded import is_embedded, restart_embedded
from rollout.ledger.errors import LedgerError

log = logging.getLogger("rollout.up")


async def watch_embedded(
    url: str,
    state_dir: str | os.PathLike[str],
    stop: asyncio.Event,
    *,
    interval: float = 0.5,
) -> None:
    """Until `stop` is set, restart the embedded server of `state_dir` whenever it is gone.

    Returns at once when `url` is not that server (an external database).
    """
    if not is_embedded(url, state_dir):
        return
    failing = False
    while not stop.is_set():
        try:
            if await asyncio.to_thread(restart_embedded, state_dir):
                log.warning("the embedded Postgres had stopped; restarted it (crash recovery)")
            failing = False
        except LedgerError as error:
            if not failing:  # once per failure streak; it tries again every interval
                log.warning("%s", str(error).splitlines()[0])
            failing = True
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(stop.wait(), timeout=interval)
