"""The runner's model client: one agent seat talks to the gateway over Chat Completions.

The runner drives a Task's conversation through the same gateway that external agent programs
use, with the seat's own key, so every turn is recorded the same way whoever drives it.
"""

from __future__ import annotations

import asyncio
import json
import logging
import time
from collections.abc import Mapping, Sequence
from typing import Any

from rollout.contracts import Message, ToolSpec
from rollout.errors import RolloutError
from rollout.harness.core import Environment, RunContext
from rollout.harness.play import Complete
from rollout.ledger import SeatClaim
from rollout.net.client import JsonHttpClient, TransportError
from rollout.rendering.openai import message_from_openai, message_to_openai, tool_to_openai


class GatewayCallError(RolloutError):
    """The gateway answered a model call with an error."""

    def __init__(self, status: int, body: str) -> None:
        super().__init__(f"gateway answered {status}: {body[:500]}")
        self.status = status
        self.body = body


def gateway_base_url(url: str) -> str:
    """The gateway's OpenAI base URL (`http://host:port/v1`) from it or from the bare root.

    OpenAI SDKs and Codex take this URL; Anthropic SDKs and Claude Code take the root (the URL
    without `/v1`: they add `/v1/messages` themselves).

    >>> gateway_base_url("http://127.0.0.1:8000"), gateway_base_url("http://127.0.0.1:8000/v1/")
    ('http://127.0.0.1:8000/v1', 'http://127.0.0.1:8000/v1')
    """
    base = url.rstrip("/")
    return base if base.endswith("/v1") else f"{base}/v1"


class GatewayClient:
    """Calls `POST {base_url}/chat/completions` with one seat's key."""

    def __init__(
        self, base_url: str, *, timeout: float = 600.0, retry_seconds: float = 120.0
    ) -> None:
        # One form everywhere (`RunContext.gateway_url`): the OpenAI base URL, `.../v1`.
        self.base_url = gateway_base_url(base_url)
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
            reply = json.loads(response.body)["choices"][0]["message"]
            return message_from_openai(reply, "choices.0.message")

    async def close(self) -> None:
        await self._http.close()


def seat_context(claim: SeatClaim, client: GatewayClient, environment: Environment) -> RunContext:
    """The `RunContext` of a claimed seat whose model calls go through `client`."""
    return RunContext(
        run_id=claim.run_id,
        episode_id=claim.episode_id,
        agent=claim.agent,
        seed=claim.seed,
        attempt=claim.attempt,
        agents=claim.agents,
        gateway_url=client.base_url,
        api_key=claim.api_key,
        logger=logging.getLogger(f"rollout.task.{environment.name}"),
    )


def seat_completer(client: GatewayClient, api_key: str) -> Complete:
    """`play_seat`'s model: each call goes through the gateway with the seat's key."""

    async def complete(
        messages: Sequence[Message], tools: Sequence[ToolSpec], sampling: Mapping[str, Any]
    ) -> Message:
        return await client.complete(api_key, messages, tools, sampling)

    return complete
