"""Errors of `rollout.models`."""

from __future__ import annotations

from rollout.errors import RolloutError


class ModelError(RolloutError, ValueError):
    """A model or tokenizer cannot be built or loaded as asked; the message names the field."""
