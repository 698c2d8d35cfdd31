"""`rollout up`: every role of the platform on one machine, under one supervisor.

Global roles: the bridge and the runners. Per active run: an inference server, a gateway and a
trainer (and an evaluator while the run has evals to score). Each role is a separate
`rollout <role>` process with the ledger's URL in its environment; its output goes to
`<state_dir>/logs/<role>.log` (rotated by size: role_logs). A role that dies is restarted (with
back-off); because every role is a follower of the ledger and the blob store, a restart loses
nothing.

`roles` (`rollout up --role ROLE`, repeatable) starts only those roles here, so several machines
share a run: one machine's supervisor runs the trainer and the bridge, another's the inference
server and the gateway, others the runners, all on one database URL and one blob URL.

The inference server and the gateway listen on this machine's service address
(`rollout.net.address`: loopback when the ledger is this machine's embedded Postgres, else an
address other machines reach) on a port chosen once per run and recorded as run settings
(`inference_url`, `gateway_url`), so a restarted role comes back at the same address; a URL that
another machine recorded is replaced.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import signal
import subprocess
import sys
import time
from dataclasses import dataclass, field, replace
from pathlib import Path
from urllib.parse import urlsplit

from rollout.launch.db_watch import watch_embedded
from rollout.launch.errors import LaunchError
from rollout.launch.failures import check_failures
from rollout.launch.owner import owned_env, this_owner
from rollout.launch.role_logs import own_log, rotate_if_large
from rollout.ledger import Ledger, RunRecord
from rollout.net.address import service_address
from rollout.net.server import free_port
from rollout.runs import live
from rollout.runs.config import RunConfig
from rollout.runs.errors import RunError
from rollout.runs.spec import RunSpec
from rollout.settings import Settings

log = logging.getLogger("rollout.up")

ROLES = ("inference", "gateway", "trainer", "evaluator", "runner", "bridge")
"""Every role the supervisor starts (`rollout up --role` picks some)."""
RUN_ROLES = ("inference", "gateway", "trainer")
"""The roles of one active run."""

HEALTHY_S = 10.0
"""A role that ran this long before it exited is restarted without back-off."""


def _quick_exits_after(exits: int, code: int, lived_s: float) -> int:
    """The count of quick exits in a row after one more exit (`code`, after `lived_s` seconds).

    The restart back-off (0.5 s doubling to 30 s) is for crash loops: a role that ran for
    `HEALTHY_S` or was killed by SIGKILL (the OOM killer, an operator, a chaos test) counts from 1.
    """
    if code == -signal.SIGKILL or lived_s >= HEALTHY_S:
        return 1
    return exits + 1


@dataclass
class ManagedProcess:
    name: str
    argv: list[str]
    log_path: Path
    env: dict[str, str]
    process: subprocess.Popen[bytes] | None = None
    restarts: int = 0
    quick_exits: int = 0
    next_start: float = 0.0
    started_at: float = 0.0
    history: list[int] = field(default_factory=list)

    def alive(self) -> bool:
        return self.process is not None and self.process.poll() is None

    def start(self) -> None:
        self.log_path.parent.mkdir(parents=True, exist_ok=True)
        out = self.log_path.open("ab")
        self.process = subprocess.Popen(
            self.argv,
            stdout=out,
            stderr=subprocess.STDOUT,
            env=owned_env(self.env),  # the role stops when this supervisor dies, even by kill -9
            start_new_session=True,
        )
        out.close()
        self.started_at = time.monotonic()
        log.info("started %s (pid %s)", self.name, self.process.pid)

    def stop(self, timeout: float = 10.0) -> None:
        if self.process is None or self.process.poll() is not None:
            return
        self.process.send_signal(signal.SIGTERM)
        try:
            self.process.wait(timeout)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait()


def role_argv(*args: str) -> list[str]:
    return [sys.executable, "-m", "rollout.cli", *args]


def check_roles(roles: list[str] | None) -> frozenset[str] | None:
    """The roles asked for (None: every role).

    Raises:
        LaunchError: one of them is not a role, naming it.

    Example:
        >>> sorted(check_roles(["runner", "trainer"]) or ())
        ['runner', 'trainer']
        >>> check_roles(["trainer", "runners"])
        Traceback (most recent call last):
        ...
        rollout.launch.errors.LaunchError: --role must be one of inference, gateway, trainer, \
