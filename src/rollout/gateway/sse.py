"""Server-sent events encoding for the three protocols."""

from __future__ import annotations

import json
from collections.abc import Iterable
from typing import Any

from starlette.responses import Response


def dumps(value: Any) -> str:
    """Compact JSON, UTF-8 kept as is (what the protocols send)."""
    return json.dumps(value, separators=(",", ":"), ensure_ascii=False)


def data_event(payload: Any) -> bytes:
    """`data: {json}` (Chat Completions chunks carry no event name)."""
    return f"data: {dumps(payload)}\n\n".encode()


def named_event(name: str, payload: Any) -> bytes:
    """`event: NAME` + `data: {json}` (Responses and Anthropic Messages)."""
    return f"event: {name}\ndata: {dumps(payload)}\n\n".encode()


DONE = b"data: [DONE]\n\n"


def join(events: Iterable[bytes]) -> bytes:
    return b"".join(events)


def response(events: bytes) -> Response:
    """An HTTP response carrying a whole event stream."""
    return Response(events, media_type="text/event-stream", headers={"Cache-Control": "no-cache"})
