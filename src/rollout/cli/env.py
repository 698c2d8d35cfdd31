"""`rollout env check` and `rollout run`: an environment's first episodes.

`rollout env check` plays without a ledger, except for an environment whose Task calls the model
itself (`Environment.needs_gateway`, e.g. a coding-agent CLI): its seats are claimed in an
'env-check' run of the ledger (the embedded Postgres unless ROLLOUT_DATABASE_URL is set) and
served by an in-process gateway on loopback, so the agent's calls are recorded turns. With the
scripted model, the environment's `demonstration` plays (each agent's reward must be above 0:
exit 2 otherwise, one line per agent) or else its `scripted_reply` answers where it has a reply;
an environment without a demonstration is reported as such, not as a bare "ok".
"""

from __future__ import annotations

import contextlib
import time
import uuid
from collections.abc import AsyncIterator, Mapping, Sequence
from typing import Annotated, Any

import typer

from rollout.cli.common import JsonFlag, ModelOption, console, print_json, run_async
from rollout.contracts import Message, ToolSpec

env_app = typer.Typer(help="Check environments.", no_args_is_help=True)


@env_app.command("check")
def env_check(
    spec: Annotated[str, typer.Argument(help="The environment, as MODULE:ATTR.")],
    model: ModelOption = "scripted",
    seed: Annotated[int, typer.Option(help="The episode's seed.")] = 0,
    preset: Annotated[
        str,
        typer.Option(
            help="The preset you will train with (name or YAML file): one line says when its "
            "model cannot read the environment's text."
        ),
    ] = "cpu-tiny",
    as_json: JsonFlag = False,
) -> None:
    """Play one episode per agent against the model and report contract problems by name.

    With the scripted model, an environment's demonstration is played and must earn each agent
    a reward (exit 2 and one line per agent otherwise); contract problems exit 1. When the
    preset's model (cpu-tiny, `rollout train`'s default) cannot read the text the environment
    shows the model, one line names the characters lost and the preset to use.
    """
    from rollout.harness.loading import load_environment
    from rollout.runs.presets import load_preset

    environment = load_environment(spec)  # first: a broken environment fails fast, before torch
    config = load_preset(preset)

    from rich.markup import escape

    from rollout.harness.check import check_environment
    from rollout.inference.direct import DirectModel
    from rollout.inference.factory import load_model
    from rollout.inference.scripted import ScriptedBackend, environment_backend
    from rollout.launch.readable import readability_note

    seen: list[Message] = []  # what the environment shows the model, for readability_note

    async def go() -> Any:
        renderer, backend = load_model(model)
        shown = environment.demonstration is not None and isinstance(backend, ScriptedBackend)
        backend = environment_backend(backend, environment)
        direct = DirectModel(renderer, backend).complete

        async def complete(
            messages: Sequence[Message], tools: Sequence[ToolSpec], sampling: Mapping[str, Any]
        ) -> Message:
            seen.extend(message for message in messages if message not in seen)
            return await direct(messages, tools, sampling)

        try:
            if not environment.needs_gateway:
                return await check_environment(
                    environment, complete, seed=seed, demonstration=shown
                )
            async with _served_seats(spec, environment, renderer, backend, model, seed) as seats:
                report = await check_environment(
                    environment, complete, seed=seed, seats=seats, demonstration=shown
                )
                seats.report = report
                return report
        finally:
            await backend.close()

    report = run_async(go())
    note = readability_note(environment, config, seen)
    if as_json:
        print_json({**report.as_json(), "readability": note})
    else:
        console.print(
            f"[bold]{spec}[/]: {environment.name} v{environment.version}, "
            f"{environment.agents} agent(s), group size {environment.group_size}"
        )
        if note is not None:
            console.print(note, style="yellow", markup=False, highlight=False, soft_wrap=True)
        console.print(f"parameters: {report.parameters}")
        if report.episode_id:
            console.print(
                f"{report.recorded_turns} turn(s) recorded by the gateway: "
                f"rollout episodes show {report.episode_id}"
            )
        if report.demonstration:
            console.print("played the environment's demonstration with the scripted model")
        for seat in report.seats:
            if seat.result is not None:
                console.print(f"  agent {seat.agent}: {seat.summary()}", markup=False)
        for problem in report.problems:
            console.print(f"[red]problem:[/] {problem}")
        for seat in report.seats:
            if seat.problem:
                console.print(f"[red]problem:[/] agent {seat.agent}: {seat.problem}")
                if seat.traceback:
                    console.print(seat.traceback, markup=False, highlight=False)
        for seat in report.seats:
            if seat.demonstration_problem:
                problem = escape(seat.demonstration_problem)
                console.print(f"[red]demonstration:[/] agent {seat.agent}: {problem}")
        if report.ok and not report.demonstration:
            console.print(
                "no demonstration played: "
                + (
                    f"{environment.name} ships none (Environment.demonstration)"
                    if environment.demonstration is None
                    else f"the model is {model!r}, not the scripted one"
                )
                + "; this shows the contract holds, not that the environment acts"
            )
        console.print("[green]ok[/]" if report.ok else "[red]failed[/]")
    if not report.ok:
        raise typer.Exit(1 if report.problems or any(s.problem for s in report.seats) else 2)


class _Seats(dict[int, dict[str, Any]]):
    report: Any = None


@contextlib.asynccontextmanager
async def _served_seats(
    spec: str, environment: Any, renderer: Any, backend: Any, model: str, seed: int
) -> AsyncIterator[_Seats]:
    """Every seat of one 'env-check' episode claimed, and a gateway serving their keys."""
    from rollout.launch.serve import serve_gateway
    from rollout.ledger import COMMAND_WAIT_S, EpisodeSpec, Ledger

    ledger = await Ledger.connect(wait_s=COMMAND_WAIT_S)
    try:
        run = await ledger.create_run(
            f"env-check-{environment.name}-{time.strftime('%Y%m%d-%H%M%S')}-{uuid.uuid4().hex[:6]}",
            spec,
            {"kind": "env-check", "model": model},
        )
        (episode_id,) = await ledger.add_episodes(
            run.run_id,
            [
                EpisodeSpec(
                    group_index=0,
                    member=0,
                    parameters=environment.draw_parameters(0, seed),
                    seed=seed,
                    agents=environment.agents,
                    kind="playground",
                )
            ],
        )
        claims = await ledger.claim_seats(
            "env-check", limit=environment.agents, run_id=run.run_id, lease_seconds=600.0
        )
        server = await serve_gateway(ledger, renderer, backend, model_name=model)
        seats = _Seats()
        for claim in claims:
            seats[claim.agent] = {
                "run_id": run.run_id,
                "episode_id": episode_id,
                "attempt": claim.attempt,
                "gateway_url": f"{server.url}/v1",
                "api_key": claim.api_key,
            }
        try:
            yield seats
        finally:
            await server.stop()
            rewards = {}
            if seats.report is not None:
                record = await ledger.episode(episode_id)
                seats.report.recorded_turns = len(record.turns)
                rewards = {s.agent: s.result.reward for s in seats.report.seats if s.result}
            for claim in claims:
                reward = rewards.get(claim.agent)
                with contextlib.suppress(Exception):  # the report already says what failed
                    await ledger.end_seat(
                        claim,
                        reward=reward or 0.0,
                        status="completed" if reward is not None else "failed",
                    )
    finally:
        await ledger.close()


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
