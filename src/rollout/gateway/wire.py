"""Reading request bodies and writing the pieces of responses that protocols share.

`read_json_object` reads a body as a JSON object (refusing NaN, Infinity and U+0000). The field
helpers (`Loose` models, `validate`, `expect_dict`, `content_text`, `arguments_text`, ...) are
the shared ones of `rollout.rendering.openai`, re-exported here for the protocol modules; a bad
value raises `WireError`, answered as a 400 naming the field.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Sequence
from typing import Any

from starlette.requests import Request

from rollout.gateway.canonical import TokenView
from rollout.gateway.errors import GatewayError
from rollout.rendering.openai import (
    Loose,
    WireError,
    arguments_text,
    content_text,
    expect_dict,
    expect_str,
    join_loc,
    loc,
    unsupported,
    validate,
)

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


def logprob_items(tokens: Sequence[TokenView], positions: Iterable[int]) -> list[dict[str, Any]]:
    """Token logprobs in OpenAI's shape (Chat Completions and Responses share it)."""
    items = []
    for i in positions:
        view = tokens[i]
        items.append(
            {
                "token": view.token,
                "logprob": view.logprob,
                "bytes": list(view.token.encode()),
                "top_logprobs": [
                    {"token": tok, "logprob": lp, "bytes": list(tok.encode())}
                    for tok, lp in view.top
                ],
            }
        )
    return items


__all__ = [
    "INT64_MAX",
    "INT64_MIN",
    "Loose",
    "WireError",
    "arguments_text",
    "content_text",
    "expect_dict",
    "expect_str",
    "loc",
    "logprob_items",
    "read_json_object",
    "unsupported",
    "validate",
]
