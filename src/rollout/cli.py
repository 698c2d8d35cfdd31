"""The `rollout` command.

Every command prints user errors (bad input, missing runs, broken environments) as one red line
without a traceback, and exits 2. `--json` gives machine-readable output where it makes sense.
"""

from __future__ import annotations

import asyncio
import json
import sys
from collections.abc import Awaitable, Callable, Coroutine
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


def _query(query: Callable[[Any], Awaitable[T]]) -> T:
    """Run one read against the ledger (ROLLOUT_DATABASE_URL or the embedded one)."""

    async def go() -> T:
        ledger = await _ledger()
        try:
            return await query(ledger)
        finally:
            await ledger.close()

    return _run(go())


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


# ---------------------------------------------------------------------------------------------
# run: one episode, end to end, on the embedded defaults


@app.command("run")
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

    outcome = _run(play_one_episode(spec, model=model, seed=seed))
    if as_json:
        _print_json(outcome)
        return
    from rollout.monitor.render import print_transcript

    print_transcript(console, outcome)


# ---------------------------------------------------------------------------------------------
# runs and episodes


@runs_app.command("list")
def runs_list(as_json: JsonFlag = False) -> None:
    """List runs, newest first."""
    from rollout.monitor.queries import run_summaries

    rows = _query(run_summaries)
    if as_json:
        _print_json(rows)
        return
    table = Table("run", "name", "environment", "steps", "episodes", "reward", "state")
    for row in rows:
        reward = row["last_reward"]
        table.add_row(
            row["run_id"],
            row["name"],
            row["environment"],
            str(row["steps"]),
            str(row["episodes_ended"]),
            "-" if reward is None else f"{reward:.3f}",
            row["state"],
        )
    console.print(table)


@runs_app.command("show")
def runs_show(
    run: Annotated[str, typer.Argument(help="Run id or name.")], as_json: JsonFlag = False
) -> None:
    """A run's settings, train steps and checkpoints."""
    from rollout.monitor.queries import run_detail

    detail = _query(lambda ledger: run_detail(ledger, run))
    if as_json:
        _print_json(detail)
        return
    from rollout.monitor.render import print_run

    print_run(console, detail)


async def _set_settings(run: str, values: dict[str, Any]) -> str:
    ledger = await _ledger()
    try:
        record = await ledger.get_run(run)
        for key, value in values.items():
            await ledger.set_setting(record.run_id, key, value)
        return record.run_id
    finally:
        await ledger.close()


@runs_app.command("set")
def runs_set(
    run: Annotated[str, typer.Argument(help="Run id or name.")],
    max_lag: Annotated[
        int | None,
        typer.Option("--max-lag", min=0, help="Turns begin only on versions >= newest - N."),
    ] = None,
) -> None:
    """Change a run's settings mid-run (effective for turns that begin afterwards)."""
    values: dict[str, Any] = {}
    if max_lag is not None:
        values["max_lag"] = max_lag
    if not values:
        raise RolloutError("nothing to set: pass --max-lag N")
    run_id = _run(_set_settings(run, values))
    console.print(f"{run_id}: " + ", ".join(f"{k} = {v}" for k, v in values.items()))


@runs_app.command("pause")
def runs_pause(run: Annotated[str, typer.Argument(help="Run id or name.")]) -> None:
    """Stop handing out new episodes (episodes in flight finish)."""
    run_id = _run(_set_settings(run, {"paused": True}))
    console.print(f"{run_id}: paused")


@runs_app.command("resume")
def runs_resume(run: Annotated[str, typer.Argument(help="Run id or name.")]) -> None:
    """Hand out episodes again."""
    run_id = _run(_set_settings(run, {"paused": False}))
    console.print(f"{run_id}: resumed")


@episodes_app.command("show")
def episodes_show(
    episode: Annotated[str, typer.Argument(help="Episode id.")],
    as_json: JsonFlag = False,
) -> None:
    """Every turn of an episode: prompt and completion token ids, logprobs, version."""
    from rollout.monitor.queries import episode_detail

    detail = _query(lambda ledger: episode_detail(ledger, episode))
    if as_json:
        _print_json(detail)
        return
    from rollout.monitor.render import print_episode

    print_episode(console, detail)


