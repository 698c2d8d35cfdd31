"""`rollout train`: create a run from a preset and train it with live progress."""

from __future__ import annotations

from typing import Annotated

import typer

from rollout.cli.common import JsonFlag, console, err_console, print_json


def train(
    spec: Annotated[str, typer.Argument(help="The environment, as MODULE:ATTR.")],
    preset: Annotated[str, typer.Option(help="Preset name or YAML file.")] = "cpu-tiny",
    steps: Annotated[int | None, typer.Option(min=1, help="Optimizer steps.")] = None,
    max_lag: Annotated[
        int | None,
        typer.Option(
            "--max-lag",
            metavar="STEPS",
            help="How many optimizer steps older than the trainer's the model that samples an "
            "episode's turns may be (0: on-policy; higher: more throughput, more off-policy).",
        ),
    ] = None,
    name: Annotated[str | None, typer.Option(help="Run name (default: generated).")] = None,
    model: Annotated[str | None, typer.Option(help="Model folder (overrides the preset).")] = None,
    create_only: Annotated[
        bool,
        typer.Option(
            "--create-only",
            help="Only create the run; roles started elsewhere (rollout up) train it.",
        ),
    ] = False,
    cluster: Annotated[
        bool,
        typer.Option(
            help="Create the run in the ledger of the cluster of the current kube context (via "
            "kubectl); its roles train it. Stops with one line when it cannot be reached.",
        ),
    ] = False,
    overrides: Annotated[
        list[str] | None,
        typer.Option("--set", help="Override a preset field: KEY=VALUE (YAML value; repeatable)."),
    ] = None,
    launcher: Annotated[
        str, typer.Option(help="local: roles as local processes; ray: as Ray actors.")
    ] = "local",
    as_json: JsonFlag = False,
) -> None:
    """Create a run and train it, showing live progress; ends with a summary."""
    from rollout.launch.train import train_command

    summary = train_command(
        spec,
        preset=preset,
        overrides=overrides or [],
        steps=steps,
        max_lag=max_lag,
        name=name,
        model=model,
        cluster=cluster,
        console=err_console if as_json else console,
        launcher=launcher,
        create_only=create_only,
    )
    if as_json:
        print_json(summary)
    if summary.get("status") == "stopped":  # interrupted (Ctrl-C, hangup): like any shell tool
        raise typer.Exit(130)
