"""Gateway errors and their wire shapes.

A `GatewayError` carries an HTTP status, a kind and a message that names the offending field and
value. Each protocol module renders it in its own shape:

- OpenAI (Chat Completions, Responses): `{"error": {"message", "type", "param", "code"}}`.
- Anthropic (Messages): `{"type": "error", "error": {"type", "message"}}`.

A request value that cannot be read raises `WireError` where it is read (the shared wire
helpers of `rollout.rendering.openai`); the app answers it as a 400 (`from_wire_error`).
"""

from __future__ import annotations

from typing import Any, Literal

from rollout.errors import RolloutError
from rollout.rendering.openai import WireError

ErrorKind = Literal[
    "invalid_request",
    "authentication",
    "permission",
    "not_found",
    "conflict",
    "too_large",
    "rate_limit",
    "server",
    "unavailable",
]

Protocol = Literal["openai", "anthropic"]

_STATUS: dict[ErrorKind, int] = {
    "invalid_request": 400,
    "authentication": 401,
    "permission": 403,
    "not_found": 404,
    "conflict": 409,
    "too_large": 413,
    "rate_limit": 429,
    "server": 500,
    "unavailable": 503,
}

_OPENAI_TYPE: dict[ErrorKind, str] = {
    "invalid_request": "invalid_request_error",
    "authentication": "invalid_request_error",
    "permission": "invalid_request_error",
    "not_found": "invalid_request_error",
    "conflict": "invalid_request_error",
    "too_large": "invalid_request_error",
    "rate_limit": "rate_limit_error",
    "server": "server_error",
    "unavailable": "server_error",
}

# Anthropic's documented error types; it has none for 409, so a conflict is an invalid request.
_ANTHROPIC_TYPE: dict[ErrorKind, str] = {
    "invalid_request": "invalid_request_error",
    "authentication": "authentication_error",
    "permission": "permission_error",
    "not_found": "not_found_error",
    "conflict": "invalid_request_error",
    "too_large": "request_too_large",
    "rate_limit": "rate_limit_error",
    "server": "api_error",
    "unavailable": "overloaded_error",
}


class GatewayError(RolloutError):
    """An error answered to a client: status, kind, message, and the field it is about.

    Example:
        >>> err = GatewayError("max_tokens: must be >= 1, got 0", param="max_tokens")
        >>> err.status, openai_error_body(err)["error"]["param"]
        (400, 'max_tokens')
    """

    def __init__(
        self,
        message: str,
        *,
        kind: ErrorKind = "invalid_request",
        param: str | None = None,
        code: str | None = None,
        status: int | None = None,
    ) -> None:
        super().__init__(message)
        self.message = message
        self.kind: ErrorKind = kind
        self.param = param
        self.code = code
        self.status = status if status is not None else _STATUS[kind]


def openai_error_body(err: GatewayError) -> dict[str, Any]:
    """`err` in the OpenAI error shape."""
    return {
        "error": {
            "message": err.message,
            "type": _OPENAI_TYPE[err.kind],
            "param": err.param,
            "code": err.code,
        }
    }


def anthropic_error_body(err: GatewayError) -> dict[str, Any]:
    """`err` in the Anthropic error shape."""
    return {"type": "error", "error": {"type": _ANTHROPIC_TYPE[err.kind], "message": err.message}}


def error_body(err: GatewayError, protocol: Protocol) -> dict[str, Any]:
    """`err` in `protocol`'s error shape."""
    return anthropic_error_body(err) if protocol == "anthropic" else openai_error_body(err)


def from_wire_error(err: WireError) -> GatewayError:
    """A 400 for a request value that cannot be read (`rollout.rendering.openai.WireError`)."""
    return GatewayError(err.message, param=err.param, code=err.code)
