"""`rollout model init`: tiny models of real architectures, built locally."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from rollout.cli.common import console
from rollout.errors import RolloutError
from rollout.runs.architectures import ARCH_NAMES, describe_names

model_app = typer.Typer(help="Build tiny local models.", no_args_is_help=True)


@model_app.command("init")
def model_init(
    name: Annotated[str, typer.Argument(help="A name for the model (recorded in its config).")],
    out: Annotated[str, typer.Option("--out", help="Folder to write the model to.")],
    arch: Annotated[str, typer.Option(help=f"{describe_names(ARCH_NAMES)}.")] = "qwen3",
    hidden: Annotated[int, typer.Option(min=8, help="Hidden size.")] = 128,
    layers: Annotated[int, typer.Option(min=1, help="Number of layers.")] = 2,
    heads: Annotated[int, typer.Option(min=1, help="Attention heads.")] = 4,
    kv_heads: Annotated[int, typer.Option(min=1, help="Key/value heads.")] = 2,
    tokenizer: Annotated[str, typer.Option(help="'bytes' (byte-level BPE) or 'chars'.")] = "bytes",
    seed: Annotated[int, typer.Option(help="Initialisation seed.")] = 0,
    sliding_window: Annotated[
        int | None,
        typer.Option(min=2, help="Local attention: layers see only this many latest tokens."),
    ] = None,
    sliding_layers: Annotated[
        str | None,
        typer.Option(help="The local attention layers, e.g. '0,1' (default: every layer)."),
    ] = None,
    force: Annotated[bool, typer.Option(help="Overwrite a folder that is not empty.")] = False,
) -> None:
    """Build a tiny random model of a real architecture, saved in the Hugging Face layout."""
    if arch not in ARCH_NAMES:
        raise RolloutError(f"--arch must be {describe_names(ARCH_NAMES)}, got {arch!r}")
    if tokenizer not in ("bytes", "chars"):
        raise RolloutError(f"--tokenizer must be bytes or chars, got {tokenizer!r}")
    layer_list = _layer_list(sliding_layers)
    folder = Path(out)
    if folder.is_dir() and any(folder.iterdir()) and not force:
        raise RolloutError(f"--out {out} is not empty; pass --force to overwrite it")
    from rollout.models import init_model  # torch and transformers: only once the input is good

    path = init_model(
        out,
        name=name,
        arch=arch,  # type: ignore[arg-type]  # checked above
        hidden=hidden,
        layers=layers,
        heads=heads,
        kv_heads=kv_heads,
        tokenizer=tokenizer,  # type: ignore[arg-type]  # checked above
        seed=seed,
        sliding_window=sliding_window,
        sliding_layers=layer_list,
    )
    files = ", ".join(sorted(p.name for p in path.iterdir()))
    console.print(f"wrote {name} ({arch}, hidden {hidden}, {layers} layers) to {path}: {files}")


def _layer_list(text: str | None) -> list[int] | None:
    """`--sliding-layers`' comma-separated layer numbers."""
    if text is None:
        return None
    try:
        return [int(part) for part in text.split(",")]
    except ValueError:
        raise RolloutError(
            f"--sliding-layers must be layer numbers like 0,1, got {text!r}"
        ) from None
