"""Anthropic Messages: `POST /v1/messages` and `POST /v1/messages/count_tokens`.

`system` becomes a leading system message; `tool_use` blocks are `ToolCall`s (their `input`
object as JSON arguments); `tool_result` blocks are tool messages, placed before the user's text
of the same message. `thinking` blocks sent back by clients are skipped, and so are server tools
(`web_search_...`, `bash_...`). Streaming sends `message_start`, `content_block_start`,
`content_block_delta` (`text_delta`, `input_json_delta`), `content_block_stop`, `message_delta`
and `message_stop`. Stop reasons: `end_turn`, `max_tokens`, `tool_use`, `stop_sequence`.
"""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from typing import Any, Literal

from pydantic import Field
from starlette.requests import Request
from starlette.responses import JSONResponse, Response

from rollout.contracts import Message, SamplingParams, ToolCall, ToolSpec
from rollout.gateway import sse
from rollout.gateway.core import MAX_TOKENS_LIMIT, CanonicalRequest, Gateway, TurnResult, new_id
from rollout.gateway.errors import GatewayError, error_body
from rollout.gateway.streaming import LiveTurn, stream_response
from rollout.gateway.tool_choice import apply_tool_choice, read_tool_choice
from rollout.gateway.wire import Loose, expect_dict, loc, read_json_object, unsupported, validate
from rollout.rendering.openai import function_tool


class CountTokensRequest(Loose):
    model: str
    messages: list[Any] = Field(min_length=1)
    system: str | list[Any] | None = None
    tools: list[Any] | None = None
    tool_choice: Any = None


class MessagesRequest(CountTokensRequest):
    """The fields of a Messages request the gateway reads (others are accepted)."""

    max_tokens: int = Field(ge=1, le=MAX_TOKENS_LIMIT)
    temperature: float | None = Field(default=None, ge=0.0, le=1.0)
    top_p: float | None = Field(default=None, gt=0.0, le=1.0)
    top_k: int | None = Field(default=None, ge=0)
    stop_sequences: list[str] | None = None
    stream: bool | None = None


class _Message(Loose):
    # Mid-conversation system messages (Claude Code sends them after a user turn).
    role: Literal["user", "assistant", "system"]
    content: str | list[Any]


class _TextBlock(Loose):
    type: str
    text: str


class _ToolUseBlock(Loose):
    type: str
    id: str = Field(min_length=1)
    name: str = Field(min_length=1)
    input: dict[str, Any]


class _ToolResultBlock(Loose):
    type: str
    tool_use_id: str = Field(min_length=1)
    content: str | list[Any] | None = None
    is_error: bool | None = None


class _Tool(Loose):
    name: str = Field(min_length=1, max_length=256)
    description: str | None = None
    input_schema: dict[str, Any]
    type: str | None = None


_SKIPPED_BLOCKS = {"thinking", "redacted_thinking"}


def _text_blocks(content: str | list[Any] | None, where: str) -> str:
    if content is None:
        return ""
    if isinstance(content, str):
        return content
    texts = []
    for k, raw in enumerate(content):
        block = expect_dict(raw, loc(where, k))
        if block.get("type") != "text":
            raise unsupported(
                loc(where, k, "type"), "content block type (text only)", block.get("type")
            )
        texts.append(validate(_TextBlock, block, loc(where, k)).text)
    return "".join(texts)


