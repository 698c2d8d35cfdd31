"""OpenAI Responses: `POST /v1/responses`.

Input items become canonical messages: `message` items (any role; `developer` is system),
`function_call` items join the assistant message before them as `ToolCall`s, and
`function_call_output` items are tool messages; `reasoning` items are skipped (the gateway never
produces them). `instructions` is a leading system message. The reply is a `message` output item
and one `function_call` item per call; streaming sends `response.created` through
`response.output_item.*`, `response.content_part.*`, `response.output_text.delta`,
`response.function_call_arguments.delta` ... to `response.completed` (or `response.incomplete`
when `max_output_tokens` cut the reply).

`previous_response_id` names a turn this seat recorded: the conversation is that turn's messages
(without its instructions, which OpenAI does not carry over) + its reply + the new input.
"""

from __future__ import annotations

import dataclasses
from collections.abc import AsyncIterator
from typing import Any

from pydantic import Field
from starlette.requests import Request
from starlette.responses import JSONResponse, Response

from rollout.contracts import Message, SamplingParams, ToolCall, ToolSpec
from rollout.gateway import sse
from rollout.gateway.core import MAX_TOKENS_LIMIT, CanonicalRequest, Gateway, TurnResult, new_id
from rollout.gateway.errors import GatewayError, error_body
from rollout.gateway.recording import load_messages
from rollout.gateway.streaming import LiveTurn, stream_response
from rollout.gateway.tool_choice import apply_tool_choice, read_tool_choice
from rollout.gateway.wire import (
    INT64_MAX,
    INT64_MIN,
    Loose,
    arguments_text,
    content_text,
    expect_dict,
    loc,
    logprob_items,
    read_json_object,
    unsupported,
    validate,
)
from rollout.rendering.openai import function_tool

LOGPROBS_INCLUDE = "message.output_text.logprobs"


class ResponsesRequest(Loose):
    """The fields of a Responses request the gateway reads (others are accepted)."""

    model: str
    input: str | list[Any] = Field(default_factory=list)
    instructions: str | None = None
    tools: list[Any] | None = None
    tool_choice: Any = None
    max_output_tokens: int | None = Field(default=None, ge=1, le=MAX_TOKENS_LIMIT)
    temperature: float | None = Field(default=None, ge=0.0, le=2.0)
    top_p: float | None = Field(default=None, gt=0.0, le=1.0)
    top_logprobs: int | None = Field(default=None, ge=0, le=20)
    seed: int | None = Field(default=None, ge=INT64_MIN, le=INT64_MAX)
    include: list[str] | None = None
    stream: bool | None = None
    previous_response_id: str | None = None
    parallel_tool_calls: bool | None = None
    metadata: dict[str, Any] | None = None


class _MessageItem(Loose):
    type: str | None = "message"
    role: str
    content: Any = None


class _FunctionCallItem(Loose):
    type: str
    call_id: str = Field(min_length=1)
    name: str = Field(min_length=1)
    arguments: Any = "{}"


class _FunctionCallOutputItem(Loose):
    type: str
    call_id: str = Field(min_length=1)
    output: Any = ""


class _FunctionTool(Loose):
    type: str
    name: str = Field(min_length=1, max_length=256)
    description: str | None = None
    parameters: dict[str, Any] | None = None


_SKIPPED_ITEMS = {"reasoning"}


