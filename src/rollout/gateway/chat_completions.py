"""OpenAI Chat Completions: `POST /v1/chat/completions`.

Requests become canonical conversations (`rollout.rendering.openai.messages_from_openai`):
`system`/`developer` messages are system messages, assistant `tool_calls` are `ToolCall`s,
`tool` messages answer them. Replies come back as `chat.completion` objects or, with
`stream: true`, as `chat.completion.chunk` events ending in `data: [DONE]` (a usage chunk first
when `stream_options.include_usage` is set).
"""

from __future__ import annotations

import dataclasses
from collections.abc import AsyncIterator, Sequence
from typing import Any

from pydantic import Field
from starlette.requests import Request
from starlette.responses import JSONResponse, Response

from rollout.contracts import SamplingParams
from rollout.gateway import sse
from rollout.gateway.core import (
    MAX_TOKENS_LIMIT,
    CanonicalRequest,
    Gateway,
    TokenView,
    TurnResult,
    new_id,
)
from rollout.gateway.errors import GatewayError, error_body
from rollout.gateway.streaming import LiveTurn, stream_response
from rollout.gateway.tool_choice import apply_tool_choice, read_tool_choice
from rollout.gateway.wire import (
    INT64_MAX,
    INT64_MIN,
    Loose,
    logprob_items,
    read_json_object,
    validate,
)
from rollout.rendering.openai import messages_from_openai, tool_call_to_openai, tools_from_openai

PROTOCOL = "openai"


class _StreamOptions(Loose):
    include_usage: bool | None = None


class ChatRequest(Loose):
    """The fields of a Chat Completions request the gateway reads (others are accepted)."""

    model: str
    messages: list[Any] = Field(min_length=1)
    tools: list[Any] | None = None
    tool_choice: Any = None
    max_tokens: int | None = Field(default=None, ge=1, le=MAX_TOKENS_LIMIT)
    max_completion_tokens: int | None = Field(default=None, ge=1, le=MAX_TOKENS_LIMIT)
    temperature: float | None = Field(default=None, ge=0.0, le=2.0)
    top_p: float | None = Field(default=None, gt=0.0, le=1.0)
    seed: int | None = Field(default=None, ge=INT64_MIN, le=INT64_MAX)
    stop: str | list[str] | None = None
    n: int | None = Field(default=None, ge=1, le=128)
    stream: bool | None = None
    stream_options: _StreamOptions | None = None
    logprobs: bool | None = None
    top_logprobs: int | None = Field(default=None, ge=0, le=20)


def to_canonical(body: dict[str, Any], gateway: Gateway) -> tuple[CanonicalRequest, ChatRequest]:
    req = validate(ChatRequest, body)
    choice = read_tool_choice(req.tool_choice, "chat")
    if req.n not in (None, 1):
        raise GatewayError(
            f"n: only n=1 is supported, got {req.n}", param="n", code="unsupported_value"
        )
    stop = [req.stop] if isinstance(req.stop, str) else list(req.stop or [])
    want_logprobs = bool(req.logprobs) or bool(req.top_logprobs)
    params = SamplingParams(
        max_tokens=req.max_completion_tokens or req.max_tokens or gateway.default_max_tokens,
        temperature=1.0 if req.temperature is None else req.temperature,
        top_p=1.0 if req.top_p is None else req.top_p,
        seed=req.seed,
        stop=stop,
        top_logprobs=(req.top_logprobs or 0) if want_logprobs else 0,
    )
    canonical = CanonicalRequest(
        protocol="chat.completions",
        messages=tuple(messages_from_openai(req.messages)),
        tools=tuple(apply_tool_choice(tools_from_openai(req.tools), choice)),
        params=params,
        model=req.model,
        tool_call_prefix="call_",
        record={"tool_choice": choice},
    )
    return canonical, req


def _usage(result: TurnResult) -> dict[str, int]:
    return {
        "prompt_tokens": result.prompt_tokens,
        "completion_tokens": result.completion_tokens,
        "total_tokens": result.prompt_tokens + result.completion_tokens,
    }


