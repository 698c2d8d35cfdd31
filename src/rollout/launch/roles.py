"""The long-running roles behind `rollout inference|gateway|trainer|runner|bridge|up`.

Each takes a stop event and returns when it is set. All of them find each other through the
ledger: the database URL comes from ROLLOUT_DATABASE_URL (or the embedded Postgres).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import secrets
import socket
from pathlib import Path
from typing import TYPE_CHECKING, Any, cast

from rollout.blobs import BlobStore
from rollout.contracts import DEFAULT_POLICY
from rollout.ledger import KeyInfo, Ledger
from rollout.runs import live
from rollout.runs.policies import PolicyMap
from rollout.runs.spec import RunSpec
from rollout.settings import get_settings

if TYPE_CHECKING:
    from rollout.launch.backends import StartedBackend

log = logging.getLogger("rollout.roles")


async def _connect() -> Ledger:
    return await Ledger.connect()


def _cache(run_id: str, role: str) -> Path:
    """This process's working folder for a run (downloaded checkpoints, scratch space)."""
    return get_settings().cache_dir / run_id / f"{role}-{os.getpid()}"


async def advertise(ledger: Ledger, run_id: str, key: str, url: str) -> None:
    """Record where this role serves the run (`inference_url`, `gateway_url`), so the roles that
    call it find it however it was started. A wildcard bind is advertised by host name."""
    scheme, _, rest = url.partition("://")
    host, _, port = rest.rpartition(":")
    if host in ("0.0.0.0", "[::]", "::"):
        url = f"{scheme}://{socket.getfqdn()}:{port}"
    await ledger.set_setting(run_id, key, url)  # appends nothing when it is already this URL


async def internal_secret(ledger: Ledger, run_id: str) -> str:
    """The run's `internal_secret` (made at run creation; made now for a run that has none):
    internal endpoints bound beyond loopback refuse requests without it."""
    secret = (await ledger.run_settings(run_id)).internal_secret
    if not secret:
        await ledger.set_setting(run_id, live.INTERNAL_SECRET, secrets.token_urlsafe(32))
        secret = (await ledger.run_settings(run_id)).internal_secret
    assert secret is not None
    return secret


async def inference(stop: asyncio.Event, *, run: str, host: str, port: int) -> None:
    from rollout.inference.server import ServingFollower, WeightLoader
    from rollout.inference.weights_cache import backend_folder
    from rollout.net.server import AppServer

    ledger = await _connect()
    try:
        record = await ledger.get_run(run)
        spec = RunSpec.of(record)
        await ledger.start_heartbeat("inference", run_id=record.run_id, status="loading model")
        from rollout.monitor.app import is_loopback

        # Bound beyond loopback, every caller must send the run's shared secret.
        secret = None if is_loopback(host) else await internal_secret(ledger, record.run_id)
        work = _cache(record.run_id, "vllm")
        started, app = await _serving_backend(spec, work, secret)
        server = AppServer(app, host=host, port=port)
        await server.start()
        await advertise(ledger, record.run_id, live.INFERENCE_URL, server.url)
        log.info("inference for %s at %s", record.run_id, server.url)
        ledger.set_process_status(f"serving at {server.url}")
        followers = [
            ServingFollower(
                ledger,
                # Every backend start_backend makes for serving loads weights (local, vLLM).
                cast("WeightLoader", policy_backend),
                run_id=record.run_id,
                server_id=server.url,
                blobs=BlobStore.from_url(),
                # One copy per run and machine, shared with its evaluator (weights_cache).
                cache_dir=backend_folder(get_settings().cache_dir, record.run_id, spec.backend),
                backend_name=spec.backend,
                policy=name,
            )
            for name, policy_backend in (
                started.policies or {DEFAULT_POLICY: started.backend}
            ).items()
        ]
        try:  # each policy's follower loads that policy's versions into its own backend
            await asyncio.gather(*(follower.run(stop) for follower in followers))
        finally:
            await server.stop()
            await started.close()
    finally:
        await ledger.close()


async def _serving_backend(
    spec: RunSpec, work: Path, secret: str | None = None
) -> tuple[StartedBackend, Any]:
    """(the started backend, inference app) for the run's `backend`. A run with several
    policies gets a backend per policy (`StartedBackend.policies`: a weight set each on the
    local backend, an adapter each on the one vLLM server), all served by the one app."""
    from rollout.inference.server import create_inference_app
    from rollout.launch.backends import start_backend

    started = await start_backend(spec, work, per_policy=True)
    backend = started.backend
    app = create_inference_app(backend, model=spec.model, secret=secret, policies=started.policies)
    from rollout.inference.vllm import VllmBackend

    if isinstance(backend, VllmBackend):
        from rollout.inference.vllm_serving import attach_engine_routes

        attach_engine_routes(app, backend)
    return started, app


