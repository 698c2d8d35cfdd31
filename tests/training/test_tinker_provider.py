"""The `tinker` provider and sampler against a fake Tinker that speaks the SDK's real types.

The fake (tests/training/tinker_fake.py) checks every `Datum` it receives; these tests check
what rollout sends (target tokens, sampler logprobs, advantages, per-token scaling and
shapes), that checkpoints and the bridge produce sampler paths the sampler loads, that resume
restores the optimizer, and that a policy trained through it learns; and that
`ROLLOUT_TINKER_SERVICE` gives each process its client (the disk-backed fake shares saved
weights between two of them), a bad factory being one line naming the variable and its value.
"""

from __future__ import annotations

import asyncio
import json
from pathlib import Path

import numpy as np
import pytest

from rollout.bridges.convert import convert_folder
from rollout.contracts import SamplingParams
from rollout.inference.base import BackendError, InferenceBackend
from rollout.inference.tinker import TinkerSamplingBackend
from rollout.runs.config import ImportanceConfig
from rollout.settings import TINKER_SERVICE_VAR
from rollout.training.errors import CheckpointError, TrainingError
from rollout.training.loss import LossConfig
from rollout.training.providers.base import TrainBatch, TrainingProvider
from rollout.training.providers.tinker import TinkerProvider, service_client
from rollout.training.segments import Segment
from tests.training.tinker_fake import (
    FAKE_DIR_VAR,
    RECEIVED,
    SAMPLERS,
    DiskStore,
    FakeService,
    read_lines,
)

GOOD = 7


def segment(tokens: list[int], sampled: int, logprobs: list[float], advantage: float) -> Segment:
    prompt = len(tokens) - sampled
    return Segment(
        tokens=tuple(tokens),
        loss_mask=(False,) * prompt + (True,) * sampled,
        sampler_logprobs=(0.0,) * prompt + tuple(logprobs),
        versions=(-1,) * prompt + (0,) * sampled,
        advantage=advantage,
    )


def provider(service: FakeService, lr: float = 0.1) -> TinkerProvider:
    return TinkerProvider(service, base_model="Qwen/Qwen3-8B", rank=8, lr=lr)


def test_it_is_a_training_provider_and_sends_what_tinker_expects() -> None:
    service = FakeService()
    trainer = provider(service)
    assert isinstance(trainer, TrainingProvider)
    seg = segment([1, 2, 3, 4, 5], 2, [-1.0, -2.0], advantage=0.5)
    batch = TrainBatch(
        (seg,), loss=LossConfig(importance=ImportanceConfig(mode="none")), num_loss_tokens=4
    )
    result = trainer.forward_backward(batch)
    ((loss_fn, datum),) = service.clients[0].received
    assert loss_fn == "importance_sampling"
    assert datum.model_input.to_ints() == [1, 2, 3, 4]
    inputs = {k: v.tolist() for k, v in datum.loss_fn_inputs.items()}
    assert inputs["target_tokens"] == [2, 3, 4, 5]
    assert inputs["logprobs"] == [0.0, 0.0, -1.0, -2.0]
    # The advantage on sampled tokens only, divided by the step's loss tokens (4).
    assert inputs["advantages"] == [0.0, 0.0, 0.125, 0.125]
    assert len(result.logprobs) == 1 and len(result.logprobs[0]) == 5
    assert result.logprobs[0][0] == 0.0
    assert np.allclose(result.logprobs[0][1:], np.log(1 / 32), atol=1e-6)  # uniform start


def test_tis_scales_advantages_by_weight_over_ratio() -> None:
    service = FakeService()
    trainer = provider(service)
    uniform = float(np.log(1 / 32))
    # Sampler logprobs that make the ratios 4 (above the cap 2) and 1.
    seg = segment([1, 2, 3], 2, [uniform - np.log(4), uniform], advantage=1.0)
    loss = LossConfig(importance=ImportanceConfig(mode="tis", cap=2.0))
    trainer.forward_backward(TrainBatch((seg,), loss=loss))
    kinds = [kind for kind, _ in service.clients[0].received]
    assert kinds == ["cross_entropy", "importance_sampling"]  # a forward pass first
    advantages = service.clients[0].received[1][1].loss_fn_inputs["advantages"].tolist()
    # weight/ratio = 2/4 for the truncated token, 1/1 for the other; over 2 loss tokens.
    assert advantages == pytest.approx([0.25, 0.5], rel=1e-5)


def test_the_clipped_objective_is_tinkers_ppo_loss_with_the_same_band() -> None:
    service = FakeService()
    trainer = provider(service)
    uniform = float(np.log(1 / 32))
    # Ratios 4 (past 1.28: clipped, A > 0) and 1.
    seg = segment([1, 2, 3], 2, [uniform - np.log(4), uniform], advantage=1.0)
    loss = LossConfig(importance=ImportanceConfig(mode="clip", clip_low=0.2, clip_high=0.28))
    result = trainer.forward_backward(TrainBatch((seg,), loss=loss))
    client = service.clients[0]
    assert [kind for kind, _ in client.received] == ["ppo"]  # one call: no forward pass
    assert client.configs == [{"clip_low_threshold": 0.8, "clip_high_threshold": 1.28}]
    advantages = client.received[0][1].loss_fn_inputs["advantages"].tolist()
    assert advantages == pytest.approx([0.5, 0.5])  # A over 2 loss tokens
    # -(min(4, 1.28) * 0.5 + 1 * 0.5)
    assert result.metrics["loss"] == pytest.approx(-(1.28 * 0.5 + 0.5), rel=1e-5)


