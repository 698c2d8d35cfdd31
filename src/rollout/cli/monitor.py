"""`rollout monitor`: the web UI for runs, transcripts, checkpoints and machines."""

from __future__ import annotations

from typing import Annotated

import typer

from rollout.cli.common import console, run_async
from rollout.settings import MONITOR_TOKEN_VAR


def monitor(
    port: Annotated[
        int, typer.Option("--port", help="Port to listen on (0: any free port).")
    ] = 8765,
    host: Annotated[
        str, typer.Option("--host", help="Address to bind; anything but loopback needs --token.")
    ] = "127.0.0.1",
    token: Annotated[
        str | None,
        typer.Option(
            "--token",
            help="Require this token on every request (header, or the cookie a ?token= link sets; "
            f"default: {MONITOR_TOKEN_VAR}).",
        ),
    ] = None,
    cluster: Annotated[
        bool,
        typer.Option(
            help="The ledger of the cluster of the current kube context (via kubectl); stops "
            "with one line when it cannot be reached.",
        ),
    ] = False,
) -> None:
    """Serve the web monitor: runs with live plots and controls, every transcript with its
    tokens, the checkpoint tree, and every process the ledger has seen."""
    import asyncio
    import contextlib
    import signal

    from rollout.monitor.app import check_binding, serve
    from rollout.settings import get_settings

    token = token or get_settings().monitor_token
    check_binding(host, token)  # refuse before connecting to anything

    async def go(database_url: str | None) -> None:
        stop = asyncio.Event()
        loop = asyncio.get_running_loop()
        for sig in (signal.SIGTERM, signal.SIGINT):
            loop.add_signal_handler(sig, stop.set)
        await serve(
            stop,
            host=host,
            port=port,
            token=token,
            database_url=database_url,
            echo=lambda text: console.print(text, markup=False, highlight=False),
        )

    with contextlib.ExitStack() as stack:
        database_url = None
        if cluster:
            from rollout.launch.cluster import cluster_ledger

            database_url = stack.enter_context(cluster_ledger())  # open while the monitor runs
        run_async(go(database_url))
