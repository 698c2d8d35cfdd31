"""LocalBackend: batched sampling whose logprobs match teacher forcing, seeds, stops, weights."""

from __future__ import annotations

import asyncio
import math
import statistics
from pathlib import Path

import pytest
import torch
from peft import LoraConfig, get_peft_model
from safetensors.torch import save_file
from transformers import AutoModelForCausalLM, PreTrainedModel

from rollout.contracts import Completion, Message, SamplingParams
from rollout.inference.base import BackendError, InferenceBackend
from rollout.inference.local import LocalBackend
from rollout.inference.local.sampling import nucleus
from rollout.models import init_model
from rollout.rendering import HFRenderer

NO_STOP = SamplingParams(max_tokens=12, stop_token_ids=[-1])


@pytest.fixture(scope="module")
def model_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return init_model(tmp_path_factory.mktemp("base"), hidden=64, heads=4, kv_heads=2, seed=0)


@pytest.fixture(scope="module")
def other_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return init_model(tmp_path_factory.mktemp("other"), hidden=64, heads=4, kv_heads=2, seed=1)


@pytest.fixture(scope="module")
def renderer(model_dir: Path) -> HFRenderer:
    return HFRenderer(model_dir)


@pytest.fixture
async def backend(model_dir: Path):
    backend = LocalBackend(model_dir, max_batch=8, threads=1, batch_window=0.02)
    yield backend
    await backend.close()


def _prompts(renderer: HFRenderer, n: int) -> list[list[int]]:
    # Different lengths, so the batch is left-padded.
    return [
        renderer.render([Message.user(f"What is {i} + {i * 3}?" + " and more" * i)])
        for i in range(n)
    ]


async def _max_diff(backend: LocalBackend, prompt: list[int], c: Completion, t: float) -> float:
    scored = await backend.score(prompt, list(c.tokens), temperature=t)
    return max(abs(a - b) for a, b in zip(scored, c.logprobs, strict=True))


@pytest.mark.parametrize("temperature", [1.0, 0.7, 0.0])
async def test_batched_logprobs_equal_teacher_forced_scores(
    backend: LocalBackend, renderer: HFRenderer, temperature: float
) -> None:
    prompts = _prompts(renderer, 6)
    assert len({len(p) for p in prompts}) == 6
    params = NO_STOP.model_copy(update={"temperature": temperature, "seed": 7})
    before = backend.batches_run
    completions = await asyncio.gather(*(backend.sample(p, params) for p in prompts))
    assert backend.batches_run == before + 1  # all six decoded together
    diffs: list[float] = []
    for prompt, completion in zip(prompts, completions, strict=True):
        assert len(completion.tokens) == len(completion.logprobs) == 12
        scored = await backend.score(prompt, list(completion.tokens), temperature=temperature)
        diffs += [abs(a - b) for a, b in zip(scored, completion.logprobs, strict=True)]
        assert all(lp <= 0 for lp in completion.logprobs)
    assert statistics.mean(diffs) < 1e-5
    assert max(diffs) < 1e-4


async def test_greedy_is_argmax_and_repeatable(backend: LocalBackend, renderer: HFRenderer):
    prompt = _prompts(renderer, 1)[0]
    params = NO_STOP.model_copy(update={"temperature": 0.0})
    first = await backend.sample(prompt, params)
    second = await backend.sample(prompt, params)
    assert first.tokens == second.tokens
    logits = backend.model(input_ids=torch.tensor([prompt])).logits[0, -1]
    assert first.tokens[0] == int(logits.argmax())


async def test_seeded_sampling_is_reproducible_alone_and_in_a_batch(
    backend: LocalBackend, renderer: HFRenderer
) -> None:
    prompts = _prompts(renderer, 4)
    seeded = NO_STOP.model_copy(update={"seed": 123})
    alone = await backend.sample(prompts[2], seeded)
    again = await backend.sample(prompts[2], seeded)
    batch = await asyncio.gather(
        *(backend.sample(p, seeded if i == 2 else NO_STOP) for i, p in enumerate(prompts))
    )
    assert alone.tokens == again.tokens == batch[2].tokens
    other = await backend.sample(prompts[2], NO_STOP.model_copy(update={"seed": 124}))
    assert other.tokens != alone.tokens


async def test_top_p_restricts_and_renormalises(backend: LocalBackend, renderer: HFRenderer):
    prompt = _prompts(renderer, 1)[0]
    params = NO_STOP.model_copy(update={"top_p": 0.3, "seed": 1, "top_logprobs": 5})
    completion = await backend.sample(prompt, params)
    full = await backend.score(prompt, list(completion.tokens))
    for lp, lp_full, top in zip(completion.logprobs, full, completion.top_logprobs, strict=True):
        assert lp >= lp_full - 1e-6  # renormalised over the nucleus
        assert math.isclose(sum(math.exp(v) for v in top.values()), 1.0, abs_tol=1e-4) or (
            len(top) == 5
        )


