"""`rollout env check` and `rollout run`: an environment's first episodes."""

from __future__ import annotations

from typing import Annotated, Any

import typer

from rollout.cli.common import JsonFlag, ModelOption, console, print_json, run_async

env_app = typer.Typer(help="Check environments.", no_args_is_help=True)


@env_app.command("check")
def env_check(
    spec: Annotated[str, typer.Argument(help="The environment, as MODULE:ATTR.")],
    model: ModelOption = "scripted",
    seed: Annotated[int, typer.Option(help="The episode's seed.")] = 0,
    as_json: JsonFlag = False,
) -> None:
    """Play one episode per agent against the model and report contract problems by name."""
    from rollout.harness.loading import load_environment

    environment = load_environment(spec)  # first: a broken environment fails fast, before torch

    from rollout.harness.check import check_environment
    from rollout.inference.direct import DirectModel
    from rollout.inference.factory import load_model

    async def go() -> Any:
        renderer, backend = load_model(model)
        try:
            return await check_environment(
                environment, DirectModel(renderer, backend).complete, seed=seed
            )
        finally:
            await backend.close()

    report = run_async(go())
    if as_json:
        print_json(report.as_json())
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
                    f"reward {seat.result.reward:g}"
                    + (" (truncated)" if seat.result.truncated else "")
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


def run_episode(
    spec: Annotated[str, typer.Argument(help="The environment, as MODULE:ATTR.")],
    model: ModelOption = "scripted",
    seed: Annotated[int, typer.Option(help="The episode's seed.")] = 0,
    as_json: JsonFlag = False,
) -> None:
    """Play one episode through the gateway against the model and print its transcript.

    Everything is recorded in the ledger (the embedded Postgres unless ROLLOUT_DATABASE_URL is
    set); `rollout episodes show EPISODE` prints its turns with token ids and logprobs.
    """
    from rollout.launch.single import play_one_episode

    outcome = run_async(play_one_episode(spec, model=model, seed=seed))
    if as_json:
        print_json(outcome)
    else:
        from rollout.monitor.render import print_transcript

        print_transcript(console, outcome)
    if any(seat["status"] != "completed" for seat in outcome["seats"]):
        raise typer.Exit(1)  # a failed seat: its error is in the transcript
