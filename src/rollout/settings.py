"""Where the platform keeps its state and finds its services: one object, read from the environment.

Every process reads the same variables, in one place (no other module reads a `ROLLOUT_*`
variable; `tests/test_settings.py` checks it):

- `ROLLOUT_STATE_DIR`: the state folder; unset, the project's `.rollout` found the way git finds
  `.git` (`find_state_dir`: the first folder up from the current one that holds `.rollout/` or
  is a uv workspace's root, else the current folder). It holds the
  embedded Postgres (`postgres/`), the local blob store (`blobs/`), models built on demand
  (`models/`), per-process caches (`cache/`) and the supervisor's logs (`logs/`).
- `ROLLOUT_DATABASE_URL`: an external Postgres; unset, the embedded one under the state folder.
- `ROLLOUT_BLOB_URL`: a folder or `s3://bucket/prefix`; unset, `<state>/blobs`.
- `ROLLOUT_DB_OUTAGE_S`: how long a process rides out an unreachable database (retrying with
  back-off) before it stops with a one-line message; default 60.
- `ROLLOUT_LOG_MAX_MB`: the size at which the local supervisor rotates a role's log
  (`<role>.log` becomes `<role>.log.1`, keeping three older files); default 100, 0 never rotates.
- `ROLLOUT_VLLM_ENV`: vLLM's own virtual environment (`rollout setup vllm`); unset, `.venv-vllm`
  next to the project's `.venv` (`rollout.inference.vllm_env`).
- `ROLLOUT_MONITOR_TOKEN`: the token `rollout monitor` requires when `--token` is not given.
- `ROLLOUT_HOST_ADDRESS`: the address this machine's servers listen on and tell other machines
  about (sandbox instances, and the inference servers and gateways `rollout up` starts); unset,
  loopback while the ledger is reached through a Unix socket (the embedded Postgres: every role
  is on this machine), else the address of the interface that routes outward
  (`rollout.net.address`).
- `ROLLOUT_TINKER_SERVICE`: `package.module:factory`, the import path of a zero-argument callable
  that returns the Tinker service client every role uses (an object with `tinker.ServiceClient`'s
  methods: a fake of Tinker for tests, or another service); unset, the SDK's
  `tinker.ServiceClient` (`rollout.training.providers.tinker.service_client`).

The platform sets two more for the processes it starts (their names are here too):

- `ROLLOUT_OWNER_PID`: the pid of the process that started this one; it watches it and stops
  when it is gone (`rollout.launch.owner`, which removes the variable once read).
- `ROLLOUT_ROLE`: the role a Ray worker plays (`rollout.launch.ray`), so a process list names it;
  nothing reads it.

`get_settings()` returns the `Settings` of the current environment. It is read once and kept;
a changed environment (a test that sets a variable) is read again.

Example:
    >>> settings = Settings.from_environ({"ROLLOUT_STATE_DIR": "/srv/rollout"})
    >>> str(settings.state_dir), settings.database_url, settings.blob_url
    ('/srv/rollout', None, '/srv/rollout/blobs')
    >>> str(settings.models_dir)
    '/srv/rollout/models'
    >>> settings.db_outage_s, Settings.from_environ({"ROLLOUT_DB_OUTAGE_S": "5"}).db_outage_s
    (60.0, 5.0)
    >>> settings.log_max_bytes, Settings.from_environ({"ROLLOUT_LOG_MAX_MB": "0.5"}).log_max_bytes
    (100000000, 500000)
    >>> settings.owner_pid, Settings.from_environ({"ROLLOUT_OWNER_PID": "42"}).owner_pid
    (None, 42)
    >>> Settings.from_environ({"ROLLOUT_BLOB_URL": "s3://bucket/runs"}).blob_url
    's3://bucket/runs'
    >>> try:
    ...     Settings.from_environ({"ROLLOUT_BLOB_URL": "ftp://host/runs"})
    ... except SettingsError as error:
    ...     print(error)
    ROLLOUT_BLOB_URL must be a folder, file://... or s3://BUCKET/PREFIX, got 'ftp://host/runs'
    >>> settings.tinker_service, Settings.from_environ(
    ...     {"ROLLOUT_TINKER_SERVICE": "tests.training.tinker_fake:disk_service"}
    ... ).tinker_service
    (None, 'tests.training.tinker_fake:disk_service')
    >>> try:
    ...     Settings.from_environ({"ROLLOUT_TINKER_SERVICE": "tinker.ServiceClient"})
    ... except SettingsError as error:
    ...     print(error)
    ROLLOUT_TINKER_SERVICE must be package.module:factory, got 'tinker.ServiceClient'
    >>> settings.one_machine  # the embedded Postgres: a Unix socket
    True
    >>> remote = {"ROLLOUT_DATABASE_URL": "postgresql://u:p@db.internal:5432/rollout"}
    >>> Settings.from_environ(remote).one_machine
    False

    >>> import tempfile
    >>> root = Path(tempfile.mkdtemp())
    >>> _ = (root / "pyproject.toml").write_text("[tool.uv.workspace]")
    >>> (root / "environments" / "parity").mkdir(parents=True)
    >>> find_state_dir(root / "environments" / "parity") == root / ".rollout"
    True
    >>> (root / "environments" / ".rollout").mkdir()  # a state folder nearer wins
    >>> find_state_dir(root / "environments" / "parity") == root / "environments" / ".rollout"
    True
"""

