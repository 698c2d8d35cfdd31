"""`rollout up --launcher ray`: the roles as Ray actors on a Ray cluster.

The launcher connects to a Ray cluster (`--ray-address` or `RAY_ADDRESS`: `host:port`, `auto` or
a Ray Client `ray://host:10001` URL), or starts a local one, and keeps one actor per role alive:
the bridge and the runners, and per active run an inference server, a gateway and a trainer, as
`rollout up` does with processes. Each actor runs the role's coroutine from
`rollout.launch.roles` in its own worker process.

- The GPU roles (trainer, inference) ask Ray for the preset's GPUs (`role_gpus`: the preset's
  `gpus`, else 1 on a `cuda` device) and one CPU; the CPU roles ask for none and are spread over
  the nodes (`SPREAD`).
- The ledger stays the only coordination: the launcher only places processes. A lost actor (its
  process killed, its node gone, or its role crashed: a crashed role exits its process) is
  restarted by Ray (`max_restarts`) and its `run` call retried (`max_task_retries`); the new
  trainer takes the run's lease with a higher epoch, so the old one is fenced like any killed
  process.
- The inference server and the gateway bind the node's address and advertise it in the run's
  settings (`inference_url`, `gateway_url`), reusing their port when they come back on the same
  node, so the roles that call them find them wherever Ray placed them.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import socket
import time
from dataclasses import dataclass, field
from typing import Any

from rollout.errors import RolloutError
from rollout.launch.role_logs import own_log, rotate_if_large
from rollout.ledger import Ledger, RunRecord
from rollout.runs.config import RunConfig
from rollout.runs.errors import RunError
from rollout.runs.spec import RunSpec
from rollout.settings import ROLE_VAR, Settings

log = logging.getLogger("rollout.ray")

ROLES = ("inference", "gateway", "trainer", "runner", "bridge")
"""Every role the launcher places, in the order it starts them."""
GPU_ROLES = frozenset({"inference", "trainer"})
NAMESPACE = "rollout"
"""The Ray namespace of the launcher's named actors (`ray list actors`)."""


class RayLaunchError(RolloutError):
    """Ray is missing, unreachable, or asked for something it cannot place."""


def role_gpus(config: RunConfig) -> float:
    """GPUs for each GPU role of a run: the preset's `gpus`, else 1 on a `cuda` device, else 0.

    The Helm chart sizes its Ray workers by the same rule.

    Example:
        >>> from rollout.runs.config import RunConfig
        >>> role_gpus(RunConfig(device="cpu")), role_gpus(RunConfig(device="cuda:0"))
        (0.0, 1.0)
        >>> role_gpus(RunConfig(device="cuda", gpus=0.5))
        0.5
    """
    if config.gpus is not None:
        return float(config.gpus)
    return 1.0 if config.device.startswith("cuda") else 0.0


SPREAD_CPUS = 0.01
"""The CPU a role other than the GPU roles asks Ray for (see `RolePlacement.cpus`)."""


@dataclass(frozen=True)
class RolePlacement:
    """One actor the launcher keeps alive: its name, role, the role's arguments and resources."""

    name: str
    role: str
    kwargs: dict[str, Any] = field(hash=False)
    gpus: float = 0.0

    @property
    def cpus(self) -> float:
        """GPU roles hold a CPU (keeping them off a Ray head started with no CPUs); the others
        ask for a hundredth, so a small machine fits every role. Not none: Ray places an actor
        that asks for no resource on a node of its own choosing, ignoring `SPREAD` (two CI runs
        put every role of a two-node cluster on the head); one that asks for some is spread
        round robin."""
        return 1.0 if self.role in GPU_ROLES else SPREAD_CPUS


