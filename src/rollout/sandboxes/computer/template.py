"""What a fresh computer holds and how much it may use: `Template` and `Limits`.

An environment declares its computer once: the files of the workspace (optionally committed in
a git repository, or a repository to clone), the host folders its tools come from (visible
read-only inside, at the same path, their `bin/` on PATH: the host's Python, Node, the pinned
agent CLIs), variables, setup commands, and the limits. Every instance starts from it, and a
reset starts it again from it.

Both records travel to the computer's server as JSON (`as_json` / `from_json`); a bad field is
refused when the record is made, with one line naming the field and the value.

Example:
    >>> template = Template(files={"README.md": "Add a function."}, git=True)
    >>> Template.from_json(template.as_json()) == template
    True
    >>> try:
    ...     Limits(memory_mb=0)
    ... except InvalidTemplate as error:
    ...     print(error)
    Limits: memory_mb must be a number >= 16, got 0
    >>> try:
    ...     Template(files={"../escape": "x"})
    ... except InvalidTemplate as error:
    ...     print(error)
    Template: files must be relative paths inside the workspace, got '../escape'
"""

from __future__ import annotations

import math
import os
import shutil
import sys
from collections.abc import Mapping
from dataclasses import asdict, dataclass, field
from pathlib import Path, PurePosixPath
from typing import Any

from rollout.errors import describe
from rollout.sandboxes.errors import SandboxError

WORKSPACE = "/workspace"
"""Where the workspace is inside a computer (commands start there)."""
HOME = "/home/agent"
"""The home folder inside a computer (kept between commands, like the workspace)."""
SYSTEM_PATH = ("/usr/local/bin", "/usr/bin", "/bin", "/usr/sbin", "/sbin")


class InvalidTemplate(SandboxError, ValueError):
    """A `Template` or `Limits` field is invalid (the message names the field and the value)."""

    def __init__(self, record: str, field: str, value: Any, reason: str) -> None:
        super().__init__(f"{record}: {field} {reason}, got {describe(value)}")
        self.field = field
        self.value = value


def _number(record: str, name: str, value: Any, low: float) -> None:
    if isinstance(value, bool) or not isinstance(value, int | float) or not math.isfinite(value):
        raise InvalidTemplate(record, name, value, f"must be a number >= {low:g}")
    if value < low:
        raise InvalidTemplate(record, name, value, f"must be a number >= {low:g}")


@dataclass(frozen=True)
class Limits:
    """What one computer may use.

    Attributes:
        memory_mb: Memory of all its processes together, the files of its disk included (its
            disk lives in memory); past it the kernel kills a process ("memory limit").
        processes: Processes and threads alive at once; past it `fork` fails ("process limit").
        disk_mb: Size of its disk (the workspace, the home folder and /tmp); past it writes
            fail with "No space left on device" ("disk full").
        cpus: CPU time per second of wall clock (1.0: one core), for all its processes.
        cpu_seconds: CPU time one process may use; past it the process is killed.
        command_seconds: The longest a command may run (a request may ask for less); past it
            every process of the command is killed ("wall-clock limit").
        output_bytes: Output kept per stream of a command (the rest is counted, not kept).
    """

    memory_mb: float = 2048
    processes: int = 256
    disk_mb: float = 512
    cpus: float = 1.0
    cpu_seconds: int = 600
    command_seconds: float = 600.0
    output_bytes: int = 1 << 20

    def __post_init__(self) -> None:
        _number("Limits", "memory_mb", self.memory_mb, 16)
        _number("Limits", "disk_mb", self.disk_mb, 1)
        _number("Limits", "cpus", self.cpus, 0.01)
        _number("Limits", "command_seconds", self.command_seconds, 0.1)
        for name, low in (("processes", 8), ("cpu_seconds", 1), ("output_bytes", 1024)):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int) or value < low:
                raise InvalidTemplate("Limits", name, value, f"must be an integer >= {low}")