def to_messages(items: str | list[Any]) -> list[Message]:
    """Responses `input` as canonical messages."""
    if isinstance(items, str):
        return [Message.user(items)]
    out: list[Message] = []
    for i, raw in enumerate(items):
        where = loc("input", i)
        item = expect_dict(raw, where)
        kind = item.get("type", "message" if "role" in item else None)
        if kind == "message":
            msg = validate(_MessageItem, item, where)
            text = content_text(msg.content, loc(where, "content"))
            if msg.role in ("system", "developer"):
                out.append(Message.system(text))
            elif msg.role == "user":
                out.append(Message.user(text))
            elif msg.role == "assistant":
                if out and out[-1].role == "assistant" and not out[-1].tool_calls:
                    # Two assistant message items in a row are one reply in several parts.
                    out[-1] = Message.assistant(out[-1].text + text)
                else:
                    out.append(Message.assistant(text))
            else:
                raise GatewayError(
                    f"{loc(where, 'role')}: unknown role {msg.role!r} "
                    "(expected system, developer, user or assistant)",
                    param=loc(where, "role"),
                    code="invalid_value",
                )
        elif kind == "function_call":
            call = validate(_FunctionCallItem, item, where)
            tool_call = ToolCall(
                id=call.call_id,
                name=call.name,
                arguments=arguments_text(call.arguments, loc(where, "arguments")),
            )
            if out and out[-1].role == "assistant":
                prev = out[-1]
                out[-1] = Message.assistant(prev.text, [*prev.tool_calls, tool_call])
            else:
                out.append(Message.assistant("", [tool_call]))
        elif kind == "function_call_output":
            result = validate(_FunctionCallOutputItem, item, where)
            out.append(
                Message.tool(content_text(result.output, loc(where, "output")), result.call_id)
            )
        elif isinstance(kind, str) and kind in _SKIPPED_ITEMS:
            continue
        elif isinstance(kind, str):
            raise unsupported(loc(where, "type"), "input item type", kind)
        else:
            raise GatewayError(
                f"{loc(where, 'type')}: required (or a 'role' for a message item)",
                param=loc(where, "type"),
                code="missing_field",
            )
    return out


def to_tools(items: list[Any] | None, tool_choice: Any) -> list[ToolSpec]:
    """Function tools as ToolSpecs; hosted tool types (web_search, ...) are skipped."""
    if not items or tool_choice == "none":
        return []
    tools: list[ToolSpec] = []
    for i, raw in enumerate(items):
        where = loc("tools", i)
        item = expect_dict(raw, where)
        kind = item.get("type")
        if not isinstance(kind, str):
            raise GatewayError(
                f"{loc(where, 'type')}: expected a string, got {type(kind).__name__}",
                param=loc(where, "type"),
                code="invalid_type",
            )
        if kind != "function":
            continue
        tool = validate(_FunctionTool, item, where)
        tools.append(function_tool(tool.name, tool.description, tool.parameters))
    return tools


async def to_canonical(
    body: dict[str, Any], gateway: Gateway, info: Any, response_id: str
) -> tuple[CanonicalRequest, ResponsesRequest]:
    req = validate(ResponsesRequest, body)
    choice = read_tool_choice(req.tool_choice, "responses")
    messages: list[Message] = []
    if req.previous_response_id is not None:
        turn = await gateway.find_response(info, req.previous_response_id)
        previous = load_messages(turn.request.get("messages", []))
        old_instructions = turn.request.get("instructions")
        if old_instructions is not None and previous and previous[0].role == "system":
            previous = previous[1:]
        messages = [*previous, Message.model_validate(turn.request["reply"])]
    messages.extend(to_messages(req.input))
    if req.instructions is not None:
        messages.insert(0, Message.system(req.instructions))
    if not messages:
        raise GatewayError(
            "input: required (no messages to answer)", param="input", code="missing_field"
        )
    want_logprobs = LOGPROBS_INCLUDE in (req.include or []) or bool(req.top_logprobs)
    params = SamplingParams(
        max_tokens=req.max_output_tokens or gateway.default_max_tokens,
        temperature=1.0 if req.temperature is None else req.temperature,
        top_p=1.0 if req.top_p is None else req.top_p,
        seed=req.seed,
        top_logprobs=(req.top_logprobs or 0) if want_logprobs else 0,
    )
    canonical = CanonicalRequest(
        protocol="responses",
        messages=tuple(messages),
        tools=tuple(apply_tool_choice(to_tools(req.tools, None), choice)),
        params=params,
        model=req.model,
        tool_call_prefix="call_",
        record={
            "response_id": response_id,
            "instructions": req.instructions,
            "previous_response_id": req.previous_response_id,
            "stream": bool(req.stream),
            "tool_choice": choice,
        },
    )
    return canonical, req


