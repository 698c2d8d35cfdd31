"""The `rollout` command, a module per command group.

- `env`: `rollout env check`, `rollout run` (an environment's first episodes);
- `runs`: `rollout runs ...`, `rollout episodes ...` (look inside runs, steer them);
- `models`: `rollout model init`;
- `roles`: the long-running roles (`inference`, `gateway`, `playground`, `trainer`, `runner`,
  `bridge`, `up`);
- `train`: `rollout train`;
- `state`: `rollout down` (stop the state folder's embedded Postgres), `rollout gc`;
- `ps`: `rollout ps` (role processes from their heartbeats; stale ones shown dead);
- `common`: consoles, shared options, running async work.

Every command prints user errors (bad input, missing runs, broken environments) as one red line
without a traceback, and exits 2. `--json` gives machine-readable output where it makes sense.
"""

from __future__ import annotations

import errno
import os
import sys
from typing import Annotated

import typer
from rich.markup import escape

from rollout.cli import (
    env,
    evals,
    models,
    monitor,
    presets,
    ps,
    roles,
    runs,
    sandboxes,
    setup,
    state,
    train,
)
from rollout.cli.common import err_console
from rollout.cli.help import plain_help
from rollout.errors import RolloutError
from rollout.settings import DATABASE_URL_VAR, ENVIRONMENT_VARIABLES, get_settings

plain_help()  # TEXT/INTEGER and no <bool> or {spec} (rollout.cli.help)

app = typer.Typer(
    name="rollout",
    help="Train language-model agents with asynchronous RL on long, multi-turn episodes.",
    epilog=(
        "Settings come from the environment: "
        + ", ".join(ENVIRONMENT_VARIABLES)
        + " (rollout.settings says what each means; the state folder defaults to the nearest "
        ".rollout/ up from here or the uv workspace's)."
    ),
    no_args_is_help=True,
    pretty_exceptions_enable=False,
    add_completion=False,
)


def _print_version(value: bool) -> None:
    if value:
        from importlib.metadata import version

        print(f"rollout {version('rollout')}")
        raise typer.Exit()


@app.callback()
def _root(
    show_version: Annotated[
        bool,
        typer.Option(
            "--version", callback=_print_version, is_eager=True, help="Print the version and exit."
        ),
    ] = False,
) -> None:
    del show_version  # handled by its callback


app.add_typer(env.env_app, name="env")
app.add_typer(runs.runs_app, name="runs")
app.add_typer(runs.episodes_app, name="episodes")
app.add_typer(models.model_app, name="model")
app.command("run")(env.run_episode)
app.command("train")(train.train)
app.command("inference")(roles.inference_role)
app.command("gateway")(roles.gateway_role)
app.command("playground")(roles.playground)
app.command("trainer")(roles.trainer_role)
app.command("runner")(roles.runner_role)
app.command("bridge")(roles.bridge_role)
app.command("up")(roles.up)
app.add_typer(evals.evals_app, name="evals")
app.add_typer(presets.preset_app, name="preset")
app.add_typer(setup.setup_app, name="setup")
app.command("evaluator")(evals.evaluator_role)
app.command("monitor")(monitor.monitor)
app.add_typer(sandboxes.sandboxes_app, name="sandboxes")
app.command("down")(state.down)
app.command("gc")(state.gc)
app.command("ps")(ps.ps)


QUIET_ENVIRONMENT = {
    "HF_HUB_DISABLE_PROGRESS_BARS": "1",
    "TRANSFORMERS_VERBOSITY": "error",
    "TRANSFORMERS_NO_ADVISORY_WARNINGS": "1",
    "TQDM_DISABLE": "1",
}
"""Set for this command and the roles it starts (unless already set): no progress bars or
advisory lines from Hugging Face libraries in the terminal or the role logs."""


def environment_error(error: BaseException) -> str | None:
    """The one-line message for an error of the machine or the settings (not a bug), or None.

    Example:
        >>> environment_error(NotADirectoryError(20, "Not a directory", "/tmp/x/postgres"))
        'Not a directory: /tmp/x/postgres (the state folder: ROLLOUT_STATE_DIR or .rollout/)'
        >>> environment_error(OSError(30, "Read-only file system", "/srv/ro/.rollout"))
        'Read-only file system: /srv/ro/.rollout (the state folder: ROLLOUT_STATE_DIR or .rollout/)'
        >>> environment_error(ValueError("a bug")) is None
        True
    """
    if isinstance(error, OSError) and error.errno == errno.EADDRINUSE:
        return f"{error.strerror or error}: the port is in use; choose another with --port"
    unwritable = isinstance(error, OSError) and error.errno in (errno.EROFS, errno.ENOSPC)
    if unwritable or isinstance(error, PermissionError | NotADirectoryError | FileExistsError):
        assert isinstance(error, OSError)
        return (
            f"{error.strerror or error}: {error.filename} "
            "(the state folder: ROLLOUT_STATE_DIR or .rollout/)"
        )
    module = type(error).__module__
    if module.startswith("psycopg"):
        first = str(error).strip().splitlines()[0] if str(error).strip() else repr(error)
        where = DATABASE_URL_VAR if get_settings().database_url else "the embedded database"
        name = type(error).__name__
        if name == "OperationalError":
            return f"cannot reach the database ({where}): {first}"
        if "connection info" in first or "invalid dsn" in first.lower() or "conninfo" in first:
            return f"{where} is not a PostgreSQL URL: {first}"
    return None


def _print_error(message: str) -> None:
    # One line however wide the terminal, and the message's brackets are not markup.
    err_console.print(f"[red]error:[/] {escape(message)}", highlight=False, soft_wrap=True)


def name_connections(argv: list[str]) -> None:
    """Name this process's Postgres connections `rollout COMMAND` (`PGAPPNAME`, which libpq gives
    every connection as its application_name): `pg_stat_activity` then says which role each
    busy backend serves, `rollout trainer` or `rollout gateway`. A name the user set (one not
    starting with `rollout`) is kept; a role inherits its launcher's, which is replaced."""
    command = next((arg for arg in argv if not arg.startswith("-")), None)
    if command is not None and os.environ.get("PGAPPNAME", "rollout").startswith("rollout"):
        os.environ["PGAPPNAME"] = f"rollout {command}"


def main() -> None:
    """Entry point: user errors print as one line, without a traceback."""
    for key, value in QUIET_ENVIRONMENT.items():
        os.environ.setdefault(key, value)
    name_connections(sys.argv[1:])
    from rollout.settings import get_settings

    try:
        folder = get_settings().state_dir
    except RolloutError as error:  # a bad ROLLOUT_* variable
        _print_error(str(error))
        sys.exit(2)
    existed = folder.exists()
    failed = True
    try:
        app()
        failed = False
    except SystemExit as exit_:
        failed = exit_.code not in (0, None)
        raise
    except RolloutError as error:
        _print_error(str(error))
        sys.exit(2)
    except KeyboardInterrupt:
        err_console.print("interrupted")
        sys.exit(130)
    except Exception as error:
        message = environment_error(error)
        if message is None:
            raise
        _print_error(message)
        sys.exit(2)
    finally:
        # Say where the new state went; a failure's one line stays the only line.
        if not existed and not failed and folder.is_dir():
            err_console.print(f"created the state folder {folder}", highlight=False, soft_wrap=True)
