"""Errors of `rollout.models`."""

from __future__ import annotations


class ModelError(ValueError):
    """A model or tokenizer cannot be built or loaded as asked; the message names the field."""
