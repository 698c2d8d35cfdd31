"""Errors raised while loading or playing environments."""

from __future__ import annotations

from rollout.errors import RolloutError


class EnvironmentLoadError(RolloutError):
    """`MODULE:ATTR` could not be imported or is not an environment."""


class TaskError(RolloutError):
    """A Task broke its contract or raised. `traceback` holds the task's own traceback."""

    def __init__(self, message: str, traceback: str | None = None) -> None:
        super().__init__(message)
        self.traceback = traceback