from __future__ import annotations

import os
import re
from collections.abc import Mapping
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path
from urllib.parse import parse_qs, urlsplit

from rollout.errors import RolloutError

STATE_DIR_VAR = "ROLLOUT_STATE_DIR"
DATABASE_URL_VAR = "ROLLOUT_DATABASE_URL"
BLOB_URL_VAR = "ROLLOUT_BLOB_URL"
DB_OUTAGE_VAR = "ROLLOUT_DB_OUTAGE_S"
LOG_MAX_VAR = "ROLLOUT_LOG_MAX_MB"
VLLM_ENV_VAR = "ROLLOUT_VLLM_ENV"
MONITOR_TOKEN_VAR = "ROLLOUT_MONITOR_TOKEN"
HOST_ADDRESS_VAR = "ROLLOUT_HOST_ADDRESS"
TINKER_SERVICE_VAR = "ROLLOUT_TINKER_SERVICE"
OWNER_PID_VAR = "ROLLOUT_OWNER_PID"
ROLE_VAR = "ROLLOUT_ROLE"
ENVIRONMENT_VARIABLES = (
    STATE_DIR_VAR,
    DATABASE_URL_VAR,
    BLOB_URL_VAR,
    DB_OUTAGE_VAR,
    LOG_MAX_VAR,
    VLLM_ENV_VAR,
    MONITOR_TOKEN_VAR,
    HOST_ADDRESS_VAR,
    TINKER_SERVICE_VAR,
)
"""The variables people set (`rollout --help` lists them)."""
READ_VARIABLES = (*ENVIRONMENT_VARIABLES, OWNER_PID_VAR)
"""Every variable `Settings` reads."""
DEFAULT_STATE_DIR = ".rollout"
DEFAULT_DB_OUTAGE_S = 60.0
DEFAULT_LOG_MAX_MB = 100.0


BLOB_SCHEMES = ("", "file", "s3", "s3a")
"""The blob store URL schemes: a folder (no scheme, or `file://`) or S3 (`rollout.blobs`)."""

WORKSPACE_MARK = "[tool.uv.workspace]"

IMPORT_PATH = re.compile(r"[A-Za-z_][\w]*(\.[A-Za-z_][\w]*)*:[A-Za-z_][\w]*(\.[A-Za-z_][\w]*)*")
"""`package.module:attribute` (the shape of `ROLLOUT_TINKER_SERVICE`)."""


