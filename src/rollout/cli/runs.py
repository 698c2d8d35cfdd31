"""`rollout runs ...` and `rollout episodes ...`: look inside runs and steer them."""

from __future__ import annotations

from typing import TYPE_CHECKING, Annotated, Any

import typer
from rich.table import Table

from rollout.cli.common import JsonFlag, console, print_json, query, run_async
from rollout.errors import RolloutError

if TYPE_CHECKING:
    from rollout.ledger import Ledger

runs_app = typer.Typer(help="List, inspect and steer runs.", no_args_is_help=True)
episodes_app = typer.Typer(help="Inspect episodes and their turns.", no_args_is_help=True)


@runs_app.command("list")
def runs_list(as_json: JsonFlag = False) -> None:
    """List runs, newest first."""
    from rollout.monitor.queries import run_summaries

    rows = query(run_summaries)
    if as_json:
        print_json(rows)
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
    run: Annotated[str, typer.Argument(help="Run id or name.")],
    steps: Annotated[
        int | None, typer.Option(min=0, metavar="N", help="Show only the last N steps.")
    ] = None,
    as_json: JsonFlag = False,
) -> None:
    """A run's settings, episode counts, train steps (all, or the last N) and checkpoints."""
    from rollout.monitor.queries import run_detail

    detail = query(lambda ledger: run_detail(ledger, run))
    if as_json:
        print_json(detail)
        return
    from rollout.monitor.render import print_run

    print_run(console, detail, steps)


async def _set_settings(run: str, values: dict[str, Any]) -> str:
    from rollout.ledger import Ledger

    ledger = await Ledger.connect()
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
    run_id = run_async(_set_settings(run, values))
    console.print(f"{run_id}: " + ", ".join(f"{k} = {v}" for k, v in values.items()))


def _pause(run: str, *, paused: bool) -> str:
    async def go(ledger: Ledger) -> str:
        record = await ledger.get_run(run)
        await (ledger.pause_run if paused else ledger.resume_run)(record.run_id)
        return record.run_id

    return query(go)


@runs_app.command("pause")
def runs_pause(run: Annotated[str, typer.Argument(help="Run id or name.")]) -> None:
    """Stop handing out new episodes (episodes in flight finish)."""
    console.print(f"{_pause(run, paused=True)}: paused")


@runs_app.command("resume")
def runs_resume(run: Annotated[str, typer.Argument(help="Run id or name.")]) -> None:
    """Hand out episodes again."""
    console.print(f"{_pause(run, paused=False)}: resumed")


@runs_app.command("stop")
def runs_stop(run: Annotated[str, typer.Argument(help="Run id or name.")]) -> None:
    """Stop training a run: supervisors retire its roles; `rollout up --run RUN` resumes it."""

    async def go(ledger: Ledger) -> str:
        record = await ledger.get_run(run)
        await ledger.set_setting(record.run_id, "status", "stopped")
        return record.name

    name = query(go)
    console.print(
        f"{name}: stopped; resume with `uv run rollout up --run {name} --until-finished`",
        highlight=False,
        soft_wrap=True,
    )


@episodes_app.command("show")
def episodes_show(
    episode: Annotated[str, typer.Argument(help="Episode id.")],
    as_json: JsonFlag = False,
) -> None:
    """Every turn of an episode: prompt and completion token ids, logprobs, version."""
    from rollout.monitor.queries import episode_detail

    detail = query(lambda ledger: episode_detail(ledger, episode))
    if as_json:
        print_json(detail)
        return
    from rollout.monitor.render import print_episode

    print_episode(console, detail)


@episodes_app.command("list")
def episodes_list(
    run: Annotated[str, typer.Argument(help="Run id or name.")],
    limit: Annotated[int, typer.Option(min=1, help="How many.")] = 20,
    as_json: JsonFlag = False,
) -> None:
    """The latest episodes of a run, the most recently ended first; failed ones marked."""
    from rollout.monitor.queries import episode_rows

    rows = query(lambda ledger: episode_rows(ledger, run, limit))
    if as_json:
        print_json(rows)
        return
    table = Table("episode", "group", "member", "state", "seats ended", "reward", "turns")
    for row in rows:
        state = row["state"]
        table.add_row(
            row["episode_id"],
            str(row["group_index"]),
            str(row["member"]),
            f"[red]{state}[/]" if state == "failed" else state,
            f"{row['seats_ended']}/{row['agents']}",
            "-" if row["reward"] is None else f"{row['reward']:g}",
            str(row["turns"]),
        )
    console.print(table)
    if any(row["state"] == "failed" for row in rows):
        console.print(
            "failed: `uv run rollout episodes show EPISODE` prints the error",
            highlight=False,
            soft_wrap=True,
        )
