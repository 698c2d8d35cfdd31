"""Errors raised while assembling and starting a run's processes."""

from __future__ import annotations

from rollout.errors import RolloutError


class LaunchError(RolloutError):
    """A run or a role cannot be started as asked (the message says what is missing)."""


class Unavailable(LaunchError):
    """This machine lacks what a preset needs (GPUs, vLLM's environment, the tinker SDK)."""
