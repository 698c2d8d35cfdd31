"""`rollout sandboxes list|serve`: the sandbox instances in the ledger and their claims, and a
machine that keeps instances for runners on every host.

A computer's line adds what it uses now (asked of the computer itself: memory, processes, disk,
CPU time, commands); its claim's secret is never printed.
"""

from __future__ import annotations

import asyncio
from collections.abc import Mapping
from dataclasses import asdict
from typing import TYPE_CHECKING, Annotated, Any

import typer
from rich.table import Table

from rollout.cli.common import JsonFlag, console, print_json, query, run_async

if TYPE_CHECKING:
    from rollout.ledger.sandboxes import SandboxRecord

sandboxes_app = typer.Typer(help="Inspect sandbox instances.", no_args_is_help=True)


@sandboxes_app.command("list")
def sandboxes_list(
    pool: Annotated[str | None, typer.Option(help="Only this pool's instances.")] = None,
    retired: Annotated[bool, typer.Option("--all", help="Include retired instances.")] = False,
    as_json: JsonFlag = False,
) -> None:
    """Instances, oldest first: pool, host, state, the episode holding one, its claim epoch, and
    a computer's usage."""
    from rollout.sandboxes.computer import computer_usage, is_computer, usage_line

    records = query(lambda ledger: ledger.list_sandboxes(pool=pool, include_retired=retired))

    async def usages() -> list[dict[str, Any] | None]:
        async def one(record: SandboxRecord) -> dict[str, Any] | None:
            if record.retired or not is_computer(record.details):
                return None
            return await computer_usage(record.details)

        return list(await asyncio.gather(*(one(record) for record in records)))

    usage = run_async(usages())
    if as_json:
        print_json(
            [
                {
                    **asdict(record),
                    "details": _public(record.details),
                    "state": record.state,
                    "usage": used,
                }
                for record, used in zip(records, usage, strict=True)
            ]
        )
        return
    columns = ["instance", "pool", "host", "state", "epoch", "episode", "holder", "finished"]
    shown = any(usage)  # the usage column only when a computer answered
    table = Table(*columns, *(["usage"] if shown else []))
    for record, used in zip(records, usage, strict=True):
        finished = "-" if record.agents is None else f"{len(record.finished)}/{record.agents}"
        cells = [
            record.instance_id,
            record.pool,
            record.host,
            record.state,
            str(record.epoch),
            record.episode_id or "-",
            record.holder or "-",
            finished if record.episode_id else "-",
        ]
        if shown:
            cells.append(usage_line(used) if used else "-")
        table.add_row(*cells)
    console.print(table)


def _public(details: Mapping[str, Any]) -> dict[str, Any]:
    """An instance's details without its claim's secret."""
    return {key: "(hidden)" if key == "secret" else value for key, value in details.items()}


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
