"""The ledger's exceptions: one hierarchy under `LedgerError`."""

from __future__ import annotations


class LedgerError(Exception):
    """Base class of ledger errors."""


class StaleFence(LedgerError):
    """A write by a lease holder or claimant who has been fenced out (someone took over)."""


class NotFound(LedgerError):
    """A run, episode or key that does not exist (the message names it)."""


class LeaseHeld(LedgerError):
    """`acquire_lease` found the lease held, unexpired, by another holder (the message names it)."""


class InvalidInput(LedgerError, ValueError):
    """Bad input to a ledger call; the message names the field and the value."""
