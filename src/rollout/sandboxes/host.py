"""`SandboxHost`: a machine that keeps instances of one pool running for runners on every host.

By default a runner starts the instances its episodes need on its own machine. A sandbox host
(`rollout sandboxes serve ENVIRONMENT`) runs them on a machine of their own instead: the Minecraft
server of an episode whose four agents are played by runners on four other machines.

It keeps `count` instances of the environment's pool registered as *served*: a runner on any host
may claim a clean served instance (`Ledger.claim_sandbox`), and its agents connect to the address
in the instance's details. Only this machine can reset its instances, so once an episode has used
one (its claim released, or expired with its runners) this host retires it, stops it and starts
a fresh one; an idle instance that fails its health check is replaced the same way. When the
host stops, it retires and stops its idle instances (one in use keeps running until its episode
ends; its claim then finds it retired).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import secrets
import socket

from rollout.ledger import Ledger
from rollout.procs import process_label
from rollout.sandboxes.errors import SandboxError
from rollout.sandboxes.pool import SandboxPool
from rollout.sandboxes.seats import instance_dir

log = logging.getLogger("rollout.sandboxes.host")


class SandboxHost:
    """Keeps `count` served instances of `pool` on this machine (see the module docstring).

    Args:
        ledger: Where the instances are registered and claimed.
        pool: The environment's pool.
        count: How many instances to keep (in use or idle).
        hostname: This machine's name in the ledger (default: its host name, as runners use).
        interval: Seconds between two looks at the instances.
    """

    def __init__(
        self,
        ledger: Ledger,
        pool: SandboxPool,
        *,
        count: int = 1,
        hostname: str | None = None,
        interval: float = 1.0,
    ) -> None:
        if isinstance(count, bool) or not isinstance(count, int) or count < 1:
            raise SandboxError(f"count must be an integer >= 1, got {count!r}")
        self.ledger = ledger
        self.pool = pool
        self.count = count
        self.hostname = hostname or socket.gethostname()
        self.holder = process_label("sandboxes")
        """This process, as the holder of what it retires."""
        self.interval = interval
        self.started: list[str] = []
        """Every instance this host started, oldest first."""

    async def tend(self) -> None:
        """One look: replace the used and the broken instances, then start the missing ones."""
        name = self.pool.name
        for spent in await self.ledger.retire_idle_sandboxes(
            self.hostname, [name], holder=self.holder, spent=True
        ):
            log.info("%s was used: replacing it", spent.instance_id)
            await self.pool.stop(spent.details)
        mine = [
            record
            for record in await self.ledger.list_sandboxes(pool=name)
            if record.host == self.hostname and record.served
        ]
        for record in mine:
            if record.state == "idle" and not await self.pool.health(record.details):
                if await self.ledger.retire_sandbox(record.instance_id, "failed its health check"):
                    log.warning("%s is not healthy: replacing it", record.instance_id)
                    await self.pool.stop(record.details)
                mine.remove(record)
        for _ in range(self.count - len(mine)):
            await self._start_one()

    async def _start_one(self) -> None:
        instance = f"{self.pool.name}-{secrets.token_hex(4)}"
        details = await self.pool.start(instance_dir(self.pool.name, instance))
        try:
            await self.ledger.register_sandbox(
                self.pool.name,
                self.hostname,
                details,
                seats=self.pool.seats,
                instance_id=instance,
                served=True,
            )
        except BaseException:
            await self.pool.stop(details)
            raise
        self.started.append(instance)
        log.info("serving %s at %s:%s", instance, details.get("host"), details.get("port"))

    async def run(self, stop: asyncio.Event) -> None:
        """Tend the instances every `interval` seconds until `stop`, then retire and stop the
        idle ones."""
        try:
            while not stop.is_set():
                try:
                    await self.tend()
                except SandboxError as error:  # an instance that did not start: try again
                    log.warning("%s", error)
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(stop.wait(), timeout=self.interval)
        finally:
            await self.close()

    async def close(self) -> None:
        """Retire and stop this host's idle instances of the pool."""
        for record in await self.ledger.retire_idle_sandboxes(
            self.hostname, [self.pool.name], holder=self.holder
        ):
            with contextlib.suppress(Exception):
                await self.pool.stop(record.details)
