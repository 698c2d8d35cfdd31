"""Sandbox instances and their fenced claims (the ledger side of `rollout.sandboxes`).

An instance (a Minecraft server, a gridworld process) is registered once and then claimed by
one episode at a time. The claim is a lease on the instance row: `epoch` grows on every claim,
so a runner that lost its claim (it paused, its lease expired, another episode took the
instance) is refused with `StaleFence` on its next fenced write. Several runners playing the
agents of one episode share that episode's claim: the first claims (and resets the instance if
it is dirty, then marks it ready), the others join it. Each finished agent is recorded on the
claim; when every agent has finished, the claim is released. A claim whose runners all died
expires; the instance is then dirty, and the next claimer resets it before use.

Abstractions (methods of `SandboxesMixin`, a mixin of the `Ledger` facade that needs only its
connection pool):

- `register_sandbox`, `retire_sandbox`: an instance appears (clean) or is taken out of service;
  a `served` one (a sandbox host keeps it for runners on every host) may be claimed from any
  host while it is clean;
- `claim_sandbox`: join the episode's live claim, or claim a free instance (oldest clean first):
  one on the claimer's host, or a clean served one;
- `renew_sandbox`, `sandbox_ready`, `finish_sandbox_seat`: fenced by the claim's epoch;
- `retire_idle_sandboxes`: take unclaimed instances of a host out of service (a clean shutdown;
  `spent`: the served ones an episode used, which their sandbox host replaces);
- reads: `sandbox`, `list_sandboxes`, `sandbox_events`.

Every write also appends a `sandbox_events` fact (started, claimed, expired, reset, released,
retired), the instance's history.
"""

from __future__ import annotations

import math
import secrets
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, LiteralString

from psycopg.rows import dict_row
from psycopg.types.json import Jsonb

from rollout.ledger.connection import LedgerConnection
from rollout.ledger.errors import InvalidInput, NotFound, StaleFence

SANDBOX_EVENTS = ("started", "claimed", "expired", "reset", "released", "retired")


@dataclass(frozen=True)
class SandboxRecord:
    """One instance and its current claim (if any)."""

    instance_id: str
    pool: str
    host: str
    details: dict[str, Any]
    seats: int
    served: bool
    """A sandbox host serves it: claimable from any host while clean."""
    retired: bool
    clean: bool
    epoch: int
    episode_id: str | None
    run_id: str | None
    holder: str | None
    ready: bool
    agents: int | None
    finished: list[int]
    expires_in: float | None
    """Seconds until the claim expires (negative: expired); None when unclaimed."""
    created_at: float

    @property
    def state(self) -> str:
        """'retired', 'claimed', 'expired' (claimed, lease ran out), 'idle' or 'dirty'."""
        if self.retired:
            return "retired"
        if self.episode_id is not None and self.expires_in is not None:
            return "claimed" if self.expires_in > 0 else "expired"
        return "idle" if self.clean else "dirty"

    @classmethod
    def from_row(cls, row: Mapping[str, Any]) -> SandboxRecord:
        return cls(**{name: row[name] for name in _RECORD_FIELDS})


_RECORD_FIELDS = tuple(SandboxRecord.__dataclass_fields__)


@dataclass(frozen=True)
class SandboxClaim:
    """An episode's fenced claim on one instance, as one runner holds it.

    `joined` is False for the runner that made the claim; when `needs_reset` is also True that
    runner must reset the instance and call `sandbox_ready` before any agent uses it.
    """

    instance_id: str
    pool: str
    epoch: int
    episode_id: str
    details: dict[str, Any]
    ready: bool
    needs_reset: bool
    joined: bool
    agents: int
    needs_start: bool = False
    """A new instance, registered by this claim: the claimer starts it (then `sandbox_ready`)."""


@dataclass(frozen=True)
class SandboxEvent:
    instance_id: str
    epoch: int
    event: str
    episode_id: str | None
    holder: str | None
    detail: str | None
    created_at: float