@dataclasses.dataclass(frozen=True)
class _Ids:
    response: str
    message: str
    calls: tuple[str, ...]


def _response_object(
    result: TurnResult | None,
    req: ResponsesRequest,
    ids: _Ids,
    created: float,
    output: list[dict[str, Any]],
    status: str,
) -> dict[str, Any]:
    obj: dict[str, Any] = {
        "id": ids.response,
        "object": "response",
        "created_at": int(created),
        "status": status,
        "background": False,
        "error": None,
        "incomplete_details": None,
        "instructions": req.instructions,
        "max_output_tokens": req.max_output_tokens,
        "model": req.model,
        "output": output,
        "parallel_tool_calls": True if req.parallel_tool_calls is None else req.parallel_tool_calls,
        "previous_response_id": req.previous_response_id,
        "reasoning": {"effort": None, "summary": None},
        "store": bool(getattr(req, "store", False)),
        "temperature": 1.0 if req.temperature is None else req.temperature,
        "text": {"format": {"type": "text"}},
        "tool_choice": req.tool_choice if req.tool_choice is not None else "auto",
        "tools": [t for t in (req.tools or []) if isinstance(t, dict)],
        "top_logprobs": req.top_logprobs or 0,
        "top_p": 1.0 if req.top_p is None else req.top_p,
        "truncation": "disabled",
        "usage": None,
        "metadata": req.metadata or {},
    }
    if result is not None:
        obj["usage"] = {
            "input_tokens": result.prompt_tokens,
            "input_tokens_details": {"cached_tokens": 0},
            "output_tokens": result.completion_tokens,
            "output_tokens_details": {"reasoning_tokens": 0},
            "total_tokens": result.prompt_tokens + result.completion_tokens,
        }
        if status == "incomplete":
            obj["incomplete_details"] = {"reason": "max_output_tokens"}
    return obj


def _status(result: TurnResult) -> str:
    return "incomplete" if result.finish == "length" else "completed"


def _text_part(text: str, logprobs: list[dict[str, Any]] | None) -> dict[str, Any]:
    part: dict[str, Any] = {"type": "output_text", "text": text, "annotations": []}
    if logprobs is not None:
        part["logprobs"] = logprobs
    return part


def _output(result: TurnResult, req: ResponsesRequest, ids: _Ids) -> list[dict[str, Any]]:
    want = _want_logprobs(req)
    item_status = _status(result)
    output: list[dict[str, Any]] = []
    if result.reply.text or not result.reply.tool_calls:
        lps = logprob_items(result.tokens, tuple(range(len(result.tokens)))) if want else None
        output.append(
            {
                "type": "message",
                "id": ids.message,
                "status": item_status,
                "role": "assistant",
                "content": [_text_part(result.reply.text, lps)],
            }
        )
    for call, item_id in zip(result.reply.tool_calls, ids.calls, strict=True):
        output.append(
            {
                "type": "function_call",
                "id": item_id,
                "call_id": call.id,
                "name": call.name,
                "arguments": call.arguments,
                "status": "completed",
            }
        )
    return output


def _want_logprobs(req: ResponsesRequest) -> bool:
    return LOGPROBS_INCLUDE in (req.include or []) or bool(req.top_logprobs)


def render_response(result: TurnResult, req: ResponsesRequest, ids: _Ids) -> dict[str, Any]:
    return _response_object(
        result, req, ids, result.created, _output(result, req, ids), _status(result)
    )


