"""OpenAI wire shapes of canonical messages and tools, both ways.

One place knows how a `Message`, a `ToolCall` and a `ToolSpec` look in OpenAI's Chat
Completions shape: the renderer hands that shape to chat templates, the runner's client sends it
to the gateway, and the gateway reads it from clients.

To the wire (`message_to_openai`, `tool_call_to_openai`, `tool_to_openai`) the two real
differences between readers are options: chat templates want tool-call arguments that are a JSON
object as a dict (`object_arguments=True`; they dump them with `tojson`) and keep a tool
message's `name` (`tool_message_name=True`); the API takes arguments as a JSON string and no name
on tool messages.

From the wire (`messages_from_openai`, `tools_from_openai`, `content_text`, `arguments_text`)
every value is checked; a bad one raises `WireError` naming the field (`messages.0.role`), the
value and a code, which the gateway answers as a 400 in the client's protocol. `Loose` is the
base of every wire model: fields it does not name are accepted and ignored.
"""

from __future__ import annotations

import json
import secrets
from collections.abc import Sequence
from typing import Any, TypeVar

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from rollout.contracts import Message, ToolCall, ToolSpec
from rollout.errors import RolloutError

M = TypeVar("M", bound=BaseModel)


class WireError(RolloutError, ValueError):
    """A wire value that cannot be read.

    Attributes:
        message: What is wrong, starting with the field's path.
        param: The field's path (`messages.0.content`), or None for the whole body.
        code: A short machine-readable reason (`invalid_type`, `missing_field`, ...).
    """

    def __init__(self, message: str, *, param: str | None = None, code: str | None = None):
        super().__init__(message)
        self.message = message
        self.param = param
        self.code = code


class Loose(BaseModel):
    """A wire model that accepts (and ignores) fields it does not name."""

    model_config = ConfigDict(extra="allow")


def new_id(prefix: str, nbytes: int = 12) -> str:
    """A random id with a protocol's prefix (`call_`, `toolu_`, `resp_`, ...)."""
    return prefix + secrets.token_hex(nbytes)


# --- naming fields -------------------------------------------------------------------------------


def join_loc(prefix: str, *parts: str | int) -> str:
    """A dotted field path.

    >>> join_loc("messages", 0, "content"), join_loc("", "tools", 1), join_loc("body")
    ('messages.0.content', 'tools.1', 'body')
    """
    path = ".".join([str(p) for p in parts])
    return f"{prefix}.{path}" if prefix and path else prefix or path


def loc(*parts: str | int) -> str:
    """`join_loc` from the top of the body: `loc("messages", 0) == "messages.0"`."""
    return join_loc("", *parts)


def _short(value: Any, limit: int = 80) -> str:
    try:
        text = json.dumps(value, default=repr)
    except (TypeError, ValueError):
        text = repr(value)
    return text if len(text) <= limit else text[: limit - 3] + "..."


def _is_union_tag(part: str | int) -> bool:
    # pydantic puts the union member's type name into error locations ("str", "list[...]").
    return isinstance(part, str) and (
        not part or "[" in part or part in {"str", "int", "float", "bool", "list", "dict", "none"}
    )


def validation_error(exc: ValidationError, prefix: str = "") -> WireError:
    """The first invalid field of `exc`, named under `prefix`, with the value that was sent."""
    first = exc.errors(include_url=False)[0]
    where = join_loc(prefix, *(p for p in first["loc"] if not _is_union_tag(p)))
    shown = where or "body"
    if first["type"] == "missing":
        message = f"{shown}: required field is missing"
    else:
        message = f"{shown}: {first['msg']}, got {_short(first.get('input'))}"
    return WireError(message, param=where or None, code="invalid_value")


def validate(model: type[M], data: Any, prefix: str = "") -> M:
    """`model.model_validate(data)`; an invalid field raises `WireError` naming it.

    >>> class Point(Loose):
    ...     x: int
    >>> validate(Point, {"x": "one"}, "points.0")
    Traceback (most recent call last):
    ...
    rollout.rendering.openai.WireError: points.0.x: Input should be a valid integer, unable to parse string as an integer, got "one"
    """  # noqa: E501 - a doctest's expected line
    try:
        return model.model_validate(data)
    except ValidationError as exc:
        raise validation_error(exc, prefix) from None
    except RecursionError:
        raise WireError(f"{prefix or 'body'}: nested too deeply", param=prefix or None) from None


def expect_dict(value: Any, where: str) -> dict[str, Any]:
    """`value` if it is a JSON object, else `WireError` (`invalid_type`)."""
    return _expect(value, dict, "an object", where)


