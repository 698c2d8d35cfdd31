"""The runner's model client: one agent seat talks to the gateway over Chat Completions.

The runner drives a Task's conversation through the same gateway that external agent programs
use, with the seat's own key, so every turn is recorded the same way whoever drives it.
"""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import Mapping, Sequence
from typing import Any

from rollout.contracts import Message, ToolCall, ToolSpec
from rollout.errors import RolloutError
from rollout.net.client import JsonHttpClient, TransportError


class GatewayCallError(RolloutError):
    """The gateway answered a model call with an error."""

    def __init__(self, status: int, body: str) -> None:
        super().__init__(f"gateway answered {status}: {body[:500]}")
        self.status = status
        self.body = body


def message_to_openai(message: Message) -> dict[str, Any]:
    """A canonical message in Chat Completions' request shape."""
    out: dict[str, Any] = {"role": message.role, "content": message.text}
    if message.tool_calls:
        out["tool_calls"] = [
            {
                "id": call.id,
                "type": "function",
                "function": {"name": call.name, "arguments": call.arguments},
            }
            for call in message.tool_calls
        ]
    if message.tool_call_id is not None:
        out["tool_call_id"] = message.tool_call_id
    if message.name is not None and message.role != "tool":
        out["name"] = message.name
    return out


def tool_to_openai(tool: ToolSpec) -> dict[str, Any]:
    return {
        "type": "function",
        "function": {
            "name": tool.name,
            "description": tool.description,
            "parameters": tool.parameters,
        },
    }


def message_from_openai(choice_message: Mapping[str, Any]) -> Message:
    """The assistant message of a Chat Completions response."""
    calls = [
        ToolCall(
            id=call["id"],
            name=call["function"]["name"],
            arguments=call["function"].get("arguments") or "{}",
        )
        for call in choice_message.get("tool_calls") or []
    ]
    return Message.assistant(choice_message.get("content") or "", calls)


class GatewayClient:
    """Calls `POST {base_url}/chat/completions` with one seat's key."""

    def __init__(
        self, base_url: str, *, timeout: float = 600.0, retry_seconds: float = 120.0
    ) -> None:
        self.base_url = base_url.rstrip("/")
        self.retry_seconds = retry_seconds
        self._http = JsonHttpClient(timeout=timeout)

    async def complete(
        self,
        api_key: str,
        messages: Sequence[Message],
        tools: Sequence[ToolSpec] = (),
        sampling: Mapping[str, Any] | None = None,
        model: str = "policy",
    ) -> Message:
        body: dict[str, Any] = {
            "model": model,
            "messages": [message_to_openai(m) for m in messages],
            **dict(sampling or {}),
        }
        if tools:
            body["tools"] = [tool_to_openai(t) for t in tools]
        content = json.dumps(body)
        headers = {"Authorization": f"Bearer {api_key}", "Content-Type": "application/json"}
        deadline = time.monotonic() + self.retry_seconds
        while True:
            try:
                response = await self._http.request(
                    "POST", f"{self.base_url}/chat/completions", data=content, headers=headers
                )
            except TransportError:  # the gateway is restarting: wait for it
                if time.monotonic() > deadline:
                    raise
                await asyncio.sleep(0.5)
                continue
            if response.status in (502, 503, 504) and time.monotonic() < deadline:
                await asyncio.sleep(0.5)
                continue
            if response.status != 200:
                raise GatewayCallError(response.status, response.text)
            return message_from_openai(json.loads(response.body)["choices"][0]["message"])

    async def close(self) -> None:
        await self._http.close()
