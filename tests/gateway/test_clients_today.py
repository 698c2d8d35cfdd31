"""What today's Claude Code (2.1.332) and Codex (0.171) send, as captured from the real CLIs.

Claude Code puts `role: "system"` messages inside `messages` (after a user turn) and sends
`thinking`, `context_management`, `output_config`, `metadata`, `?beta=true`, system blocks with
`cache_control` and tools with `defer_loading`; Codex sends `namespace` tools and
`client_metadata`. The gateway keeps what shapes the prompt (the mid-conversation system message
is rendered in place by the chat template) and ignores the rest, as the real APIs would; a content
block type it cannot read is a 400 naming the block, never a 500.
"""

from __future__ import annotations

from typing import Any

import httpx

from tests.gateway.gateway_helpers import Serve

CLAUDE_HEADERS = {
    "anthropic-version": "2023-06-01",
    "anthropic-beta": "claude-code-20250219,interleaved-thinking-2025-05-14,"
    "context-management-2025-06-27,effort-2025-11-24",
    "x-app": "cli",
    "user-agent": "claude-cli/2.1.332 (external, sdk-cli)",
}


def claude_code_body(messages: list[Any]) -> dict[str, Any]:
    return {
        "model": "claude-opus-5-5",
        "max_tokens": 128000,
        "stream": True,
        "metadata": {"user_id": '{"device_id":"d","account_uuid":"","session_id":"s"}'},
        "thinking": {"type": "adaptive", "display": "omitted"},
        "context_management": {"edits": [{"type": "clear_thinking_20251015", "keep": "all"}]},
        "output_config": {"effort": "medium"},
        "system": [
            {"type": "text", "text": "x-anthropic-billing-header: cc_version=2.1.332;"},
            {
                "type": "text",
                "text": "You are a Claude agent.",
                "cache_control": {"type": "ephemeral"},
            },
        ],
        "tools": [
            {"name": "Write", "description": "Write a file", "input_schema": {"type": "object"}},
            {
                "name": "DeferredToolPlaceholder",
                "description": "later",
                "input_schema": {"type": "object"},
                "defer_loading": True,
            },
        ],
        "messages": messages,
    }


async def test_claude_code_request_with_a_system_message_inside_messages(serve: Serve) -> None:
    served = await serve(["done"])
    messages = [
        {
            "role": "user",
            "content": [
                {"type": "text", "text": "<system-reminder>\nattribution\n</system-reminder>\n"},
                {"type": "text", "text": "create hello.txt", "cache_control": {"type": "x"}},
            ],
        },
        {"role": "system", "content": [{"type": "text", "text": "# Environment\ncwd: /tmp/x"}]},
    ]
    headers = {"authorization": f"Bearer {served.key}", **CLAUDE_HEADERS}
    async with httpx.AsyncClient(base_url=served.server.root_url, headers=headers) as http:
        r = await http.post("/v1/messages?beta=true", json=claude_code_body(messages))
        assert r.status_code == 200, r.text
        assert "event: message_stop" in r.text and '"stop_reason":"end_turn"' in r.text
    (turn,) = await served.turns()
    text = served.renderer.decode(list(turn.prompt_tokens))
    # In place: after the user's turn, as the system turn the client sent.
    user_at = text.index("create hello.txt")
    system_at = text.index("<|im_start|>system\n# Environment\ncwd: /tmp/x<|im_end|>")
    assert user_at < system_at
    assert "You are a Claude agent." in text[:user_at]
    assert [t["name"] for t in turn.request["tools"]] == ["Write", "DeferredToolPlaceholder"]


async def test_unknown_content_blocks_are_400_naming_the_block(serve: Serve) -> None:
    served = await serve(["done"])
    headers = {"x-api-key": served.key, **CLAUDE_HEADERS}
    cases: list[tuple[list[Any], str]] = [
        (
            [{"role": "user", "content": [{"type": "hologram", "data": "x"}]}],
            "messages.0.content.0.type",
        ),
        (
            [
                {"role": "user", "content": "hi"},
                {"role": "system", "content": [{"type": "image", "source": {}}]},
            ],
            "messages.1.content.0.type",
        ),
        ([{"role": "user", "content": [7]}], "messages.0.content.0"),
        ([{"role": "critic", "content": "hi"}], "messages.0.role"),
    ]
    async with httpx.AsyncClient(base_url=served.server.root_url, headers=headers) as http:
        for messages, where in cases:
            r = await http.post("/v1/messages?beta=true", json=claude_code_body(messages))
            assert r.status_code == 400, (messages, r.text)
            error = r.json()["error"]
            assert error["type"] == "invalid_request_error" and where in error["message"]
    assert await served.turns() == []


async def test_codex_request_with_namespace_tools_and_client_metadata(serve: Serve) -> None:
    served = await serve(["done"])
    body = {
        "model": "scripted",
        "stream": True,
        "instructions": "You are Codex.",
        "input": [
            {
                "type": "message",
                "id": "msg_1",
                "role": "developer",
                "content": [{"type": "input_text", "text": "rules"}],
            },
            {"type": "message", "role": "user", "content": [{"type": "input_text", "text": "hi"}]},
        ],
        "tools": [
            {
                "type": "function",
                "name": "exec_command",
                "description": "Run a command",
                "strict": False,
                "parameters": {"type": "object", "properties": {"cmd": {"type": "string"}}},
            },
            {
                "type": "namespace",
                "name": "multi_agent_v1",
                "description": "agents",
                "tools": [{"type": "function", "name": "spawn_agent", "parameters": {}}],
            },
            {"type": "web_search", "external_web_access": False},
        ],
        "tool_choice": "auto",
        "parallel_tool_calls": True,
        "reasoning": {"summary": "auto"},
        "store": False,
        "include": ["reasoning.encrypted_content"],
        "prompt_cache_key": "01a2",
        "client_metadata": {"thread_id": "01a2", "x-codex-turn-metadata": "{}"},
    }
    headers = {"authorization": f"Bearer {served.key}", "x-codex-beta-features": "x"}
    async with httpx.AsyncClient(base_url=served.server.base_url, headers=headers) as http:
        r = await http.post("/responses", json=body)
        assert r.status_code == 200, r.text
        assert "event: response.completed" in r.text
    (turn,) = await served.turns()
    assert [t["name"] for t in turn.request["tools"]] == ["exec_command"]
