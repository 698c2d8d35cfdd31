"""OpenAI Chat Completions: `POST /v1/chat/completions`.

Requests become canonical conversations: `system`/`developer` messages are system messages,
assistant `tool_calls` are `ToolCall`s, `tool` messages answer them. Replies come back as
`chat.completion` objects or, with `stream: true`, as `chat.completion.chunk` events ending in
`data: [DONE]` (a usage chunk first when `stream_options.include_usage` is set).
"""

from __future__ import annotations

import dataclasses
from typing import Any

from pydantic import BaseModel, ConfigDict, Field
from starlette.requests import Request
from starlette.responses import JSONResponse, Response

from rollout.contracts import Message, SamplingParams, ToolCall, ToolSpec
from rollout.gateway import sse
from rollout.gateway.core import MAX_TOKENS_LIMIT, CanonicalRequest, Gateway, TurnResult, new_id
from rollout.gateway.errors import GatewayError
from rollout.gateway.wire import (
    INT64_MAX,
    INT64_MIN,
    arguments_text,
    expect_dict,
    loc,
    read_json_object,
    unsupported,
    validate,
)

PROTOCOL = "openai"


class _Loose(BaseModel):
    model_config = ConfigDict(extra="allow")


class _StreamOptions(_Loose):
    include_usage: bool | None = None


class ChatRequest(_Loose):
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


class _FunctionDef(_Loose):
    name: str = Field(min_length=1, max_length=256)
    description: str | None = None
    parameters: dict[str, Any] | None = None


class _ToolDef(_Loose):
    type: str
    function: _FunctionDef | None = None


class _CallFunction(_Loose):
    name: str
    arguments: Any = "{}"


class _Call(_Loose):
    id: str | None = None
    type: str | None = "function"
    function: _CallFunction


class _Message(_Loose):
    role: str
    content: Any = None
    tool_calls: list[Any] | None = None
    tool_call_id: str | None = None
    name: str | None = None


def content_text(content: Any, where: str) -> str:
    """Text of a message's `content`: a string, null, or a list of text parts."""
    if content is None:
        return ""
    if isinstance(content, str):
        return content
    if not isinstance(content, list):
        raise GatewayError(
            f"{where}: expected a string or a list of parts, got {type(content).__name__}",
            param=where,
            code="invalid_type",
        )
    texts: list[str] = []
    for k, part in enumerate(content):
        part = expect_dict(part, loc(where, k))
        kind = part.get("type")
        if kind in ("text", "input_text", "output_text"):
            text = part.get("text")
            if not isinstance(text, str):
                raise GatewayError(
                    f"{loc(where, k, 'text')}: expected a string, got {type(text).__name__}",
                    param=loc(where, k, "text"),
                    code="invalid_type",
                )
            texts.append(text)
        elif kind == "refusal" and isinstance(part.get("refusal"), str):
            texts.append(part["refusal"])
        else:
            raise unsupported(loc(where, k, "type"), "content part type (text only)", kind)
    return "".join(texts)


def to_messages(items: list[Any]) -> list[Message]:
    """Chat `messages` as canonical messages."""
    out: list[Message] = []
    for i, raw in enumerate(items):
        where = loc("messages", i)
        item = validate(_Message, expect_dict(raw, where), where)
        text = content_text(item.content, loc(where, "content"))
        if item.role in ("system", "developer"):
            out.append(Message.system(text))
        elif item.role == "user":
            out.append(Message(role="user", content=text, name=item.name))
        elif item.role == "assistant":
            calls: list[ToolCall] = []
            for k, raw_call in enumerate(item.tool_calls or []):
                cwhere = loc(where, "tool_calls", k)
                call = validate(_Call, expect_dict(raw_call, cwhere), cwhere)
                args = arguments_text(call.function.arguments, loc(cwhere, "function", "arguments"))
                calls.append(
                    ToolCall(id=call.id or new_id("call_"), name=call.function.name, arguments=args)
                )
            out.append(Message(role="assistant", content=text, tool_calls=calls, name=item.name))
        elif item.role == "tool":
            if not item.tool_call_id:
                raise GatewayError(
                    f"{loc(where, 'tool_call_id')}: required for role 'tool'",
                    param=loc(where, "tool_call_id"),
                    code="missing_field",
                )
            out.append(Message.tool(text, item.tool_call_id))
        else:
            raise GatewayError(
                f"{loc(where, 'role')}: unknown role {item.role!r} "
                "(expected system, developer, user, assistant or tool)",
                param=loc(where, "role"),
                code="invalid_value",
            )
    return out


