"""The model a training run starts from: a folder given on the command line, the preset's folder,
or the preset's tiny model, built on first use under the state folder and reused afterwards."""

from __future__ import annotations

from pathlib import Path

from rollout.errors import RolloutError
from rollout.runs.config import RunConfig
from rollout.settings import get_settings


def resolve_model(config: RunConfig, override: str | None = None) -> Path:
    """The model folder: `override` (`--model`), the preset's `model.path`, or `model.init`'s
    tiny model under `<state>/models/`, built once per recipe.

    Raises:
        RolloutError: the preset names no model, or the folder has no `config.json` (with the
            preset's `model.get` command, when it has one).
    """
    if override:
        path = Path(override).resolve()
    elif config.model.path:
        path = Path(config.model.path).resolve()
    elif config.model.init is not None:
        path = _tiny_model(config)
    else:
        raise RolloutError("the preset names no model: set model.path or model.init")
    if not (path / "config.json").is_file():
        fetch = f"; get it with: {config.model.get}" if config.model.get and not override else ""
        raise RolloutError(f"model folder {path} has no config.json{fetch}")
    return path


def _tiny_model(config: RunConfig) -> Path:
    from rollout.models.default_tokenizer import recipe_fingerprint

    init = config.model.init
    assert init is not None
    # The tokenizer/template sources are part of the key: a changed recipe builds afresh.
    path = get_settings().models_dir / f"{init.arch}-{init.key()}-{recipe_fingerprint()[:8]}"
    if (path / "config.json").is_file():
        return path
    from rollout.models import init_model
    from rollout.models.default_tokenizer import DEFAULT_VOCAB_SIZE

    init_model(
        path,
        name=f"tiny-{init.arch}",
        alphabet=init.alphabet,
        vocab_size=init.vocab_size or DEFAULT_VOCAB_SIZE,
        arch=init.arch,
        hidden=init.hidden,
        layers=init.layers,
        heads=init.heads,
        kv_heads=init.kv_heads,
        tokenizer=init.tokenizer,
        seed=init.seed,
        sliding_window=init.sliding_window,
        sliding_layers=init.sliding_layers,
    )
    return path