def to_messages(system: str | list[Any] | None, items: list[Any]) -> list[Message]:
    """`system` + Messages `messages` as canonical messages."""
    out: list[Message] = []
    if system is not None:
        text = _text_blocks(system, "system")
        if text or isinstance(system, str):
            out.append(Message.system(text))
    for i, raw in enumerate(items):
        where = loc("messages", i)
        msg = validate(_Message, expect_dict(raw, where), where)
        if msg.role == "system":  # mid-conversation: rendered in place by the chat template
            if i == 0:
                raise unsupported(
                    loc(where, "role"), "role of the first message (use `system`)", "system"
                )
            out.append(Message.system(_text_blocks(msg.content, loc(where, "content"))))
            continue
        if isinstance(msg.content, str):
            blocks: list[Any] = [{"type": "text", "text": msg.content}]
        else:
            blocks = msg.content
        texts: list[str] = []
        calls: list[ToolCall] = []
        results: list[Message] = []
        for k, raw_block in enumerate(blocks):
            bwhere = loc(where, "content", k)
            block = expect_dict(raw_block, bwhere)
            kind = block.get("type")
            if kind == "text":
                texts.append(validate(_TextBlock, block, bwhere).text)
            elif kind == "tool_use" and msg.role == "assistant":
                use = validate(_ToolUseBlock, block, bwhere)
                calls.append(
                    ToolCall(
                        id=use.id,
                        name=use.name,
                        arguments=json.dumps(use.input, ensure_ascii=False),
                    )
                )
            elif kind == "tool_result" and msg.role == "user":
                res = validate(_ToolResultBlock, block, bwhere)
                text = _text_blocks(res.content, loc(bwhere, "content"))
                results.append(Message.tool(text, res.tool_use_id))
            elif isinstance(kind, str) and kind in _SKIPPED_BLOCKS and msg.role == "assistant":
                continue
            else:
                raise unsupported(
                    loc(bwhere, "type"), f"content block type in a {msg.role} message", kind
                )
        if msg.role == "assistant":
            out.append(Message.assistant("".join(texts), calls))
        else:
            out.extend(results)
            if texts or not results:
                out.append(Message.user("".join(texts)))
    return out


def to_tools(items: list[Any] | None, tool_choice: Any) -> list[ToolSpec]:
    """Client tools as ToolSpecs; server tools (a `type` like `web_search_20250305`) are skipped."""
    if not items:
        return []
    if isinstance(tool_choice, dict) and tool_choice.get("type") == "none":
        return []
    tools: list[ToolSpec] = []
    for i, raw in enumerate(items):
        where = loc("tools", i)
        item = expect_dict(raw, where)
        kind = item.get("type")
        if kind not in (None, "custom"):
            if not isinstance(kind, str):
                raise unsupported(loc(where, "type"), "tool type", kind)
            continue
        tool = validate(_Tool, item, where)
        tools.append(function_tool(tool.name, tool.description, tool.input_schema))
    return tools


def to_canonical(
    body: dict[str, Any], gateway: Gateway, message_id: str
) -> tuple[CanonicalRequest, MessagesRequest]:
    req = validate(MessagesRequest, body)
    choice = read_tool_choice(req.tool_choice, "messages")
    params = SamplingParams(
        max_tokens=req.max_tokens,
        temperature=1.0 if req.temperature is None else req.temperature,
        top_p=1.0 if req.top_p is None else req.top_p,
        stop=list(req.stop_sequences or []),
    )
    canonical = CanonicalRequest(
        protocol="messages",
        messages=tuple(to_messages(req.system, req.messages)),
        tools=tuple(apply_tool_choice(to_tools(req.tools, None), choice)),
        params=params,
        model=req.model,
        tool_call_prefix="toolu_",
        record={"response_id": message_id, "stream": bool(req.stream), "tool_choice": choice},
    )
    return canonical, req


def _stop_reason(result: TurnResult) -> str:
    if result.stop_sequence is not None:
        return "stop_sequence"
    return {"length": "max_tokens", "tool_calls": "tool_use", "stop": "end_turn"}[result.finish]


def _blocks(result: TurnResult) -> list[dict[str, Any]]:
    blocks: list[dict[str, Any]] = []
    if result.reply.text:
        blocks.append({"type": "text", "text": result.reply.text})
    for call in result.reply.tool_calls:
        blocks.append(
            {"type": "tool_use", "id": call.id, "name": call.name, "input": call.parsed_arguments()}
        )
    return blocks


def _usage(result: TurnResult | None, output_tokens: int) -> dict[str, Any]:
    return {
        "input_tokens": 0 if result is None else result.prompt_tokens,
        "cache_creation_input_tokens": 0,
        "cache_read_input_tokens": 0,
        "output_tokens": output_tokens,
    }


