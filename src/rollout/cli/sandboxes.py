"""`rollout sandboxes list|serve`: the sandbox instances in the ledger and their claims, and a
machine that keeps instances for runners on every host."""

from __future__ import annotations

from dataclasses import asdict
from typing import Annotated

import typer
from rich.table import Table

from rollout.cli.common import JsonFlag, console, print_json, query

sandboxes_app = typer.Typer(help="Inspect sandbox instances.", no_args_is_help=True)


@sandboxes_app.command("list")
def sandboxes_list(
    pool: Annotated[str | None, typer.Option(help="Only this pool's instances.")] = None,
    retired: Annotated[bool, typer.Option("--all", help="Include retired instances.")] = False,
    as_json: JsonFlag = False,
) -> None:
    """Instances, oldest first: pool, host, state, the episode holding one, its claim epoch."""
    records = query(lambda ledger: ledger.list_sandboxes(pool=pool, include_retired=retired))
    if as_json:
        print_json([{**asdict(record), "state": record.state} for record in records])
        return
    table = Table("instance", "pool", "host", "state", "epoch", "episode", "holder", "finished")
    for record in records:
        finished = "-" if record.agents is None else f"{len(record.finished)}/{record.agents}"
        table.add_row(
            record.instance_id,
            record.pool,
            record.host,
            record.state,
            str(record.epoch),
            record.episode_id or "-",
            record.holder or "-",
            finished if record.episode_id else "-",
        )
    console.print(table)


@sandboxes_app.command("serve")
def sandboxes_serve(
    environment: Annotated[str, typer.Argument(help="The environment, as MODULE:ATTR.")],
    instances: Annotated[int, typer.Option(min=1, help="Instances to keep (in use or idle).")] = 1,
) -> None:
    """Keep instances of the environment's pool on this machine for runners on every host.

    A runner on any machine may claim one that is clean; once an episode has used it, this
    machine replaces it with a fresh one. Instances listen on ROLLOUT_HOST_ADDRESS (else this
    machine's outward address when the ledger is reached over TCP).
    """
    from rollout.cli.roles import _serve_role
    from rollout.launch.roles import sandbox_host, served_pool

    pool = served_pool(environment)  # a broken environment fails before anything starts
    _serve_role(lambda stop: sandbox_host(stop, pool=pool, instances=instances))