def test_nucleus_keeps_the_smallest_set_reaching_top_p() -> None:
    logp = torch.log(torch.tensor([[0.5, 0.3, 0.15, 0.05], [0.5, 0.3, 0.15, 0.05]]))
    out = nucleus(logp, torch.tensor([0.75, 1.0]))
    assert torch.allclose(out[0].exp(), torch.tensor([0.625, 0.375, 0.0, 0.0]))
    assert torch.allclose(out[1], logp[1])


async def test_stop_tokens_and_max_tokens(backend: LocalBackend, renderer: HFRenderer) -> None:
    prompt = _prompts(renderer, 1)[0]
    greedy = NO_STOP.model_copy(update={"temperature": 0.0})
    free = await backend.sample(prompt, greedy)
    assert free.stop_reason == "length" and len(free.tokens) == 12
    third = free.tokens[2]
    stopped = await backend.sample(prompt, greedy.model_copy(update={"stop_token_ids": [third]}))
    assert stopped.tokens == free.tokens[: free.tokens.index(third) + 1]
    assert stopped.stop_reason == "stop"
    short = await backend.sample(prompt, greedy.model_copy(update={"max_tokens": 2}))
    assert short.tokens == free.tokens[:2] and short.stop_reason == "length"


async def test_stop_strings(backend: LocalBackend, renderer: HFRenderer) -> None:
    prompt = _prompts(renderer, 1)[0]
    greedy = NO_STOP.model_copy(update={"temperature": 0.0})
    free = await backend.sample(prompt, greedy)
    text = renderer.decode(free.tokens[:4])
    stop = text[-2:] if len(text) >= 2 else text
    cut = await backend.sample(prompt, greedy.model_copy(update={"stop": [stop]}))
    assert cut.stop_reason == "stop"
    assert stop in renderer.decode(cut.tokens)
    assert stop not in renderer.decode(cut.tokens[:-1])
    assert cut.tokens == free.tokens[: len(cut.tokens)]


async def test_default_stop_tokens_come_from_the_generation_config(
    backend: LocalBackend, renderer: HFRenderer
) -> None:
    assert backend.default_stop_ids == frozenset(renderer.stop_token_ids)


async def test_load_weights_changes_outputs_and_version(
    backend: LocalBackend, renderer: HFRenderer, other_dir: Path, tmp_path: Path
) -> None:
    prompt = _prompts(renderer, 1)[0]
    greedy = NO_STOP.model_copy(update={"temperature": 0.0})
    before = await backend.sample(prompt, greedy)
    assert before.version == 0
    reference = LocalBackend(other_dir, threads=1)
    try:
        expected = await reference.sample(prompt, greedy)
        await backend.load_weights(other_dir, version=3)
        after = await backend.sample(prompt, greedy)
        assert after.version == backend.version == 3
        assert after.tokens == expected.tokens
        assert (
            max(abs(a - b) for a, b in zip(after.logprobs, expected.logprobs, strict=True)) < 1e-5
        )
        assert max(abs(a - b) for a, b in zip(after.logprobs, before.logprobs, strict=True)) > 1e-3
        # A plain state dict and a single safetensors file work too.
        state = {k: v.clone() for k, v in reference.model.state_dict().items()}
        await backend.load_weights(state, version=4)
        assert (await backend.sample(prompt, greedy)).logprobs == after.logprobs
        original = AutoModelForCausalLM.from_pretrained(backend.model_dir).state_dict()
        original.pop("lm_head.weight")  # tied to the embedding, as Hugging Face saves it
        save_file(original, str(tmp_path / "w.safetensors"))
        await backend.load_weights(tmp_path / "w.safetensors", version=5)
        back = await backend.sample(prompt, greedy)
        assert (back.logprobs, back.version) == (before.logprobs, 5)
    finally:
        await reference.close()


async def test_lora_adapter_matches_a_freshly_loaded_merged_model(
    backend: LocalBackend, renderer: HFRenderer, model_dir: Path, tmp_path: Path
) -> None:
    torch.manual_seed(0)
    base = AutoModelForCausalLM.from_pretrained(model_dir)
    config = LoraConfig(
        r=4, lora_alpha=8, target_modules=["q_proj", "v_proj", "down_proj"], init_lora_weights=False
    )
    peft_model = get_peft_model(base, config)
    peft_model.save_pretrained(str(tmp_path / "adapter"))
    merged = peft_model.merge_and_unload()
    assert isinstance(merged, PreTrainedModel)
    merged.save_pretrained(tmp_path / "merged")
    renderer.tokenizer.save_pretrained(tmp_path / "merged")

    prompts = _prompts(renderer, 3)
    params = NO_STOP.model_copy(update={"seed": 5})
    await backend.load_weights(tmp_path / "adapter", version=9)
    fresh = LocalBackend(tmp_path / "merged", threads=1)
    try:
        for prompt in prompts:
            completion = await backend.sample(prompt, params)
            assert completion.version == 9
            assert await _max_diff(fresh, prompt, completion, 1.0) < 1e-5
            assert (await fresh.sample(prompt, params)).tokens == completion.tokens
    finally:
        await fresh.close()