def render_response(result: TurnResult, req: MessagesRequest, message_id: str) -> dict[str, Any]:
    return {
        "id": message_id,
        "type": "message",
        "role": "assistant",
        "model": req.model,
        "content": _blocks(result),
        "stop_reason": _stop_reason(result),
        "stop_sequence": result.stop_sequence,
        "usage": _usage(result, result.completion_tokens),
    }


async def stream_events(
    live: LiveTurn, req: MessagesRequest, message_id: str
) -> AsyncIterator[bytes]:
    """The turn's events while it is sampled; the turn is recorded before `message_delta`."""

    def event(name: str, payload: dict[str, Any]) -> bytes:
        return sse.named_event(name, {"type": name, **payload})

    start = live.start
    # Events ready at the same moment go out in one write (see chat_completions.stream_events).
    ready = [
        event(
            "message_start",
            {
                "message": {
                    "id": message_id,
                    "type": "message",
                    "role": "assistant",
                    "model": req.model,
                    "content": [],
                    "stop_reason": None,
                    "stop_sequence": None,
                    "usage": {**_usage(None, 1), "input_tokens": start.prompt_tokens},
                }
            },
        ),
        event("ping", {}),
    ]
    text_block = {"index": 0, "content_block": {"type": "text", "text": ""}}
    opened = False
    async for delta in live.deltas():
        if not opened:
            ready.append(event("content_block_start", text_block))
            opened = True
        ready.append(
            event(
                "content_block_delta",
                {"index": 0, "delta": {"type": "text_delta", "text": delta.text}},
            )
        )
        yield sse.join(ready)
        ready = []
    result = live.result
    rest, _ = live.rest()
    if rest:
        if not opened:
            ready.append(event("content_block_start", text_block))
            opened = True
        ready.append(
            event(
                "content_block_delta", {"index": 0, "delta": {"type": "text_delta", "text": rest}}
            )
        )
    index = 0
    if opened:
        ready.append(event("content_block_stop", {"index": 0}))
        index = 1
    for call in result.reply.tool_calls:
        block = {"type": "tool_use", "id": call.id, "name": call.name, "input": {}}
        ready.append(event("content_block_start", {"index": index, "content_block": block}))
        partial = json.dumps(call.parsed_arguments(), ensure_ascii=False)
        ready.append(
            event(
                "content_block_delta",
                {"index": index, "delta": {"type": "input_json_delta", "partial_json": partial}},
            )
        )
        ready.append(event("content_block_stop", {"index": index}))
        index += 1
    ready.append(
        event(
            "message_delta",
            {
                "delta": {
                    "stop_reason": _stop_reason(result),
                    "stop_sequence": result.stop_sequence,
                },
                "usage": {"output_tokens": result.completion_tokens},
            },
        )
    )
    ready.append(event("message_stop", {}))
    yield sse.join(ready)


def _error_event(err: GatewayError) -> bytes:
    return sse.named_event("error", error_body(err, "anthropic"))


async def handle(gateway: Gateway, request: Request) -> Response:
    """`POST /v1/messages`."""
    info = await gateway.authenticate_headers(request.headers)
    body = await read_json_object(request)
    message_id = new_id("msg_")
    canonical, req = to_canonical(body, gateway, message_id)
    if req.stream:
        live = await LiveTurn(gateway.stream(info, canonical)).open()
        return stream_response(stream_events(live, req, message_id), _error_event)
    result = await gateway.complete(info, canonical)
    return JSONResponse(render_response(result, req, message_id))


async def count_tokens(gateway: Gateway, request: Request) -> Response:
    """`POST /v1/messages/count_tokens`: the prompt's length under the chat template."""
    await gateway.authenticate_headers(request.headers)
    body = await read_json_object(request)
    req = validate(CountTokensRequest, body)
    messages = to_messages(req.system, req.messages)
    tools = apply_tool_choice(
        to_tools(req.tools, None), read_tool_choice(req.tool_choice, "messages")
    )
    return JSONResponse({"input_tokens": gateway.count_tokens(messages, tools)})
