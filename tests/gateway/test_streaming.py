"""True streaming: the first token reaches the client while the rest is still being sampled,
and the turn is in the ledger before the stream's final event, in every protocol.

`SlowBackend` is the scripted backend sampling one token every `delay` seconds through the
optional `sample_stream` path of the backend protocol.
"""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import AsyncIterator
from typing import Any

import httpx
import pytest

from rollout.contracts import Completion, SamplingParams
from rollout.gateway import GatewayServer, create_app
from rollout.inference.base import SampleChunk, StreamingBackend, sample_stream
from rollout.inference.scripted import ScriptedBackend
from rollout.ledger import Ledger
from rollout.rendering import HFRenderer
from tests.gateway.gateway_helpers import TOOL_REPLY, claim_new_seat

REPLY = "one two three four five six"


class SlowBackend(ScriptedBackend):
    """The scripted reply, one token every `delay` seconds."""

    def __init__(self, renderer: HFRenderer, script: Any, delay: float) -> None:
        super().__init__(renderer, script)
        self.delay = delay
        self.finished: list[float] = []

    async def sample_stream(
        self, prompt_tokens: list[int], params: SamplingParams
    ) -> AsyncIterator[SampleChunk]:
        completion = await self.sample(prompt_tokens, params)
        for i, token in enumerate(completion.tokens):
            await asyncio.sleep(self.delay)
            yield SampleChunk((token,), (completion.logprobs[i],))
        self.finished.append(time.monotonic())
        yield SampleChunk((), (), completion=completion)


async def test_default_stream_is_the_whole_completion(renderer: HFRenderer) -> None:
    backend = ScriptedBackend(renderer, ["hi"])
    assert not isinstance(backend, StreamingBackend)
    assert isinstance(SlowBackend(renderer, ["hi"], 0.0), StreamingBackend)
    chunks = [c async for c in sample_stream(backend, [1, 2], SamplingParams(max_tokens=8))]
    assert len(chunks) == 1 and isinstance(chunks[0].completion, Completion)
    assert chunks[0].tokens == chunks[0].completion.tokens


REQUESTS: dict[str, tuple[str, dict[str, Any]]] = {
    "chat": (
        "/v1/chat/completions",
        {"model": "m", "stream": True, "messages": [{"role": "user", "content": "go"}]},
    ),
    "responses": ("/v1/responses", {"model": "m", "stream": True, "input": "go"}),
    "messages": (
        "/v1/messages",
        {
            "model": "m",
            "stream": True,
            "max_tokens": 64,
            "messages": [{"role": "user", "content": "go"}],
        },
    ),
}
TEXT_EVENTS = {
    "chat": lambda e: bool(e.get("choices") and e["choices"][0]["delta"].get("content")),
    "responses": lambda e: e.get("type") == "response.output_text.delta",
    "messages": lambda e: e.get("type") == "content_block_delta",
}
FINAL_EVENTS = {
    "chat": lambda e: bool(e.get("choices") and e["choices"][0].get("finish_reason")),
    "responses": lambda e: e.get("type") == "response.completed",
    "messages": lambda e: e.get("type") == "message_delta",
}


@pytest.mark.parametrize("protocol", list(REQUESTS))
async def test_first_token_before_sampling_ends_and_turn_recorded_before_final_event(
    ledger: Ledger, renderer: HFRenderer, protocol: str
) -> None:
    backend = SlowBackend(renderer, [REPLY], delay=0.05)
    server = await GatewayServer(create_app(ledger, renderer, backend, model_name="m")).start()
    claim = await claim_new_seat(ledger)
    path, body = REQUESTS[protocol]
    first_text: float | None = None
    texts: list[str] = []
    turns_at_final: int | None = None
    try:
        headers = {"authorization": f"Bearer {claim.api_key}"}
        async with (
            httpx.AsyncClient(base_url=server.root_url, headers=headers, timeout=30) as http,
            http.stream("POST", path, json=body) as response,
        ):
            assert response.status_code == 200
            async for line in response.aiter_lines():
                if not line.startswith("data: {"):
                    continue
                event = json.loads(line[len("data: ") :])
                if TEXT_EVENTS[protocol](event):
                    first_text = first_text or time.monotonic()
                    texts.append(json.dumps(event))
                if FINAL_EVENTS[protocol](event) and turns_at_final is None:
                    turns = await ledger.seat_turns(claim.episode_id, claim.agent, claim.attempt)
                    turns_at_final = len(turns)
    finally:
        await server.stop()
    (finished,) = backend.finished
    assert first_text is not None and first_text < finished - 0.1  # well before the last token
    assert len(texts) > 3  # token by token, not one piece at the end
    assert turns_at_final == 1


async def test_tool_calls_are_held_until_parsed_and_text_is_never_retracted(
    ledger: Ledger, renderer: HFRenderer
) -> None:
    backend = SlowBackend(renderer, [f"Let me add.\n{TOOL_REPLY}"], delay=0.0)
    server = await GatewayServer(create_app(ledger, renderer, backend, model_name="m")).start()
    claim = await claim_new_seat(ledger)
    tools = [{"name": "add", "input_schema": {"type": "object"}}]
    try:
        headers = {"x-api-key": claim.api_key}
        async with httpx.AsyncClient(base_url=server.root_url, headers=headers) as http:
            body = {**REQUESTS["messages"][1], "tools": tools}
            r = await http.post("/v1/messages", json=body)
    finally:
        await server.stop()
    events = [json.loads(x[6:]) for x in r.text.splitlines() if x.startswith("data: {")]
    text = "".join(
        e["delta"]["text"] for e in events if e.get("delta", {}).get("type") == "text_delta"
    )
    assert text == "Let me add."  # the newline before the call belongs to the call
    uses = [e for e in events if e.get("content_block", {}).get("type") == "tool_use"]
    assert [u["content_block"]["name"] for u in uses] == ["add"]
    assert "<tool_call>" not in r.text


async def test_remote_backend_streams_what_the_inference_server_samples(
    renderer: HFRenderer,
) -> None:
    from rollout.inference.remote import RemoteBackend
    from rollout.inference.server import create_inference_app
    from rollout.net.server import AppServer

    backend = SlowBackend(renderer, [REPLY], delay=0.05)
    server = await AppServer(create_inference_app(backend, model="slow")).start()
    remote = RemoteBackend(server.url, retries=2, retry_wait=0.05)
    params = SamplingParams(max_tokens=64)
    try:
        arrivals: list[tuple[float, SampleChunk]] = []
        async for chunk in remote.sample_stream([1, 2, 3], params):
            arrivals.append((time.monotonic(), chunk))
        expected = await backend.sample([1, 2, 3], params)
    finally:
        await remote.close()
        await server.stop()
    *tokens, (_, last) = arrivals
    assert last.completion == expected
    assert tuple(t for _, c in tokens for t in c.tokens) == expected.tokens
    assert arrivals[0][0] < backend.finished[0] - 0.1  # the first token came while sampling