_SELECT_RECORD: LiteralString = (
    "SELECT instance_id, pool, host, details, seats, served, retired, clean, epoch, episode_id,"
    " run_id,"
    " holder, ready, agents, finished,"
    " extract(epoch FROM expires_at - now())::float8 AS expires_in,"
    " extract(epoch FROM created_at)::float8 AS created_at FROM sandboxes"
)
_INSERT_EVENT: LiteralString = (
    "INSERT INTO sandbox_events (instance_id, epoch, event, episode_id, holder, detail)"
    " VALUES (%s, %s, %s, %s, %s, %s) ON CONFLICT (instance_id, epoch, event) DO NOTHING"
)
_REGISTER: LiteralString = (
    "INSERT INTO sandboxes (instance_id, pool, host, details, seats, served)"
    " VALUES (%s, %s, %s, %s, %s, %s) ON CONFLICT (instance_id) DO NOTHING"
)
_CLAIM_DETAIL: LiteralString = (
    "SELECT detail FROM sandbox_events WHERE instance_id = %s AND epoch = %s AND event = 'claimed'"
)
_LIVE_CLAIM_OF_EPISODE: LiteralString = (
    "SELECT instance_id, pool, epoch, details, ready, agents, members, finished, holder, claimer"
    " FROM sandboxes"
    " WHERE episode_id = %s AND pool = %s AND NOT retired AND expires_at > now()"
    " FOR UPDATE"
)
_JOIN: LiteralString = (
    "UPDATE sandboxes SET expires_at = greatest(expires_at, now() + make_interval(secs => %s)),"
    " members = members || %s WHERE instance_id = %s"
)
_PICK_FREE: LiteralString = (
    "SELECT instance_id, clean, epoch, episode_id, holder FROM sandboxes"
    " WHERE pool = %(pool)s AND NOT retired"
    "   AND (%(host)s::text IS NULL OR host = %(host)s OR (served AND clean))"
    "   AND seats >= %(agents)s AND (episode_id IS NULL OR expires_at <= now())"
    " ORDER BY clean DESC, created_at LIMIT 1 FOR UPDATE SKIP LOCKED"
)
_COUNT_LIVE: LiteralString = (
    "SELECT count(*) AS live FROM sandboxes WHERE pool = %s AND host = %s AND NOT retired"
)
_PICK_INSTANCE: LiteralString = (
    "SELECT instance_id, clean, epoch, episode_id, holder FROM sandboxes"
    " WHERE instance_id = %(instance)s FOR UPDATE"
)
_CLAIM: LiteralString = (
    "UPDATE sandboxes SET epoch = epoch + 1, episode_id = %(episode)s, run_id = %(run)s,"
    " holder = %(holder)s, agents = %(agents)s, members = %(members)s, finished = '{}',"
    " claimer = %(agent)s,"
    " ready = false, clean = false,"
    " expires_at = now() + make_interval(secs => %(lease)s)"
    " WHERE instance_id = %(instance)s RETURNING pool, epoch, details"
)
_RENEW: LiteralString = (
    "UPDATE sandboxes SET expires_at = greatest(expires_at, now() + make_interval(secs => %s))"
    " WHERE instance_id = %s AND epoch = %s AND episode_id IS NOT NULL AND NOT retired"
    " RETURNING 1"
)
_READY: LiteralString = (
    "UPDATE sandboxes SET ready = true, details = coalesce(%s, details)"
    " WHERE instance_id = %s AND epoch = %s AND episode_id IS NOT NULL AND NOT retired"
    " RETURNING 1"
)
_FINISH: LiteralString = (
    "UPDATE sandboxes SET finished = CASE WHEN %(agent)s = ANY(finished) THEN finished"
    "   ELSE finished || %(agent)s END"
    " WHERE instance_id = %(instance)s AND epoch = %(epoch)s AND episode_id IS NOT NULL"
    " RETURNING cardinality(finished) >= agents AS all_done, episode_id, holder"
)
_RELEASED: LiteralString = (
    "SELECT 1 AS released FROM sandboxes s JOIN sandbox_events e USING (instance_id)"
    " WHERE s.instance_id = %(instance)s AND s.epoch = %(epoch)s AND s.episode_id IS NULL"
    "   AND %(agent)s = ANY(s.finished) AND e.epoch = %(epoch)s AND e.event = 'released'"
)
_RELEASE: LiteralString = (
    "UPDATE sandboxes SET episode_id = NULL, run_id = NULL, holder = NULL, expires_at = NULL,"
    " ready = false WHERE instance_id = %s"
)
_RETIRE: LiteralString = (
    "UPDATE sandboxes SET retired = true, episode_id = NULL, expires_at = NULL"
    " WHERE instance_id = %s AND NOT retired RETURNING epoch"
)
_RETIRE_IDLE: LiteralString = (
    "UPDATE sandboxes SET retired = true WHERE NOT retired AND host = %(host)s"
    " AND (%(pools)s::text[] IS NULL OR pool = ANY(%(pools)s::text[]))"
    " AND (episode_id IS NULL OR expires_at <= now())"
    " AND NOT (%(spent)s AND (clean OR NOT served))"
    " RETURNING instance_id, epoch"
)
_RETIRED_AT_SHUTDOWN: LiteralString = (
    "SELECT s.instance_id FROM sandboxes s JOIN sandbox_events e USING (instance_id)"
    " WHERE s.host = %(host)s AND (%(pools)s::text[] IS NULL OR s.pool = ANY(%(pools)s::text[]))"
    "   AND e.event = 'retired' AND e.holder = %(holder)s AND e.detail = %(detail)s"
    " ORDER BY s.created_at, s.instance_id"
)
IDLE_AT_SHUTDOWN = "idle at shutdown"
USED_AND_REPLACED = "used: replaced by its host"


