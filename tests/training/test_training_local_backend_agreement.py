"""Trainer vs the local inference backend: checkpoints it loads, logprobs that agree in fp32."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest
from transformers import AutoTokenizer

from rollout.contracts import SamplingParams, Turn
from rollout.inference.local import LocalBackend
from rollout.training.loss import LossConfig
from rollout.training.providers.base import TrainBatch
from rollout.training.providers.torch import TorchProvider
from rollout.training.segments import Segment, build_segments
from rollout.training.warmup import warmup_segment
from tests.training.logprob_helpers import abs_diffs

NUMBERS = ["123", "45678901", "7", "900210", "55", "31415926", "2024", "86"]


@pytest.mark.parametrize("lora_rank", [None, 4])
async def test_backend_serving_a_trainer_checkpoint_agrees_with_trainer_logprobs(
    tiny_model_dir: Path, tmp_path: Path, lora_rank: int | None
) -> None:
    tok = AutoTokenizer.from_pretrained(str(tiny_model_dir))
    eos = int(tok.convert_tokens_to_ids("<|im_end|>"))
    prompts = [list(tok.encode(n + "=")) for n in NUMBERS]
    provider = TorchProvider(tiny_model_dir, lora_rank=lora_rank, lr=1e-2)
    # Move the weights off the base so serving the checkpoint is distinguishable.
    teach = tuple(warmup_segment(p, (int(tok.convert_tokens_to_ids("E")), eos)) for p in prompts)
    for _ in range(3):
        provider.forward_backward(TrainBatch(teach, loss=LossConfig(kind="supervised")))
        provider.optim_step()
    saved = await asyncio.to_thread(provider.save, tmp_path / "ckpt")

    backend = LocalBackend(tiny_model_dir, max_batch=8)
    try:
        await backend.load_weights(saved.path, version=saved.step)
        params = SamplingParams(max_tokens=6, temperature=0.8, stop_token_ids=[eos], seed=0)
        completions = await asyncio.gather(*(backend.sample(p, params) for p in prompts))
    finally:
        await backend.close()

    segments: list[Segment] = []
    for i, (prompt, c) in enumerate(zip(prompts, completions, strict=True)):
        assert c.version == 3
        turn = Turn(
            f"e{i}",
            0,
            0,
            0,
            tuple(prompt),
            c.tokens,
            c.logprobs,
            c.version,
            c.stop_reason,
            temperature=0.8,
        )
        segments.extend(build_segments([turn]))
    trainer = provider.logprobs(segments)
    diffs = abs_diffs(segments, trainer)
    assert sum(diffs) / len(diffs) < 1e-5
    assert max(diffs) < 1e-4


async def test_local_attention_model_served_in_a_batch_agrees_with_trainer_logprobs(
    tmp_path: Path,
) -> None:
    """A model whose layers see only the last 8 tokens (`sliding_window`): prompts longer and
    shorter than the window, left-padded into one batch by the backend, sample tokens whose
    logprobs the trainer's full forward pass reproduces; and a token beyond both layers' reach
    changes nothing at the end, where one inside it does."""
    from rollout.models import init_model

    folder = init_model(
        tmp_path / "local", hidden=64, vocab_size=64, tokenizer="chars",
        alphabet="0123456789EO=", sliding_window=8, seed=0,
    )  # fmt: skip
    tok = AutoTokenizer.from_pretrained(str(folder))
    eos = int(tok.convert_tokens_to_ids("<|im_end|>"))
    numbers = [n * 4 for n in NUMBERS]  # 4 to 32 characters: around the window
    prompts = [list(tok.encode(n + "=")) for n in numbers]
    backend = LocalBackend(folder, max_batch=8)
    try:
        params = SamplingParams(max_tokens=12, temperature=1.0, stop_token_ids=[eos], seed=0)
        completions = await asyncio.gather(*(backend.sample(p, params) for p in prompts))
    finally:
        await backend.close()
    turns = [
        Turn(f"e{i}", 0, 0, 0, tuple(p), c.tokens, c.logprobs, c.version, c.stop_reason)
        for i, (p, c) in enumerate(zip(prompts, completions, strict=True))
    ]
    segments = [segment for turn in turns for segment in build_segments([turn])]
    provider = TorchProvider(folder, lora_rank=None, lr=1e-2)
    diffs = abs_diffs(segments, provider.logprobs(segments))
    assert max(diffs) < 1e-4
    assert sum(len(c.tokens) for c in completions) > 3 * len(prompts)

    texts = ("9" + "1" * 30, "1" * 28 + "91", "1" * 31)
    far, near, base = (list(tok.encode(text)) for text in texts)
    ends = [provider.logprobs([warmup_segment(p, (eos,))])[0][-1] for p in (far, near, base)]
    assert ends[0] == pytest.approx(ends[2], abs=1e-6)  # 30 tokens back: beyond 2 x 8
    assert abs(ends[1] - ends[2]) > 1e-4
