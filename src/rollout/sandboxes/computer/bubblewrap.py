"""One command inside a computer: the `bwrap` command line that isolates it.

Every command runs in a sandbox of its own made by bubblewrap (`bwrap`, Debian's
`bubblewrap`), run as root with `--unshare-all` and every capability dropped:

- **filesystem**: a read-only root holding only the system folders (`/usr` and the `/bin`,
  `/lib` links), a few public files of `/etc` (and generated `passwd`, `group`, `hosts`), the
  template's tools (read-only, at their host path), a private `/proc` and a minimal `/dev`; the
  computer's disk, writable: `/workspace`, `/home/agent` and `/tmp`. Nothing else of the host
  is there to read or write;
- **processes**: its own pid namespace (it sees only its own processes; when the command's
  first process exits, the kernel kills every process left in it) and its own session;
- **network**: its own network namespace with loopback only; the addresses a request asks
  for are relayed in through a read-only Unix socket folder (`rollout.sandboxes.computer.relay`);
- **limits**: before `bwrap` starts, the wrapper shell joins the command's cgroups
  (`rollout.sandboxes.computer.cgroups`: processes, memory, CPU rate) and sets the CPU time and
  open-file rlimits, so every process of the command is born inside them;
- no nested user namespaces (`--disable-userns`), other IPC and host name namespaces.

`check_host` says, in one line, what a host lacks to run computers (root, `bwrap`, `unshare`).
"""

from __future__ import annotations

import os
import shutil
import sys
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

from rollout.sandboxes.computer.template import HOME, WORKSPACE, Template
from rollout.sandboxes.errors import SandboxError

RELAY_FILE = Path(__file__).with_name("relay.py")
INSIDE_RELAY = "/run/rollout/relay.py"
INSIDE_NET = "/run/rollout/net"
SYSTEM_LINKS = ("/bin", "/sbin", "/lib", "/lib32", "/lib64", "/libx32")
PUBLIC_ETC = (
    "/etc/alternatives",
    "/etc/ssl",
    "/etc/ca-certificates",
    "/etc/ld.so.cache",
    "/etc/ld.so.conf",
    "/etc/ld.so.conf.d",
    "/etc/localtime",
    "/etc/nsswitch.conf",
    "/etc/mime.types",
)
GENERATED_ETC = {
    "passwd": "root:x:0:0:agent:/home/agent:/bin/sh\n",
    "group": "root:x:0:\n",
    "hosts": "127.0.0.1 localhost computer\n::1 localhost\n",
    "hostname": "computer\n",
}
OPEN_FILES = 4096

# The wrapper: join the groups (each `cgroup.procs` given), set the rlimits, exec bwrap.
_WRAPPER = (
    'cpu=$1 files=$2; shift 2; while [ "$1" != -- ]; do echo $$ > "$1" || exit 125; shift; '
    'done; shift; ulimit -S -t "$cpu" && ulimit -H -t $((cpu + 1)) && ulimit -n "$files" '
    '|| exit 125; exec "$@"'
)


def check_host() -> None:
    """Raise SandboxError naming what this host lacks to run computers."""
    if os.geteuid() != 0:
        raise SandboxError(
            "computer: needs root (bubblewrap makes its namespaces and cgroups as root); "
            f"this process runs as uid {os.geteuid()}"
        )
    for program, package in (("bwrap", "bubblewrap"), ("unshare", "util-linux")):
        if shutil.which(program) is None:
            raise SandboxError(
                f"computer: `{program}` is not on PATH (install Debian's `{package}`)"
            )


def write_etc(folder: Path) -> None:
    """The generated `/etc` files of a computer."""
    folder.mkdir(parents=True, exist_ok=True)
    for name, text in GENERATED_ETC.items():
        (folder / name).write_text(text)


def _visible(path: str) -> bool:
    """Whether a host path is already inside the computer's system folders."""
    return Path(path).is_relative_to("/usr")