@episodes_app.command("list")
def episodes_list(
    run: Annotated[str, typer.Argument(help="Run id or name.")],
    limit: Annotated[int, typer.Option(min=1, help="How many.")] = 20,
    as_json: JsonFlag = False,
) -> None:
    """The latest episodes of a run."""
    from rollout.monitor.queries import episode_rows

    rows = _query(lambda ledger: episode_rows(ledger, run, limit))
    if as_json:
        _print_json(rows)
        return
    table = Table("episode", "group", "member", "seats ended", "reward", "turns")
    for row in rows:
        table.add_row(
            row["episode_id"],
            str(row["group_index"]),
            str(row["member"]),
            f"{row['seats_ended']}/{row['agents']}",
            "-" if row["reward"] is None else f"{row['reward']:g}",
            str(row["turns"]),
        )
    console.print(table)


# ---------------------------------------------------------------------------------------------
# models


@model_app.command("init")
def model_init(
    name: Annotated[str, typer.Argument(help="A name for the model (recorded in its config).")],
    out: Annotated[str, typer.Option("--out", help="Folder to write the model to.")],
    arch: Annotated[str, typer.Option(help="qwen3, qwen2 or llama.")] = "qwen3",
    hidden: Annotated[int, typer.Option(min=8, help="Hidden size.")] = 128,
    layers: Annotated[int, typer.Option(min=1, help="Number of layers.")] = 2,
    heads: Annotated[int, typer.Option(min=1, help="Attention heads.")] = 4,
    kv_heads: Annotated[int, typer.Option(min=1, help="Key/value heads.")] = 2,
    tokenizer: Annotated[str, typer.Option(help="'bytes' (byte-level BPE) or 'chars'.")] = "bytes",
    seed: Annotated[int, typer.Option(help="Initialisation seed.")] = 0,
) -> None:
    """Build a tiny random model of a real architecture, saved in the Hugging Face layout."""
    from rollout.models import init_model

    if arch not in ("qwen3", "qwen2", "llama"):
        raise RolloutError(f"--arch must be qwen3, qwen2 or llama, got {arch!r}")
    if tokenizer not in ("bytes", "chars"):
        raise RolloutError(f"--tokenizer must be bytes or chars, got {tokenizer!r}")
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
    )
    files = ", ".join(sorted(p.name for p in path.iterdir()))
    console.print(f"wrote {name} ({arch}, hidden {hidden}, {layers} layers) to {path}: {files}")


# ---------------------------------------------------------------------------------------------
# roles


def _role_logging() -> None:
    import logging

    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s %(levelname)s %(message)s")


def _serve_role(role: Any) -> None:
    """Run an async role until SIGTERM/SIGINT."""
    import signal

    async def go() -> None:
        stop = asyncio.Event()
        loop = asyncio.get_running_loop()
        for sig in (signal.SIGTERM, signal.SIGINT):
            loop.add_signal_handler(sig, stop.set)
        await role(stop)

    _role_logging()
    _run(go())


RunOption = Annotated[str, typer.Option("--run", help="Run id or name.")]
PortOption = Annotated[int, typer.Option("--port", help="Port on 127.0.0.1 (0: any free port).")]
HostOption = Annotated[str, typer.Option("--host", help="Address to bind.")]


@app.command("inference")
def inference_role(run: RunOption, port: PortOption = 0, host: HostOption = "127.0.0.1") -> None:
    """Serve a run's policy (local PyTorch) and follow its serving records."""
    from rollout.launch.roles import inference

    _serve_role(lambda stop: inference(stop, run=run, host=host, port=port))