def find_state_dir(start: Path) -> Path:
    """The state folder for commands run in `start` (absolute): `.rollout` in the nearest folder
    up from it that holds one or is a uv workspace's root; `start/.rollout` when none is."""
    start = start.resolve()
    for folder in (start, *start.parents):
        if (folder / DEFAULT_STATE_DIR).is_dir():
            return folder / DEFAULT_STATE_DIR
        project = folder / "pyproject.toml"
        try:
            if project.is_file() and WORKSPACE_MARK in project.read_text(errors="replace"):
                return folder / DEFAULT_STATE_DIR
        except OSError:  # an unreadable file is not a workspace root
            continue
    return start / DEFAULT_STATE_DIR


def unix_socket_url(url: str) -> bool:
    """Whether a Postgres URL (or `key=value` string) connects through a Unix socket: no host, or
    a host that is a folder.

    Example:
        >>> unix_socket_url("postgresql://postgres:@/rollout?host=/srv/state/postgres")
        True
        >>> unix_socket_url("postgresql://u:p@10.0.0.5:5432/rollout"), unix_socket_url("host=db")
        (False, False)
    """
    if "://" in url:
        parts = urlsplit(url)
        options = {key: values[0] for key, values in parse_qs(parts.query).items()}
        host = parts.hostname or ""
    else:
        options = {key: value for key, _, value in (pair.partition("=") for pair in url.split())}
        host = ""
    host = host or options.get("host", "") or options.get("hostaddr", "")
    return not host or host.startswith("/")


class SettingsError(RolloutError, ValueError):
    """A setting's variable holds a value that cannot be used (the message names it)."""


def _amount(name: str, value: str | None, default: float, unit: str) -> float:
    """A variable's number >= 0 in `unit` (`default` when unset or empty)."""
    if not value:
        return default
    try:
        amount = float(value)
    except ValueError:
        amount = -1.0
    if not amount >= 0:  # also refuses nan
        raise SettingsError(f"{name} must be a number of {unit} >= 0, got {value!r}")
    return amount


def _blob_url(value: str | None, state: Path) -> str:
    """`ROLLOUT_BLOB_URL` checked (a folder, `file://` or `s3://BUCKET/...`), else
    `<state>/blobs`."""
    if not value:
        return str(state / "blobs")
    parts = urlsplit(value)
    if parts.scheme not in BLOB_SCHEMES or (parts.scheme.startswith("s3") and not parts.netloc):
        raise SettingsError(
            f"{BLOB_URL_VAR} must be a folder, file://... or s3://BUCKET/PREFIX, got {value!r}"
        )
    return value


def _import_path(name: str, value: str | None) -> str | None:
    """A variable's `package.module:attribute` (None when unset or empty)."""
    if not value:
        return None
    if not IMPORT_PATH.fullmatch(value):
        raise SettingsError(f"{name} must be package.module:factory, got {value!r}")
    return value


def _size(name: str, value: str | None, default_mb: float) -> int:
    """A variable's size in megabytes (1,000,000 bytes), as bytes."""
    megabytes = _amount(name, value, default_mb, "megabytes")
    if megabytes == float("inf"):
        raise SettingsError(f"{name} must be a finite number of megabytes, got {value!r}")
    return int(megabytes * 1_000_000)


