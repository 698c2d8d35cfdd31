"""Checkpoint conversion per inference backend."""

from __future__ import annotations

import shutil
import tempfile
from pathlib import Path

from rollout.blobs import BlobStore
from rollout.errors import RolloutError

BACKENDS = ("local", "vllm")

TRAINER_STATE = "trainer_state"
"""Sub-folder of a checkpoint with what only the trainer needs (optimizer, RNG, step)."""

MODEL_FILES = (
    "config.json",
    "generation_config.json",
    "model.safetensors",
    "model.safetensors.index.json",
    "adapter_config.json",
    "adapter_model.safetensors",
    "tokenizer.json",
    "tokenizer_config.json",
    "special_tokens_map.json",
    "chat_template.jinja",
    "rollout_model.json",
)


def conversion_uri(checkpoint_uri: str, backend: str) -> str:
    return f"{checkpoint_uri.rstrip('/')}-{backend}"


def convert_checkpoint(blobs: BlobStore, checkpoint_uri: str, backend: str) -> str:
    """Write `backend`'s files for the checkpoint at `checkpoint_uri`; return their URI."""
    if backend not in BACKENDS:
        raise RolloutError(f"unknown inference backend {backend!r}; known: {', '.join(BACKENDS)}")
    target = conversion_uri(checkpoint_uri, backend)
    if blobs.exists(target):
        return target  # converted before a crash: the write is atomic, so it is complete
    with tempfile.TemporaryDirectory(prefix="rollout-bridge-") as tmp:
        source = Path(tmp) / "checkpoint"
        blobs.get_dir(checkpoint_uri, source)
        out = Path(tmp) / "converted"
        out.mkdir()
        copied = 0
        for name in MODEL_FILES:
            if (source / name).is_file():
                shutil.copy2(source / name, out / name)
                copied += 1
        shards = sorted(source.glob("model-*.safetensors"))
        for shard in shards:
            shutil.copy2(shard, out / shard.name)
        if (
            not (out / "model.safetensors").exists()
            and not shards
            and not (out / "adapter_model.safetensors").exists()
        ):
            raise RolloutError(f"checkpoint {checkpoint_uri} has no model or adapter weights")
        blobs.put_dir(out, target)
    return target
