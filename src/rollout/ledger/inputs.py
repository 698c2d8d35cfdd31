"""Checking values bound for the database: bad input raises `InvalidInput` naming the field.

Every concept module checks its writes' values with these, so a message names the same way
everywhere ("reward must be finite, got nan"), and nothing is sent that Postgres would refuse
with a less helpful error.

Example:
    >>> finite("reward", "0.5")
    0.5
    >>> finite("reward", float("nan"))
    Traceback (most recent call last):
    ...
    rollout.ledger.errors.InvalidInput: reward must be finite, got nan
"""

from __future__ import annotations

import json
import math
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

from psycopg import errors as pg_errors
from psycopg.types.json import Jsonb

from rollout.errors import describe
from rollout.ledger.errors import InvalidInput, NotFound


def finite(field: str, value: Any) -> float:
    """`value` as a float; InvalidInput unless it is a finite number."""
    try:
        number = float(value)
    except (TypeError, ValueError):
        raise InvalidInput(f"{field} must be a number, got {describe(value)}") from None
    if not math.isfinite(number):
        raise InvalidInput(f"{field} must be finite, got {describe(value)}")
    return number


def jsonb(field: str, value: Any) -> Jsonb:
    """Wrap for a jsonb column, refusing what JSON cannot hold (NaN, sets, objects)."""
    try:
        json.dumps(value, allow_nan=False)
    except (TypeError, ValueError) as error:
        raise InvalidInput(
            f"{field} must be JSON (no NaN or infinity): {error}: {describe(value)}"
        ) from None
    return Jsonb(value)


def metrics_jsonb(field: str, metrics: dict[str, float] | None) -> Jsonb:
    """Metrics as a jsonb object of finite floats (keys as strings)."""
    clean: dict[str, float] = {}
    for key, value in (metrics or {}).items():
        clean[str(key)] = finite(f"{field}[{key!r}]", value)
    return Jsonb(clean)


def not_empty(field: str, value: str) -> str:
    """`value` unless it is empty."""
    if not value:
        raise InvalidInput(f"{field} must not be empty, got {describe(value)}")
    return value


@contextmanager
def known_run(run_id: str) -> Iterator[None]:
    """Turn a write's foreign-key failure on `runs` into NotFound naming the run."""
    try:
        yield
    except pg_errors.ForeignKeyViolation:
        raise NotFound(f"run {run_id!r} not found") from None
