"""`rollout runs ...` and `rollout episodes ...`: look inside runs and steer them."""

from __future__ import annotations

from typing import TYPE_CHECKING, Annotated, Any

import typer
from rich.table import Column, Table

from rollout.cli.common import JsonFlag, console, print_json, query, run_async
from rollout.errors import RolloutError
from rollout.runs import live

if TYPE_CHECKING:
    from rollout.ledger import Ledger

runs_app = typer.Typer(help="List, inspect and steer runs.", no_args_is_help=True)
episodes_app = typer.Typer(help="Inspect episodes and their turns.", no_args_is_help=True)


async def _with_reasons(ledger: Ledger) -> list[dict[str, Any]]:
    """`run_summaries`, each failed run with `reason`: why it paused itself (its `error`)."""
    from rollout.monitor.queries import run_summaries

    rows = await run_summaries(ledger)
    for row in rows:
        if row["state"] == "failed":
            row["reason"] = (await ledger.run_settings(row["run_id"])).error
    return rows


def _failed_line(name: str, reason: Any) -> str:
    """One line for a run paused by its failure threshold (`rollout.launch.failures`)."""
    return f"{name} paused: {reason or 'the run failed'}"


@runs_app.command("list")
def runs_list(as_json: JsonFlag = False) -> None:
    """List runs, newest first; a failed run (paused by too many failed episodes) says why."""
    rows = query(_with_reasons)
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
    for row in rows:
        if row["state"] == "failed":
            console.print(
                _failed_line(row["name"], row.get("reason")),
                style="red",
                markup=False,
                highlight=False,
                soft_wrap=True,
            )


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

    async def read(ledger: Ledger) -> dict[str, Any]:
        from rollout.training import retention

        detail = await run_detail(ledger, run)
        run_id = (await ledger.get_run(run)).run_id
        kept = await retention.plan(ledger, run_id)
        # Which checkpoints keep their files (training.retention); the others' are deleted.
        detail["checkpoints_kept"] = kept.kept
        detail["checkpoints_deleted"] = kept.deleted
        for name, policy in detail["policies"].items():  # each policy's chain, on its own
            kept = await retention.plan(ledger, run_id, name)
            policy["checkpoints_kept"] = kept.kept
            policy["checkpoints_deleted"] = kept.deleted
        return detail

    detail = query(read)
    if as_json:
        print_json(detail)
        return
    from rollout.monitor.render import print_run

    print_run(console, detail, steps)
    for name, policy in detail["policies"].items():
        console.print(f"policy {name}: {_retention_line(policy)}", highlight=False, soft_wrap=True)
    if not detail["policies"]:
        console.print(_retention_line(detail), highlight=False, soft_wrap=True)
    if detail["state"] == "failed":
        console.print(
            _failed_line(detail["name"], detail["settings"].get("error")),
            style="red",
            markup=False,
            highlight=False,
            soft_wrap=True,
        )


def _retention_line(detail: dict[str, Any]) -> str:
    """Which checkpoints keep their files (of the run, or of one of its several policies).

    Example:
        >>> _retention_line({"checkpoints_kept": [7, 8, 9], "checkpoints_deleted": [1, 2]})
        'checkpoints kept: v7 v8 v9; files deleted by retention: v1 v2'
    """
    kept = " ".join(f"v{v}" for v in detail["checkpoints_kept"]) or "none"
    line = f"checkpoints kept: {kept}"
    if detail["checkpoints_deleted"]:
        deleted = " ".join(f"v{v}" for v in detail["checkpoints_deleted"])
        line += f"; files deleted by retention: {deleted}"
    return line


async def _set_settings(run: str, values: dict[str, Any]) -> str:
    from rollout.ledger import COMMAND_WAIT_S, Ledger

    ledger = await Ledger.connect(wait_s=COMMAND_WAIT_S)
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
        typer.Option("--max-lag", metavar="N", help="Turns begin only on versions >= newest - N."),
    ] = None,
    keep_checkpoints: Annotated[
        int | None,
        typer.Option(
            "--keep-checkpoints",
            metavar="N",
            help="Keep the files of the last N checkpoints (default: the preset's, "
            f"{live.DEFAULT_KEEP_CHECKPOINTS} unless it says; older ones are deleted).",
        ),
    ] = None,
    keep_version: Annotated[
        list[int] | None,
        typer.Option(
            "--keep-version",
            metavar="V",
            help="Also keep checkpoint V's files whatever its age (repeatable).",
        ),
    ] = None,
) -> None:
    """Change a run's settings mid-run (effective for turns that begin afterwards)."""
    values: dict[str, Any] = {}
    if max_lag is not None:
        values[live.MAX_LAG] = max_lag
    if keep_checkpoints is not None:
        values[live.KEEP_CHECKPOINTS] = keep_checkpoints
    if keep_version:
        values[live.KEEP_VERSIONS] = sorted(set(keep_version))
    if not values:
        raise RolloutError(
            "nothing to set: pass --max-lag N, --keep-checkpoints N or --keep-version V"
        )
    for key, value in values.items():
        live.check_setting(key, value)  # every value checked before any is stored
    run_id = run_async(_set_settings(run, values))
    console.print(f"{run_id}: " + ", ".join(f"{k} = {v}" for k, v in values.items()))