def render_response(result: TurnResult, req: ChatRequest, response_id: str) -> dict[str, Any]:
    reply = result.reply
    message: dict[str, Any] = {
        "role": "assistant",
        "content": reply.text if (reply.text or not reply.tool_calls) else None,
        "refusal": None,
    }
    if reply.tool_calls:
        message["tool_calls"] = [tool_call_to_openai(c) for c in reply.tool_calls]
    logprobs = None
    if req.logprobs or req.top_logprobs:
        # Every completion token, the stop token too: as many as usage.completion_tokens.
        views = (*result.tokens, *result.stop_token)
        logprobs = {"content": logprob_items(views, range(len(views))), "refusal": None}
    return {
        "id": response_id,
        "object": "chat.completion",
        "created": int(result.created),
        "model": req.model,
        "system_fingerprint": f"rollout-v{result.turn.version}",
        "choices": [
            {"index": 0, "message": message, "logprobs": logprobs, "finish_reason": result.finish}
        ],
        "usage": _usage(result),
    }


async def stream_events(live: LiveTurn, req: ChatRequest, response_id: str) -> AsyncIterator[bytes]:
    """The turn's chunks while it is sampled; the turn is recorded before the finish chunk."""
    include_usage = bool(req.stream_options and req.stream_options.include_usage)
    want_logprobs = bool(req.logprobs or req.top_logprobs)
    start = live.start
    base = {
        "id": response_id,
        "object": "chat.completion.chunk",
        "created": int(start.created),
        "model": req.model,
        "system_fingerprint": f"rollout-v{start.version}",
    }

    def chunk(delta: dict[str, Any], finish: str | None = None, logprobs: Any = None) -> bytes:
        payload: dict[str, Any] = {
            **base,
            "choices": [
                {"index": 0, "delta": delta, "logprobs": logprobs, "finish_reason": finish}
            ],
        }
        if include_usage:
            payload["usage"] = None
        return sse.data_event(payload)

    def logprobs_of(views: Sequence[TokenView]) -> dict[str, Any] | None:
        if not want_logprobs:
            return None
        return {"content": logprob_items(views, range(len(views))), "refusal": None}

    # Events ready at the same moment go out in one write: each write wakes the client (and,
    # on a busy machine, gives it the CPU) once more before it has the token or the end.
    opening = chunk({"role": "assistant", "content": "", "refusal": None})
    async for delta in live.deltas():
        yield opening + chunk({"content": delta.text}, logprobs=logprobs_of(delta.tokens))
        opening = b""
    result = live.result
    text, positions = live.rest()
    rest = [*(result.tokens[i] for i in positions), *result.stop_token]
    tail = [opening] if opening else []
    if text:
        tail.append(chunk({"content": text}, logprobs=logprobs_of(rest)))
        rest = []
    for k, call in enumerate(result.reply.tool_calls):
        head = {
            "index": k,
            "id": call.id,
            "type": "function",
            "function": {"name": call.name, "arguments": ""},
        }
        tail.append(chunk({"tool_calls": [head]}, logprobs=logprobs_of(rest) if rest else None))
        rest = []
        tail.append(
            chunk({"tool_calls": [{"index": k, "function": {"arguments": call.arguments}}]})
        )
    if want_logprobs and rest:
        tail.append(chunk({}, logprobs=logprobs_of(rest)))
    tail.append(chunk({}, finish=result.finish))
    if include_usage:
        tail.append(sse.data_event({**base, "choices": [], "usage": _usage(result)}))
    tail.append(sse.DONE)
    yield sse.join(tail)


def _error_event(err: GatewayError) -> bytes:
    return sse.data_event(error_body(err, "openai"))


async def handle(gateway: Gateway, request: Request) -> Response:
    """`POST /v1/chat/completions`."""
    info = await gateway.authenticate_headers(request.headers)
    body = await read_json_object(request)
    canonical, req = to_canonical(body, gateway)
    response_id = new_id("chatcmpl-")
    canonical = dataclasses.replace(
        canonical,
        record={**canonical.record, "response_id": response_id, "stream": bool(req.stream)},
    )
    if req.stream:
        live = await LiveTurn(gateway.stream(info, canonical)).open()
        return stream_response(stream_events(live, req, response_id), _error_event)
    result = await gateway.complete(info, canonical)
    return JSONResponse(render_response(result, req, response_id))