async def test_a_completion_never_mixes_versions(
    backend: LocalBackend, renderer: HFRenderer, model_dir: Path, other_dir: Path
) -> None:
    prompts = _prompts(renderer, 4)
    reference = LocalBackend(other_dir, threads=1)
    base = LocalBackend(model_dir, threads=1)
    scorers = {0: base, 1: reference}
    try:
        params = SamplingParams(max_tokens=24, stop_token_ids=[-1])
        first = [asyncio.create_task(backend.sample(p, params)) for p in prompts]
        await asyncio.sleep(0.05)  # the first requests are queued or decoding
        swap = asyncio.create_task(backend.load_weights(other_dir, version=1))
        # Sent while the swap is in flight: either version may serve them, never both.
        second = [asyncio.create_task(backend.sample(p, params)) for p in prompts]
        await swap
        later = await backend.sample(prompts[0], params)
        results = await asyncio.gather(*first, *second)
        assert {c.version for c in results[:4]} == {0}
        assert later.version == 1
        for prompt, completion in zip(prompts * 2, results, strict=True):
            # Scored by the weights of its own version only, every token matches.
            scored = await scorers[completion.version].score(prompt, list(completion.tokens))
            assert max(abs(a - b) for a, b in zip(scored, completion.logprobs, strict=True)) < 1e-4
    finally:
        await reference.close()
        await base.close()


async def test_the_event_loop_keeps_running_while_sampling(
    backend: LocalBackend, renderer: HFRenderer
) -> None:
    ticks = 0

    async def ticker() -> None:
        nonlocal ticks
        while True:
            await asyncio.sleep(0.001)
            ticks += 1

    task = asyncio.create_task(ticker())
    params = SamplingParams(max_tokens=64, stop_token_ids=[-1])
    await asyncio.gather(*(backend.sample(p, params) for p in _prompts(renderer, 8)))
    task.cancel()
    assert ticks > 5


async def test_bad_requests_name_the_field(backend: LocalBackend, tmp_path: Path) -> None:
    b: InferenceBackend = backend
    with pytest.raises(BackendError, match="prompt_tokens"):
        await b.sample([], NO_STOP)
    with pytest.raises(BackendError, match="prompt_tokens"):
        await b.sample([10**6], NO_STOP)
    with pytest.raises(BackendError, match="unexpected keys"):
        await backend.load_weights({"nope": torch.zeros(1)}, version=1)
    with pytest.raises(BackendError, match="source"):
        await backend.load_weights(tmp_path, version=1)
    with pytest.raises(BackendError, match="model_dir"):
        LocalBackend(tmp_path)
    assert backend.version == 0


async def test_close_fails_later_requests(model_dir: Path) -> None:
    backend = LocalBackend(model_dir, threads=1)
    await backend.close()
    with pytest.raises(BackendError, match="closed"):
        await backend.sample([1, 2, 3], NO_STOP)


async def test_requests_join_a_running_batch_and_leave_when_done(
    backend: LocalBackend, renderer: HFRenderer
) -> None:
    prompts = _prompts(renderer, 5)
    long = SamplingParams(max_tokens=400, stop_token_ids=[-1], seed=1)
    short = SamplingParams(max_tokens=5, stop_token_ids=[-1], seed=2)
    running = [asyncio.create_task(backend.sample(p, long)) for p in prompts[:2]]
    await asyncio.sleep(0.1)  # the long batch is decoding
    assert not any(task.done() for task in running)
    joined = [await backend.sample(p, short) for p in prompts[2:]]  # one after another
    assert not any(task.done() for task in running)  # served while the long ones still ran
    done = await asyncio.gather(*running)
    for prompt, completion in zip(prompts, [*done, *joined], strict=True):
        # Joining (left-padded caches of other lengths) changes no logprob.
        assert await _max_diff(backend, prompt, completion, 1.0) < 1e-4
    # Seeded: the same tokens as when sampled alone.
    alone = await backend.sample(prompts[3], short)
    assert alone.tokens == joined[1].tokens


async def test_dtype_by_name(model_dir: Path) -> None:
    with pytest.raises(BackendError, match="dtype"):
        LocalBackend(model_dir, dtype="float99")
    backend = LocalBackend(model_dir, dtype="bfloat16", threads=1)
    try:
        completion = await backend.sample([1, 2, 3], NO_STOP.model_copy(update={"max_tokens": 3}))
        assert len(completion.tokens) == 3
        assert next(backend.model.parameters()).dtype == torch.bfloat16
    finally:
        await backend.close()
