"""Riding out a database outage: ledger calls retried with back-off while Postgres is away.

Every public coroutine method of a `LedgerConnection` subclass (each concept's mixin) is wrapped
by `retried` when the class is defined (`LedgerConnection.__init_subclass__`): a call that fails
because the connection is gone (`is_disconnect`: the server restarted, crashed, was failed over,
or its backends were terminated) runs again on a fresh connection, with back-off, until it
succeeds or the outage has lasted `ROLLOUT_DB_OUTAGE_S` (`rollout.settings`, default 60 s).
The first failure logs one warning ("database unreachable, retrying for up to N s"); giving up
raises `DatabaseUnavailable`, a `RolloutError`, which the CLI prints as one line.

Why rerunning a whole call is safe: every ledger write is idempotent on a natural key (ON
CONFLICT DO NOTHING, "append unless the latest row says the same", fenced inserts), so a call
whose COMMIT was lost with the connection stores its fact once when it runs again; its second
run may return False ("already there"). Claims (seats, leases) are not idempotent but safe to
repeat: a lost claim's attempt is superseded by the new one and nothing was written under it
(a sandbox claim rerun by the seat attempt that made it finds it and prepares it as before).
Calls that hold their own connection (`listen`, `wait`) are listed in `NOT_RETRIED`.

Example:
    >>> import psycopg
    >>> is_disconnect(psycopg.OperationalError("server closed the connection unexpectedly"))
    True
    >>> is_disconnect(psycopg.errors.AdminShutdown("terminating connection"))
    True
    >>> is_disconnect(psycopg.errors.UniqueViolation("duplicate key"))
    False
    >>> from psycopg_pool import PoolClosed
    >>> is_disconnect(PoolClosed("the pool is closed"))  # a call after close fails at once
    False
"""

from __future__ import annotations

import asyncio
import contextvars
import functools
import inspect
import logging
import time
from collections.abc import Awaitable, Callable
from typing import Any, ParamSpec, TypeVar

import psycopg
from psycopg.errors import IdleInTransactionSessionTimeout
from psycopg_pool import PoolClosed, TooManyRequests

from rollout.ledger.errors import LedgerError
from rollout.settings import get_settings

log = logging.getLogger("rollout.ledger")

P = ParamSpec("P")
T = TypeVar("T")

# Connection exceptions (class 08), and the server shutting down or starting up.
_DISCONNECT_STATES = frozenset({"57P01", "57P02", "57P03"})

NOT_RETRIED = frozenset(
    {
        # Not calls on the database, or holders of their own reconnecting connection.
        "close",
        "listen",
        "wait",
    }
)
"""Public ledger methods that are not retried (see the module docstring)."""

# The task running a retried call: a ledger method it calls inside runs once (the outer call
# retries the whole), so nested calls never multiply the outage time.
_retrying_task: contextvars.ContextVar[asyncio.Task[Any] | None] = contextvars.ContextVar(
    "rollout_ledger_retrying_task", default=None
)


class DatabaseUnavailable(LedgerError):
    """The database stayed unreachable for longer than `ROLLOUT_DB_OUTAGE_S`."""


def is_disconnect(error: BaseException) -> bool:
    """Whether `error` means the connection (or the server) went away, not a bad statement."""
    if isinstance(error, IdleInTransactionSessionTimeout):
        return True  # the server ended a frozen session (its transaction rolled back)
    if not isinstance(error, psycopg.OperationalError):
        return False
    if isinstance(error, PoolClosed | TooManyRequests):  # this process's doing, not the server's
        return False
    state = error.sqlstate
    # No SQLSTATE: the client lost the socket (refused, reset, closed), or the pool timed out.
    return state is None or state.startswith("08") or state in _DISCONNECT_STATES


# Start-up failures that waiting does not cure: the server answered and refused.
_PERMANENT = (
    "authentication failed",
    "does not exist",
    "no password supplied",
    "no pg_hba.conf entry",
    "invalid dsn",
    "invalid connection option",
)


def is_not_up_yet(error: BaseException) -> bool:
    """At start-up: whether `error` means the database is not there yet (worth waiting for),
    not that it refused us (a wrong password, database or URL).

    Example:
        >>> import psycopg
        >>> is_not_up_yet(psycopg.OperationalError("connection failed: Connection refused"))
        True
        >>> is_not_up_yet(psycopg.OperationalError('FATAL: database "x" does not exist'))
        False
    """
    return is_disconnect(error) and not any(text in str(error) for text in _PERMANENT)


def _first_line(error: BaseException) -> str:
    return str(error).strip().splitlines()[0] if str(error).strip() else repr(error)