def plan(
    active: list[tuple[RunRecord, RunConfig]],
    *,
    runners: int | None = None,
    only_run: str | None = None,
    roles: frozenset[str] | None = None,
) -> list[RolePlacement]:
    """The actors for these active runs: the bridge, the runners (as many as the largest
    preset asks for), and each run's inference server, gateway and trainer.

    Example:
        >>> from rollout.ledger import RunRecord
        >>> run = RunRecord(run_id="r1", name="demo", environment="m:e", config={}, created_at=0)
        >>> [p.name for p in plan([(run, RunConfig(runners=2))])]
        ['bridge', 'runner-0', 'runner-1', 'inference-demo', 'gateway-demo', 'trainer-demo']
        >>> [(p.name, p.gpus) for p in plan([(run, RunConfig(device="cuda"))], roles=GPU_ROLES)]
        [('inference-demo', 1.0), ('trainer-demo', 1.0)]
    """
    configs = [config for _, config in active]
    count = runners or max([c.runners for c in configs] or [1])
    concurrency = max([c.runner_concurrency for c in configs] or [32])
    placements = [RolePlacement("bridge", "bridge", {})]
    placements += [
        RolePlacement(
            f"runner-{index}",
            "runner",
            {"run": only_run, "concurrency": concurrency, "name": f"runner-{index}"},
        )
        for index in range(count)
    ]
    for run, config in active:
        gpus = role_gpus(config)
        placements += [
            RolePlacement(f"inference-{run.name}", "inference", {"run": run.run_id}, gpus),
            RolePlacement(f"gateway-{run.name}", "gateway", {"run": run.run_id}),
            RolePlacement(f"trainer-{run.name}", "trainer", {"run": run.run_id}, gpus),
        ]
    return [p for p in placements if roles is None or p.role in roles]


class RoleActor:
    """A Ray actor running one role's coroutine until `stop` (made remote by `_actor_class`)."""

    def __init__(self, role: str, kwargs: dict[str, Any]) -> None:
        logging.basicConfig(
            level=logging.INFO, format="%(asctime)s %(name)s %(levelname)s %(message)s"
        )
        self.role = role
        self.kwargs = kwargs
        self._stop: asyncio.Event | None = None

    def pid(self) -> int:
        return os.getpid()

    async def run(self) -> None:
        from rollout.launch import roles

        self._stop = asyncio.Event()
        kwargs = dict(self.kwargs)
        try:
            if self.role in ("inference", "gateway"):
                kwargs["host"], kwargs["port"] = await _address(self.role, kwargs["run"])
            await getattr(roles, self.role)(self._stop, **kwargs)
        except Exception:
            # A crashed role is a lost actor: Ray restarts the process and retries this call.
            log.exception("%s crashed; exiting so that Ray restarts it", self.role)
            logging.shutdown()
            os._exit(1)

    async def stop(self) -> None:
        if self._stop is not None:
            self._stop.set()


async def _address(role: str, run: str) -> tuple[str, int]:
    """This node's address, and the port the role advertised before if that was on this node
    (a restarted role comes back where its callers look for it), else any free port."""
    import ray

    host = ray.util.get_node_ip_address()
    ledger = await Ledger.connect()
    try:
        record = await ledger.get_run(run)
        url = (await ledger.run_settings(record.run_id)).url_of(role) or ""
    finally:
        await ledger.close()
    before_host, _, before_port = url.partition("://")[2].rpartition(":")
    if before_host == host and before_port.isdigit():
        with socket.socket() as probe, contextlib.suppress(OSError):
            probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            probe.bind((host, int(before_port)))
            return host, int(before_port)
    return host, 0


def _actor_class() -> Any:
    import ray

    return ray.remote(RoleActor)