def _positive(field: str, value: float) -> float:
    if isinstance(value, bool) or not isinstance(value, int | float) or not math.isfinite(value):
        raise InvalidInput(f"{field} must be a finite number, got {value!r}")
    if value <= 0:
        raise InvalidInput(f"{field} must be > 0, got {value!r}")
    return float(value)


def _stale(claim: SandboxClaim, what: str) -> StaleFence:
    return StaleFence(
        f"claim epoch {claim.epoch} of sandbox {claim.instance_id!r} (episode "
        f"{claim.episode_id!r}) was released or taken over; cannot {what}"
    )


async def _claim_new(
    conn: Any,
    pool: str,
    host: str,
    max_instances: int,
    seats: int | None,
    episode_id: str,
    run_id: str,
    agents: int,
    agent: int,
    holder: str,
    member: Jsonb,
    lease: float,
) -> SandboxClaim | None:
    """Register a new instance claimed by the episode, if the host has room (see claim)."""
    await conn.execute("SELECT pg_advisory_xact_lock(hashtext(%s))", (f"{pool}@{host}",))
    cursor = await conn.execute(_COUNT_LIVE, (pool, host))
    row = await cursor.fetchone()
    if row is not None and row["live"] >= max_instances:
        return None
    instance = f"{pool}-{secrets.token_hex(4)}"
    await conn.execute(_REGISTER, (instance, pool, host, Jsonb({}), seats or agents, False))
    await conn.execute(_INSERT_EVENT, (instance, 0, "started", None, None, host))
    cursor = await conn.execute(
        _CLAIM,
        {
            "episode": episode_id,
            "run": run_id,
            "holder": holder,
            "agents": agents,
            "members": member,
            "lease": lease,
            "instance": instance,
            "agent": agent,
        },
    )
    claimed = await cursor.fetchone()
    assert claimed is not None
    await conn.execute(
        _INSERT_EVENT, (instance, claimed["epoch"], "claimed", episode_id, holder, "new")
    )
    return SandboxClaim(
        instance, pool, claimed["epoch"], episode_id, {}, False, False, False, agents, True
    )


def _own_claim(live: Mapping[str, Any], agent: int, attempt: int, holder: str) -> bool:
    """Whether the live claim was made by this seat attempt itself (and not prepared yet)."""
    return (
        live["claimer"] == agent
        and live["holder"] == holder
        and live["members"].get(str(agent)) == attempt
        and not live["ready"]
    )