def expect_str(value: Any, where: str) -> str:
    """`value` if it is a string, else `WireError` (`invalid_type`)."""
    return _expect(value, str, "a string", where)


def _expect(value: Any, kind: type[Any], what: str, where: str) -> Any:
    if not isinstance(value, kind):
        raise WireError(
            f"{where}: expected {what}, got {type(value).__name__}",
            param=where,
            code="invalid_type",
        )
    return value


def unsupported(where: str, what: str, value: Any) -> WireError:
    """The error for a value the platform does not support (`unsupported_value`)."""
    shown = value if isinstance(value, str | int | float | bool) or value is None else "..."
    return WireError(
        f"{where}: {what} is not supported, got {shown!r}", param=where, code="unsupported_value"
    )


# --- from the wire --------------------------------------------------------------------------------


class _Function(Loose):
    name: str = Field(min_length=1, max_length=256)
    description: str | None = None
    parameters: dict[str, Any] | None = None


class _Tool(Loose):
    type: str
    function: _Function | None = None


class _CallFunction(Loose):
    name: str
    arguments: Any = "{}"


class _Call(Loose):
    id: str | None = None
    type: str | None = "function"
    function: _CallFunction


class _Message(Loose):
    role: str
    content: Any = None
    tool_calls: list[Any] | None = None
    tool_call_id: str | None = None
    name: str | None = None


def content_text(content: Any, where: str) -> str:
    """Text of a message's `content`: a string, null, or a list of text parts.

    >>> content_text([{"type": "text", "text": "a"}, {"type": "output_text", "text": "b"}], "c")
    'ab'
    """
    if content is None:
        return ""
    if isinstance(content, str):
        return content
    if not isinstance(content, list):
        raise WireError(
            f"{where}: expected a string or a list of parts, got {type(content).__name__}",
            param=where,
            code="invalid_type",
        )
    texts: list[str] = []
    for k, part in enumerate(content):
        part = expect_dict(part, join_loc(where, k))
        kind = part.get("type")
        if kind in ("text", "input_text", "output_text"):
            texts.append(expect_str(part.get("text"), join_loc(where, k, "text")))
        elif kind == "refusal" and isinstance(part.get("refusal"), str):
            texts.append(part["refusal"])
        else:
            raise unsupported(join_loc(where, k, "type"), "content part type (text only)", kind)
    return "".join(texts)


def arguments_text(value: Any, where: str) -> str:
    """Tool-call arguments as JSON text (clients send a string, some an object).

    >>> arguments_text({"a": 1}, "arguments"), arguments_text('{"a": 1}', "arguments")
    ('{"a": 1}', '{"a": 1}')
    """
    if isinstance(value, str):
        return value
    if isinstance(value, dict):
        return json.dumps(value, ensure_ascii=False)
    raise WireError(
        f"{where}: expected a JSON string or object, got {type(value).__name__}",
        param=where,
        code="invalid_type",
    )


def message_from_openai(item: Any, where: str = "message") -> Message:
    """One Chat Completions message as a canonical message.

    `system` and `developer` messages are system messages; an assistant's `tool_calls` are
    `ToolCall`s (a call without an id gets a new `call_` id); a `tool` message needs its
    `tool_call_id`.

    >>> message_from_openai({"role": "developer", "content": [{"type": "text", "text": "Hi"}]})
    Message(role='system', content='Hi', tool_calls=[], tool_call_id=None, name=None)
    """
    message = validate(_Message, expect_dict(item, where), where)
    text = content_text(message.content, join_loc(where, "content"))
    if message.role in ("system", "developer"):
        return Message.system(text)
    if message.role == "user":
        return Message(role="user", content=text, name=message.name)
    if message.role == "assistant":
        calls: list[ToolCall] = []
        for k, raw in enumerate(message.tool_calls or []):
            cwhere = join_loc(where, "tool_calls", k)
            call = validate(_Call, expect_dict(raw, cwhere), cwhere)
            arguments = arguments_text(
                call.function.arguments, join_loc(cwhere, "function", "arguments")
            )
            calls.append(
                ToolCall(
                    id=call.id or new_id("call_"), name=call.function.name, arguments=arguments
                )
            )
        return Message(role="assistant", content=text, tool_calls=calls, name=message.name)
    if message.role == "tool":
        if not message.tool_call_id:
            raise WireError(
                f"{join_loc(where, 'tool_call_id')}: required for role 'tool'",
                param=join_loc(where, "tool_call_id"),
                code="missing_field",
            )
        return Message.tool(text, message.tool_call_id)
    raise WireError(
        f"{join_loc(where, 'role')}: unknown role {message.role!r} "
        "(expected system, developer, user, assistant or tool)",
        param=join_loc(where, "role"),
        code="invalid_value",
    )


