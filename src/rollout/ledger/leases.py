"""Leases: fencing for roles that must be single (the trainer of a run).

A lease is named `ROLE:SUBJECT`: the trainer of run RUN holds `trainer_lease(RUN)`, and
`lease_role` and `trainer_run` read a name back. A lease has one holder at a time and an epoch
that grows on every take-over. `acquire_lease` takes a free or expired lease (epoch + 1) or
renews one its holder already has. Writes made under a lease call `check_fence` in their own
transaction: it locks the lease row and raises `StaleFence` unless the lease is still the
caller's, so a paused-then-revived old holder can never write.
"""

from __future__ import annotations

from typing import LiteralString

from psycopg.rows import class_row, dict_row

from rollout.ledger.connection import Conn, LedgerConnection, fetch_one
from rollout.ledger.errors import InvalidInput, LeaseHeld, LedgerError, StaleFence
from rollout.ledger.inputs import not_empty
from rollout.ledger.records import Lease

LEASE_COLUMNS: LiteralString = (
    "name, holder, epoch, extract(epoch FROM expires_at)::float8 AS expires_at"
)
# Take over when expired (epoch + 1), renew when already ours, else change nothing.
ACQUIRE_LEASE: LiteralString = (
    """
INSERT INTO leases AS l (name, holder, epoch, expires_at)
VALUES (%(name)s, %(holder)s, 1, now() + make_interval(secs => %(ttl)s))
ON CONFLICT (name) DO UPDATE SET
    epoch = CASE WHEN l.holder = EXCLUDED.holder THEN l.epoch ELSE l.epoch + 1 END,
    acquired_at = CASE WHEN l.holder = EXCLUDED.holder THEN l.acquired_at ELSE now() END,
    holder = EXCLUDED.holder,
    expires_at = EXCLUDED.expires_at
WHERE l.holder = EXCLUDED.holder OR l.expires_at <= now()
RETURNING """
    + LEASE_COLUMNS
)
LEASE_HOLDER: LiteralString = """
SELECT holder, epoch, greatest(0, extract(epoch FROM expires_at - now()))::float8 AS remaining
FROM leases WHERE name = %(name)s
"""
FENCE_SHARE: LiteralString = "SELECT holder, epoch FROM leases WHERE name = %(name)s FOR SHARE"
FENCE_UPDATE: LiteralString = "SELECT holder, epoch FROM leases WHERE name = %(name)s FOR UPDATE"

TRAINER = "trainer"


def trainer_lease(run_id: str) -> str:
    """The name of the lease the trainer of run `run_id` holds (one trainer per run).

    Example:
        >>> trainer_lease("r1")
        'trainer:r1'
    """
    return f"{TRAINER}:{run_id}"


def lease_role(name: str) -> str:
    """The role that holds lease `name` (what comes before the first ':').

    Example:
        >>> lease_role(trainer_lease("r1"))
        'trainer'
    """
    return name.partition(":")[0]


def trainer_run(name: str) -> str | None:
    """The run whose trainer holds lease `name`, or None for any other lease.

    Example:
        >>> trainer_run(trainer_lease("r1")), trainer_run("sandbox:minecraft")
        ('r1', None)
    """
    role, _, subject = name.partition(":")
    return subject if role == TRAINER else None


async def check_fence(conn: Conn, lease: Lease, *, exclusive: bool = False) -> None:
    """Inside a transaction: lock the lease row and raise StaleFence unless `lease` is current.

    The lock makes a concurrent take-over wait until this transaction ends. `exclusive` takes
    it FOR UPDATE, which also serialises the holder's own writes of one kind (serving records).
    """
    query = FENCE_UPDATE if exclusive else FENCE_SHARE
    row = await fetch_one(conn, dict_row, query, {"name": lease.name})
    if row is None:
        raise StaleFence(f"lease {lease.name!r} was never acquired")
    if row["epoch"] != lease.epoch or row["holder"] != lease.holder:
        raise StaleFence(
            f"lease {lease.name!r} epoch {lease.epoch} ({lease.holder!r}) was taken over "
            f"by {row['holder']!r} at epoch {row['epoch']}"
        )


class LeasesMixin(LedgerConnection):
    """Taking and renewing leases (see the module docstring)."""

    async def acquire_lease(self, name: str, holder: str, ttl_seconds: float = 30.0) -> Lease:
        """Take the lease if free or expired (epoch + 1); renew if held by `holder`.

        `holder` must be unique per process (for example host, pid and a random suffix): two
        processes with one holder name would share the lease and defeat the fence.

        Raises:
            LeaseHeld: another holder has it and it has not expired.
        """
        if ttl_seconds <= 0:
            raise InvalidInput(f"ttl_seconds must be > 0, got {ttl_seconds!r}")
        not_empty("holder", holder)
        params = {"name": name, "holder": holder, "ttl": float(ttl_seconds)}
        async with self._pool.connection() as conn:
            lease = await fetch_one(conn, class_row(Lease), ACQUIRE_LEASE, params)
            if lease is not None:
                return lease
            current = await fetch_one(conn, dict_row, LEASE_HOLDER, params)
        if current is None:  # pragma: no cover - leases are never deleted
            raise LedgerError(f"lease {name!r} vanished while acquiring it")
        raise LeaseHeld(
            f"lease {name!r} is held by {current['holder']!r} (epoch {current['epoch']}) for "
            f"another {current['remaining']:.1f} s"
        )
