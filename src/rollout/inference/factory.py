"""Build a renderer and an inference backend from a `--model` value.

`scripted` is the deterministic model (no weights; a real tokenizer and chat template);
anything else is a local Hugging Face model folder served by the `local` backend.
"""

from __future__ import annotations

from pathlib import Path

from rollout.errors import RolloutError
from rollout.inference.base import InferenceBackend
from rollout.rendering.base import Renderer


def load_model(
    model: str, *, device: str = "cpu", state_dir: str | Path | None = None
) -> tuple[Renderer, InferenceBackend]:
    """(renderer, backend) for `scripted` (its tokenizer cached under `state_dir`) or a folder."""
    from rollout.rendering import HFRenderer

    if model == "scripted":
        from rollout.inference.scripted import ScriptedBackend
        from rollout.models import default_tokenizer_dir

        renderer = HFRenderer(default_tokenizer_dir(state_dir))
        return renderer, ScriptedBackend(renderer)
    path = Path(model)
    if not (path / "config.json").is_file():
        raise RolloutError(
            f"--model must be 'scripted' or a Hugging Face model folder with a config.json, "
            f"got {model!r}"
        )
    from rollout.inference.local import LocalBackend

    return HFRenderer(path), LocalBackend(path, device=device)
