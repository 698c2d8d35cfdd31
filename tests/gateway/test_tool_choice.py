"""`tool_choice` in each protocol's shape: `none` offers no tools, a named function offers that
one alone, `required`/`any` and `auto` offer all; bad shapes and unknown names are 400s naming
the field; the choice is recorded with the turn."""

from __future__ import annotations

from typing import Any

import httpx

from tests.gateway.gateway_helpers import ADD_SCHEMA, Serve

TWO = [("add", ADD_SCHEMA), ("mul", ADD_SCHEMA)]
CHAT_TOOLS = [{"type": "function", "function": {"name": n, "parameters": p}} for n, p in TWO]
RESPONSES_TOOLS = [{"type": "function", "name": n, "parameters": p} for n, p in TWO]
MESSAGES_TOOLS = [{"name": n, "input_schema": p} for n, p in TWO]


def body(path: str, choice: Any) -> dict[str, Any]:
    if path == "/v1/chat/completions":
        out: dict[str, Any] = {
            "model": "m",
            "messages": [{"role": "user", "content": "hi"}],
            "tools": CHAT_TOOLS,
        }
    elif path == "/v1/responses":
        out = {"model": "m", "input": "hi", "tools": RESPONSES_TOOLS}
    else:
        out = {
            "model": "m",
            "max_tokens": 8,
            "messages": [{"role": "user", "content": "hi"}],
            "tools": MESSAGES_TOOLS,
        }
    if choice is not None:
        out["tool_choice"] = choice
    return out


CASES: dict[str, list[tuple[Any, list[str], str]]] = {
    "/v1/chat/completions": [
        (None, ["add", "mul"], "auto"),
        ("none", [], "none"),
        ("required", ["add", "mul"], "required"),
        ({"type": "function", "function": {"name": "mul"}}, ["mul"], "function:mul"),
    ],
    "/v1/responses": [
        ("auto", ["add", "mul"], "auto"),
        ("none", [], "none"),
        ("required", ["add", "mul"], "required"),
        ({"type": "function", "name": "add"}, ["add"], "function:add"),
    ],
    "/v1/messages": [
        ({"type": "auto"}, ["add", "mul"], "auto"),
        ({"type": "none"}, [], "none"),
        ({"type": "any"}, ["add", "mul"], "required"),
        (
            {"type": "tool", "name": "mul", "disable_parallel_tool_use": True},
            ["mul"],
            "function:mul",
        ),
    ],
}
BAD: dict[str, list[tuple[Any, str]]] = {
    "/v1/chat/completions": [
        ("sometimes", "tool_choice"),
        ({"type": "function", "function": {"name": "div"}}, "no tool named 'div'"),
        ({"type": "function"}, "tool_choice.function.name"),
    ],
    "/v1/responses": [({"type": "function", "name": 3}, "tool_choice.name")],
    "/v1/messages": [
        ("auto", "tool_choice"),
        ({"type": "tool", "name": "div"}, "no tool named 'div'"),
        ({"type": "maybe"}, "tool_choice.type"),
    ],
}


async def test_tool_choice_in_every_protocol(serve: Serve) -> None:
    served = await serve(["ok"])
    expected: list[tuple[list[str], str]] = []
    async with httpx.AsyncClient(
        base_url=served.server.root_url, headers={"x-api-key": served.key}
    ) as http:
        for path, cases in CASES.items():
            for choice, offered, recorded in cases:
                r = await http.post(path, json=body(path, choice))
                assert r.status_code == 200, (path, choice, r.text)
                expected.append((offered, recorded))
        for path, bad in BAD.items():
            for choice, words in bad:
                r = await http.post(path, json=body(path, choice))
                assert r.status_code == 400, (path, choice, r.text)
                assert words in r.text, (path, choice, r.text)
    turns = await served.turns()
    assert len(turns) == len(expected)
    for turn, (offered, recorded) in zip(turns, expected, strict=True):
        assert [t["name"] for t in turn.request["tools"]] == offered
        assert turn.request["tool_choice"] == recorded
