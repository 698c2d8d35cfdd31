"""Errors raised while building training batches or running a training provider."""

from __future__ import annotations

from rollout.errors import RolloutError


class TrainingError(RolloutError, ValueError):
    """Bad training input (the message names the field and the value) or a provider failure."""


class CheckpointError(TrainingError):
    """A checkpoint folder is missing files or does not match the provider that loads it."""


class FencedOut(TrainingError):
    """Another trainer took this trainer's lease over: it stands down and writes nothing more.

    The message says which lease, which epoch this trainer held and who holds it now.
    """