@dataclass(frozen=True)
class Settings:
    """The platform's settings (see the module docstring)."""

    state_dir: Path
    """The state folder, absolute."""
    database_url: str | None
    """An external Postgres URL, or None for the embedded server under `state_dir`."""
    blob_url: str
    """Where checkpoints and other blobs go: a folder or an `s3://` URL."""
    db_outage_s: float = DEFAULT_DB_OUTAGE_S
    """Seconds a process retries an unreachable database before it gives up."""
    log_max_bytes: int = int(DEFAULT_LOG_MAX_MB * 1_000_000)
    """The size at which a role's log is rotated (0: never)."""
    vllm_env: Path | None = None
    """vLLM's virtual environment, when given (absolute)."""
    monitor_token: str | None = None
    """The token the monitor requires, when given."""
    owner_pid: int | None = None
    """The pid of the process that started this one, when it said so."""
    host_address: str | None = None
    """The address this machine's servers listen on and advertise, when given."""
    tinker_service: str | None = None
    """`package.module:factory` of the Tinker service client, when given (else the SDK's)."""

    @classmethod
    def from_environ(cls, environ: Mapping[str, str] | None = None) -> Settings:
        """Read the settings from `environ` (default: `os.environ`)."""
        env = os.environ if environ is None else environ
        given = env.get(STATE_DIR_VAR)
        state = Path(given).expanduser().resolve() if given else find_state_dir(Path(os.getcwd()))
        vllm_env = env.get(VLLM_ENV_VAR)
        owner = env.get(OWNER_PID_VAR) or ""
        return cls(
            state_dir=state,
            database_url=env.get(DATABASE_URL_VAR) or None,
            blob_url=_blob_url(env.get(BLOB_URL_VAR), state),
            db_outage_s=_amount(
                DB_OUTAGE_VAR, env.get(DB_OUTAGE_VAR), DEFAULT_DB_OUTAGE_S, "seconds"
            ),
            log_max_bytes=_size(LOG_MAX_VAR, env.get(LOG_MAX_VAR), DEFAULT_LOG_MAX_MB),
            vllm_env=Path(vllm_env).expanduser().resolve() if vllm_env else None,
            monitor_token=env.get(MONITOR_TOKEN_VAR) or None,
            owner_pid=int(owner) if owner.isdigit() else None,
            host_address=env.get(HOST_ADDRESS_VAR) or None,
            tinker_service=_import_path(TINKER_SERVICE_VAR, env.get(TINKER_SERVICE_VAR)),
        )

    @property
    def one_machine(self) -> bool:
        """Whether the ledger is reached through a Unix socket (the embedded Postgres, or a
        server's socket on this machine), so that every role using it runs on this machine."""
        return self.database_url is None or unix_socket_url(self.database_url)

    @property
    def postgres_dir(self) -> Path:
        """The embedded Postgres' data folder."""
        return self.state_dir / "postgres"

    @property
    def models_dir(self) -> Path:
        """Models and tokenizers built on demand."""
        return self.state_dir / "models"

    @property
    def cache_dir(self) -> Path:
        """Per-process working copies (downloaded checkpoints, trainer scratch space)."""
        return self.state_dir / "cache"

    @property
    def logs_dir(self) -> Path:
        """The local supervisor's role logs."""
        return self.state_dir / "logs"

    def environ(self, database_url: str | None = None) -> dict[str, str]:
        """The variables that give a child process these settings (and `database_url`)."""
        env = {STATE_DIR_VAR: str(self.state_dir), BLOB_URL_VAR: self.blob_url}
        url = database_url or self.database_url
        if url:
            env[DATABASE_URL_VAR] = url
        return env


@lru_cache(maxsize=8)
def _settings_for(snapshot: tuple[str | None, ...], cwd: str) -> Settings:
    del cwd  # part of the cache key: a relative state folder depends on it
    pairs = zip(READ_VARIABLES, snapshot, strict=True)
    return Settings.from_environ({name: value for name, value in pairs if value is not None})


def get_settings() -> Settings:
    """The settings of the current environment (read once per distinct environment)."""
    snapshot = tuple(os.environ.get(name) for name in READ_VARIABLES)
    return _settings_for(snapshot, os.getcwd())


def state_dir(path: str | os.PathLike[str] | None = None) -> Path:
    """The state folder: `path` when given (absolute), else the settings' one."""
    if path is None:
        return get_settings().state_dir
    return Path(path).expanduser().resolve()
