"""The evals' exceptions, under `RolloutError`."""

from __future__ import annotations

from rollout.errors import RolloutError


class EvalError(RolloutError):
    """Base class of eval errors."""


class SuiteError(EvalError, ValueError):
    """A suite that cannot be loaded or resolved; the message names the field and the value."""
