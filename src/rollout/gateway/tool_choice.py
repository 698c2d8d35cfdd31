"""`tool_choice` in each protocol's shape, read into one decision about the tools offered.

- Chat Completions: `"auto"`, `"none"`, `"required"`, `{"type": "function", "function":
  {"name": N}}`.
- Responses: `"auto"`, `"none"`, `"required"`, `{"type": "function", "name": N}` (hosted tool
  choices such as `{"type": "web_search"}` read as `auto`: those tools are not offered).
- Messages: `{"type": "auto"}`, `{"type": "none"}`, `{"type": "any"}` (required),
  `{"type": "tool", "name": N}` (`disable_parallel_tool_use` is accepted).

`none` offers no tools; a named function offers that tool alone (400 if no such tool); `required`
offers every tool (400 without tools). The choice is recorded with the turn. Sampling is not
constrained: the reply's finish reason says whether the model called a tool.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, Literal

from rollout.contracts import ToolSpec
from rollout.gateway.errors import GatewayError

Flavour = Literal["chat", "responses", "messages"]


def _bad(where: str, value: Any, expected: str) -> GatewayError:
    shown = value if isinstance(value, str) else type(value).__name__
    return GatewayError(
        f"{where}: expected {expected}, got {shown!r}", param=where, code="invalid_value"
    )


def read_tool_choice(choice: Any, flavour: Flavour) -> str:
    """`auto`, `none`, `required` or `function:NAME` for a request's `tool_choice`."""
    if choice is None:
        return "auto"
    if flavour == "messages":
        if not isinstance(choice, dict):
            raise _bad("tool_choice", choice, "an object with a type")
        kind = choice.get("type")
        if kind in ("auto", "none"):
            return str(kind)
        if kind == "any":
            return "required"
        if kind == "tool":
            name = choice.get("name")
            if not isinstance(name, str) or not name:
                raise _bad("tool_choice.name", name, "a tool name")
            return f"function:{name}"
        raise _bad("tool_choice.type", kind, "'auto', 'any', 'tool' or 'none'")
    if isinstance(choice, str):
        if choice in ("auto", "none", "required"):
            return choice
        raise _bad("tool_choice", choice, "'auto', 'none', 'required' or a function")
    if not isinstance(choice, dict):
        raise _bad("tool_choice", choice, "'auto', 'none', 'required' or a function")
    kind = choice.get("type")
    if kind == "function":
        if flavour == "chat":
            function = choice.get("function")
            name = function.get("name") if isinstance(function, dict) else None
            where = "tool_choice.function.name"
        else:
            name, where = choice.get("name"), "tool_choice.name"
        if not isinstance(name, str) or not name:
            raise _bad(where, name, "a function name")
        return f"function:{name}"
    if flavour == "responses" and isinstance(kind, str):
        return "auto"  # a hosted tool (web_search, file_search, ...): not offered here
    raise _bad("tool_choice.type", kind, "'function'")


def apply_tool_choice(tools: Sequence[ToolSpec], choice: str) -> list[ToolSpec]:
    """The tools to offer under `choice` (from `read_tool_choice`)."""
    if choice == "none":
        return []
    if choice.startswith("function:"):
        name = choice.removeprefix("function:")
        named = [t for t in tools if t.name == name]
        if not named:
            raise GatewayError(
                f"tool_choice: no tool named {name!r} in tools",
                param="tool_choice",
                code="invalid_value",
            )
        return named
    if choice == "required" and not tools:
        raise GatewayError("tool_choice: 'required' needs at least one tool", param="tool_choice")
    return list(tools)
