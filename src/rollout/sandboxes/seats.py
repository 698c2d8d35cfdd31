"""`SandboxSeats`: a runner's side of sandbox claims, one object per runner process.

`hold(pool, seat)` is what a runner wraps around playing one agent seat of a sandboxed episode:

1. claim: join the episode's live claim, or claim a free instance of the pool on this host (or
   a clean one that a sandbox host serves, `rollout.sandboxes.host`), or register a new one
   claimed by the episode (up to the pool's `max_instances` per host, counted in the same
   transaction) and start it; when the host is full, wait for an instance to be released or to
   expire;
2. prepare (the runner that made the claim): health-check the instance (a crashed one is
   retired and replaced), reset it if an earlier episode used it, let the pool prepare it for
   this claim (`SandboxPool.claimed`: a new secret), then mark it ready. Runners
   that joined wait until it is ready (or the claim changes hands, then they claim again);
3. yield the details (plus `instance` and `epoch`) for `RunContext.sandbox`, renewing the claim
   in the background while the seat plays;
4. finish: record that this agent finished; the last agent's runner releases the claim. A seat
   that is abandoned (cancelled, fenced out, gateway unreachable) does not finish (only a
   normal end or a `TaskError` counts), so a killed
   runner's claim expires and the instance is reset before its next use.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import socket
from collections.abc import AsyncIterator, Mapping
from pathlib import Path
from typing import Any, Protocol

from rollout.harness.errors import TaskError
from rollout.ledger import Ledger, StaleFence
from rollout.ledger.sandboxes import SandboxClaim
from rollout.sandboxes.errors import SandboxError
from rollout.sandboxes.pool import Details, SandboxPool
from rollout.settings import get_settings
from rollout.tasks import raise_if_cancelled, stop_task

log = logging.getLogger("rollout.sandboxes")

POLL_SECONDS = 0.1


class SeatLike(Protocol):
    """What `hold` needs to know about the seat (a ledger `SeatClaim` has it)."""

    @property
    def run_id(self) -> str: ...
    @property
    def episode_id(self) -> str: ...
    @property
    def agent(self) -> int: ...
    @property
    def attempt(self) -> int: ...
    @property
    def agents(self) -> int: ...


def instance_dir(pool: str, instance_id: str) -> Path:
    """Where an instance keeps its files: `<state>/sandboxes/<pool>/<instance>`."""
    return get_settings().state_dir / "sandboxes" / pool / instance_id


class SandboxSeats:
    """Claims, prepares and releases sandbox instances for the seats one runner plays."""

    def __init__(
        self,
        ledger: Ledger,
        holder: str,
        *,
        lease_seconds: float = 30.0,
        host: str | None = None,
        wait_timeout: float = 600.0,
    ) -> None:
        self.ledger = ledger
        self.holder = holder
        self.lease_seconds = lease_seconds
        self.host = host or socket.gethostname()
        self.wait_timeout = wait_timeout
        self.started: list[str] = []
        """Instances this object started (for tests and shutdown)."""

    @contextlib.asynccontextmanager
    async def hold(self, pool: SandboxPool, seat: SeatLike) -> AsyncIterator[dict[str, Any]]:
        """Claim (or join) the seat's episode's instance for the duration of the block."""
        claim = await self.acquire(pool, seat)
        renew = asyncio.create_task(self._renew(claim))
        finished = False
        try:
            yield {**claim.details, "instance": claim.instance_id, "epoch": claim.epoch}
            finished = True
        except TaskError:
            finished = True  # the seat failed, but it ended: count it as finished
            raise
        # Anything else (cancelled, fenced out, gateway gone) abandons the seat: it will be
        # played again, so this agent has not finished; the claim expires if nobody renews it.
        finally:
            await stop_task(renew)
            if finished:
                try:
                    released = await self.ledger.finish_sandbox_seat(claim, seat.agent)
                    if released:
                        log.info("released %s after %s", claim.instance_id, claim.episode_id)
                except StaleFence as error:
                    log.warning("%s", error)

    async def acquire(self, pool: SandboxPool, seat: SeatLike) -> SandboxClaim:
        """The seat's episode's claim, prepared and ready (see the module docstring)."""
        loop = asyncio.get_running_loop()
        deadline = loop.time() + self.wait_timeout
        while True:
            raise_if_cancelled()
            claim = await self.ledger.claim_sandbox(
                pool.name,
                episode_id=seat.episode_id,
                run_id=seat.run_id,
                agents=seat.agents,
                agent=seat.agent,
                attempt=seat.attempt,
                holder=self.holder,
                host=self.host if pool.local else None,
                lease_seconds=self.lease_seconds,
                max_instances=pool.max_instances,
                seats=pool.seats,
            )
            if claim is None:
                await asyncio.sleep(POLL_SECONDS * 5)  # the host is full: wait for a release
            elif claim.joined:
                ready = await self._wait_ready(claim)
                if ready is not None:
                    return ready
            else:
                prepared = await self._prepare(pool, claim)
                if prepared is not None:
                    return prepared
            if loop.time() > deadline:
                raise SandboxError(
                    f"no {pool.name} instance for episode {seat.episode_id} after "
                    f"{self.wait_timeout:.0f} s"
                )

    async def _prepare(self, pool: SandboxPool, claim: SandboxClaim) -> SandboxClaim | None:
        """Health-check and (if used before) reset a newly claimed instance, then mark it ready.
        None if it had crashed (it is retired; claim again)."""
        workdir = instance_dir(pool.name, claim.instance_id)
        details: Details = dict(claim.details)
        if claim.needs_start:  # a new instance, registered by this claim
            try:
                details = await pool.start(workdir)
            except SandboxError as error:
                log.warning("starting %s failed: %s", claim.instance_id, error)
                await self.ledger.retire_sandbox(claim.instance_id, f"start failed: {error}")
                raise
            self.started.append(claim.instance_id)
            log.info("started %s: %s", claim.instance_id, details)
        elif not await pool.health(details):
            log.warning("%s is not healthy: replacing it", claim.instance_id)
            await self.ledger.retire_sandbox(claim.instance_id, "failed its health check")
            with contextlib.suppress(Exception):
                await pool.stop(details)
            return None
        if claim.needs_reset:
            try:
                details = await pool.reset(details, workdir)
            except SandboxError as error:
                log.warning("reset of %s failed: %s", claim.instance_id, error)
                await self.ledger.retire_sandbox(claim.instance_id, f"reset failed: {error}")
                return None
        try:
            details = await pool.claimed(details)
        except SandboxError as error:
            log.warning("claiming %s failed: %s", claim.instance_id, error)
            await self.ledger.retire_sandbox(claim.instance_id, f"claim failed: {error}")
            with contextlib.suppress(Exception):
                await pool.stop(details)
            return None
        await self.ledger.sandbox_ready(
            claim, details=details, reset=claim.needs_reset, holder=self.holder
        )
        return SandboxClaim(
            claim.instance_id,
            claim.pool,
            claim.epoch,
            claim.episode_id,
            details,
            True,
            False,
            False,
            claim.agents,
        )

    async def _wait_ready(self, claim: SandboxClaim) -> SandboxClaim | None:
        """Wait until the claim's preparer marks it ready; None if the claim changed hands."""
        current = claim
        while not current.ready:
            await asyncio.sleep(POLL_SECONDS)
            record = await self.ledger.sandbox(claim.instance_id)
            if (
                record.epoch != claim.epoch
                or record.retired
                or record.episode_id != claim.episode_id
            ):
                return None
            if record.ready:
                current = SandboxClaim(
                    claim.instance_id,
                    claim.pool,
                    claim.epoch,
                    claim.episode_id,
                    record.details,
                    True,
                    False,
                    True,
                    claim.agents,
                )
            elif record.expires_in is not None and record.expires_in <= 0:
                return None  # its preparer died
        return current

    async def _renew(self, claim: SandboxClaim) -> None:
        while True:
            raise_if_cancelled()  # a cancel the pool swallowed during the last renewal
            await asyncio.sleep(self.lease_seconds / 3)
            try:
                await self.ledger.renew_sandbox(claim, self.lease_seconds)
            except StaleFence as error:
                log.warning("%s", error)
                return
            except Exception as error:  # a ledger blip: try again at the next tick
                log.warning("renewing %s failed: %s", claim.instance_id, error)

    async def close(self, pools: Mapping[str, SandboxPool]) -> None:
        """Stop the idle instances of these pools on this host (a clean shutdown)."""
        if not pools:
            return
        for record in await self.ledger.retire_idle_sandboxes(
            self.host, list(pools), holder=self.holder
        ):
            pool = pools.get(record.pool)
            if pool is None or not pool.local:
                continue
            with contextlib.suppress(Exception):
                await pool.stop(record.details)
