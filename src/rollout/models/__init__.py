"""Tiny models of real architectures (Qwen3, Qwen2, Llama) for CPU runs with no downloads.

`init_model(out_dir)` writes a randomly initialised model, a trained tokenizer and a Qwen-style
chat template in the Hugging Face layout; `default_tokenizer_dir()` gives a cached tokenizer
folder (no weights) for the scripted backend.
"""

from rollout.models.errors import ModelError
from rollout.models.template import CHAT_TEMPLATE
from rollout.models.tiny import ARCHITECTURES, default_tokenizer_dir, init_model
from rollout.models.tokenizer import (
    ADDED_TOKENS,
    DEFAULT_ALPHABET,
    MARKUP_TOKENS,
    MIN_BYTES_VOCAB,
    SPECIAL_TOKENS,
    build_tokenizer,
)

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
