"""The ledger's exceptions: `LedgerError` and its subclasses, under `RolloutError`."""

from __future__ import annotations

from rollout.errors import RolloutError


class LedgerError(RolloutError):
    """Base class of ledger errors."""


class StaleFence(LedgerError):
    """A write by a lease holder or claimant who has been fenced out (someone took over)."""


class NotFound(LedgerError, LookupError):
    """A run, episode or key that does not exist (the message names it)."""


class LeaseHeld(LedgerError):
    """`acquire_lease` found the lease held, unexpired, by another holder (the message names it)."""


class InvalidInput(LedgerError, ValueError):
    """Bad input to a ledger call; the message names the field and the value."""
