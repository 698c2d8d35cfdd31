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


async def test_samples_asked_together_go_in_one_request_and_each_gets_its_own(tmp_path) -> None:
    backend = ScriptedBackend.default(state_dir=tmp_path)
    app = create_inference_app(backend, model="scripted")
    paths: list[str] = []

    @app.middleware("http")
    async def count(request, call_next):  # type: ignore[no-untyped-def]
        paths.append(request.url.path)
        return await call_next(request)

    server = AppServer(app)
    await server.start()
    remote = RemoteBackend(server.url, retries=2, retry_wait=0.05)
    params = SamplingParams(max_tokens=16)
    prompts = [list(backend.renderer.render([Message.user(f"What is {n} + 1?")])) for n in range(8)]
    try:
        direct = [await backend.sample(p, params) for p in prompts]
        asked = [remote.sample(p, params) for p in prompts] + [remote.sample([], params)]
        *answers, refused = await asyncio.gather(*asked, return_exceptions=True)
        assert answers == direct  # each caller got the completion of its own prompt
        assert isinstance(refused, InferenceUnavailable) and "422" in str(refused)
        assert paths == ["/sample/batch"]  # nine samples, one HTTP exchange
        # Asked one after another, each goes alone.
        assert await remote.sample(prompts[0], params) == direct[0]
        assert paths == ["/sample/batch"] * 2
    finally:
        await remote.close()
        await server.stop()


async def test_a_batch_sent_while_the_server_restarts_is_answered_once_it_is_back(
    tmp_path,
) -> None:
    backend = ScriptedBackend.default(state_dir=tmp_path)
    server = AppServer(create_inference_app(backend, model="scripted"))
    await server.start()
    port = server.port
    await server.stop()
    remote = RemoteBackend(server.url, retries=40, retry_wait=0.05)
    params = SamplingParams(max_tokens=16)
    prompts = [list(backend.renderer.render([Message.user(f"What is {n} * 3?")])) for n in range(4)]
    try:
        asked = asyncio.gather(*(remote.sample(p, params) for p in prompts))
        await asyncio.sleep(0.3)  # the batch is refused a few times: nothing is listening
        assert not asked.done()
        back = AppServer(create_inference_app(backend, model="scripted"), port=port)
        await back.start()
        try:
            answers = await asyncio.wait_for(asked, 30)
        finally:
            await back.stop()
        assert answers == [await backend.sample(p, params) for p in prompts]
    finally:
        await remote.close()