class SandboxesMixin(LedgerConnection):
    """Sandbox methods of the `Ledger` facade (see the module docstring)."""

    async def register_sandbox(
        self,
        pool: str,
        host: str,
        details: Mapping[str, Any],
        *,
        seats: int,
        instance_id: str,
        served: bool = False,
    ) -> SandboxRecord:
        """Record a started, clean instance `instance_id` of `pool` on `host`; returns its
        record. Registering it again with the same pool and host changes nothing. A `served`
        one may be claimed from any host while it is clean (a sandbox host replaces it once
        used).

        Raises:
            InvalidInput: an empty pool or instance id, seats below 1, or `instance_id`
                registered already with another pool or host.
        """
        if not pool:
            raise InvalidInput(f"pool must not be empty, got {pool!r}")
        if not instance_id:
            raise InvalidInput(f"instance_id must not be empty, got {instance_id!r}")
        if isinstance(seats, bool) or not isinstance(seats, int) or seats < 1:
            raise InvalidInput(f"seats must be an integer >= 1, got {seats!r}")
        async with self._pool.connection() as conn, conn.transaction():
            await conn.execute(
                _REGISTER, (instance_id, pool, host, Jsonb(dict(details)), seats, served)
            )
            await conn.execute(_INSERT_EVENT, (instance_id, 0, "started", None, None, host))
        record = await self.sandbox(instance_id)
        if (record.pool, record.host) != (pool, host):
            raise InvalidInput(
                f"instance_id {instance_id!r} is registered already, in pool {record.pool!r} "
                f"on host {record.host!r}"
            )
        return record

    async def claim_sandbox(
        self,
        pool: str,
        *,
        episode_id: str,
        run_id: str,
        agents: int,
        agent: int,
        attempt: int,
        holder: str,
        host: str | None,
        lease_seconds: float = 30.0,
        max_instances: int | None = None,
        seats: int | None = None,
    ) -> SandboxClaim | None:
        """The episode's live claim (joined), or a new claim on a free instance; None if none.

        Free instances are unclaimed ones and ones whose claim expired (their runners died),
        clean ones first. Claims of one episode are serialised, so its agents never end up in
        two instances. A later attempt of an agent whose earlier attempt held the live claim
        alone (no other agent still playing) takes it over with a new epoch and a reset.

        Args:
            pool: The pool's name.
            episode_id: The episode that needs the instance.
            run_id: Its run (recorded for `rollout sandboxes list`).
            agents: How many agents will finish before the claim is released.
            agent: Which agent of the episode claims.
            attempt: The seat attempt that claims.
            holder: Who claims (a runner id).
            host: Only instances on this host, or clean served ones (None: any host).
            lease_seconds: The claim expires unless renewed within this time.
            max_instances: With a `host`: when no instance is free and the host has fewer
                live instances of the pool, register a new one (of `seats` seats) claimed by
                this episode, in the same transaction (so concurrent claimers never start more
                than the limit); the claim says `needs_start`.
            seats: The seats of a new instance (default `agents`).
        """
        lease = _positive("lease_seconds", lease_seconds)
        async with self._pool.connection() as conn, conn.transaction():
            await conn.execute("SELECT pg_advisory_xact_lock(hashtext(%s))", (episode_id,))
            cursor = await conn.execute(_LIVE_CLAIM_OF_EPISODE, (episode_id, pool))
            live = await cursor.fetchone()
            member = Jsonb({str(agent): attempt})
            if live is not None and _own_claim(live, agent, attempt, holder):
                # This very seat attempt made the claim (its COMMIT's answer was lost and the
                # call runs again): it still has to prepare the instance, as it would have.
                cursor = await conn.execute(_CLAIM_DETAIL, (live["instance_id"], live["epoch"]))
                claimed = await cursor.fetchone()
                detail = claimed["detail"] if claimed is not None else None
                return SandboxClaim(
                    live["instance_id"], live["pool"], live["epoch"], episode_id,
                    live["details"], False, detail == "needs reset", False, live["agents"],
                    detail == "new",
                )  # fmt: skip
            if live is not None:
                previous = live["members"].get(str(agent))
                others = [
                    int(a)
                    for a in live["members"]
                    if int(a) != agent and int(a) not in live["finished"]
                ]
                if previous is None or previous >= attempt or others:
                    await conn.execute(_JOIN, (lease, member, live["instance_id"]))
                    return SandboxClaim(
                        live["instance_id"], live["pool"], live["epoch"], episode_id,
                        live["details"], live["ready"], False, True, live["agents"],
                    )  # fmt: skip
                # This agent's earlier attempt held the claim alone and died: take it over (the
                # world it left is dirty), fencing the dead attempt out.
                cursor = await conn.execute(_PICK_INSTANCE, {"instance": live["instance_id"]})
            else:
                cursor = await conn.execute(
                    _PICK_FREE, {"pool": pool, "host": host, "agents": agents}
                )
            free = await cursor.fetchone()
            if free is None:
                if max_instances is None or host is None:
                    return None
                return await _claim_new(
                    conn, pool, host, max_instances, seats, episode_id, run_id, agents, agent,
                    holder, member, lease,
                )  # fmt: skip
            instance, clean = free["instance_id"], free["clean"]
            old_epoch, old_episode, old_holder = free["epoch"], free["episode_id"], free["holder"]
            if old_episode is not None:  # the previous claim died without a release
                await conn.execute(
                    _INSERT_EVENT,
                    (instance, old_epoch, "expired", old_episode, old_holder, None),
                )
            cursor = await conn.execute(
                _CLAIM,
                {
                    "episode": episode_id,
                    "run": run_id,
                    "holder": holder,
                    "agents": agents,
                    "members": member,
                    "lease": lease,
                    "instance": instance,
                    "agent": agent,
                },
            )
            row = await cursor.fetchone()
            assert row is not None  # locked above
            pool_name, epoch, details = row["pool"], row["epoch"], row["details"]
            detail = "clean" if clean else "needs reset"
            await conn.execute(
                _INSERT_EVENT, (instance, epoch, "claimed", episode_id, holder, detail)
            )
        return SandboxClaim(
            instance, pool_name, epoch, episode_id, details, False, not clean, False, agents
        )

    async def renew_sandbox(self, claim: SandboxClaim, lease_seconds: float = 30.0) -> None:
        """Extend the claim. Raises StaleFence if it was released or taken over."""
        lease = _positive("lease_seconds", lease_seconds)
        async with self._pool.connection() as conn:
            cursor = await conn.execute(_RENEW, (lease, claim.instance_id, claim.epoch))
            if await cursor.fetchone() is None:
                raise _stale(claim, "renew it")

    async def sandbox_ready(
        self,
        claim: SandboxClaim,
        *,
        details: Mapping[str, Any] | None = None,
        reset: bool = False,
        holder: str | None = None,
    ) -> None:
        """Mark the claimed instance ready for the episode's agents (after a reset, if `reset`),
        with new connection details if they changed. Fenced by the claim's epoch."""
        new_details = Jsonb(dict(details)) if details is not None else None
        async with self._pool.connection() as conn, conn.transaction():
            cursor = await conn.execute(_READY, (new_details, claim.instance_id, claim.epoch))
            if await cursor.fetchone() is None:
                raise _stale(claim, "mark it ready")
            if reset:
                await conn.execute(
                    _INSERT_EVENT,
                    (claim.instance_id, claim.epoch, "reset", claim.episode_id, holder, None),
                )

    async def finish_sandbox_seat(self, claim: SandboxClaim, agent: int) -> bool:
        """Record that `agent` finished; release the claim when every agent has. True if this
        call released it. Raises StaleFence if the claim was released or taken over."""
        async with self._pool.connection() as conn, conn.transaction():
            cursor = await conn.execute(
                _FINISH, {"agent": agent, "instance": claim.instance_id, "epoch": claim.epoch}
            )
            row = await cursor.fetchone()
            if row is None:
                fence = {"agent": agent, "instance": claim.instance_id, "epoch": claim.epoch}
                cursor = await conn.execute(_RELEASED, fence)
                if await cursor.fetchone() is not None:
                    return True  # this call released it; its answer was lost on the way
                raise _stale(claim, f"finish agent {agent}")
            if not row["all_done"]:
                return False
            await conn.execute(_RELEASE, (claim.instance_id,))
            await conn.execute(
                _INSERT_EVENT,
                (
                    claim.instance_id,
                    claim.epoch,
                    "released",
                    row["episode_id"],
                    row["holder"],
                    None,
                ),
            )
        return True

    async def retire_sandbox(self, instance_id: str, reason: str) -> bool:
        """Take an instance out of service (it crashed, or it was stopped). False if it was
        retired already."""
        async with self._pool.connection() as conn, conn.transaction():
            cursor = await conn.execute(_RETIRE, (instance_id,))
            row = await cursor.fetchone()
            if row is None:
                return False
            await conn.execute(
                _INSERT_EVENT, (instance_id, row["epoch"], "retired", None, None, reason)
            )
        return True

    async def retire_idle_sandboxes(
        self, host: str, pools: Sequence[str] | None = None, *, holder: str, spent: bool = False
    ) -> list[SandboxRecord]:
        """Retire the unclaimed (or expired) instances on `host` (of `pools`, if given) in one
        statement, so none of them can be claimed any more; returns them to be stopped.

        At shutdown (`spent` false) that is every instance `holder` (the process shutting down)
        retired so, a rerun of the call included. With `spent`, only the served instances an
        episode used, and only those this call retired: their sandbox host calls it on every
        look, and an instance it already stopped must not be stopped again.
        """
        reason = USED_AND_REPLACED if spent else IDLE_AT_SHUTDOWN
        keys = {
            "host": host,
            "pools": list(pools) if pools is not None else None,
            "spent": spent,
        }
        async with self._pool.connection() as conn, conn.transaction():
            cursor = await conn.execute(_RETIRE_IDLE, keys)
            rows = await cursor.fetchall()
            for row in rows:
                await conn.execute(
                    _INSERT_EVENT,
                    (row["instance_id"], row["epoch"], "retired", None, holder, reason),
                )
            retired = [row["instance_id"] for row in rows]
            if not spent:
                cursor = await conn.execute(
                    _RETIRED_AT_SHUTDOWN, {**keys, "holder": holder, "detail": reason}
                )
                retired = [row["instance_id"] for row in await cursor.fetchall()]
        return [await self.sandbox(instance_id) for instance_id in retired]

    async def sandbox(self, instance_id: str) -> SandboxRecord:
        """One instance's record. Raises NotFound."""
        async with self._pool.connection() as conn:
            cursor = conn.cursor(row_factory=dict_row)
            await cursor.execute(_SELECT_RECORD + " WHERE instance_id = %s", (instance_id,))
            row = await cursor.fetchone()
        if row is None:
            raise NotFound(f"sandbox {instance_id!r} not found")
        return SandboxRecord.from_row(row)

    async def list_sandboxes(
        self, *, pool: str | None = None, include_retired: bool = False
    ) -> list[SandboxRecord]:
        """Instances, oldest first (only `pool`'s; retired ones only if asked)."""
        async with self._pool.connection() as conn:
            cursor = conn.cursor(row_factory=dict_row)
            await cursor.execute(
                _SELECT_RECORD + " WHERE (%s::text IS NULL OR pool = %s) AND (%s OR NOT retired)"
                " ORDER BY created_at, instance_id",
                (pool, pool, include_retired),
            )
            rows = await cursor.fetchall()
        return [SandboxRecord.from_row(row) for row in rows]

    async def sandbox_events(self, instance_id: str) -> list[SandboxEvent]:
        """An instance's history, oldest first."""
        async with self._pool.connection() as conn:
            cursor = conn.cursor(row_factory=dict_row)
            await cursor.execute(
                "SELECT instance_id, epoch, event, episode_id, holder, detail,"
                " extract(epoch FROM created_at)::float8 AS created_at FROM sandbox_events"
                " WHERE instance_id = %s ORDER BY id",
                (instance_id,),
            )
            rows = await cursor.fetchall()
        return [SandboxEvent(**row) for row in rows]