@dataclass(frozen=True)
class Disk:
    """Where a computer's disk and generated files are, outside (on its server's side)."""

    root: Path
    etc: Path

    @property
    def workspace(self) -> Path:
        return self.root / "workspace"

    @property
    def home(self) -> Path:
        return self.root / "home"

    @property
    def tmp(self) -> Path:
        return self.root / "tmp"


def python_executable() -> str:
    """This host's Python interpreter (not a virtual environment's link), for the relay."""
    return os.path.realpath(sys.executable)


def command_line(
    disk: Disk,
    template: Template,
    argv: Sequence[str],
    *,
    cwd: str = WORKSPACE,
    env: Mapping[str, str] | None = None,
    procs_files: Sequence[str] = (),
    routes: Sequence[tuple[int, str]] = (),
    net_folder: Path | None = None,
) -> list[str]:
    """The wrapper and `bwrap` command line that runs `argv` inside the computer.

    Args:
        disk: The computer's disk and generated `/etc`.
        template: Its tools, variables and limits.
        argv: The command.
        cwd: Where it starts (inside).
        env: Variables of this command (on top of the template's).
        procs_files: The command's cgroups to join.
        routes: (port, socket file name in `net_folder`) per address relayed in.
        net_folder: The folder (outside) holding those sockets.
    """
    limits = template.limits
    bwrap = [
        "bwrap",
        "--unshare-all",
        "--unshare-user",
        "--disable-userns",
        "--cap-drop",
        "ALL",
        "--die-with-parent",
        "--new-session",
        "--hostname",
        "computer",
        "--ro-bind",
        "/usr",
        "/usr",
    ]
    for link in SYSTEM_LINKS:
        if os.path.islink(link):
            bwrap += ["--symlink", os.readlink(link), link]
        elif os.path.isdir(link):
            bwrap += ["--ro-bind", link, link]
    bwrap += ["--proc", "/proc", "--dev", "/dev"]
    for name in GENERATED_ETC:
        bwrap += ["--ro-bind", str(disk.etc / name), f"/etc/{name}"]
    for public in PUBLIC_ETC:
        bwrap += ["--ro-bind-try", public, public]
    bwrap += [
        "--bind", str(disk.workspace), WORKSPACE,
        "--bind", str(disk.home), HOME,
        "--bind", str(disk.tmp), "/tmp",
    ]  # fmt: skip
    # After the computer's own folders: a tool under /tmp (a checkout in a temporary folder)
    # stays visible on top of the computer's /tmp instead of being hidden by it.
    for tool in template.tools:
        if not _visible(tool):
            bwrap += ["--ro-bind", tool, tool]
    inner = list(argv)
    if routes:
        if net_folder is None:
            raise SandboxError("computer: routes need a folder for their sockets")
        python = python_executable()
        prefix = str(Path(sys.base_prefix).resolve())
        if not _visible(prefix) and prefix not in template.tools:
            bwrap += ["--ro-bind", prefix, prefix]
        bwrap += ["--ro-bind", str(RELAY_FILE), INSIDE_RELAY]
        bwrap += ["--ro-bind", str(net_folder), INSIDE_NET]
        inner = [
            python,
            "-I",
            "-S",
            INSIDE_RELAY,
            *(f"127.0.0.1:{port}={INSIDE_NET}/{name}" for port, name in routes),
            "--",
            *inner,
        ]
    bwrap += ["--remount-ro", "/", "--chdir", cwd, "--clearenv"]
    variables = {
        "PATH": template.path(),
        "HOME": HOME,
        "USER": "agent",
        "LOGNAME": "agent",
        "SHELL": "/bin/sh",
        "TMPDIR": "/tmp",
        "LANG": "C.UTF-8",
        **template.env,
        **(env or {}),
    }
    for name, value in variables.items():
        bwrap += ["--setenv", name, value]
    return [
        "/bin/sh",
        "-c",
        _WRAPPER,
        "sh",
        str(limits.cpu_seconds),
        str(OPEN_FILES),
        *procs_files,
        "--",
        *bwrap,
        "--",
        *inner,
    ]
