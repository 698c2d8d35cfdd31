"""`rollout evals run|list|show` and the `rollout evaluator` role."""

from __future__ import annotations

from typing import Annotated, Any

import typer
from rich.table import Table

from rollout.cli.common import JsonFlag, console, err_console, print_json, query, run_async
from rollout.contracts import DEFAULT_POLICY

evals_app = typer.Typer(
    help="Versioned eval suites: run them on any checkpoint, list and compare scores.",
    no_args_is_help=True,
)

RunOption = Annotated[str | None, typer.Option("--run", help="Run id or name.")]


def _fmt(value: float | None, signed: bool = False) -> str:
    if value is None:
        return "-"
    return f"{value:+.3f}" if signed else f"{value:.3f}"


def _print_scores(rows: list[dict[str, Any]]) -> None:
    """One table per run and suite version: a row per checkpoint and environment (and policy,
    for a run with several policies: a `policy` column then)."""
    tables: dict[tuple[str, str], Table] = {}
    several = {r["run_id"] for r in rows if r.get("policy", DEFAULT_POLICY) != DEFAULT_POLICY}
    for row in rows:
        key = (row["run_id"], f"{row['suite']}@{row['suite_version']}")
        per_policy = row["run_id"] in several
        if key not in tables:
            tables[key] = Table(
                "checkpoint", "environment", *(["policy"] if per_policy else []), "score",
                "95% CI", "n", "Δ base", "Δ prev",
                title=f"run {key[0]}: suite {key[1]}",
            )  # fmt: skip
        tables[key].add_row(
            row["checkpoint"],
            row["environment"],
            *([row["policy"]] if per_policy else []),
            _fmt(row["score"]),
            f"{row['ci_low']:.2f}-{row['ci_high']:.2f}",
            str(row["episodes"]) + (f" ({row['failed']} failed)" if row["failed"] else ""),
            _fmt(row["delta_base"], signed=True),
            _fmt(row["delta_previous"], signed=True),
        )
    for table in tables.values():
        console.print(table)


async def _scores(ledger: Any, run: str | None, suite: str | None) -> list[dict[str, Any]]:
    from rollout.evals.report import score_rows

    run_id = (await ledger.get_run(run)).run_id if run else None
    rows = score_rows(await ledger.eval_scores(run_id))
    return [r for r in rows if suite is None or r["suite"] == suite]


@evals_app.command("run")
def evals_run(
    suite: Annotated[str, typer.Argument(help="A suite: YAML file, built-in name or MODULE:ATTR.")],
    checkpoint: Annotated[
        str, typer.Option(help="A checkpoint version, 'latest' or 'base' (the untrained model).")
    ] = "latest",
    run: RunOption = None,
    concurrency: Annotated[int, typer.Option(min=1, help="Seats played at once.")] = 16,
    queue: Annotated[
        bool, typer.Option("--queue", help="Only queue the job; an evaluator role plays it.")
    ] = False,
    as_json: JsonFlag = False,
) -> None:
    """Evaluate a checkpoint of a run (default: the newest run) with a suite, now."""
    from rollout.blobs import BlobStore
    from rollout.evals.report import job_rows
    from rollout.launch.evaluator.demand import evaluate
    from rollout.ledger import COMMAND_WAIT_S, Ledger

    async def go() -> tuple[dict[str, Any], list[dict[str, Any]]]:
        ledger = await Ledger.connect(wait_s=COMMAND_WAIT_S)
        try:
            job = await evaluate(
                ledger,
                BlobStore.from_url(),
                suite,
                checkpoint=checkpoint,
                run=run,
                play=not queue,
                concurrency=concurrency,
            )
            rows = await _scores(ledger, job.run_id, job.suite)
            mine = [r for r in rows if r["job_id"] == job.job_id]
            return job_rows([job])[0], mine
        finally:
            await ledger.close()

    if not as_json:
        err_console.print(f"evaluating {suite} on checkpoint {checkpoint}...")
    job, rows = run_async(go())
    if as_json:
        print_json({"job": job, "scores": rows})
        return
    console.print(
        f"job {job['job_id']}: {job['suite']}@{job['suite_version']} on {job['checkpoint']} "
        f"of run {job['run_id']}: {job['state']}"
    )
    _print_scores(rows)


@evals_app.command("list")
def evals_list(run: RunOption = None, as_json: JsonFlag = False) -> None:
    """Eval jobs (of one run, or all): suite version, checkpoint, progress."""
    from rollout.evals.report import job_rows

    async def read(ledger: Any) -> list[dict[str, Any]]:
        run_id = (await ledger.get_run(run)).run_id if run else None
        return job_rows(await ledger.eval_jobs(run_id))

    rows = query(read)
    if as_json:
        print_json(rows)
        return
    table = Table("job", "run", "suite", "checkpoint", "trigger", "seats ended", "state")
    for row in rows:
        table.add_row(
            str(row["job_id"]),
            row["run_id"],
            f"{row['suite']}@{row['suite_version']}",
            row["checkpoint"],
            row["trigger"],
            f"{row['seats_ended']}/{row['seats']}",
            row["state"],
        )
    console.print(table)


@evals_app.command("show")
def evals_show(
    run: Annotated[str | None, typer.Argument(help="Run id or name (default: all).")] = None,
    suite: Annotated[str | None, typer.Option(help="Only this suite (by name).")] = None,
    as_json: JsonFlag = False,
) -> None:
    """Scores per checkpoint and environment (and policy, for a run with several), with the
    delta to the base model and to the previous eval."""
    rows = query(lambda ledger: _scores(ledger, run, suite))
    if as_json:
        print_json(rows)
        return
    if not rows:
        console.print("no eval scores yet")
        return
    _print_scores(rows)


def evaluator_role(
    run: RunOption = None,
    concurrency: Annotated[int, typer.Option(min=1, help="Seats played at once.")] = 16,
    lease_seconds: Annotated[
        float, typer.Option(min=0.1, help="Seat claims expire unless renewed within this.")
    ] = 30.0,
    name: Annotated[str | None, typer.Option(help="Evaluator name (default: host-pid).")] = None,
) -> None:
    """Play eval requests and jobs (of one run, or all) on the checkpoints they name."""
    from rollout.cli.roles import _serve_role
    from rollout.launch.evaluator.role import evaluator

    _serve_role(
        lambda stop: evaluator(
            stop, run=run, concurrency=concurrency, lease_seconds=lease_seconds, name=name
        )
    )
