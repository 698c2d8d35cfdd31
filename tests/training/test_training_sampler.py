"""The in-process sampler: stop handling, lengths, reproducibility, argument errors."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch
from transformers import AutoModelForCausalLM

from rollout.training.errors import TrainingError
from rollout.training.sampler import sample_batch

PROMPTS = [[5, 6, 7], [8, 9, 10, 11, 12, 13], [4]]


@pytest.fixture(scope="module")
def model(tiny_model_dir: Path):
    return AutoModelForCausalLM.from_pretrained(str(tiny_model_dir), dtype=torch.float32)


def draw(model, seed: int, **kw):
    args = {"max_new_tokens": 8, "stop_token_ids": [], "pad_token_id": 0} | kw
    return sample_batch(model, PROMPTS, generator=torch.Generator().manual_seed(seed), **args)


def test_same_seed_same_samples_and_lengths_respected(model) -> None:
    a, b = draw(model, 3), draw(model, 3)
    assert a == b
    assert all(len(s.tokens) == 8 == len(s.logprobs) for s in a)
    assert all(s.stop_reason == "length" for s in a)
    assert all(lp <= 0 for s in a for lp in s.logprobs)


def test_a_stop_token_ends_its_row_only(model) -> None:
    # Every token is a stop token: each row stops after exactly one token.
    every = list(range(64))
    samples = draw(model, 0, stop_token_ids=every)
    assert all(len(s.tokens) == 1 and s.stop_reason == "stop" for s in samples)
    # One common token as the stop: rows that sampled it end there, with it included.
    samples = draw(model, 1, max_new_tokens=40, stop_token_ids=[7])
    assert any(s.stop_reason == "stop" for s in samples)
    assert any(len(s.tokens) < 40 for s in samples)
    for s in samples:
        assert 7 not in s.tokens[:-1]
        assert (s.stop_reason == "stop") == (s.tokens[-1] == 7)


def test_bad_arguments_are_named(model) -> None:
    with pytest.raises(TrainingError, match="temperature"):
        draw(model, 0, temperature=0.0)
    with pytest.raises(TrainingError, match="max_new_tokens"):
        draw(model, 0, max_new_tokens=0)
    with pytest.raises(TrainingError, match="prompts"):
        sample_batch(model, [[1], []], max_new_tokens=2, stop_token_ids=[], pad_token_id=0)