def connect(address: str | None) -> None:
    """Connect to the Ray cluster at `address` (else RAY_ADDRESS), or start a local one."""
    # Ray's `uv run` hook would ship this folder to every worker and re-create the environment
    # there; the workers already run this interpreter.
    os.environ.setdefault("RAY_ENABLE_UV_RUN_RUNTIME_ENV", "0")
    try:
        import ray
    except ImportError:
        raise RayLaunchError(
            "the ray launcher needs Ray: install rollout with its cluster extra "
            "(pip install 'rollout[cluster]', or uv sync --extra cluster)"
        ) from None
    address = address or os.environ.get("RAY_ADDRESS") or None
    if ray.is_initialized():
        return
    if address:
        try:
            ray.init(address=address, namespace=NAMESPACE, log_to_driver=True)
        except (ConnectionError, RuntimeError, ValueError) as error:
            raise RayLaunchError(f"cannot connect to Ray at {address}: {error}") from None
        return
    os.environ.setdefault("RAY_AUTH_MODE", "disabled")
    for attempt in range(1, 4):
        try:
            # Logical CPUs: the GPU roles hold one each; the CPU roles ask for none.
            ray.init(
                num_cpus=max(4, os.cpu_count() or 1),
                namespace=NAMESPACE,
                include_dashboard=False,
                log_to_driver=True,
            )
            return
        except Exception as error:  # Ray raises a bare Exception when its node starts slowly
            # A busy machine can miss Ray's fixed 30 s start-up wait: start it again.
            log.warning("local Ray did not start (attempt %d of 3): %s", attempt, error)
            ray.shutdown()
            if attempt == 3:
                raise RayLaunchError(f"cannot start a local Ray cluster: {error}") from None


@dataclass
class _Placed:
    placement: RolePlacement
    actor: Any
    ref: Any
    started: float = field(default_factory=time.monotonic)
    restarts: int = 0


