"""The gateway in front of a real (tiny, random) model: what is recorded is what was sampled.

The local backend samples with a seeded generator, so sampling the recorded prompt again with the
same settings must give the same tokens and logprobs; teacher-forced scores of the recorded
completion must match the recorded logprobs too.
"""

from __future__ import annotations

import math
from collections.abc import AsyncIterator
from pathlib import Path

import openai
import pytest

from rollout.contracts import SamplingParams
from rollout.gateway import GatewayServer, create_app
from rollout.inference.local import LocalBackend
from rollout.ledger import Ledger
from rollout.models import init_model
from rollout.rendering import HFRenderer
from tests.gateway.gateway_helpers import claim_new_seat


@pytest.fixture(scope="module")
def model_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return init_model(tmp_path_factory.mktemp("gw-tiny"), hidden=32, heads=2, kv_heads=1, seed=3)


@pytest.fixture
async def backend(model_dir: Path) -> AsyncIterator[LocalBackend]:
    local = LocalBackend(model_dir, version=2, threads=1)
    try:
        yield local
    finally:
        await local.close()


async def test_recorded_logprobs_equal_the_backends(
    ledger: Ledger, model_dir: Path, backend: LocalBackend
) -> None:
    renderer = HFRenderer(model_dir)
    server = GatewayServer(create_app(ledger, renderer, backend, model_name="tiny"))
    await server.start()
    try:
        claim = await claim_new_seat(ledger)
        client = openai.AsyncOpenAI(base_url=server.base_url, api_key=claim.api_key)
        reply = await client.chat.completions.create(
            model="tiny",
            messages=[{"role": "user", "content": "What is 2 + 3?"}],
            max_tokens=12,
            temperature=0.8,
            seed=11,
            logprobs=True,
            top_logprobs=3,
        )
    finally:
        await server.stop()
    (turn,) = await ledger.seat_turns(claim.episode_id, claim.agent, claim.attempt)
    assert turn.version == 2 and turn.temperature == 0.8
    assert len(turn.logprobs) == len(turn.completion_tokens) > 0
    assert all(math.isfinite(lp) and lp <= 0.0 for lp in turn.logprobs)

    # The same prompt and settings sampled again directly: the same tokens and logprobs.
    params = SamplingParams(
        max_tokens=12,
        temperature=0.8,
        seed=11,
        top_logprobs=3,
        stop_token_ids=renderer.stop_token_ids,
    )
    again = await backend.sample(list(turn.prompt_tokens), params)
    assert again.tokens == turn.completion_tokens
    assert again.logprobs == turn.logprobs

    # Teacher forcing agrees (up to float rounding between prefill and incremental decoding).
    scored = await backend.score(turn.prompt_tokens, turn.completion_tokens, temperature=0.8)
    assert scored == pytest.approx(list(turn.logprobs), abs=1e-4)

    # The API shows the same numbers (the final stop token, if any, is not shown).
    shown = (reply.choices[0].logprobs and reply.choices[0].logprobs.content) or []
    visible = len(turn.completion_tokens) - (
        1 if turn.completion_tokens[-1] in renderer.stop_token_ids else 0
    )
    assert [item.logprob for item in shown] == list(turn.logprobs[:visible])
    assert all(1 <= len(item.top_logprobs) <= 3 for item in shown)


async def test_local_backend_streams_the_tokens_it_samples(backend: LocalBackend) -> None:
    params = SamplingParams(max_tokens=12, temperature=1.0, seed=11, top_logprobs=2)
    chunks = [c async for c in backend.sample_stream([1, 2, 3, 4], params)]
    *tokens, last = chunks
    completion = last.completion
    assert completion is not None
    assert completion == await backend.sample([1, 2, 3, 4], params)  # same seed, same draw
    assert len(tokens) == len(completion.tokens) > 1  # one chunk per chosen token
    assert tuple(t for c in tokens for t in c.tokens) == completion.tokens
    assert tuple(lp for c in tokens for lp in c.logprobs) == completion.logprobs
    assert tuple(top for c in tokens for top in c.top_logprobs) == completion.top_logprobs
