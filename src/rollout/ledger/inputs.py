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
    """Wrap for a jsonb column, refusing what JSON cannot hold (NaN, sets, objects); a NUL
    character in a string is stored as U+FFFD (see `json_text`)."""
    text = json_text(field, value)
    return Jsonb(value, dumps=lambda _: text)


NUL_STORED_AS = "\ufffd"
"""What a NUL character in a string becomes in a jsonb column, which cannot hold one (a
byte-level model can sample NUL; its tokens are stored exactly, the request's text with this)."""


def json_text(field: str, value: Any) -> str:
    r"""`value` as the JSON text of a jsonb column: NaN, infinity and non-JSON types refused,
    naming `field`; each NUL character in a string (or key) written as `NUL_STORED_AS`.

    >>> json_text("turn.request", {"reply": "a\x00b"})
    '{"reply": "a\\ufffdb"}'
    """
    try:
        text = json.dumps(value, allow_nan=False)
    except (TypeError, ValueError) as error:
        raise InvalidInput(
            f"{field} must be JSON (no NaN or infinity): {error}: {describe(value)}"
        ) from None
    if "\\u0000" in text:  # rare: only then walk the value
        text = json.dumps(without_nul(value), allow_nan=False)
    return text


def without_nul(value: Any) -> Any:
    """`value` with every NUL character in its strings and keys replaced by `NUL_STORED_AS`."""
    if isinstance(value, str):
        return value.replace("\x00", NUL_STORED_AS)
    if isinstance(value, dict):
        return {without_nul(k): without_nul(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [without_nul(v) for v in value]
    return value


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
