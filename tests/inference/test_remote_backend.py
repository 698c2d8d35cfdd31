"""RemoteBackend over real HTTP to `create_inference_app` (what the gateway uses to sample)."""

from __future__ import annotations

import asyncio
import re

import pytest

from rollout.contracts import Message, SamplingParams
from rollout.inference.remote import InferenceUnavailable, RemoteBackend
from rollout.inference.scripted import ScriptedBackend
from rollout.inference.server import create_inference_app
from rollout.net.server import AppServer


async def test_samples_over_http_like_the_backend_itself(tmp_path) -> None:
    backend = ScriptedBackend.default(state_dir=tmp_path)
    prompt = backend.renderer.render([Message.user("What is 6 * 7?")])
    params = SamplingParams(max_tokens=16)
    server = AppServer(create_inference_app(backend, model="scripted"))
    await server.start()
    remote = RemoteBackend(server.url, retries=2, retry_wait=0.05)
    try:
        direct = await backend.sample(list(prompt), params)
        over_http = await remote.sample(list(prompt), params)
        assert over_http == direct
        assert (await remote.health())["model"] == "scripted"
        # The server refuses a bad request with its reason; nothing is retried.
        with pytest.raises(InferenceUnavailable, match=r"answered 422: .*prompt_tokens is empty"):
            await remote.sample([], params)
        # Many requests in flight at once share the pooled connections.
        results = await asyncio.gather(*(remote.sample(list(prompt), params) for _ in range(200)))
        assert all(r == direct for r in results)
    finally:
        await remote.close()
        await server.stop()


async def test_an_unreachable_server_is_reported_after_the_retries(tmp_path) -> None:
    server = AppServer(create_inference_app(ScriptedBackend.default(state_dir=tmp_path), model="x"))
    await server.start()
    url = server.url
    await server.stop()
    remote = RemoteBackend(url, retries=3, retry_wait=0.01)
    try:
        expected = re.escape(f"inference server {url} unavailable")
        with pytest.raises(InferenceUnavailable, match=expected):
            await remote.sample([1, 2, 3], SamplingParams(max_tokens=2))
    finally:
        await remote.close()
