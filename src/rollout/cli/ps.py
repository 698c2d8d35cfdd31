"""`rollout ps`: every role process, from the heartbeats in the ledger."""

from __future__ import annotations

from dataclasses import asdict
from typing import Annotated

import typer
from rich.table import Table

from rollout.cli.common import JsonFlag, console, print_json, query


def ps(
    as_json: JsonFlag = False,
    everything: Annotated[
        bool, typer.Option("--all", help="Also stopped processes and ones dead for long.")
    ] = False,
) -> None:
    """List role processes (where, role, run, status, seconds since the last beat); a process
    that missed 3 beats is shown as dead."""
    rows = query(lambda ledger: ledger.processes(everything=everything))
    if as_json:
        print_json([asdict(row) for row in rows])
        return
    if not rows:
        console.print("no processes")
        return
    table = Table("ROLE", "RUN", "HOST", "PID", "STATE", "AGE", "STATUS")
    for row in rows:
        state = f"[red]{row.state}[/red]" if row.state == "dead" else row.state
        table.add_row(
            row.role,
            row.run_id or "-",
            row.host,
            str(row.pid),
            state,
            f"{row.age_s:.0f}s",
            row.status,
        )
    console.print(table)
