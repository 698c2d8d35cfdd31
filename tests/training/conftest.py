"""Fixtures for the training tests: one tiny Qwen3 (vocab 64, char tokenizer) per session."""

from __future__ import annotations

from pathlib import Path

import pytest

from rollout.models import init_model


@pytest.fixture(scope="session")
def tiny_model_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return init_model(
        tmp_path_factory.mktemp("tiny-qwen3"),
        arch="qwen3",
        hidden=64,
        layers=2,
        heads=4,
        kv_heads=2,
        vocab_size=64,
        tokenizer="chars",
        alphabet="0123456789EO=",
        seed=0,
    )