class RayLauncher:
    """Keeps the selected runs' roles alive as Ray actors until stopped (or until they finish).

    Args:
        ledger: The ledger the roles follow (its URL goes to every actor).
        settings: The state folder and blob store the actors use.
        runs: Only these runs (ids or names); None: every run.
        until_finished: Return once the selected runs are finished.
        roles: Only these roles (the Helm chart places the trainer and inference server here and
            runs the others as Deployments); None: every role.
        runners: How many runners (default: the largest preset's `runners`).
        max_restarts: How often Ray restarts a lost actor (-1: always).
    """

    def __init__(
        self,
        ledger: Ledger,
        settings: Settings,
        *,
        runs: list[str] | None = None,
        until_finished: bool = False,
        roles: frozenset[str] | None = None,
        runners: int | None = None,
        max_restarts: int = -1,
    ) -> None:
        unknown = sorted(set(roles or ()) - set(ROLES))
        if unknown:
            raise RayLaunchError(f"role {unknown[0]!r} is not one of {', '.join(ROLES)}")
        self.ledger = ledger
        self.settings = settings
        self.run_filter = runs
        self.until_finished = until_finished
        self.roles = roles
        self.runners = runners
        self.max_restarts = max_restarts
        self.placed: dict[str, _Placed] = {}
        self._specs: dict[str, RunSpec | None] = {}
        self.env = {
            **settings.environ(ledger.url),
            "PYTHONUNBUFFERED": "1",
            "OMP_NUM_THREADS": "1",  # roles share a node's cores
            "TOKENIZERS_PARALLELISM": "false",
        }

    def _spec(self, run: RunRecord) -> RunSpec | None:
        if run.run_id not in self._specs:
            try:
                self._specs[run.run_id] = RunSpec.of(run)
            except RunError as error:
                log.warning("%s; not placing its roles", error)
                self._specs[run.run_id] = None
        return self._specs[run.run_id]

    async def active_runs(self) -> tuple[list[tuple[RunRecord, RunConfig]], list[RunRecord]]:
        """The selected train runs that are still going, and those that finished."""
        runs = await self.ledger.list_runs()
        if self.run_filter is not None:
            runs = [r for r in runs if r.run_id in self.run_filter or r.name in self.run_filter]
        active: list[tuple[RunRecord, RunConfig]] = []
        finished: list[RunRecord] = []
        for run in runs:
            spec = self._spec(run)
            if spec is None or spec.training is None:
                continue
            if (await self.ledger.run_settings(run.run_id)).finished:
                finished.append(run)
            else:
                active.append((run, spec.training))
        return active, finished

    def _place(self, placement: RolePlacement) -> _Placed:
        options: dict[str, Any] = {
            "name": f"{placement.name}-{os.getpid()}",
            "namespace": NAMESPACE,
            "num_cpus": placement.cpus,
            "num_gpus": placement.gpus,
            "max_restarts": self.max_restarts,
            "max_task_retries": -1,
            "max_concurrency": 4,  # `stop` runs while `run` awaits
            "runtime_env": {"env_vars": {**self.env, ROLE_VAR: placement.name}},
        }
        if placement.role not in GPU_ROLES:
            options["scheduling_strategy"] = "SPREAD"
        actor = _actor_class().options(**options).remote(placement.role, placement.kwargs)
        log.info("placed %s (gpus %s)", placement.name, placement.gpus)
        return _Placed(placement, actor, actor.run.remote())

    def _retire(self, name: str) -> None:
        placed = self.placed.pop(name, None)
        if placed is None:
            return
        import ray

        placed.actor.stop.remote()
        with contextlib.suppress(Exception):
            ray.wait([placed.ref], timeout=15)
        ray.kill(placed.actor, no_restart=True)
        log.info("retired %s", name)

    def _check(self) -> None:
        """Re-place an actor whose `run` ended: Ray gave up restarting it, or it returned."""
        import ray

        refs = {p.ref: name for name, p in self.placed.items()}
        if not refs:
            return
        done, _ = ray.wait(list(refs), num_returns=len(refs), timeout=0)
        for ref in done:
            name = refs[ref]
            placed = self.placed.pop(name)
            try:
                ray.get(ref)
                log.warning("%s returned; placing it again", name)
            except Exception as error:
                log.warning("%s is lost (%s); placing it again", name, type(error).__name__)
            with contextlib.suppress(Exception):
                ray.kill(placed.actor, no_restart=True)
            again = self._place(placed.placement)
            again.restarts = placed.restarts + 1
            self.placed[name] = again

    async def reconcile(self) -> bool:
        """Place, re-place and retire actors. Returns False when there is nothing left to do."""
        active, finished = await self.active_runs()
        for run in finished:
            for role in ("inference", "gateway", "trainer"):
                self._retire(f"{role}-{run.name}")
        if self.until_finished and not active:
            return False
        only = active[0][0].run_id if self.run_filter is not None and len(active) == 1 else None
        wanted = plan(active, runners=self.runners, only_run=only, roles=self.roles)
        self._check()
        for placement in wanted:
            if placement.name not in self.placed:
                self.placed[placement.name] = self._place(placement)
        return True

    async def run(self, stop: asyncio.Event) -> None:
        try:
            while not stop.is_set():
                if not await self.reconcile():
                    return
                # This launcher's own log (`rollout train --launcher ray` appends to a file);
                # the actors' output is Ray's to keep.
                own = own_log()
                if own is not None:
                    await asyncio.to_thread(rotate_if_large, own, self.settings.log_max_bytes)
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(stop.wait(), timeout=1.0)
        finally:
            await asyncio.to_thread(self.stop_all)

    def stop_all(self) -> None:
        """Ask every role to stop, give them a moment, then end their actors."""
        import ray

        placed = list(self.placed.values())
        for item in placed:
            with contextlib.suppress(Exception):
                item.actor.stop.remote()
        with contextlib.suppress(Exception):
            ray.wait([p.ref for p in placed], num_returns=len(placed), timeout=15)
        for item in placed:
            with contextlib.suppress(Exception):
                ray.kill(item.actor, no_restart=True)
        self.placed.clear()


async def launch(
    stop: asyncio.Event,
    *,
    runs: list[str] | None,
    until_finished: bool,
    address: str | None,
    roles: list[str] | None = None,
) -> None:
    """`rollout up --launcher ray`: connect to Ray and keep the roles placed until `stop`."""
    from rollout.settings import get_settings

    await asyncio.to_thread(connect, address)
    ledger = await Ledger.connect()
    try:
        launcher = RayLauncher(
            ledger,
            get_settings(),
            runs=runs,
            until_finished=until_finished,
            roles=frozenset(roles) if roles else None,
        )
        await launcher.run(stop)
    finally:
        await ledger.close()
        import ray

        ray.shutdown()
