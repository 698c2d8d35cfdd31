"""`ComputerPool`: computers as sandbox instances, claimed and leased like any shared world.

An instance is a computer's server process (`rollout.sandboxes.computer.server`), started by
`ProcessPool` like any other local instance, in a mount namespace of its own (`unshare
--mount`). Its address is the one `ProcessPool` chooses and advertises (`host`, `port`), so the
address handling of every process pool applies unchanged; its details add `secret` (the
claim's), `kind: "computer"` and `cgroup` (the name of its cgroups).

- `start`: the host must be able to run computers (`bubblewrap.check_host`); the template and
  a first secret go to the instance's folder, and the instance is ready once it has set its
  computer up (`ready`, a file it writes) and listens.
- `health`: the process is alive and the API answers with the secret the ledger holds.
- `claimed`: every claim gets a new secret (`POST /claim`): whoever held an earlier claim is
  refused from then on.
- `reset`: in place (`POST /reset`: every process killed, a fresh disk from the template);
  if the server does not answer, stop it and start a new one.
- `stop`: the process group is stopped, and its cgroups removed even if it was killed.
"""

from __future__ import annotations

import asyncio
import json
import os
import secrets
import sys
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from rollout.sandboxes.computer.bubblewrap import check_host
from rollout.sandboxes.computer.cgroups import Cgroups
from rollout.sandboxes.computer.client import Computer
from rollout.sandboxes.computer.machine import READY_FILE, SECRET_FILE, TEMPLATE_FILE
from rollout.sandboxes.computer.template import Template
from rollout.sandboxes.errors import SandboxError
from rollout.sandboxes.pool import Details
from rollout.sandboxes.process import ProcessPool, port_open

KIND = "computer"


def _new_secret() -> str:
    return secrets.token_urlsafe(32)


def _cgroup_name(workdir: Path, port: int) -> str:
    """The name of an instance's cgroups (its folder's name and its port: unique per host)."""
    return f"{workdir.name}-{port}"


class ComputerPool(ProcessPool):
    """Computers made from `template` (see the module docstring).

    Args:
        template: What a fresh computer holds and may use.
        name: The pool's name.
        seats: How many agents one computer holds.
        max_instances: The most live computers per host.
    """

    startup_timeout = 60.0

    def __init__(
        self,
        template: Template | None = None,
        *,
        name: str = KIND,
        seats: int = 8,
        max_instances: int = 4,
    ) -> None:
        if template is not None and not isinstance(template, Template):
            raise SandboxError(f"ComputerPool: template must be a Template, got {template!r}")
        if isinstance(seats, bool) or not isinstance(seats, int) or seats < 1:
            raise SandboxError(f"ComputerPool: seats must be an integer >= 1, got {seats!r}")
        self.template = template or Template()
        self.name = name
        self.seats = seats
        self.max_instances = max_instances

    def command(self, port: int, workdir: Path, host: str = "127.0.0.1") -> Sequence[str]:
        return [
            "unshare",
            "--mount",
            "--propagation",
            "private",
            sys.executable,
            "-m",
            "rollout.sandboxes.computer.server",
            "--workdir",
            str(workdir),
            "--host",
            host,
            "--port",
            str(port),
            "--name",
            _cgroup_name(workdir, port),
        ]

    async def ready(self, details: Mapping[str, Any]) -> bool:
        ready = os.path.join(details["workdir"], READY_FILE)
        if not await asyncio.to_thread(os.path.exists, ready):
            return False
        return await port_open(details["host"], details["port"])

    def _prepare(self, workdir: Path) -> str:
        """The instance's folder with its template and a first secret (returned)."""
        workdir.mkdir(parents=True, exist_ok=True)
        (workdir / READY_FILE).unlink(missing_ok=True)
        (workdir / TEMPLATE_FILE).write_text(json.dumps(self.template.as_json()))
        secret = _new_secret()
        descriptor = os.open(workdir / SECRET_FILE, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        with os.fdopen(descriptor, "w") as file:
            file.write(secret)
        return secret

    async def start(self, workdir: Path) -> Details:
        check_host()
        secret = await asyncio.to_thread(self._prepare, workdir)
        details = await super().start(workdir)
        cgroup = _cgroup_name(workdir, details["port"])
        return {**details, "kind": KIND, "secret": secret, "cgroup": cgroup}

    async def health(self, details: Mapping[str, Any]) -> bool:
        if not await super().health(details):
            return False
        async with Computer.of(details) as computer:
            return await computer.health()

    async def reset(self, details: Mapping[str, Any], workdir: Path) -> Details:
        try:
            async with Computer.of(details) as computer:
                await computer.reset()
        except SandboxError:  # it does not answer: a new process, from the template
            return await super().reset(details, workdir)
        return dict(details)

    async def claimed(self, details: Mapping[str, Any]) -> Details:
        secret = _new_secret()
        async with Computer.of(details) as computer:
            await computer.rotate(secret)
        return {**details, "secret": secret}

    async def stop(self, details: Mapping[str, Any]) -> None:
        await super().stop(details)
        cgroup = details.get("cgroup")
        if isinstance(cgroup, str) and cgroup:  # a killed server leaves its groups behind
            await asyncio.to_thread(Cgroups.existing(cgroup).remove)