async def stream_events(
    live: LiveTurn, req: ResponsesRequest, response_id: str
) -> AsyncIterator[bytes]:
    """The response's events while it is sampled; the turn is recorded before the final one."""
    want = _want_logprobs(req)
    sequence = 0

    def event(name: str, payload: dict[str, Any]) -> bytes:
        nonlocal sequence
        sequence += 1
        return sse.named_event(name, {"type": name, "sequence_number": sequence - 1, **payload})

    message_id = new_id("msg_")
    created = live.start.created
    start = _response_object(
        None, req, _Ids(response_id, message_id, ()), created, [], "in_progress"
    )
    # Events ready at the same moment go out in one write (see chat_completions.stream_events).
    ready = [
        event("response.created", {"response": start}),
        event("response.in_progress", {"response": start}),
    ]
    common = {"item_id": message_id, "output_index": 0, "content_index": 0}
    opened = False

    def open_message() -> list[bytes]:
        item = {
            "type": "message",
            "id": message_id,
            "status": "in_progress",
            "role": "assistant",
            "content": [],
        }
        return [
            event("response.output_item.added", {"output_index": 0, "item": item}),
            event(
                "response.content_part.added",
                {**common, "part": _text_part("", [] if want else None)},
            ),
        ]

    async for delta in live.deltas():
        if not opened:
            ready.extend(open_message())
            opened = True
        logprobs = logprob_items(delta.tokens, range(len(delta.tokens))) if want else []
        ready.append(
            event(
                "response.output_text.delta", {**common, "delta": delta.text, "logprobs": logprobs}
            )
        )
        yield sse.join(ready)
        ready = []
    result = live.result
    ids = _Ids(
        response=response_id,
        message=message_id,
        calls=tuple(new_id("fc_") for _ in result.reply.tool_calls),
    )
    status = _status(result)
    final_output = _output(result, req, ids)
    index = 0
    if result.reply.text or not result.reply.tool_calls:
        if not opened:
            ready.extend(open_message())
        rest, positions = live.rest()
        if rest:
            logprobs = logprob_items(result.tokens, positions) if want else []
            ready.append(
                event("response.output_text.delta", {**common, "delta": rest, "logprobs": logprobs})
            )
        item = final_output[0]
        part = item["content"][0]
        ready.append(
            event(
                "response.output_text.done",
                {**common, "text": result.reply.text, "logprobs": part.get("logprobs", [])},
            )
        )
        ready.append(event("response.content_part.done", {**common, "part": part}))
        ready.append(event("response.output_item.done", {"output_index": 0, "item": item}))
        index = 1
    for item in final_output[index:]:
        ready.append(
            event(
                "response.output_item.added",
                {"output_index": index, "item": {**item, "arguments": "", "status": "in_progress"}},
            )
        )
        ready.append(
            event(
                "response.function_call_arguments.delta",
                {"item_id": item["id"], "output_index": index, "delta": item["arguments"]},
            )
        )
        ready.append(
            event(
                "response.function_call_arguments.done",
                {
                    "item_id": item["id"],
                    "output_index": index,
                    "name": item["name"],
                    "arguments": item["arguments"],
                },
            )
        )
        ready.append(event("response.output_item.done", {"output_index": index, "item": item}))
        index += 1
    final = _response_object(result, req, ids, result.created, final_output, status)
    ready.append(
        event(
            "response.completed" if status == "completed" else "response.incomplete",
            {"response": final},
        )
    )
    yield sse.join(ready)


def _error_event(err: GatewayError) -> bytes:
    body = error_body(err, "openai")["error"]
    return sse.named_event("error", {"type": "error", "sequence_number": 0, **body})


async def handle(gateway: Gateway, request: Request) -> Response:
    """`POST /v1/responses`."""
    info = await gateway.authenticate_headers(request.headers)
    body = await read_json_object(request)
    response_id = new_id("resp_")
    canonical, req = await to_canonical(body, gateway, info, response_id)
    if req.stream:
        live = await LiveTurn(gateway.stream(info, canonical)).open()
        return stream_response(stream_events(live, req, response_id), _error_event)
    result = await gateway.complete(info, canonical)
    ids = _Ids(
        response=response_id,
        message=new_id("msg_"),
        calls=tuple(new_id("fc_") for _ in result.reply.tool_calls),
    )
    return JSONResponse(render_response(result, req, ids))
