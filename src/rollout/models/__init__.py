"""Tiny models of real architectures (Qwen3, Qwen2, Llama) for CPU runs with no downloads, and
helpers every part uses on Hugging Face model folders.

- `init_model(out_dir)` writes a randomly initialised model, a trained tokenizer and a
  Qwen-style chat template in the Hugging Face layout; `default_tokenizer_dir()` gives a cached
  tokenizer folder (no weights) for the scripted backend.
- `hf`: stop, eos and pad ids of a folder, tied weights, the KV-cache argument's name.
- `logprobs`: teacher-forced token logprobs (the trainer and the local backend).
- `padding`: left-padded prompt batches (the local backend and the in-process sampler).

The architectures `init_model` takes are named in `rollout.runs.architectures` (`Arch`,
`ARCH_NAMES`), where run configs check them. Names are loaded on first use, so importing a light
submodule (`rollout.models.errors`) does not import torch.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from rollout.models.default_tokenizer import default_tokenizer_dir
    from rollout.models.errors import ModelError
    from rollout.models.template import CHAT_TEMPLATE
    from rollout.models.tiny import ARCHITECTURES, init_model
    from rollout.models.tokenizer import (
        ADDED_TOKENS,
        DEFAULT_ALPHABET,
        MARKUP_TOKENS,
        MIN_BYTES_VOCAB,
        SPECIAL_TOKENS,
        build_tokenizer,
    )

_WHERE = {
    "ModelError": "errors",
    "CHAT_TEMPLATE": "template",
    "ARCHITECTURES": "tiny",
    "default_tokenizer_dir": "default_tokenizer",
    "init_model": "tiny",
    "ADDED_TOKENS": "tokenizer",
    "DEFAULT_ALPHABET": "tokenizer",
    "MARKUP_TOKENS": "tokenizer",
    "MIN_BYTES_VOCAB": "tokenizer",
    "SPECIAL_TOKENS": "tokenizer",
    "build_tokenizer": "tokenizer",
}


def __getattr__(name: str) -> Any:
    module = _WHERE.get(name)
    if module is None:
        raise AttributeError(f"module 'rollout.models' has no attribute {name!r}")
    return getattr(importlib.import_module(f"rollout.models.{module}"), name)


__all__ = [
    "ADDED_TOKENS",
    "ARCHITECTURES",
    "CHAT_TEMPLATE",
    "DEFAULT_ALPHABET",
    "MARKUP_TOKENS",
    "MIN_BYTES_VOCAB",
    "SPECIAL_TOKENS",
    "ModelError",
    "build_tokenizer",
    "default_tokenizer_dir",
    "init_model",
]
