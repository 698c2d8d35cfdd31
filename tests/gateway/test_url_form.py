"""One gateway URL form: `RunContext.gateway_url` is the OpenAI base URL (`.../v1`) whether the
runner was given the gateway's root (a training run's `gateway_url` setting) or `.../v1`
(`rollout run`), so an anthropic-SDK agent takes the root by dropping `/v1`, in both cases."""

from __future__ import annotations

import anthropic
import openai
import pytest

from rollout.harness import Environment, Observation, RunContext, Task
from rollout.runners.client import GatewayClient, seat_context
from tests.gateway.gateway_helpers import Serve


class _Agent(Task):
    async def start(self, run: RunContext) -> Observation:
        return Observation("unused")


ENVIRONMENT = Environment(name="url-form", task=_Agent)


@pytest.mark.parametrize("form", ["root", "v1"])
async def test_both_sdks_work_from_the_run_context_url(serve: Serve, form: str) -> None:
    served = await serve(["ok"])
    given = served.server.root_url if form == "root" else served.server.base_url
    client = GatewayClient(given)
    try:
        run = seat_context(served.claim, client, ENVIRONMENT)
    finally:
        await client.close()
    assert run.gateway_url is not None and run.api_key is not None
    assert run.gateway_url == served.server.base_url and run.gateway_url.endswith("/v1")
    claude = anthropic.AsyncAnthropic(
        base_url=run.gateway_url.removesuffix("/v1"), api_key=run.api_key, max_retries=0
    )
    reply = await claude.messages.create(
        model="m", max_tokens=8, messages=[{"role": "user", "content": "hi"}]
    )
    assert reply.content[0].text == "ok"  # type: ignore[union-attr]
    oa = openai.AsyncOpenAI(base_url=run.gateway_url, api_key=run.api_key, max_retries=0)
    chat = await oa.chat.completions.create(model="m", messages=[{"role": "user", "content": "hi"}])
    assert chat.choices[0].message.content == "ok"
    assert len(await served.turns()) == 2