def test_supervised_batches_use_cross_entropy_weights() -> None:
    service = FakeService()
    trainer = provider(service)
    trainer.forward_backward(
        TrainBatch((segment([1, 2, 3, 4], 2, [0.0, 0.0], 0.0),), loss=LossConfig("supervised"))
    )
    loss_fn, datum = service.clients[0].received[0]
    assert loss_fn == "cross_entropy"
    assert datum.loss_fn_inputs["weights"].tolist() == [0.0, 0.5, 0.5]


def test_other_temperatures_are_refused() -> None:
    seg = segment([1, 2, 3], 1, [-1.0], 1.0)
    hot = Segment(**{**seg.__dict__, "temperature": 0.7})
    with pytest.raises(TrainingError, match="temperature 1"):
        provider(FakeService()).forward_backward(TrainBatch((hot,)))


async def test_checkpoints_become_sampler_paths_and_learning_shows(tmp_path: Path) -> None:
    service = FakeService()
    trainer = provider(service, lr=0.5)
    sampler = TinkerSamplingBackend(service, base_model="Qwen/Qwen3-8B")
    assert isinstance(sampler, InferenceBackend)
    params = SamplingParams(max_tokens=8, seed=0, stop_token_ids=[0])

    async def good_rate() -> float:
        completions = [
            await sampler.sample([1, 2], params.model_copy(update={"seed": s})) for s in range(20)
        ]
        tokens = [t for c in completions for t in c.tokens]
        return tokens.count(GOOD) / len(tokens)

    before = await good_rate()
    for step in range(1, 9):
        completions = [
            await sampler.sample([1, 2], params.model_copy(update={"seed": step * 100 + s}))
            for s in range(8)
        ]
        rewards = [c.tokens.count(GOOD) / len(c.tokens) for c in completions]
        mean = sum(rewards) / len(rewards)
        segments = tuple(
            segment([1, 2, *c.tokens], len(c.tokens), list(c.logprobs), r - mean)
            for c, r in zip(completions, rewards, strict=True)
            if r != mean
        )
        if segments:
            trainer.forward_backward(TrainBatch(segments))
        trainer.optim_step()
        saved = trainer.save(tmp_path / f"v{step}")
        converted = tmp_path / f"v{step}-tinker"
        converted.mkdir()
        convert_folder(Path(saved.path), converted, "tinker")
        paths = json.loads((converted / "sampler.json").read_text())
        assert paths["sampler_path"].startswith("tinker://")
        await sampler.load_weights(converted, step)
        assert sampler.version == step
        assert (await sampler.sample([1, 2], params)).version == step
    assert await good_rate() > before + 0.1, before


async def test_the_sampler_refuses_top_logprobs_and_needs_a_checkpoint(tmp_path: Path) -> None:
    sampler = TinkerSamplingBackend(FakeService())
    with pytest.raises(BackendError, match="no Tinker sampler loaded"):
        await sampler.sample([1], SamplingParams())
    with pytest.raises(BackendError, match="top_logprobs=2"):
        await sampler.sample([1], SamplingParams(top_logprobs=2))
    with pytest.raises(BackendError, match=r"sampler\.json"):
        await sampler.load_weights(tmp_path, 1)


