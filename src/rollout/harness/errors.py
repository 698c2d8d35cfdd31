"""Errors raised while defining, loading or playing environments.

- `InvalidEnvironment`: an `Environment` was given a bad field (`agents=0`, empty parameters).
- `EnvironmentLoadError`: `MODULE:ATTR` could not be imported or is not an environment.
- `TaskError`: a `Task` broke its contract, raised or timed out while playing. Its message and
  traceback are capped (`capped`): a Task that raises with megabytes of text records at most
  `MAX_ERROR_CHARS` of each.

Example:
    >>> from rollout.harness.errors import InvalidEnvironment
    >>> error = InvalidEnvironment("demo", "agents", 0, "must be an integer >= 1")
    >>> str(error)
    "Environment 'demo': agents must be an integer >= 1, got 0"
    >>> isinstance(error, ValueError), error.field, error.value
    (True, 'agents', 0)
    >>> capped("x" * 30 + "y" * 30, limit=20)
    'xxxxxxxxxx\\n... (40 characters left out) ...\\nyyyyyyyyyy'
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


MAX_ERROR_CHARS = 16_000
"""The most characters of a Task error's message, and of its traceback, that are kept."""


def capped(text: str, limit: int = MAX_ERROR_CHARS) -> str:
    """`text` cut to about `limit` characters: its head and its tail, with a note of the cut."""
    if len(text) <= limit:
        return text
    half = limit // 2
    return f"{text[:half]}\n... ({len(text) - 2 * half} characters left out) ...\n{text[-half:]}"


class TaskError(RolloutError):
    """A Task broke its contract, raised or timed out. `traceback` holds the task's own traceback.

    Both are capped to `MAX_ERROR_CHARS` (see `capped`).
    """

    def __init__(self, message: str, traceback: str | None = None) -> None:
        super().__init__(capped(message))
        self.traceback = None if traceback is None else capped(traceback)
