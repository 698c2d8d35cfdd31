"""TorchProvider on a real tiny Qwen3: logprob agreement, exact resume, LoRA, checkpoints."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
import torch
from transformers import AutoModelForCausalLM, AutoTokenizer

from rollout.contracts import Turn
from rollout.runs.config import ImportanceConfig
from rollout.training.errors import CheckpointError, TrainingError
from rollout.training.loss import LossConfig
from rollout.training.providers.base import TrainBatch, TrainingProvider
from rollout.training.providers.torch import TorchProvider
from rollout.training.sampler import Sample, sample_batch
from rollout.training.segments import Segment, build_segments
from rollout.training.warmup import format_warmup, warmup_segment
from tests.training.logprob_helpers import abs_diffs


@pytest.fixture(scope="module")
def ids(tiny_model_dir: Path) -> dict[str, int]:
    tok = AutoTokenizer.from_pretrained(str(tiny_model_dir))
    names = {"eos": "<|im_end|>", "pad": "<|endoftext|>", "E": "E", "O": "O", "=": "="}
    out = {k: int(tok.convert_tokens_to_ids(v)) for k, v in names.items()}
    out.update({str(d): int(tok.convert_tokens_to_ids(str(d))) for d in range(10)})
    return out


def prompts_of(ids: dict[str, int], numbers: list[str]) -> list[tuple[int, ...]]:
    return [(*tuple(ids[c] for c in n), ids["="]) for n in numbers]


def sample_segments(
    provider: TorchProvider,
    ids: dict[str, int],
    numbers: list[str],
    *,
    temperature: float = 1.0,
    seed: int = 0,
    advantages: list[float] | None = None,
    max_new_tokens: int = 6,
) -> list[Segment]:
    prompts = prompts_of(ids, numbers)
    samples = sample_batch(
        provider.model,
        prompts,
        max_new_tokens=max_new_tokens,
        stop_token_ids=[ids["eos"]],
        pad_token_id=ids["pad"],
        temperature=temperature,
        generator=torch.Generator().manual_seed(seed),
    )
    advantages = advantages or [0.0] * len(prompts)
    segments = []
    for i, (prompt, s) in enumerate(zip(prompts, samples, strict=True)):
        turn = Turn(
            f"e{i}",
            0,
            0,
            0,
            prompt,
            s.tokens,
            s.logprobs,
            provider.step,
            s.stop_reason,
            temperature=temperature,
        )
        segments.extend(build_segments([turn], advantages[i]))
    return segments


NUMBERS = ["123", "45678901", "7", "900210", "55", "31415926"]


def test_provider_satisfies_the_protocol(tiny_model_dir: Path) -> None:
    assert isinstance(TorchProvider(tiny_model_dir), TrainingProvider)


@pytest.mark.parametrize("temperature", [1.0, 0.7])
def test_trainer_logprobs_match_sampler_logprobs_fp32(
    tiny_model_dir: Path, ids: dict[str, int], temperature: float
) -> None:
    provider = TorchProvider(tiny_model_dir)
    segments = sample_segments(provider, ids, NUMBERS, temperature=temperature)
    diffs = abs_diffs(segments, provider.logprobs(segments))
    assert len(diffs) >= len(NUMBERS)
    assert sum(diffs) / len(diffs) < 1e-5
    assert max(diffs) < 1e-4


def test_multi_turn_segment_matches_per_turn_sampler_logprobs(
    tiny_model_dir: Path, ids: dict[str, int]
) -> None:
    provider = TorchProvider(tiny_model_dir)
    gen = torch.Generator().manual_seed(1)
    prompt = prompts_of(ids, ["2024"])[0]
    turns = []
    for index in range(3):
        [s] = sample_batch(
            provider.model,
            [prompt],
            max_new_tokens=5,
            stop_token_ids=[ids["eos"]],
            pad_token_id=ids["pad"],
            generator=gen,
        )
        turns.append(Turn("ep", 0, 0, index, prompt, s.tokens, s.logprobs, 0, s.stop_reason))
        prompt = prompt + s.tokens + (ids["7"], ids["="])  # a "tool result" between turns
    [segment] = build_segments(turns)
    [trainer] = provider.logprobs([segment])
    diffs = abs_diffs([segment], [trainer])
    assert len(diffs) == sum(len(t.completion_tokens) for t in turns)
    assert sum(diffs) / len(diffs) < 1e-5


def trained_pair(model_dir: Path, ids: dict[str, int], **kw) -> tuple[TorchProvider, list[Segment]]:
    provider = TorchProvider(model_dir, lr=1e-2, **kw)
    segments = sample_segments(provider, ids, NUMBERS, advantages=[1, -1, 0.5, -0.5, 2, -2])
    return provider, segments


def step(provider: TorchProvider, segments: list[Segment], loss: LossConfig | None = None):
    result = provider.forward_backward(TrainBatch(tuple(segments), loss=loss or LossConfig()))
    return {**result.metrics, **provider.optim_step()}


def weights(provider: TorchProvider) -> dict[str, torch.Tensor]:
    return {k: v.detach().clone() for k, v in provider.model.state_dict().items()}


@pytest.mark.parametrize("lora_rank", [None, 4])
def test_save_load_resumes_exactly(
    tiny_model_dir: Path, ids: dict[str, int], tmp_path: Path, lora_rank: int | None
) -> None:
    a, segments = trained_pair(tiny_model_dir, ids, lora_rank=lora_rank)
    step(a, segments)
    step(a, segments)
    saved = a.save(tmp_path / "ckpt")
    assert saved.step == 2
    assert saved.kind == ("full" if lora_rank is None else "lora")
    b = TorchProvider(tiny_model_dir, lr=1e-2, lora_rank=lora_rank)
    b.load(saved.path)
    assert b.step == 2
    rng_a, rng_b = torch.rand(3), None  # RNG state restored: b draws what a drew after save
    torch.set_rng_state(
        torch.load(Path(saved.path) / "trainer_state.pt", weights_only=False)["rng"]["torch"]
    )
    rng_b = torch.rand(3)
    assert torch.equal(rng_a, rng_b)
    ma, mb = step(a, segments), step(b, segments)
    assert ma["loss"] == mb["loss"]
    assert ma["grad_norm"] == mb["grad_norm"]
    wa, wb = weights(a), weights(b)
    assert wa.keys() == wb.keys()
    for k in wa:
        assert torch.equal(wa[k], wb[k]), k
    assert a.step == b.step == 3


def test_full_checkpoint_is_a_loadable_hf_folder(
    tiny_model_dir: Path, ids: dict[str, int], tmp_path: Path
) -> None:
    provider, segments = trained_pair(tiny_model_dir, ids)
    step(provider, segments)
    saved = provider.save(tmp_path / "full")
    files = set(saved.metadata["files"])
    assert {"model.safetensors", "config.json", "tokenizer.json", "tokenizer_config.json"} <= files
    assert {"trainer_state.pt", "trainer_state.json"} <= files
    assert json.loads((Path(saved.path) / "trainer_state.json").read_text())["step"] == 1
    reloaded = AutoModelForCausalLM.from_pretrained(saved.path, dtype=torch.float32)
    AutoTokenizer.from_pretrained(saved.path)
    fresh = TorchProvider(saved.path)  # a checkpoint is itself a base model folder
    assert fresh.logprobs(segments) == provider.logprobs(segments)
    for k, v in provider.model.state_dict().items():
        assert torch.equal(v, reloaded.state_dict()[k]), k
    with pytest.raises(CheckpointError, match="not empty"):
        provider.save(saved.path)


def test_lora_trains_only_adapters_and_learns(
    tiny_model_dir: Path, ids: dict[str, int], tmp_path: Path
) -> None:
    provider = TorchProvider(tiny_model_dir, lora_rank=8, lr=3e-2)
    base_before = {k: v.clone() for k, v in provider.model.state_dict().items() if "lora" not in k}
    assert (
        provider.num_trainable_parameters < sum(p.numel() for p in provider.model.parameters()) / 4
    )
    # Tiny supervised task: "<digits>=" -> "E" + EOS.
    segments = tuple(warmup_segment(p, (ids["E"], ids["eos"])) for p in prompts_of(ids, NUMBERS))
    batch = TrainBatch(segments, loss=LossConfig(kind="supervised"))
    losses = [step(provider, list(segments), batch.loss)["loss"] for _ in range(15)]
    # With embeddings and norms frozen, a random tiny model's logits span only ~1.3 nats, so
    # LoRA can lower the loss from ln(64) = 4.16 to about 2.9 and no further.
    assert losses[-1] < losses[0] - 0.8
    for k, v in provider.model.state_dict().items():
        if "lora" not in k:
            assert torch.equal(v, base_before[k]), k
    saved = provider.save(tmp_path / "adapter")
    assert {"adapter_config.json", "adapter_model.safetensors"} <= set(saved.metadata["files"])
    assert "model.safetensors" not in saved.metadata["files"]
    restored = TorchProvider(tiny_model_dir, lora_rank=8, lr=3e-2)
    assert restored.logprobs(segments) != provider.logprobs(segments)
    restored.load(saved.path)
    assert restored.logprobs(segments) == provider.logprobs(segments)
    with pytest.raises(CheckpointError, match="kind 'lora'"):
        TorchProvider(tiny_model_dir).load(saved.path)


def test_micro_batches_accumulate_to_the_same_step(
    tiny_model_dir: Path, ids: dict[str, int]
) -> None:
    whole, segments = trained_pair(tiny_model_dir, ids)
    split = TorchProvider(tiny_model_dir, lr=1e-2, micro_batch_tokens=16)
    assert len(split._micro_batches(segments)) > 2
    batch = TrainBatch(tuple(segments))
    mw, ms = whole.forward_backward(batch).metrics, split.forward_backward(batch).metrics
    assert ms["loss"] == pytest.approx(mw["loss"], rel=1e-5)
    assert ms["is/ratio_mean"] == pytest.approx(mw["is/ratio_mean"], rel=1e-6)
    # Compare gradients, not Adam's first update (it is ~lr * sign(grad) even for grad ~ 1e-12).
    for pw, ps in zip(whole.params, split.params, strict=True):
        assert pw.grad is not None and ps.grad is not None
        assert torch.allclose(pw.grad, ps.grad, rtol=1e-4, atol=1e-7)
    assert whole.optim_step()["grad_norm"] == pytest.approx(split.optim_step()["grad_norm"], 1e-5)


def test_the_run_configuration_sets_the_memory_plan_and_gradients_do_not_change(
    tiny_model_dir: Path, ids: dict[str, int]
) -> None:
    from rollout.runs.config import RunConfig
    from rollout.training.loop import make_provider

    config = RunConfig.model_validate(
        {"learning_rate": 1e-2, "micro_batch_tokens": 16, "gradient_checkpointing": True}
    )
    planned = make_provider(config, tiny_model_dir)
    assert planned.micro_batch_tokens == 16
    assert planned.optimizer.param_groups[0]["betas"] == (0.9, 0.999)  # the defaults
    tuned = RunConfig.model_validate({"adam_beta1": 0.8, "adam_beta2": 0.95, "adam_eps": 1e-6})
    group = make_provider(tuned, tiny_model_dir).optimizer.param_groups[0]
    assert (group["betas"], group["eps"]) == ((0.8, 0.95), 1e-6)
    assert getattr(planned.model, "is_gradient_checkpointing", False)
    whole, segments = trained_pair(tiny_model_dir, ids)
    assert len(planned._micro_batches(segments)) > 2

    # Per-token advantages (alternating signs) and the clipped objective with sampler logprobs
    # off the trainer's (a stale sampler: ratios e^+-0.3 past the band of 0.1 on some tokens):
    # the micro-batches still add up to the whole step's gradient.
    def stale(segment: Segment) -> Segment:
        shifts = [(0.3 if i % 3 else -0.3) if m else 0.0 for i, m in enumerate(segment.loss_mask)]
        return Segment(
            **{
                **segment.__dict__,
                "sampler_logprobs": tuple(
                    lp + d for lp, d in zip(segment.sampler_logprobs, shifts, strict=True)
                ),
                "advantages": tuple(
                    (segment.advantage if i % 2 else -segment.advantage) if m else 0.0
                    for i, m in enumerate(segment.loss_mask)
                ),
            }
        )

    mixed = [stale(s) for s in segments]
    clip = LossConfig(importance=ImportanceConfig(mode="clip", clip_low=0.1, clip_high=0.1))
    batch = TrainBatch(tuple(mixed), loss=clip)
    mw, mp = whole.forward_backward(batch).metrics, planned.forward_backward(batch).metrics
    assert mp["loss"] == pytest.approx(mw["loss"], rel=1e-5)
    assert mp["is/clipped_frac"] == pytest.approx(mw["is/clipped_frac"])
    assert 0 < mw["is/clipped_frac"] < 1
    for pw, pp in zip(whole.params, planned.params, strict=True):
        assert pw.grad is not None and pp.grad is not None
        assert torch.allclose(pw.grad, pp.grad, rtol=1e-4, atol=1e-7)


@pytest.mark.parametrize("lora_rank", [None, 4])
def test_gradient_checkpointing_gives_the_same_gradients(
    tiny_model_dir: Path, ids: dict[str, int], lora_rank: int | None
) -> None:
    plain, segments = trained_pair(tiny_model_dir, ids, lora_rank=lora_rank)
    checkpointed = TorchProvider(
        tiny_model_dir, lr=1e-2, lora_rank=lora_rank, gradient_checkpointing=True
    )
    batch = TrainBatch(tuple(segments))
    assert checkpointed.forward_backward(batch).metrics["loss"] == pytest.approx(
        plain.forward_backward(batch).metrics["loss"], rel=1e-6
    )
    for a, b in zip(plain.params, checkpointed.params, strict=True):
        assert a.grad is not None and b.grad is not None
        assert torch.allclose(a.grad, b.grad, rtol=1e-4, atol=1e-7)


def test_forward_backward_reports_importance_and_lag(
    tiny_model_dir: Path, ids: dict[str, int]
) -> None:
    provider, segments = trained_pair(tiny_model_dir, ids)
    result = provider.forward_backward(TrainBatch(tuple(segments)))
    m = result.metrics
    assert m["is/ratio_mean"] == pytest.approx(1.0, abs=1e-4)
    assert m["is/logp_abs_diff_mean"] < 1e-5
    assert m["train/lag_mean"] == 0.0
    assert m["loss_tokens"] == sum(s.num_loss_tokens for s in segments)
    assert 0 < m["train/entropy"] < 5
    assert [len(lp) for lp in result.logprobs] == [len(s) for s in segments]
    provider.optim_step()
    # One step later the old samples are one version behind and the ratio moves off 1.
    m = provider.forward_backward(
        TrainBatch(tuple(segments), loss=LossConfig(importance=ImportanceConfig(mode="icepop")))
    ).metrics
    assert m["train/lag_mean"] == 1.0
    assert m["is/logp_abs_diff_mean"] > 1e-4


def test_step_with_nothing_accumulated_counts_but_changes_nothing(
    tiny_model_dir: Path, ids: dict[str, int]
) -> None:
    provider, segments = trained_pair(tiny_model_dir, ids)
    step(provider, segments)  # Adam now has momentum that a zero-gradient step would apply
    before = weights(provider)
    metrics = provider.optim_step()
    assert metrics["optim/skipped"] == 1.0
    assert provider.step == 2
    for k, v in weights(provider).items():
        assert torch.equal(v, before[k]), k
    provider.reset_optimizer()
    assert not provider.optimizer.state
    assert step(provider, segments)["optim/skipped"] == 0.0


def test_provider_errors_name_the_problem(tiny_model_dir: Path, tmp_path: Path) -> None:
    provider = TorchProvider(tiny_model_dir)
    with pytest.raises(TrainingError, match="lora_rank"):
        TorchProvider(tiny_model_dir, lora_rank=0)
    with pytest.raises(TrainingError, match=r"config\.json"):
        TorchProvider(tmp_path)
    with pytest.raises(TrainingError, match="dtype"):
        TorchProvider(tiny_model_dir, dtype="float8")
    with pytest.raises(CheckpointError, match=r"trainer_state\.pt"):
        provider.load(tmp_path)
    with pytest.raises(TrainingError, match=r"TrainBatch\.segments"):
        TrainBatch(())


def test_format_warmup_teaches_the_answer_shape(tiny_model_dir: Path, ids: dict[str, int]) -> None:
    provider = TorchProvider(tiny_model_dir, lr=1e-2)
    prompts = prompts_of(ids, [str(n) for n in range(100, 160)])
    history = format_warmup(
        provider,
        prompts,
        lambda r: [ids[r.choice("EO")]],
        steps=20,
        batch_size=32,
        eos_token_id=ids["eos"],
    )
    assert provider.step == 20
    assert history[-1]["loss"] < 0.5 * history[0]["loss"]
    samples: list[Sample] = sample_batch(
        provider.model,
        prompts[:32],
        max_new_tokens=3,
        stop_token_ids=[ids["eos"]],
        pad_token_id=ids["pad"],
        generator=torch.Generator().manual_seed(0),
    )
    shaped = [s.tokens in {(ids["E"], ids["eos"]), (ids["O"], ids["eos"])} for s in samples]
    assert sum(shaped) >= 24


def test_warmup_segments_render_chat_examples(tiny_model_dir: Path) -> None:
    from rollout.contracts import Message
    from rollout.rendering.hf import HFRenderer
    from rollout.training.warmup import warmup_segments

    renderer = HFRenderer(tiny_model_dir)
    messages = [Message.user("12345")]
    [segment] = warmup_segments(renderer, [(messages, "O")])
    prompt = renderer.render(messages)
    completion = (*renderer.encode("O"), renderer.stop_token_ids[0])
    assert segment.tokens == (*prompt, *completion)
    assert segment.loss_mask == (False,) * len(prompt) + (True,) * len(completion)
    # The completion parses back to the answer, as a sampled one would.
    assert renderer.parse(list(completion)).text == "O"


def test_entropy_metric_is_the_mean_entropy_of_trained_positions(
    tiny_model_dir: Path, ids: dict[str, int]
) -> None:
    provider = TorchProvider(tiny_model_dir)
    [segment] = sample_segments(provider, ids, ["8642"], temperature=0.5)
    metrics = provider.forward_backward(TrainBatch((segment,))).metrics
    with torch.no_grad():
        logits = provider.model(input_ids=torch.tensor([segment.tokens])).logits[0].float() / 0.5
    logp = torch.log_softmax(logits, dim=-1)
    entropy = -(logp.exp() * logp).sum(-1)
    trained = [t - 1 for t, m in enumerate(segment.loss_mask) if m]
    assert metrics["train/entropy"] == pytest.approx(entropy[trained].mean().item(), rel=1e-5)


def test_entropy_bonus_raises_entropy_when_advantages_are_zero(
    tiny_model_dir: Path, ids: dict[str, int]
) -> None:
    provider = TorchProvider(tiny_model_dir, lr=1e-2)
    segments = sample_segments(provider, ids, NUMBERS)  # every advantage 0: no policy gradient
    plain = LossConfig()
    before = weights(provider)
    step(provider, segments, plain)
    assert all(torch.equal(before[k], v) for k, v in weights(provider).items())
    bonus = LossConfig(entropy_coef=1.0)
    entropies = [step(provider, segments, bonus)["train/entropy"] for _ in range(5)]
    assert entropies[-1] > entropies[0] + 1e-3, entropies


@pytest.mark.parametrize("coef", [-0.1, float("nan"), float("inf")])
def test_entropy_coef_must_be_finite_and_not_negative(coef: float) -> None:
    with pytest.raises(TrainingError, match="entropy_coef must be a finite number >= 0"):
        LossConfig(entropy_coef=coef)


def test_later_full_checkpoints_hold_what_save_pretrained_writes(
    tiny_model_dir: Path, ids: dict[str, int], tmp_path: Path
) -> None:
    """After the first checkpoint, a full model's weights are written without save_pretrained:
    the folder has the same files, the same configs byte for byte and the same weights, names
    and metadata as save_pretrained gives for the same model."""
    from safetensors import safe_open

    provider, segments = trained_pair(tiny_model_dir, ids)
    provider.save(tmp_path / "v0")
    assert provider._writer.direct
    step(provider, segments)
    saved = Path(provider.save(tmp_path / "v1").path)
    reference = tmp_path / "reference"
    cast_model: Any = provider.model
    cast_model.save_pretrained(str(reference))
    written = {f.name for f in reference.iterdir()}
    assert written <= {f.name for f in saved.iterdir()}
    for name in written - {"model.safetensors"}:
        assert (saved / name).read_bytes() == (reference / name).read_bytes(), name
    with (
        safe_open(str(saved / "model.safetensors"), framework="pt") as ours,
        safe_open(str(reference / "model.safetensors"), framework="pt") as theirs,
    ):
        assert ours.metadata() == theirs.metadata()
        names = list(theirs.keys())
        assert sorted(ours.keys()) == sorted(names)
        for key in names:
            assert torch.equal(ours.get_tensor(key), theirs.get_tensor(key)), key
    reloaded = TorchProvider(saved)  # and it is a base model folder like any other
    assert reloaded.logprobs(segments) == provider.logprobs(segments)


def test_lora_checkpoints_are_always_written_by_save_pretrained(
    tiny_model_dir: Path, tmp_path: Path
) -> None:
    provider = TorchProvider(tiny_model_dir, lora_rank=4)
    provider.save(tmp_path / "v0")
    assert not provider._writer.direct
