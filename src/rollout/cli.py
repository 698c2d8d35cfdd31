"""The `rollout` command.

Every command prints user errors (bad input, missing runs, broken environments) as one red line
without a traceback, and exits 2. `--json` gives machine-readable output where it makes sense.
"""

from __future__ import annotations

import asyncio
import json
import sys
from collections.abc import Coroutine
from typing import Annotated, Any, TypeVar

import typer
from rich.console import Console
from rich.table import Table

from rollout.harness.errors import RolloutError

T = TypeVar("T")

console = Console()
err_console = Console(stderr=True)

app = typer.Typer(
    name="rollout",
    help="Train language-model agents with asynchronous RL on long, multi-turn episodes.",
    no_args_is_help=True,
    pretty_exceptions_enable=False,
    add_completion=False,
)
env_app = typer.Typer(help="Check environments.", no_args_is_help=True)
runs_app = typer.Typer(help="List, inspect and steer runs.", no_args_is_help=True)
episodes_app = typer.Typer(help="Inspect episodes and their turns.", no_args_is_help=True)
model_app = typer.Typer(help="Build tiny local models.", no_args_is_help=True)
app.add_typer(env_app, name="env")
app.add_typer(runs_app, name="runs")
app.add_typer(episodes_app, name="episodes")
app.add_typer(model_app, name="model")

JsonFlag = Annotated[bool, typer.Option("--json", help="Print JSON instead of tables.")]
ModelOption = Annotated[
    str, typer.Option("--model", help="'scripted' or a local Hugging Face model folder.")
]


def _run(coroutine: Coroutine[Any, Any, T]) -> T:
    return asyncio.run(coroutine)


def _print_json(value: object) -> None:
    sys.stdout.write(json.dumps(value, indent=2, default=str) + "\n")


async def _ledger() -> Any:
    from rollout.ledger import Ledger

    return await Ledger.connect()


# ---------------------------------------------------------------------------------------------
# env


@env_app.command("check")
def env_check(
    spec: Annotated[str, typer.Argument(help="The environment, as MODULE:ATTR.")],
    model: ModelOption = "scripted",
    seed: Annotated[int, typer.Option(help="The episode's seed.")] = 0,
    as_json: JsonFlag = False,
) -> None:
    """Play one episode per agent against the model and report contract problems by name."""
    from rollout.harness.check import check_environment
    from rollout.harness.loading import load_environment
    from rollout.inference.direct import DirectModel
    from rollout.inference.factory import load_model

    environment = load_environment(spec)

    async def go() -> Any:
        renderer, backend = load_model(model)
        try:
            return await check_environment(
                environment, DirectModel(renderer, backend).complete, seed=seed
            )
        finally:
            await backend.close()

    report = _run(go())
    if as_json:
        _print_json(report.as_json())
    else:
        console.print(
            f"[bold]{spec}[/]: {environment.name} v{environment.version}, "
            f"{environment.agents} agent(s), group size {environment.group_size}"
        )
        console.print(f"parameters: {report.parameters}")
        for seat in report.seats:
            if seat.result is not None:
                console.print(
                    f"  agent {seat.agent}: ended after {seat.result.turns} turn(s), "
                    f"reward {seat.result.reward:g}" + (" (truncated)" if seat.result.truncated else "")
                )
        for problem in report.problems:
            console.print(f"[red]problem:[/] {problem}")
        for seat in report.seats:
            if seat.problem:
                console.print(f"[red]problem:[/] agent {seat.agent}: {seat.problem}")
                if seat.traceback:
                    console.print(seat.traceback, markup=False, highlight=False)
        console.print("[green]ok[/]" if report.ok else "[red]failed[/]")
    if not report.ok:
        raise typer.Exit(1)


def main() -> None:
    """Entry point: user errors print as one line, without a traceback."""
    from rollout.ledger import LedgerError

    try:
        app()
    except (RolloutError, LedgerError) as error:
        err_console.print(f"[red]error:[/] {error}", highlight=False)
        sys.exit(2)
    except KeyboardInterrupt:
        err_console.print("interrupted")
        sys.exit(130)


if __name__ == "__main__":
    main()