def to_tools(items: list[Any] | None, tool_choice: Any) -> list[ToolSpec]:
    """Function tools as ToolSpecs (other tool types are skipped; `tool_choice: none` drops all)."""
    if not items or tool_choice == "none":
        return []
    tools: list[ToolSpec] = []
    for i, raw in enumerate(items):
        where = loc("tools", i)
        tool = validate(_ToolDef, expect_dict(raw, where), where)
        if tool.type != "function":
            continue
        if tool.function is None:
            raise GatewayError(
                f"{loc(where, 'function')}: required for a function tool",
                param=loc(where, "function"),
                code="missing_field",
            )
        fn = tool.function
        spec: dict[str, Any] = {"name": fn.name, "description": fn.description or ""}
        if fn.parameters is not None:
            spec["parameters"] = fn.parameters
        tools.append(ToolSpec(**spec))
    return tools


def to_canonical(body: dict[str, Any], gateway: Gateway) -> tuple[CanonicalRequest, ChatRequest]:
    req = validate(ChatRequest, body)
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
        messages=tuple(to_messages(req.messages)),
        tools=tuple(to_tools(req.tools, req.tool_choice)),
        params=params,
        model=req.model,
        tool_call_prefix="call_",
    )
    return canonical, req


def _logprob_items(result: TurnResult, positions: tuple[int, ...]) -> list[dict[str, Any]]:
    items = []
    for i in positions:
        view = result.tokens[i]
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


def _usage(result: TurnResult) -> dict[str, int]:
    return {
        "prompt_tokens": result.prompt_tokens,
        "completion_tokens": result.completion_tokens,
        "total_tokens": result.prompt_tokens + result.completion_tokens,
    }


def _tool_calls(result: TurnResult) -> list[dict[str, Any]]:
    return [
        {"id": c.id, "type": "function", "function": {"name": c.name, "arguments": c.arguments}}
        for c in result.reply.tool_calls
    ]


def render_response(result: TurnResult, req: ChatRequest, response_id: str) -> dict[str, Any]:
    reply = result.reply
    message: dict[str, Any] = {
        "role": "assistant",
        "content": reply.text if (reply.text or not reply.tool_calls) else None,
        "refusal": None,
    }
    if reply.tool_calls:
        message["tool_calls"] = _tool_calls(result)
    logprobs = None
    if req.logprobs or req.top_logprobs:
        logprobs = {
            "content": _logprob_items(result, tuple(range(len(result.tokens)))),
            "refusal": None,
        }
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


def render_stream(result: TurnResult, req: ChatRequest, response_id: str) -> bytes:
    include_usage = bool(req.stream_options and req.stream_options.include_usage)
    want_logprobs = bool(req.logprobs or req.top_logprobs)
    base = {
        "id": response_id,
        "object": "chat.completion.chunk",
        "created": int(result.created),
        "model": req.model,
        "system_fingerprint": f"rollout-v{result.turn.version}",
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

    events = [chunk({"role": "assistant", "content": "", "refusal": None})]
    covered: set[int] = set()
    for piece, positions in result.pieces:
        lp = None
        if want_logprobs:
            lp = {"content": _logprob_items(result, positions), "refusal": None}
            covered.update(positions)
        events.append(chunk({"content": piece}, logprobs=lp))
    rest = tuple(i for i in range(len(result.tokens)) if i not in covered)
    for k, call in enumerate(result.reply.tool_calls):
        lp = None
        if want_logprobs and k == 0 and rest:
            lp = {"content": _logprob_items(result, rest), "refusal": None}
            rest = ()
        head = {
            "index": k,
            "id": call.id,
            "type": "function",
            "function": {"name": call.name, "arguments": ""},
        }
        events.append(chunk({"tool_calls": [head]}, logprobs=lp))
        events.append(
            chunk({"tool_calls": [{"index": k, "function": {"arguments": call.arguments}}]})
        )
    if want_logprobs and rest:
        events.append(
            chunk({}, logprobs={"content": _logprob_items(result, rest), "refusal": None})
        )
    events.append(chunk({}, finish=result.finish))
    if include_usage:
        events.append(sse.data_event({**base, "choices": [], "usage": _usage(result)}))
    events.append(sse.DONE)
    return sse.join(events)


async def handle(gateway: Gateway, request: Request) -> Response:
    """`POST /v1/chat/completions`."""
    info = await gateway.authenticate_headers(request.headers)
    body = await read_json_object(request)
    canonical, req = to_canonical(body, gateway)
    response_id = new_id("chatcmpl-")
    canonical = dataclasses.replace(
        canonical, record={"response_id": response_id, "stream": bool(req.stream)}
    )
    result = await gateway.complete(info, canonical)
    if req.stream:
        return Response(
            render_stream(result, req, response_id),
            media_type="text/event-stream",
            headers={"Cache-Control": "no-cache"},
        )
    return JSONResponse(render_response(result, req, response_id))