class Outage:
    """One process's view of the database being away: when it began, and the retry policy.

    Shared by every call of one `Ledger`, so the warning is logged once per outage and every
    call gives up at the same time, `limit_s` after the first failure. With `starting`, the
    outage is the database not being up yet when a process connects (`Ledger.connect`): the
    same lines, but with a limit of 0 (not waited for) the error just says it cannot reach it.
    A `quiet` outage (a command a person types waiting briefly at start) logs nothing and gives
    up with that one line too.
    """

    def __init__(
        self,
        limit_s: float | None = None,
        *,
        where: str = "the database",
        starting: bool = False,
        quiet: bool = False,
    ) -> None:
        self.limit_s = get_settings().db_outage_s if limit_s is None else limit_s
        self.where = where
        self.starting = starting
        self.quiet = quiet
        self.since: float | None = None

    def failed(self, error: BaseException) -> float:
        """Note a disconnect; the seconds left to retry (<= 0: give up)."""
        now = time.monotonic()
        if self.since is None:
            self.since = now
            if self.limit_s > 0 and not self.quiet:  # else the error alone says it
                log.warning(
                    "database unreachable, retrying for up to %g s (%s: %s)",
                    self.limit_s,
                    self.where,
                    _first_line(error),
                )
        return self.since + self.limit_s - now

    def succeeded(self) -> None:
        if self.since is not None:
            if not self.quiet:
                log.warning("database reachable again after %.1f s", time.monotonic() - self.since)
            self.since = None

    def give_up(self, error: BaseException) -> DatabaseUnavailable:
        first = _first_line(error)
        if self.starting and (self.limit_s <= 0 or self.quiet):  # what happened, nothing more
            return DatabaseUnavailable(f"cannot reach the database ({self.where}): {first}")
        return DatabaseUnavailable(
            f"database unreachable for more than {self.limit_s:g} s ({self.where}): {first}; "
            "stopping (ROLLOUT_DB_OUTAGE_S sets how long to wait)"
        )


async def run_retrying(
    outage: Outage,
    call: Callable[[], Awaitable[T]],
    on_disconnect: Callable[[], Awaitable[None]] | None = None,
    *,
    retryable: Callable[[BaseException], bool] = is_disconnect,
) -> T:
    """Run `call` until it does not fail with a disconnect, or the outage outlasts its limit.

    `on_disconnect` runs after each disconnect (the pool drops its dead connections there);
    `retryable` says which errors are disconnects. Back-off: the first retry at once (a pooled
    connection may just be stale), then 0.1 s, doubling up to 2 s.

    The call also gives up `outage.limit_s` after its own first failure: other calls that
    succeed meanwhile (a heartbeat) end the shared outage, and must not keep one call that
    never gets through retrying for ever.
    """
    delay = 0.0
    first_failure: float | None = None
    while True:
        try:
            result = await call()
        except (psycopg.OperationalError, IdleInTransactionSessionTimeout) as error:
            if not retryable(error):
                raise
            now = time.monotonic()
            first_failure = now if first_failure is None else first_failure
            left = min(outage.failed(error), first_failure + outage.limit_s - now)
            if left <= 0:
                raise outage.give_up(error) from None
            if on_disconnect is not None:
                try:
                    await on_disconnect()
                except Exception as cleanup:  # the retry reports what matters
                    log.debug("after a disconnect: %s", cleanup)
            await asyncio.sleep(min(delay, left))
            delay = min(2.0, max(0.1, delay * 2))
            continue
        outage.succeeded()
        return result


def retried(
    method: Callable[..., Awaitable[T]],
) -> Callable[..., Awaitable[T]]:
    """Wrap a ledger method: rerun it through its ledger's `Outage` on a disconnect."""

    @functools.wraps(method)
    async def call(self: Any, *args: Any, **kwargs: Any) -> T:
        task = asyncio.current_task()
        if task is not None and _retrying_task.get() is task:
            return await method(self, *args, **kwargs)  # the outer call retries
        token = _retrying_task.set(task)
        try:
            return await run_retrying(
                self._outage,
                lambda: method(self, *args, **kwargs),
                self._after_disconnect,
            )
        finally:
            _retrying_task.reset(token)

    call.__rollout_retried__ = True  # type: ignore[attr-defined]
    return call


def wrap_methods(cls: type) -> None:
    """Wrap `cls`'s own public coroutine methods with `retried` (except `NOT_RETRIED`)."""
    for name, value in list(vars(cls).items()):
        if name.startswith("_") or name in NOT_RETRIED:
            continue
        if not inspect.iscoroutinefunction(value) or getattr(value, "__rollout_retried__", False):
            continue
        setattr(cls, name, retried(value))