def _relative(path: str) -> bool:
    parts = PurePosixPath(path).parts
    return bool(parts) and not PurePosixPath(path).is_absolute() and ".." not in parts


@dataclass(frozen=True)
class Template:
    """What a fresh computer holds (see the module docstring).

    Attributes:
        files: Workspace files, relative path -> text.
        git: Make the workspace a git repository with `files` committed (branch `main`).
        repository: A git repository (a path on the computer's host, or a URL its host reaches)
            cloned as the workspace, before `files` are written.
        tools: Host folders visible read-only inside at the same path; each one's `bin/` (if
            any) goes on PATH. `python_tool()` and `node_tool()` name the host's.
        env: Variables of every command (a request adds its own).
        setup: Shell commands run inside the computer, in order, once it holds its files; a
            failing one fails the computer's start.
        limits: What the computer may use.
    """

    files: Mapping[str, str] = field(default_factory=dict)
    git: bool = False
    repository: str | None = None
    tools: tuple[str, ...] = ()
    env: Mapping[str, str] = field(default_factory=dict)
    setup: tuple[str, ...] = ()
    limits: Limits = field(default_factory=Limits)

    def __post_init__(self) -> None:
        if not isinstance(self.files, Mapping):
            raise InvalidTemplate("Template", "files", self.files, "must be a mapping")
        for path, text in self.files.items():
            if not isinstance(path, str) or not _relative(path):
                raise InvalidTemplate(
                    "Template", "files", path, "must be relative paths inside the workspace"
                )
            if not isinstance(text, str):
                raise InvalidTemplate("Template", f"files[{path!r}]", text, "must be text")
        if not isinstance(self.git, bool):
            raise InvalidTemplate("Template", "git", self.git, "must be a bool")
        if self.repository is not None and (
            not isinstance(self.repository, str) or not self.repository
        ):
            raise InvalidTemplate(
                "Template", "repository", self.repository, "must be a path, a URL or None"
            )
        object.__setattr__(self, "tools", tuple(str(tool) for tool in self.tools))
        for tool in self.tools:
            if not os.path.isabs(tool) or tool == "/":
                raise InvalidTemplate("Template", "tools", tool, "must be absolute host folders")
        if not isinstance(self.env, Mapping) or not all(
            isinstance(k, str) and k and "=" not in k and isinstance(v, str)
            for k, v in self.env.items()
        ):
            raise InvalidTemplate("Template", "env", self.env, "must map names to strings")
        object.__setattr__(self, "setup", tuple(self.setup))
        if not all(isinstance(command, str) for command in self.setup):
            raise InvalidTemplate("Template", "setup", self.setup, "must be shell commands")
        if not isinstance(self.limits, Limits):
            raise InvalidTemplate("Template", "limits", self.limits, "must be a Limits")

    def path(self) -> str:
        """PATH inside the computer: the tools' `bin/` folders, then the system's."""
        bins = [f"{tool}/bin" for tool in self.tools if Path(tool, "bin").is_dir()]
        return ":".join([*bins, *SYSTEM_PATH])

    def as_json(self) -> dict[str, Any]:
        return {**asdict(self), "files": dict(self.files), "env": dict(self.env)}

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> Template:
        values = dict(data)
        values["tools"] = tuple(values.get("tools", ()))
        values["setup"] = tuple(values.get("setup", ()))
        values["limits"] = Limits(**values.get("limits", {}))
        return cls(**values)


def python_tool() -> str:
    """The host folder of the Python that runs this process (its `bin/` has `python3`)."""
    return str(Path(sys.base_prefix).resolve())


def node_tool() -> str:
    """The host folder of `node` (its `bin/` has `node`). Raises SandboxError when missing."""
    found = shutil.which("node")
    if found is None:
        raise SandboxError("computer: `node` is not on PATH (a template asked for Node.js)")
    return str(Path(found).resolve().parent.parent)
