"""Reading new weights for the local backend: from a state dict, safetensors, a model folder or
a LoRA adapter, checked against the served model before anything changes.

`read_weights` returns a complete state dict for the model on its device and dtype: every key
the model has (tied weights may be left out: setting one sets its twin), each with the model's
shape. A LoRA adapter folder is merged into the base weights of the served model's folder (the
adapter's own base path is ignored).
"""

from __future__ import annotations

import os
from collections.abc import Callable, Mapping
from pathlib import Path

import torch
from safetensors.torch import load_file
from transformers import AutoModelForCausalLM, PreTrainedModel

from rollout.inference.base import BackendError
from rollout.models.hf import missing_weights

WeightSource = str | os.PathLike[str] | Mapping[str, torch.Tensor]


def read_weights(
    source: WeightSource,
    model: torch.nn.Module,
    *,
    load_base: Callable[[], PreTrainedModel],
    device: torch.device,
    dtype: torch.dtype,
) -> dict[str, torch.Tensor]:
    """A complete state dict for `model`, on `device`, checked against its keys and shapes.

    Args:
        source: A mapping of tensors, a `.safetensors` file, a folder of safetensors shards or
            a Hugging Face model folder, or a peft LoRA adapter folder (`adapter_config.json`).
        model: The served model (only read).
        load_base: A fresh copy of the served model's base weights (LoRA adapters merge into it).
        device: Where the tensors go.
        dtype: The dtype a model folder is loaded in.

    Raises:
        BackendError: When the weights cannot be read or do not fit `model`.
    """
    if isinstance(source, Mapping):
        state = dict(source)
    else:
        path = Path(source)
        if path.is_dir() and (path / "adapter_config.json").is_file():
            state = merge_adapter(path, load_base())
        elif path.is_file() and path.suffix == ".safetensors":
            state = load_file(str(path))
        elif path.is_dir() and sorted(path.glob("*.safetensors")):
            state = {}
            for shard in sorted(path.glob("*.safetensors")):
                state.update(load_file(str(shard)))
        elif path.is_dir() and (path / "config.json").is_file():
            state = AutoModelForCausalLM.from_pretrained(str(path), dtype=dtype).state_dict()
        else:
            raise BackendError(
                f"source {str(source)!r} is not a safetensors file, a model folder or a "
                "LoRA adapter folder"
            )
    return fit(state, model, device=device, source=source)


def merge_adapter(folder: Path, base: PreTrainedModel) -> dict[str, torch.Tensor]:
    """The state dict of `base` with the LoRA adapter in `folder` merged in."""
    from peft import PeftModel

    try:
        merged = PeftModel.from_pretrained(base, str(folder)).merge_and_unload()
    except (OSError, ValueError, KeyError, RuntimeError) as exc:
        raise BackendError(f"source {str(folder)!r}: cannot load the adapter: {exc}") from exc
    if not isinstance(merged, torch.nn.Module):
        raise BackendError(f"source {str(folder)!r}: merging gave {type(merged).__name__}")
    return merged.state_dict()


def fit(
    state: Mapping[str, torch.Tensor],
    model: torch.nn.Module,
    *,
    device: torch.device,
    source: object,
) -> dict[str, torch.Tensor]:
    """`state` renamed (peft's `base_model.model.` prefix dropped), cast to `model`'s dtypes and
    moved to `device`; every key must be `model`'s, with its shape, and none may be missing."""
    expected = model.state_dict()
    fitted: dict[str, torch.Tensor] = {}
    unexpected: list[str] = []
    for key, tensor in state.items():
        name = key.removeprefix("base_model.model.")
        if name not in expected:
            unexpected.append(key)
            continue
        if tuple(tensor.shape) != tuple(expected[name].shape):
            raise BackendError(
                f"source {_describe(source)}: {name} has shape {tuple(tensor.shape)}, "
                f"the model has {tuple(expected[name].shape)}"
            )
        fitted[name] = tensor.to(device=device, dtype=expected[name].dtype)
    missing = missing_weights(model, fitted)
    if unexpected or missing:
        raise BackendError(
            f"source {_describe(source)} does not fit the model: "
            f"unexpected keys {unexpected[:5]}, missing keys {missing[:5]}"
        )
    return fitted


def _describe(source: object) -> str:
    return "state dict" if isinstance(source, Mapping) else repr(str(source))
