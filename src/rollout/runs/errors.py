"""The errors of a run's configuration, spec and live settings.

- `RunError`: the base (a `ValueError` too: each is bad input, and the message names the field
  and shows the value).
- `InvalidPreset`: a preset is missing, not YAML, or has a field that does not validate.
- `InvalidRunSpec`: a run's recorded spec does not validate, or the run has nothing to train.
- `InvalidSetting`: a live setting's key is unknown or its value out of bounds.
- `InvalidPolicies`: a run's `policies:` leaves an agent out or names one it does not have.
"""

from __future__ import annotations

from rollout.errors import RolloutError


class RunError(RolloutError, ValueError):
    """A run's configuration, spec or setting is not valid (the message names the field)."""


class InvalidPreset(RunError):
    """A preset is missing, is not YAML, or does not validate."""


class InvalidRunSpec(RunError):
    """A run's recorded spec does not validate, or does not fit what is asked of the run."""


class InvalidSetting(RunError):
    """A live setting's key is unknown, or its value is not one the setting takes."""


class InvalidPolicies(RunError):
    """A run's `policies:` leaves an agent out, names one the environment does not have, or
    gives an agent two policies."""
