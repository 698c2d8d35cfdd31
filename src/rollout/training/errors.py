"""Errors raised while building training batches or running a training provider."""

from __future__ import annotations

from rollout.errors import RolloutError


class TrainingError(RolloutError, ValueError):
    """Bad training input (the message names the field and the value) or a provider failure."""


class CheckpointError(TrainingError):
    """A checkpoint folder is missing files or does not match the provider that loads it."""