async def gateway(stop: asyncio.Event, *, run: str, host: str, port: int) -> None:
    from rollout.gateway.admission import LagGate
    from rollout.inference.remote import RemoteBackend
    from rollout.launch.serve import serve_gateway
    from rollout.rendering import HFRenderer

    ledger = await _connect()
    try:
        record = await ledger.get_run(run)
        spec = RunSpec.of(record)
        await ledger.start_heartbeat(
            "gateway", run_id=record.run_id, status="waiting for inference"
        )
        settings = await ledger.run_settings(record.run_id, spec.training)
        while not settings.inference_url and not stop.is_set():
            await ledger.wait("settings", timeout=1.0)
            settings = await ledger.run_settings(record.run_id, spec.training)
        if stop.is_set() or not settings.inference_url:
            return
        secret = settings.internal_secret or None
        backend = RemoteBackend(settings.inference_url, secret=secret)
        renderer = HFRenderer(Path(spec.model))
        # Each seat samples from its agent's policy, admitted on that policy's versions.
        training = spec.training
        mapping = PolicyMap.recorded(training.policies if training is not None else {})
        backends = (
            {
                name: RemoteBackend(settings.inference_url, secret=secret, policy=name)
                for name in mapping.names
            }
            if mapping.several
            else {}
        )
        gates = {
            name: LagGate(
                ledger,
                record.run_id,
                default_max_lag=settings.max_lag,
                policy=name,
                max_lag=(
                    entry.max_lag
                    if training is not None and (entry := training.policy_config(name)) is not None
                    else None
                ),
            )
            for name in mapping.names
        }

        async def admission(key: KeyInfo) -> None:
            gate = gates[mapping.policy_of(key.agent)]
            # A key just resolved brings its run's lag view, read for this turn: no second read
            # (it is the default policy's view: another policy's gate reads its own).
            await gate.admit(read=key.lag if key.run_id == record.run_id else None)

        server = await serve_gateway(
            ledger,
            renderer,
            backend,
            model_name=record.name,
            admission=admission,
            host=host,
            port=port,
            policies=backends,
            policy_of=mapping.policy_of,
        )
        await advertise(ledger, record.run_id, live.GATEWAY_URL, server.url)
        log.info("gateway for %s at %s/v1", record.run_id, server.url)
        ledger.set_process_status(f"serving at {server.url}/v1")
        try:
            await stop.wait()
        finally:
            await server.stop()
            await backend.close()
            for each in backends.values():
                await each.close()
    finally:
        await ledger.close()


async def trainer(stop: asyncio.Event, *, run: str) -> None:
    from rollout.launch.available import require_available
    from rollout.training.loop import Trainer

    ledger = await _connect()
    try:
        record = await ledger.get_run(run)
        training = RunSpec.of(record).training
        if training is not None:  # this machine, which may not be the one that created the run
            require_available(training)
        work = _cache(record.run_id, "trainer")
        await ledger.start_heartbeat("trainer", run_id=record.run_id, status="training")
        await Trainer(ledger, BlobStore.from_url(), record.run_id, work_dir=work).run(stop)
        if not stop.is_set():  # finished: stay until told to stop, so the supervisor is calm
            ledger.set_process_status(live.FINISHED)  # the machines page shows it finished
            await stop.wait()
    finally:
        await ledger.close()


async def runner(
    stop: asyncio.Event, *, run: str | None, concurrency: int, name: str | None
) -> None:
    from rollout.runners.runner import Runner, default_runner_id

    ledger = await _connect()
    try:
        run_id = (await ledger.get_run(run)).run_id if run else None
        await ledger.start_heartbeat("runner", run_id=run_id, status="playing seats")
        worker = Runner(
            ledger,
            runner_id=default_runner_id(name or "runner"),
            run_id=run_id,
            concurrency=concurrency,
        )
        try:
            await worker.run(stop)
        finally:
            await worker.close()
    finally:
        await ledger.close()


async def bridge(stop: asyncio.Event) -> None:
    from rollout.bridges import Bridge

    ledger = await _connect()
    try:
        await ledger.start_heartbeat("bridge", status="converting checkpoints")
        await Bridge(ledger, BlobStore.from_url()).run(stop)
    finally:
        await ledger.close()


def served_pool(environment: str) -> Any:
    """The sandbox pool of `environment` (MODULE:ATTR), for `rollout sandboxes serve`.

    Raises:
        LaunchError: the environment cannot be loaded, or its episodes claim no sandbox.
    """
    from rollout.harness.loading import load_environment
    from rollout.launch.errors import LaunchError
    from rollout.sandboxes import sandbox_pool

    pool = sandbox_pool(load_environment(environment))
    if pool is None:
        raise LaunchError(f"{environment}: its episodes claim no sandbox (it has no pool)")
    return pool


async def sandbox_host(stop: asyncio.Event, *, pool: Any, instances: int) -> None:
    """Keep `instances` served instances of `pool` on this machine (`rollout.sandboxes.host`)."""
    from rollout.sandboxes import SandboxHost

    ledger = await _connect()
    try:
        await ledger.start_heartbeat("sandboxes", status=f"serving {pool.name}")
        await SandboxHost(ledger, pool, count=instances).run(stop)
    finally:
        await ledger.close()


async def supervise(
    stop: asyncio.Event,
    *,
    runs: list[str] | None,
    until_finished: bool,
    roles: frozenset[str] | None = None,
) -> None:
    from rollout.launch.local import LocalSupervisor
    from rollout.launch.owner import this_owner

    ledger = await _connect()
    try:
        # Single-run `rollout train`: that run; `rollout up`: every run (no run id).
        sole = None
        if runs and len(runs) == 1:
            with contextlib.suppress(LookupError):  # a run not created yet: no run id
                sole = (await ledger.get_run(runs[0])).run_id
        await ledger.start_heartbeat("supervisor", run_id=sole, status="supervising")
        supervisor = LocalSupervisor(
            ledger, get_settings(), runs=runs, until_finished=until_finished, roles=roles
        )
        await supervisor.run(stop)
        if this_owner().gone() and runs:
            # `rollout train` died (kill -9) before marking its run: mark it, so plain `rollout
            # up` leaves it alone and `rollout up --run RUN` resumes it on purpose.
            await _mark_stopped(ledger, runs)
    finally:
        await ledger.close()


async def _mark_stopped(ledger: Ledger, runs: list[str]) -> None:
    for name in runs:
        run = await ledger.get_run(name)
        settings = await ledger.run_settings(run.run_id)
        if not settings.finished and not settings.stopped:
            await ledger.set_setting(run.run_id, live.STATUS, "stopped")
            log.warning("run %s marked stopped: its owner is gone", run.name)
