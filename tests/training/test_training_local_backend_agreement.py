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
