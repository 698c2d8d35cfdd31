"""Checkpoint conversion per inference backend.

- `local`: the model files (full weights or a peft adapter) and tokenizer files; the trainer's
  state (optimizer, RNG) is dropped, so servers fetch only what they load.
- `vllm`: what vLLM loads as it is: a LoRA checkpoint becomes a peft adapter folder whose
  `adapter_config.json` names the run's base model folder (`base_model_name_or_path`, read from
  the checkpoint's `trainer_state.json`), and a full checkpoint a complete Hugging Face folder,
  tokenizer and chat template included (taken from the base model folder when the checkpoint
  lacks them).
- `tinker`: the checkpoint holds only Tinker paths (`tinker_checkpoint.json`); the conversion
  is `sampler.json` with the sampler path that `SamplingClient` loads.
"""

from __future__ import annotations

import json
import os
import shutil
import tempfile
from pathlib import Path

from rollout.blobs import BlobStore, link_or_copy
from rollout.errors import RolloutError

BACKENDS = ("local", "vllm", "tinker")

TRAINER_STATE = "trainer_state"
"""Sub-folder of a checkpoint with what only the trainer needs (optimizer, RNG, step)."""

STATE_SUMMARY = "trainer_state.json"
"""The trainer's readable summary of a checkpoint (kind, step, base model folder)."""

TINKER_CHECKPOINT = "tinker_checkpoint.json"
"""A Tinker checkpoint's paths: `state_path` (weights + optimizer) and `sampler_path` (written
by `rollout.training.providers.tinker` under the same name)."""

TINKER_SAMPLER = "sampler.json"
"""The `tinker` conversion: `{"sampler_path": ..., "base_model": ...}` (read by
`rollout.inference.tinker`)."""

MODEL_FILES = (
    "config.json",
    "generation_config.json",
    "model.safetensors",
    "model.safetensors.index.json",
    "adapter_config.json",
    "adapter_model.safetensors",
    "rollout_model.json",
)

TOKENIZER_FILES = (
    "tokenizer*",
    "special_tokens_map.json",
    "added_tokens.json",
    "chat_template*",
    "vocab*",
    "merges.txt",
    "*.tiktoken",
)
"""Glob patterns of a Hugging Face folder's tokenizer and chat template files."""


def conversion_uri(checkpoint_uri: str, backend: str) -> str:
    return f"{checkpoint_uri.rstrip('/')}-{backend}"


def convert_checkpoint(blobs: BlobStore, checkpoint_uri: str, backend: str) -> str:
    """Write `backend`'s files for the checkpoint at `checkpoint_uri`; return their URI."""
    if backend not in BACKENDS:
        raise RolloutError(f"unknown inference backend {backend!r}; known: {', '.join(BACKENDS)}")
    target = conversion_uri(checkpoint_uri, backend)
    if blobs.exists(target):
        return target  # converted before a crash: the write is atomic, so it is complete
    # On a local store nothing is copied: the checkpoint is read in place, the conversion's
    # files are links to it, and the folder is renamed into the store.
    with tempfile.TemporaryDirectory(prefix="rollout-bridge-", dir=blobs.scratch_dir()) as tmp:
        source = blobs.local_folder(checkpoint_uri)
        if source is None:
            source = blobs.get_dir(checkpoint_uri, Path(tmp) / "checkpoint")
        out = Path(tmp) / "converted"
        out.mkdir()
        convert_folder(source, out, backend, checkpoint_uri=checkpoint_uri)
        blobs.put_dir(out, target, move=True)
    return target


def convert_folder(source: Path, out: Path, backend: str, *, checkpoint_uri: str = "") -> None:
    """Write `backend`'s files for the checkpoint folder `source` into the folder `out`.

    The checkpoint's files are hard-linked where they can be (a checkpoint's files are never
    changed once written; a file rewritten here is replaced, never written through a link).

    Raises:
        RolloutError: The checkpoint has nothing `backend` can load (naming it).
    """
    name = checkpoint_uri or str(source)
    if backend == "tinker":
        _convert_tinker(source, out, name)
        return
    if (source / TINKER_CHECKPOINT).is_file():
        raise RolloutError(
            f"checkpoint {name} is a Tinker checkpoint; only backend 'tinker' serves it"
        )
    for file in MODEL_FILES:
        if (source / file).is_file():
            link_or_copy(source / file, out / file)
    for shard in sorted(source.glob("model-*.safetensors")):
        link_or_copy(shard, out / shard.name)
    _copy_tokenizer(source, out, link=True)
    lora = (out / "adapter_model.safetensors").exists()
    full = (out / "model.safetensors").exists() or any(out.glob("model-*.safetensors"))
    if not lora and not full:
        raise RolloutError(f"checkpoint {name} has no model or adapter weights")
    if backend != "vllm":
        return
    base = _base_model(source)
    if lora:
        if base is None:
            raise RolloutError(f"checkpoint {name}: a LoRA adapter without its base model folder")
        config_path = out / "adapter_config.json"
        config = json.loads(config_path.read_text())
        config["base_model_name_or_path"] = str(base)
        rewritten = out / f".{config_path.name}.new"
        rewritten.write_text(json.dumps(config, indent=2))
        os.replace(rewritten, config_path)  # a new file: the link to the checkpoint's stays
    elif not any(out.glob("tokenizer*")) and base is not None:
        _copy_tokenizer(base, out)  # vLLM's reload reads the folder as a whole model


def _copy_tokenizer(source: Path, out: Path, *, link: bool = False) -> None:
    """`source`'s tokenizer files into `out`: linked from a checkpoint (`link`), copied from a
    base model folder (its owner may edit it in place)."""
    for pattern in TOKENIZER_FILES:
        for file in source.glob(pattern):
            if file.is_file() and not (out / file.name).exists():
                (link_or_copy if link else shutil.copy2)(file, out / file.name)


def _base_model(source: Path) -> Path | None:
    summary = source / STATE_SUMMARY
    if not summary.is_file():
        return None
    base = json.loads(summary.read_text()).get("base_model")
    return Path(base) if base else None


def _convert_tinker(source: Path, out: Path, name: str) -> None:
    checkpoint = source / TINKER_CHECKPOINT
    if not checkpoint.is_file():
        raise RolloutError(
            f"checkpoint {name} has no {TINKER_CHECKPOINT}; backend 'tinker' "
            "serves only checkpoints of provider 'tinker'"
        )
    paths = json.loads(checkpoint.read_text())
    if not paths.get("sampler_path"):
        raise RolloutError(f"checkpoint {name}: {TINKER_CHECKPOINT} has no sampler_path")
    (out / TINKER_SAMPLER).write_text(
        json.dumps({"sampler_path": paths["sampler_path"], "base_model": paths.get("base_model")})
    )