evaluator, runner, bridge, got 'runners'
    """
    if not roles:
        return None
    for role in roles:
        if role not in ROLES:
            raise LaunchError(f"--role must be one of {', '.join(ROLES)}, got {role!r}")
    return frozenset(roles)


class LocalSupervisor:
    """Keeps the roles of the selected runs alive until stopped (or until those runs finish)."""

    def __init__(
        self,
        ledger: Ledger,
        settings: Settings,
        *,
        runs: list[str] | None = None,
        until_finished: bool = False,
        runners: int | None = None,
        roles: frozenset[str] | None = None,
    ) -> None:
        self.ledger = ledger
        self.settings = settings
        self.run_filter = runs
        self.until_finished = until_finished
        self.runner_count = runners
        self.roles = roles
        # Where the inference server and the gateway listen: judged by this ledger's URL.
        self.address = service_address(replace(settings, database_url=ledger.url))
        self.processes: dict[str, ManagedProcess] = {}
        self._specs: dict[str, RunSpec | None] = {}
        self._failed: set[str] = set()
        self._seen: set[str] = set()
        # Every role uses this ledger's database and these settings, whatever started it.
        env = {**os.environ, **settings.environ(ledger.url)}
        env.setdefault("PYTHONUNBUFFERED", "1")
        # Several roles share the machine's cores: one compute thread each avoids oversubscription.
        env.setdefault("OMP_NUM_THREADS", "1")
        env.setdefault("TOKENIZERS_PARALLELISM", "false")
        self.env = env

    def runs_role(self, role: str) -> bool:
        """Whether this supervisor starts `role` (`rollout up --role`)."""
        return self.roles is None or role in self.roles

    def _ensure(self, name: str, role: str, *args: str) -> None:
        """Keep process `name` (`rollout ROLE ARGS`) running, if this supervisor runs `role`."""
        if self.runs_role(role):
            self._keep(name, role_argv(role, *args))

    def _keep(self, name: str, argv: list[str]) -> ManagedProcess:
        """Start process `name` (`argv`), or start it again once it exited (with back-off)."""
        managed = self.processes.get(name)
        if managed is None:
            managed = ManagedProcess(
                name, argv, self.settings.logs_dir / f"{name}.log", dict(self.env)
            )
            self.processes[name] = managed
        now = time.monotonic()
        if not managed.alive() and now >= managed.next_start:
            if managed.process is not None:
                code = managed.process.returncode
                managed.history.append(code)
                managed.restarts += 1
                managed.quick_exits = _quick_exits_after(
                    managed.quick_exits, code, now - managed.started_at
                )
                log.warning("%s exited with %s; restarting", name, code)
            managed.start()
            managed.next_start = now + min(30.0, 0.5 * 2 ** min(managed.quick_exits, 6))
        return managed

    def _spec(self, run: RunRecord) -> RunSpec | None:
        """The run's spec, or None (warned about once) when it has none this supervisor runs."""
        if run.run_id not in self._specs:
            try:
                self._specs[run.run_id] = RunSpec.of(run)
            except RunError as error:
                log.warning("%s; not starting its roles", error)
                self._specs[run.run_id] = None
        return self._specs[run.run_id]

    def _retire(self, name: str) -> None:
        managed = self.processes.pop(name, None)
        if managed is not None:
            managed.stop()

    async def _run_url(self, run_id: str, role: str) -> str:
        """The URL `role` (inference or gateway) serves `run_id` at from this machine: the one
        recorded, when it is on this machine's address, else a free port, recorded."""
        url = (await self.ledger.run_settings(run_id)).url_of(role)
        if not url or urlsplit(url).hostname != self.address:
            url = f"http://{self.address}:{free_port(self.address)}"
            await self.ledger.set_setting(run_id, live.ADVERTISED_URLS[role], url)
        return url

    async def _wanted(self, run: RunRecord, settings: live.RunSettings) -> bool:
        """Whether an unfinished run should train: not failed (past the failure threshold, until
        `rollout runs resume RUN` clears it), and not stopped unless this supervisor was told to
        run it (`rollout up --run RUN`) and it was stopped before this supervisor started."""
        named = self.run_filter is not None
        error = await check_failures(self.ledger, run.run_id)
        if error is None:
            self._failed.discard(run.run_id)  # resumed (`rollout runs resume`): log a new failure
        else:
            if run.run_id not in self._failed:
                self._failed.add(run.run_id)
                log.error("run %s failed: %s", run.name, error)
            return False
        first_look = run.run_id not in self._seen
        self._seen.add(run.run_id)
        if settings.stopped:
            # Resumed on purpose when named at start; stopped later (`rollout runs stop`): retired.
            if not (named and first_look):
                return False
            await self.ledger.set_setting(run.run_id, live.STATUS, "running")
        return True

    async def reconcile(self) -> bool:
        """Start/restart/retire processes. Returns False when there is nothing left to do."""
        runs = await self.ledger.list_runs()
        if self.run_filter is not None:
            runs = [r for r in runs if r.run_id in self.run_filter or r.name in self.run_filter]
        active: list[RunRecord] = []
        presets: list[RunConfig] = []
        evaluating = False
        for run in runs:
            spec = self._spec(run)
            if spec is None or spec.training is None:
                continue
            settings = await self.ledger.run_settings(run.run_id)
            wanted = settings.finished or await self._wanted(run, settings)
            # A run with an eval schedule has an evaluator until its last eval is scored.
            if wanted and spec.training.evals and not settings.evaluated:
                self._ensure(f"evaluator-{run.name}", "evaluator", "--run", run.run_id)
                evaluating = True
            else:
                self._retire(f"evaluator-{run.name}")
            if not wanted or settings.finished:
                for role in RUN_ROLES:
                    self._retire(f"{role}-{run.name}")
                continue
            active.append(run)
            presets.append(spec.training)
        if self.until_finished and not active and not evaluating:
            return False
        self._ensure("bridge", "bridge")
        wanted_runners = self.runner_count or max([p.runners for p in presets] or [1])
        concurrency = max([p.runner_concurrency for p in presets] or [32])
        # Supervising chosen runs: runners play only theirs, never seats left by other runs.
        only = ["--run", runs[0].run_id] if self.run_filter is not None and len(runs) == 1 else []
        for index in range(wanted_runners):
            self._ensure(
                f"runner-{index}",
                "runner", "--concurrency", str(concurrency), "--name", f"runner-{index}", *only,
            )  # fmt: skip
        for run in active:
            for role in ("inference", "gateway"):
                if self.runs_role(role):
                    port = str(urlsplit(await self._run_url(run.run_id, role)).port)
                    self._ensure(
                        f"{role}-{run.name}",
                        role, "--run", run.run_id, "--host", self.address, "--port", port,
                    )  # fmt: skip
            self._ensure(f"trainer-{run.name}", "trainer", "--run", run.run_id)
        return True

    async def run(self, stop: asyncio.Event) -> None:
        # The embedded Postgres is restarted when it dies (an external one is not ours).
        watch = asyncio.create_task(watch_embedded(self.ledger.url, self.settings.state_dir, stop))
        try:
            while not stop.is_set():
                if not await self.reconcile():
                    return
                await asyncio.to_thread(self.rotate_logs)
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(stop.wait(), timeout=1.0)
        finally:
            watch.cancel()
            # Nobody waits for a clean stop when the owner died (kill -9 of `rollout train`):
            # a short grace, then SIGKILL, which loses nothing (roles are ledger followers).
            self.stop_all(grace=3.0 if this_owner().gone() else 15.0)

    def rotate_logs(self) -> None:
        """Rotate each role's log, and this supervisor's own, that has reached
        `ROLLOUT_LOG_MAX_MB` (role_logs)."""
        paths = [managed.log_path for managed in list(self.processes.values())]
        for path in [*paths, *filter(None, [own_log()])]:
            if rotate_if_large(path, self.settings.log_max_bytes):
                log.info("rotated %s", path)

    def stop_all(self, grace: float = 15.0) -> None:
        for managed in list(self.processes.values()):
            if managed.process is not None and managed.process.poll() is None:
                managed.process.send_signal(signal.SIGTERM)
        deadline = time.monotonic() + grace
        for managed in self.processes.values():
            if managed.process is None:
                continue
            try:
                managed.process.wait(max(0.1, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                managed.process.kill()
                managed.process.wait()
