"""Reading request bodies: JSON objects validated into pydantic models, errors naming fields."""

from __future__ import annotations

import json
from typing import Any, TypeVar

from pydantic import BaseModel, ValidationError
from starlette.requests import Request

from rollout.gateway.errors import GatewayError, from_validation_error, join_loc

M = TypeVar("M", bound=BaseModel)

INT64_MIN, INT64_MAX = -(1 << 63), (1 << 63) - 1


def _reject_constant(name: str) -> Any:
    # NaN and Infinity are not JSON; Python's parser accepts them unless told otherwise.
    raise ValueError(f"{name} is not a JSON value")


def _find_nul(value: Any, loc: str) -> str | None:
    """Where a string (key or value) holds U+0000, which the ledger (Postgres text) cannot store."""
    if isinstance(value, str):
        return loc if "\x00" in value else None
    if isinstance(value, dict):
        for key, item in value.items():
            where = join_loc(loc, key.replace("\x00", "\\u0000"))
            if "\x00" in key:
                return where
            found = _find_nul(item, where)
            if found:
                return found
    elif isinstance(value, list):
        for index, item in enumerate(value):
            found = _find_nul(item, join_loc(loc, index))
            if found:
                return found
    return None


async def read_json_object(request: Request) -> dict[str, Any]:
    """The request body as a JSON object; 400 for invalid JSON or any other JSON value."""
    raw = await request.body()
    if not raw.strip():
        raise GatewayError("body: expected a JSON object, got an empty body", code="invalid_json")
    try:
        value = json.loads(raw, parse_constant=_reject_constant)
    except (ValueError, RecursionError) as exc:
        raise GatewayError(f"body: invalid JSON ({exc})", code="invalid_json") from exc
    if not isinstance(value, dict):
        raise GatewayError(
            f"body: expected a JSON object, got {type(value).__name__}", code="invalid_json"
        )
    if b"\\u0000" in raw:
        where = _find_nul(value, "")
        if where is not None:
            raise GatewayError(
                f"{where}: strings may not contain U+0000", param=where, code="invalid_value"
            )
    return value


def validate(model: type[M], data: Any, prefix: str = "") -> M:
    """`model.model_validate(data)`, a ValidationError becoming a 400 that names the field."""
    try:
        return model.model_validate(data)
    except ValidationError as exc:
        raise from_validation_error(exc, prefix) from None
    except RecursionError:
        raise GatewayError(f"{prefix or 'body'}: nested too deeply", param=prefix or None) from None


def expect_dict(value: Any, loc: str) -> dict[str, Any]:
    if not isinstance(value, dict):
        raise GatewayError(
            f"{loc}: expected an object, got {type(value).__name__}", param=loc, code="invalid_type"
        )
    return value


def expect_str(value: Any, loc: str) -> str:
    if not isinstance(value, str):
        raise GatewayError(
            f"{loc}: expected a string, got {type(value).__name__}", param=loc, code="invalid_type"
        )
    return value


def unsupported(loc: str, what: str, value: Any) -> GatewayError:
    shown = value if isinstance(value, str | int | float | bool) or value is None else "..."
    return GatewayError(
        f"{loc}: {what} is not supported, got {shown!r}", param=loc, code="unsupported_value"
    )


def loc(*parts: str | int) -> str:
    return join_loc("", *parts)


def arguments_text(value: Any, where: str) -> str:
    """Tool call arguments as JSON text (clients send a string, some an object)."""
    if isinstance(value, str):
        return value
    if isinstance(value, dict):
        return json.dumps(value, ensure_ascii=False)
    raise GatewayError(
        f"{where}: expected a JSON string or object, got {type(value).__name__}",
        param=where,
        code="invalid_type",
    )
