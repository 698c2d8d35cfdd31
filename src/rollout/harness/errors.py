"""Errors raised while defining, loading or playing environments.

- `InvalidEnvironment`: an `Environment` was given a bad field (`agents=0`, empty parameters).
- `EnvironmentLoadError`: `MODULE:ATTR` could not be imported or is not an environment.
- `TaskError`: a `Task` broke its contract or raised while playing.

Example:
    >>> from rollout.harness.errors import InvalidEnvironment
    >>> error = InvalidEnvironment("demo", "agents", 0, "must be an integer >= 1")
    >>> str(error)
    "Environment 'demo': agents must be an integer >= 1, got 0"
    >>> isinstance(error, ValueError), error.field, error.value
    (True, 'agents', 0)
"""

from __future__ import annotations

from typing import Any

from rollout.errors import RolloutError, describe


class InvalidEnvironment(RolloutError, ValueError):
    """An `Environment` field (or what its parameter source produced) is invalid.

    Attributes:
        environment: The environment's name.
        field: The offending field, e.g. `agents` or `parameters[2]`.
        value: The rejected value.
    """

    def __init__(self, environment: str, field: str, value: Any, reason: str) -> None:
        super().__init__(f"Environment {environment!r}: {field} {reason}, got {describe(value)}")
        self.environment = environment
        self.field = field
        self.value = value


class EnvironmentLoadError(RolloutError):
    """`MODULE:ATTR` could not be imported or is not an environment."""


class TaskError(RolloutError):
    """A Task broke its contract or raised. `traceback` holds the task's own traceback."""

    def __init__(self, message: str, traceback: str | None = None) -> None:
        super().__init__(message)
        self.traceback = traceback
