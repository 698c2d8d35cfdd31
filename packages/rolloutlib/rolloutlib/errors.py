"""The exception hierarchy of rolloutlib.

Every error the library raises on purpose derives from `RolloutlibError`, so callers can catch
the library's errors in one place. Each class also derives from the matching built-in exception
(`ValueError`, `TypeError`, ...) so code written against the standard exceptions keeps working.

Messages name the offending field, space or parameter and show the value (shortened with
`describe`) so that a log line alone is enough to find the problem.
"""

from __future__ import annotations

import reprlib
from typing import Any

__all__ = [
    "ArgumentError",
    "ContractError",
    "EnvStateError",
    "GradingError",
    "MissingDependencyError",
    "RolloutlibError",
    "SerializationError",
    "SpaceValueError",
    "describe",
]


class _OrderedRepr(reprlib.Repr):
    """`reprlib.Repr` that keeps dict insertion order (the stock one sorts keys)."""

    def repr_dict(self, x: dict[Any, Any], level: int) -> str:
        if not x:
            return "{}"
        if level <= 0:
            return "{...}"
        parts = [
            f"{self.repr1(key, level - 1)}: {self.repr1(value, level - 1)}"
            for key, value in list(x.items())[: self.maxdict]
        ]
        if len(x) > self.maxdict:
            parts.append("...")
        return "{" + ", ".join(parts) + "}"


_repr = _OrderedRepr()
_repr.maxstring = 80
_repr.maxother = 80
_repr.maxlist = 8
_repr.maxdict = 8
_repr.maxlevel = 3


def describe(value: Any) -> str:
    """A short, single-line representation of `value` for error messages.

    Example:
        >>> describe("x" * 200)[:12]
        "'xxxxxxxxxxx"
    """
    try:
        return _repr.repr(value)
    except Exception:  # a broken __repr__ must not hide the original error
        return f"<{type(value).__name__} object>"


class RolloutlibError(Exception):
    """Base class of every error raised by rolloutlib."""


class ArgumentError(RolloutlibError, ValueError):
    """A function or constructor received a bad argument.

    Attributes:
        name: The parameter or field name.
        value: The value that was rejected.
    """

    def __init__(self, name: str, value: Any, reason: str) -> None:
        self.name = name
        self.value = value
        self.reason = reason
        super().__init__(f"{name}={describe(value)}: {reason}")


class SpaceValueError(RolloutlibError, ValueError):
    """A value is not an element of a space (wrong type or out of bounds).

    Attributes:
        space: The space that rejected the value.
        value: The rejected value.
        reason: Why the value was rejected.
    """

    def __init__(self, space: Any, value: Any, reason: str) -> None:
        self.space = space
        self.value = value
        self.reason = reason
        super().__init__(f"{describe(value)} is not an element of {space!r}: {reason}")


class ContractError(RolloutlibError, TypeError):
    """An environment or policy returned a value that breaks the contract (e.g. `step`
    returning something other than a 5-tuple)."""


class EnvStateError(RolloutlibError, RuntimeError):
    """An environment was used in the wrong state (for example `step` before `reset`)."""


class GradingError(RolloutlibError, ValueError):
    """A grader, parser or aggregation produced something that is not a score."""


class SerializationError(RolloutlibError, ValueError):
    """A record could not be converted to or from JSON."""


class MissingDependencyError(RolloutlibError, ImportError):
    """An optional dependency is needed for this feature (the message names the extra)."""
