"""The long-running roles: `rollout inference|gateway|playground|trainer|runner|bridge|up`."""

from __future__ import annotations

import asyncio
from typing import Annotated, Any

import typer

from rollout.cli.common import ModelOption, console, run_async
from rollout.errors import RolloutError


def _role_logging() -> None:
    import logging

    # The embedded Postgres' own INFO lines are silenced where it starts (rollout.ledger.embedded).
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s %(levelname)s %(message)s")


def _serve_role(role: Any) -> None:
    """Run an async role until SIGTERM/SIGINT or until the process that started it is gone
    (`rollout.launch.owner`)."""
    import signal

    from rollout.heap import settle_after_start_up
    from rollout.launch.owner import this_owner

    async def go() -> None:
        stop = asyncio.Event()
        loop = asyncio.get_running_loop()
        for sig in (signal.SIGTERM, signal.SIGINT):
            loop.add_signal_handler(sig, stop.set)
        # Started by `rollout train` or `rollout up`: stop when that owner dies, even by kill -9.
        watcher = asyncio.create_task(this_owner().watch(stop))
        settling = asyncio.create_task(settle_after_start_up())  # rollout.heap
        try:
            await role(stop)
        finally:
            watcher.cancel()
            settling.cancel()

    _role_logging()
    run_async(go())


RunOption = Annotated[str, typer.Option("--run", help="Run id or name.")]
PortOption = Annotated[int, typer.Option("--port", help="Port on 127.0.0.1 (0: any free port).")]
HostOption = Annotated[str, typer.Option("--host", help="Address to bind.")]


def inference_role(run: RunOption, port: PortOption = 0, host: HostOption = "127.0.0.1") -> None:
    """Serve a run's policy (local PyTorch) and follow its serving records."""
    from rollout.launch.roles import inference

    _serve_role(lambda stop: inference(stop, run=run, host=host, port=port))


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
    from rollout.launch.playground import run_gateway

    assert model is not None
    _serve_role(lambda stop: run_gateway(model, port=port or 8000, host=host, stop=stop))


def playground(
    model: ModelOption = "scripted",
    port: Annotated[int, typer.Option("--port", help="Port on 127.0.0.1 (0: any free port).")] = 0,
    host: HostOption = "127.0.0.1",
) -> None:
    """A model behind the gateway on loopback, with a key for Claude Code, Codex or the SDKs.

    Prints the key and the environment variables to point each client at it. Everything it
    serves is recorded under the `playground` run (`rollout episodes list playground`).
    """
    from rollout.launch.playground import run_playground

    _serve_role(
        lambda stop: run_playground(
            model, port, host=host, stop=stop, echo=lambda text: console.print(text, markup=False)
        )
    )


def trainer_role(run: RunOption) -> None:
    """Train a run: take complete groups, step, checkpoint, publish serving records."""
    from rollout.launch.roles import trainer

    _serve_role(lambda stop: trainer(stop, run=run))


def runner_role(
    run: Annotated[str | None, typer.Option("--run", help="Only this run's seats.")] = None,
    concurrency: Annotated[int, typer.Option(min=1, help="Seats played at once.")] = 32,
    name: Annotated[str | None, typer.Option(help="Runner name (default: host-pid).")] = None,
) -> None:
    """Claim agent seats and play them through their run's gateway."""
    from rollout.launch.roles import runner

    _serve_role(lambda stop: runner(stop, run=run, concurrency=concurrency, name=name))


def bridge_role() -> None:
    """Convert new checkpoints for each inference backend."""
    from rollout.launch.roles import bridge

    _serve_role(lambda stop: bridge(stop))


def up(
    run: Annotated[
        list[str] | None, typer.Option("--run", help="Only these runs (repeatable).")
    ] = None,
    until_finished: Annotated[
        bool, typer.Option(help="Exit when the selected runs are finished.")
    ] = False,
    launcher: Annotated[
        str, typer.Option(help="local: processes on this machine; ray: actors on a Ray cluster.")
    ] = "local",
    ray_address: Annotated[
        str | None,
        typer.Option(help="Ray cluster (host:port, auto, ray://host:10001; default RAY_ADDRESS)."),
    ] = None,
    role: Annotated[
        list[str] | None,
        typer.Option(
            "--role",
            help="Only these roles on this machine (repeatable): inference, gateway, trainer, "
            "evaluator, runner, bridge.",
        ),
    ] = None,
) -> None:
    """Start every role under one supervisor (embedded Postgres by default): as local processes,
    or as Ray actors with `--launcher ray`. With `--role`, only those roles: the others run on
    other machines that share the database URL and the blob URL."""
    if launcher == "ray":
        from rollout.launch.ray import launch

        _serve_role(
            lambda stop: launch(
                stop, runs=run, until_finished=until_finished, address=ray_address, roles=role
            )
        )
        return
    if launcher != "local":
        raise RolloutError(f"--launcher must be local or ray, got {launcher!r}")
    if ray_address:
        raise RolloutError("--ray-address needs --launcher ray")
    from rollout.launch.local import check_roles
    from rollout.launch.roles import supervise

    roles = check_roles(role)  # before anything starts
    _serve_role(lambda stop: supervise(stop, runs=run, until_finished=until_finished, roles=roles))
