"""Checkpoints of the torch provider: written aside then renamed into place, read back exactly.

- full: `model.safetensors` + `config.json` (+ generation config) and the tokenizer files of the
  base folder: a Hugging Face folder any backend can load;
- LoRA: `adapter_config.json` + `adapter_model.safetensors` (peft `save_pretrained`);
- both: `trainer_state.pt` (optimizer state, step, RNG states) and `trainer_state.json` (a
  readable summary), so a provider that loads the folder resumes exactly where the one that
  saved it left off.
"""

from __future__ import annotations

import json
import random
from pathlib import Path
from typing import Any, cast

import numpy as np
import torch
from safetensors.torch import load_file

from rollout.models.hf import copy_tokenizer_files, missing_weights
from rollout.training.errors import CheckpointError
from rollout.training.providers.base import CheckpointKind, new_checkpoint_folder

STATE_FILE = "trainer_state.pt"
STATE_SUMMARY = "trainer_state.json"


def rng_state() -> dict[str, Any]:
    """The RNG states a resumed run must continue from (torch, Python, numpy, CUDA)."""
    state: dict[str, Any] = {
        "torch": torch.get_rng_state(),
        "python": random.getstate(),
        "numpy": np.random.get_state(),
    }
    if torch.cuda.is_available():
        state["cuda"] = torch.cuda.get_rng_state_all()
    return state


def set_rng_state(state: dict[str, Any]) -> None:
    """Restore what `rng_state` returned."""
    torch.set_rng_state(state["torch"])
    random.setstate(state["python"])
    np.random.set_state(state["numpy"])
    if "cuda" in state and torch.cuda.is_available():
        torch.cuda.set_rng_state_all(state["cuda"])


def write_checkpoint(
    path: str | Path,
    *,
    model: torch.nn.Module,
    kind: CheckpointKind,
    base_dir: Path,
    state: dict[str, Any],
    summary: dict[str, Any],
) -> tuple[Path, list[str]]:
    """Write a checkpoint to the new folder `path`; the folder and the names of its files.

    Args:
        path: The folder to create (it may exist if empty).
        model: The trained model (a transformers or peft model: its `save_pretrained`).
        kind: `full` also copies the tokenizer files of `base_dir`.
        base_dir: The base model's folder.
        state: What `read_state` gives back (optimizer state, step, RNG states, kind).
        summary: The readable summary (`trainer_state.json`).

    Raises:
        CheckpointError: `path` exists and is not empty.
    """
    with new_checkpoint_folder(path) as staging:
        # peft and transformers both provide save_pretrained with safetensors by default.
        cast(Any, model).save_pretrained(str(staging))
        if kind == "full":  # a complete Hugging Face folder any backend can load
            copy_tokenizer_files(base_dir, staging)
        torch.save(state, staging / STATE_FILE)
        (staging / STATE_SUMMARY).write_text(json.dumps(summary, indent=2))
        files = sorted(f.name for f in staging.iterdir())
    return Path(path), files


def read_state(source: Path, kind: CheckpointKind) -> dict[str, Any]:
    """The trainer state saved with a checkpoint of `kind`.

    Raises:
        CheckpointError: The state file is missing or the checkpoint is of another kind.
    """
    state_path = source / STATE_FILE
    if not state_path.is_file():
        raise CheckpointError(f"checkpoint {str(source)!r} has no {STATE_FILE}")
    state = torch.load(state_path, map_location="cpu", weights_only=False)
    if state.get("kind") != kind:
        raise CheckpointError(
            f"checkpoint {str(source)!r} is kind {state.get('kind')!r}, provider is {kind!r}"
        )
    return state


def load_full(model: torch.nn.Module, source: Path) -> None:
    """Load every weight of `model` from `source`'s `model*.safetensors`."""
    files = sorted(source.glob("model*.safetensors"))
    if not files:
        raise CheckpointError(f"checkpoint {str(source)!r} has no model*.safetensors")
    weights: dict[str, torch.Tensor] = {}
    for f in files:
        weights.update(load_file(str(f)))
    result = model.load_state_dict(weights, strict=False)
    if result.unexpected_keys:
        raise CheckpointError(
            f"checkpoint {str(source)!r} has unknown weights {result.unexpected_keys[:5]!r}"
        )
    # Tied weights (lm_head = embeddings) are saved once; anything else missing is an error.
    missing = missing_weights(model, weights)
    if missing:
        raise CheckpointError(f"checkpoint {str(source)!r} lacks weights {missing[:5]!r}")


def load_lora(model: torch.nn.Module, source: Path) -> None:
    """Load the LoRA adapter weights of `model` (a peft model) from `source`."""
    from peft import set_peft_model_state_dict

    adapter = source / "adapter_model.safetensors"
    if not adapter.is_file():
        raise CheckpointError(f"checkpoint {str(source)!r} has no adapter_model.safetensors")
    result = set_peft_model_state_dict(model, load_file(str(adapter)))
    unexpected = getattr(result, "unexpected_keys", [])
    if unexpected:
        raise CheckpointError(
            f"checkpoint {str(source)!r} has unknown adapter weights {unexpected[:5]!r}"
        )