@app.command("gateway")
def gateway_role(
    run: Annotated[
        str | None, typer.Option("--run", help="Serve this run's policy (its inference server).")
    ] = None,
    model: Annotated[
        str | None, typer.Option("--model", help="Or serve a model in-process: scripted|PATH.")
    ] = None,
    port: PortOption = 0,
    host: HostOption = "127.0.0.1",
) -> None:
    """Serve the OpenAI/Anthropic-compatible gateway, recording every turn.

    With `--run`, sampling goes to the run's inference server and max_lag is enforced; with
    `--model`, the model is served in-process. Keys come from seat claims either way.
    """
    if (run is None) == (model is None):
        raise RolloutError("pass exactly one of --run RUN or --model scripted|PATH")
    if run is not None:
        from rollout.launch.roles import gateway

        _serve_role(lambda stop: gateway(stop, run=run, host=host, port=port))
        return
    from rollout.gateway import run_gateway

    assert model is not None
    _serve_role(lambda stop: run_gateway(model, port=port or 8000, host=host, stop=stop))


@app.command("playground")
def playground(
    model: ModelOption = "scripted",
    port: Annotated[int, typer.Option("--port", help="Port on 127.0.0.1 (0: any free port).")] = 0,
    host: HostOption = "127.0.0.1",
) -> None:
    """A model behind the gateway on loopback, with a key for Claude Code, Codex or the SDKs.

    Prints the key and the environment variables to point each client at it. Everything it
    serves is recorded under the `playground` run (`rollout episodes list playground`).
    """
    from rollout.gateway import run_playground

    _serve_role(
        lambda stop: run_playground(
            model, port, host=host, stop=stop, echo=lambda text: console.print(text, markup=False)
        )
    )


@app.command("trainer")
def trainer_role(run: RunOption) -> None:
    """Train a run: take complete groups, step, checkpoint, publish serving records."""
    from rollout.launch.roles import trainer

    _serve_role(lambda stop: trainer(stop, run=run))


@app.command("runner")
def runner_role(
    run: Annotated[str | None, typer.Option("--run", help="Only this run's seats.")] = None,
    concurrency: Annotated[int, typer.Option(min=1, help="Seats played at once.")] = 32,
    name: Annotated[str | None, typer.Option(help="Runner name (default: host-pid).")] = None,
) -> None:
    """Claim agent seats and play them through their run's gateway."""
    from rollout.launch.roles import runner

    _serve_role(lambda stop: runner(stop, run=run, concurrency=concurrency, name=name))


@app.command("bridge")
def bridge_role() -> None:
    """Convert new checkpoints for each inference backend."""
    from rollout.launch.roles import bridge

    _serve_role(lambda stop: bridge(stop))


@app.command("up")
def up(
    run: Annotated[
        list[str] | None, typer.Option("--run", help="Only these runs (repeatable).")
    ] = None,
    until_finished: Annotated[
        bool, typer.Option(help="Exit when the selected runs are finished.")
    ] = False,
) -> None:
    """Start every role locally under one supervisor (embedded Postgres by default)."""
    from rollout.launch.roles import supervise

    _serve_role(lambda stop: supervise(stop, runs=run, until_finished=until_finished))


@app.command("train")
def train(
    spec: Annotated[str, typer.Argument(help="The environment, as MODULE:ATTR.")],
    preset: Annotated[str, typer.Option(help="Preset name or YAML file.")] = "cpu-tiny",
    steps: Annotated[int | None, typer.Option(min=1, help="Optimizer steps.")] = None,
    max_lag: Annotated[int | None, typer.Option("--max-lag", min=0, help="max_lag.")] = None,
    name: Annotated[str | None, typer.Option(help="Run name (default: generated).")] = None,
    model: Annotated[str | None, typer.Option(help="Model folder (overrides the preset).")] = None,
    cluster: Annotated[
        bool, typer.Option(help="Only create the run; the cluster's roles pick it up.")
    ] = False,
    overrides: Annotated[
        list[str] | None,
        typer.Option("--set", help="Override a preset field: KEY=VALUE (YAML value; repeatable)."),
    ] = None,
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
    )
    if as_json:
        _print_json(summary)


def main() -> None:
    """Entry point: user errors print as one line, without a traceback."""
    from rollout.blobs import BlobError
    from rollout.ledger import LedgerError

    try:
        app()
    except (RolloutError, LedgerError, BlobError) as error:
        err_console.print(f"[red]error:[/] {error}", highlight=False)
        sys.exit(2)
    except KeyboardInterrupt:
        err_console.print("interrupted")
        sys.exit(130)


if __name__ == "__main__":
    main()