def _pause(run: str, *, paused: bool) -> tuple[str, str, str | None]:
    """Pause or resume; return the run's id, its name and, when resuming cleared a failure, the
    error it had paused with."""

    async def go(ledger: Ledger) -> tuple[str, str, str | None]:
        record = await ledger.get_run(run)
        settings = await ledger.run_settings(record.run_id)
        await (ledger.pause_run if paused else ledger.resume_run)(record.run_id)
        failed = not paused and settings.status == "failed"
        error = (settings.error or "the run failed") if failed else None
        return record.run_id, record.name, error

    return query(go)


@runs_app.command("pause")
def runs_pause(run: Annotated[str, typer.Argument(help="Run id or name.")]) -> None:
    """Stop handing out new episodes (episodes in flight finish)."""
    console.print(f"{_pause(run, paused=True)[0]}: paused")


@runs_app.command("resume")
def runs_resume(run: Annotated[str, typer.Argument(help="Run id or name.")]) -> None:
    """Hand out episodes again.

    A run that paused itself after too many failed episodes (state failed) is cleared too: it
    trains on with everything recorded so far, and the failure threshold counts only episodes
    that end from now on. A running `rollout up` picks it up; otherwise continue it with
    `rollout up --run RUN --until-finished`.
    """
    run_id, name, cleared = _pause(run, paused=False)
    console.print(f"{run_id}: resumed", highlight=False)
    if cleared is not None:
        console.print(
            f"cleared the failure ({cleared.split('; the run is paused')[0]}); episodes are "
            "counted against max_failure_fraction from now on; unless a `rollout up` runs, "
            f"continue with `uv run rollout up --run {name} --until-finished`",
            markup=False,
            highlight=False,
            soft_wrap=True,
        )


@runs_app.command("stop")
def runs_stop(run: Annotated[str, typer.Argument(help="Run id or name.")]) -> None:
    """Stop training a run: supervisors retire its roles; `rollout up --run RUN` resumes it."""

    async def go(ledger: Ledger) -> str:
        record = await ledger.get_run(run)
        await ledger.set_setting(record.run_id, live.STATUS, "stopped")
        return record.name

    name = query(go)
    console.print(
        f"{name}: stopped; resume with `uv run rollout up --run {name} --until-finished`",
        highlight=False,
        soft_wrap=True,
    )


@runs_app.command("delete")
def runs_delete(
    run: Annotated[str, typer.Argument(help="Run id or name.")],
    yes: Annotated[bool, typer.Option("--yes", help="Do not ask for confirmation.")] = False,
    as_json: JsonFlag = False,
) -> None:
    """Delete a run: its facts in the ledger, its checkpoints and its caches (not undoable).

    A run that may still be training is refused: `rollout runs stop RUN` first.
    """
    from rollout.blobs import BlobStore
    from rollout.launch.gc import delete_run
    from rollout.settings import get_settings

    cache = get_settings().cache_dir
    blobs = BlobStore.from_url()
    # Checked (and measured) before asking: a refused run is refused without a prompt.
    planned = query(lambda ledger: delete_run(ledger, blobs, cache, run, dry_run=True))
    if not yes and not typer.confirm(
        f"delete run {run} and {planned.bytes_freed / 1e6:.1f} MB of its files?"
    ):
        raise RolloutError("not deleted (pass --yes to skip the question)")
    done = query(lambda ledger: delete_run(ledger, blobs, cache, run))
    if as_json:
        print_json({"run": run, **done.as_json()})
        return
    console.print(f"deleted run {run}: {done.bytes_freed / 1e6:.1f} MB freed", highlight=False)


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
    # The ids stay whole however narrow the terminal: they are what `episodes show` takes.
    episode = Column("episode", no_wrap=True)
    table = Table(episode, "group", "member", "state", "seats ended", "reward", "turns")
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
