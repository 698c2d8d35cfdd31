"""The monitor's errors: bad query parameters (HTTP 400) and forbidden requests (403).

Missing runs and episodes are the ledger's `NotFound` (HTTP 404).
"""

from __future__ import annotations

from rollout.errors import RolloutError, describe


class MonitorError(RolloutError):
    """Base class of the monitor's errors."""


class BadParameter(MonitorError, ValueError):
    """A query parameter or form field is not acceptable (the message names it and the value)."""


def bounded(field: str, value: int, low: int, high: int) -> int:
    """`value` if `low <= value <= high`, else a `BadParameter` naming `field`.

    Example:
        >>> bounded("limit", 50, 1, 500)
        50
        >>> bounded("limit", 100000, 1, 500)
        Traceback (most recent call last):
        ...
        rollout.monitor.errors.BadParameter: limit must be between 1 and 500, got 100000
    """
    if not low <= value <= high:
        raise BadParameter(f"{field} must be between {low} and {high}, got {describe(value)}")
    return value