def messages_from_openai(items: Sequence[Any], where: str = "messages") -> list[Message]:
    """Chat Completions `messages` as canonical messages (see `message_from_openai`)."""
    return [message_from_openai(item, join_loc(where, i)) for i, item in enumerate(items)]


def tools_from_openai(
    items: Sequence[Any] | None, tool_choice: Any = None, where: str = "tools"
) -> list[ToolSpec]:
    """Function tools as ToolSpecs; other tool types are skipped, `tool_choice: none` drops all.

    >>> tools_from_openai([{"type": "function", "function": {"name": "add"}}])
    [ToolSpec(name='add', description='', parameters={'type': 'object', 'properties': {}})]
    """
    if not items or tool_choice == "none":
        return []
    tools: list[ToolSpec] = []
    for i, raw in enumerate(items):
        twhere = join_loc(where, i)
        tool = validate(_Tool, expect_dict(raw, twhere), twhere)
        if tool.type != "function":
            continue
        if tool.function is None:
            raise WireError(
                f"{join_loc(twhere, 'function')}: required for a function tool",
                param=join_loc(twhere, "function"),
                code="missing_field",
            )
        tools.append(
            function_tool(tool.function.name, tool.function.description, tool.function.parameters)
        )
    return tools


def function_tool(
    name: str, description: str | None, parameters: dict[str, Any] | None
) -> ToolSpec:
    """A ToolSpec from a function's wire fields (no description is '', no schema the default)."""
    spec: dict[str, Any] = {"name": name, "description": description or ""}
    if parameters is not None:
        spec["parameters"] = parameters
    return ToolSpec(**spec)


# --- to the wire ----------------------------------------------------------------------------------


def tool_call_to_openai(call: ToolCall, *, object_arguments: bool = False) -> dict[str, Any]:
    """A tool call in the Chat Completions shape.

    Args:
        call: The call.
        object_arguments: Give arguments that are a JSON object as a dict (chat templates dump
            them with `tojson`); anything else stays the original string.

    >>> call = ToolCall(id="call_1", name="add", arguments='{"a": 1}')
    >>> tool_call_to_openai(call, object_arguments=True)["function"]
    {'name': 'add', 'arguments': {'a': 1}}
    """
    arguments: dict[str, Any] | str = call.arguments
    if object_arguments:
        try:
            value = json.loads(call.arguments)
        except (json.JSONDecodeError, RecursionError):
            value = None
        if isinstance(value, dict):
            arguments = value
    return {
        "id": call.id,
        "type": "function",
        "function": {"name": call.name, "arguments": arguments},
    }


def message_to_openai(
    message: Message, *, object_arguments: bool = False, tool_message_name: bool = False
) -> dict[str, Any]:
    """A canonical message in the Chat Completions request shape.

    Args:
        message: The message.
        object_arguments: See `tool_call_to_openai` (chat templates: True).
        tool_message_name: Keep a tool message's `name` (chat templates: True; the API takes
            none).

    >>> message_to_openai(Message.tool("3", "call_1", name="add"))
    {'role': 'tool', 'content': '3', 'tool_call_id': 'call_1'}
    """
    out: dict[str, Any] = {"role": message.role, "content": message.text}
    if message.tool_calls:
        out["tool_calls"] = [
            tool_call_to_openai(call, object_arguments=object_arguments)
            for call in message.tool_calls
        ]
    if message.tool_call_id is not None:
        out["tool_call_id"] = message.tool_call_id
    if message.name is not None and (message.role != "tool" or tool_message_name):
        out["name"] = message.name
    return out


def tool_to_openai(tool: ToolSpec) -> dict[str, Any]:
    """A tool spec in the Chat Completions function shape (what chat templates take too)."""
    return {
        "type": "function",
        "function": {
            "name": tool.name,
            "description": tool.description,
            "parameters": tool.parameters,
        },
    }


__all__ = [
    "Loose",
    "WireError",
    "arguments_text",
    "content_text",
    "expect_dict",
    "expect_str",
    "function_tool",
    "join_loc",
    "loc",
    "message_from_openai",
    "message_to_openai",
    "messages_from_openai",
    "new_id",
    "tool_call_to_openai",
    "tool_to_openai",
    "tools_from_openai",
    "unsupported",
    "validate",
    "validation_error",
]
