"""The exception hierarchy of the platform: one root, `RolloutError`.

Every error rollout raises on purpose derives from `RolloutError`, so the CLI (and any caller)
catches the platform's errors in one place and prints them as one line, without a traceback.
Where a built-in exception says the same thing, a class derives from it too (`ValueError` for
bad input, `LookupError` for something missing), so code written against the standard
exceptions keeps working. Each package defines the subclasses it raises next to its code
(`rollout.ledger.errors`, `rollout.harness.errors`, ...); they all descend from this root.

Messages name the offending field and show the value, shortened with `describe`; `problems`
spells out a pydantic `ValidationError` the same way, field by field.

Example:
    >>> from rollout.errors import RolloutError, describe
    >>> issubclass(RolloutError, Exception)
    True
    >>> describe("x" * 200)[:12]
    "'xxxxxxxxxxx"
"""

from __future__ import annotations

import json
from typing import TYPE_CHECKING

from rolloutlib.errors import describe

if TYPE_CHECKING:
    from pydantic import ValidationError

__all__ = ["RolloutError", "describe", "problems"]


class RolloutError(Exception):
    """Base class of every error the platform raises on purpose."""


def problems(error: ValidationError, *, whole: str = "") -> str:
    """Each problem of a pydantic `error` as `field: message (got value)`, joined by `; `
    (`whole` names a problem of the whole object, which has no field)."""
    return "; ".join(
        f"{'.'.join(str(p) for p in e['loc']) or whole}: {e['msg']} "
        f"(got {json.dumps(e.get('input'), default=str)[:80]})"
        for e in error.errors()
    )
