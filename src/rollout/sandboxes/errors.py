"""Errors of sandbox pools and claims."""

from __future__ import annotations

from rollout.errors import RolloutError


class SandboxError(RolloutError):
    """A sandbox instance could not be started, reached, reset or claimed (the message says
    which instance and which step)."""