def test_the_run_configuration_sets_adams_parameters(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from rollout.runs.config import RunConfig

    monkeypatch.setenv(TINKER_SERVICE_VAR, "tests.training.tinker_fake:disk_service")
    monkeypatch.setenv(FAKE_DIR_VAR, str(tmp_path / "fake"))

    base = {"backend": "tinker", "provider": "tinker", "lora_rank": 8}
    base["tinker"] = {"base_model": "Qwen/Qwen3-8B"}
    default = TinkerProvider.from_config(RunConfig.model_validate(base))
    config = RunConfig.model_validate({**base, "adam_beta2": 0.5, "adam_eps": 1e-6})
    tuned = TinkerProvider.from_config(config)
    assert (tuned.betas, tuned.eps) == ((0.9, 0.5), 1e-6)
    seg = segment([1, 2, 3], 2, [-3.0, -3.0], advantage=1.0)
    for trainer in (default, tuned):
        trainer.forward_backward(TrainBatch((seg,)))
        trainer.optim_step()
    # Adam's second moment after one step is (1 - beta2) g^2: the service got beta2 0.5.
    v_default, v_tuned = default.client.weights.v, tuned.client.weights.v
    assert v_default.any() and np.allclose(v_tuned, v_default * 0.5 / (1 - 0.999))


def test_load_restores_weights_optimizer_and_step(tmp_path: Path) -> None:
    service = FakeService()
    trainer = provider(service)
    seg = segment([1, 2, 3], 2, [-3.0, -3.0], advantage=1.0)
    trainer.forward_backward(TrainBatch((seg,)))
    trainer.optim_step()
    trainer.save(tmp_path / "v1")
    resumed = provider(service)
    resumed.load(tmp_path / "v1")
    assert resumed.step == 1
    assert np.array_equal(resumed.client.weights.m, trainer.client.weights.m)  # Adam moments
    # Both take the same next step.
    for p in (trainer, resumed):
        p.forward_backward(TrainBatch((seg,)))
        p.optim_step()
    assert np.allclose(resumed.client.weights.logits, trainer.client.weights.logits)
    resumed.reset_optimizer()
    assert not resumed.client.weights.m.any()
    assert np.allclose(resumed.client.weights.logits, trainer.client.weights.logits)
    with pytest.raises(CheckpointError, match=r"tinker_checkpoint\.json"):
        resumed.load(tmp_path)
    with pytest.raises(CheckpointError, match="not empty"):
        trainer.save(tmp_path / "v1")


def test_bridge_refuses_mixing_tinker_and_weight_checkpoints(tmp_path: Path) -> None:
    from rollout.errors import RolloutError

    service = FakeService()
    saved = provider(service).save(tmp_path / "v0")
    out = tmp_path / "out"
    out.mkdir()
    with pytest.raises(RolloutError, match="only backend 'tinker' serves it"):
        convert_folder(Path(saved.path), out, "vllm")
    asyncio.run(asyncio.sleep(0))


async def test_the_sampler_waits_for_sdk_futures_and_rides_out_rate_limits() -> None:
    service = FakeService()
    sampler = TinkerSamplingBackend(service, base_model="Qwen/Qwen3-8B", retry_wait=0.01)
    (client,) = service.samplers  # the future the SDK answers was resolved to its client
    assert sampler._client is client
    params = SamplingParams(max_tokens=4, seed=1)
    expected = await sampler.sample([1, 2], params)
    client.failures = [429, 500, 429]
    assert await sampler.sample([1, 2], params) == expected  # retried, then sampled once
    assert sampler.retried == 3 and len(client.requests) == 2
    client.failures = [429] * 6
    with pytest.raises(BackendError, match="answered 429 6 times"):
        await sampler.sample([1, 2], params)
    client.failures = [400]
    with pytest.raises(BackendError, match="answered 400"):
        await sampler.sample([1, 2], params)
    assert sampler.retried == 8  # a refusal is not retried


def test_every_process_gets_the_factory_service_and_shares_the_disk_fake(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv(TINKER_SERVICE_VAR, "tests.training.tinker_fake:disk_service")
    monkeypatch.setenv(FAKE_DIR_VAR, str(tmp_path / "fake"))
    trainer_side, sampler_side = service_client(), service_client("https://ignored.invalid")
    assert isinstance(trainer_side, FakeService) and trainer_side is not sampler_side
    trainer = provider(trainer_side)
    trainer.forward_backward(TrainBatch((segment([1, 2, 3], 2, [-3.0, -3.0], advantage=1.0),)))
    trainer.optim_step()
    saved = trainer.save(tmp_path / "v1")
    converted = tmp_path / "v1-tinker"
    converted.mkdir()
    convert_folder(Path(saved.path), converted, "tinker")
    # Another process's service opens what this one saved, from the shared folder.
    sampler = TinkerSamplingBackend(sampler_side)
    asyncio.run(sampler.load_weights(converted, 1))
    (client,) = sampler_side.samplers
    assert np.array_equal(client.logits, trainer.client.weights.logits)
    assert read_lines(tmp_path / "fake", SAMPLERS)[-1]["model_path"] == sampler.sampler_path
    received = read_lines(tmp_path / "fake", RECEIVED)
    assert [d["call"] for d in received] == ["forward", "forward_backward"]  # TIS: ratio first
    assert all(d["tokens"] == [1, 2, 3] for d in received)
    assert sorted(DiskStore(tmp_path / "fake")) == sorted(
        json.loads((Path(saved.path) / "tinker_checkpoint.json").read_text())[k]
        for k in ("sampler_path", "state_path")
    )


@pytest.mark.parametrize(
    ("value", "message"),
    [
        ("tests.training.no_such_module:disk_service", "cannot import it"),
        ("tests.training.tinker_fake:no_such_factory", "cannot import it"),
        ("tests.training.tinker_fake:DISK_VOCAB", "is not callable"),
        ("tests.training.tinker_fake:disk_service", "failed: RuntimeError"),
    ],
)
def test_a_bad_service_factory_is_one_line_naming_the_variable(
    value: str, message: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv(TINKER_SERVICE_VAR, value)
    monkeypatch.delenv(FAKE_DIR_VAR, raising=False)
    with pytest.raises(TrainingError, match=message) as caught:
        service_client()
    assert str(caught.value).startswith(f"{TINKER_SERVICE_VAR}={value!r}")
    assert "\n" not in str(caught.value)
