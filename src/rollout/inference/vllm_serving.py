"""The `vllm` backend inside the inference role: start (or reach) the server, and let the trainer
put the engine to sleep while it steps.

- `start_vllm(options, url=..., work_dir=...)`: a `VllmBackend` on an existing server (`url`)
  or on one started here from `options`; returns the backend and the started server (or None).
- `attach_engine_routes(app, backend)`: `POST /engine/sleep` and `POST /engine/wake_up` on the
  inference role's own app. A preset with `vllm.sleep_while_training` has the trainer call them
  around each optimizer step (`set_engines_asleep`), so a colocated engine frees the GPU while
  the trainer needs it and requests wait meanwhile.
"""

from __future__ import annotations

import contextlib
import json
from collections.abc import AsyncIterator
from pathlib import Path

from fastapi import FastAPI

from rollout.inference.vllm import VllmBackend
from rollout.inference.vllm_server import VllmServer, VllmServerOptions
from rollout.ledger import Ledger
from rollout.net.client import JsonHttpClient


async def start_vllm(
    options: VllmServerOptions, *, url: str | None, work_dir: Path, version: int = 0
) -> tuple[VllmBackend, VllmServer | None]:
    """The backend on `url`, or on a server started from `options` (stop it when done); it
    reports `version` until it loads a checkpoint."""
    if url:
        return VllmBackend(url, version=version), None
    server = VllmServer(options, work_dir=work_dir)
    return VllmBackend(await server.start(), version=version), server


def attach_engine_routes(app: FastAPI, backend: VllmBackend) -> None:
    """Add `/engine/sleep` and `/engine/wake_up` (see the module docstring)."""

    @app.post("/engine/sleep")
    async def sleep() -> dict[str, bool]:
        await backend.sleep()
        return {"asleep": backend.asleep}

    @app.post("/engine/wake_up")
    async def wake_up() -> dict[str, bool]:
        await backend.wake_up()
        return {"asleep": backend.asleep}


async def set_engines_asleep(inference_url: str, asleep: bool, secret: str | None = None) -> None:
    """Ask the run's inference role to put its engine to sleep or wake it."""
    client = JsonHttpClient(timeout=600.0)
    try:
        action = "sleep" if asleep else "wake_up"
        response = await client.request(
            "POST",
            f"{inference_url.rstrip('/')}/engine/{action}",
            data=json.dumps({}),
            headers={"X-Rollout-Secret": secret} if secret else None,
        )
        if response.status != 200:
            from rollout.inference.base import BackendError

            raise BackendError(
                f"{inference_url}/engine/{action} answered {response.status}: {response.text}"
            )
    finally:
        await client.close()


@contextlib.asynccontextmanager
async def engines_asleep(ledger: Ledger, run_id: str) -> AsyncIterator[None]:
    """While the block runs, the run's engine sleeps (nothing happens before it has a URL)."""
    settings = await ledger.run_settings(run_id)
    url, secret = settings.inference_url, settings.internal_secret
    if not url:
        yield
        return
    await set_engines_asleep(url, True, secret)
    try:
        yield
    finally:
        await set_engines_asleep(url, False, secret)
