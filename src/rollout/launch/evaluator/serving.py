"""Serve one checkpoint of a run to eval episodes, alongside (never instead of) training.

`CheckpointServer.serve(run, version)` loads the checkpoint into an inference backend owned by
the evaluator (the run's model folder with the checkpoint's `local` conversion loaded on top; the
model folder alone for the base model, version -1) and puts the platform's gateway app in front
of it on loopback, in this process. Eval seats talk to that gateway with their own keys, so
every eval turn is recorded like any other, reporting the version that sampled it. A checkpoint
the bridge has not converted yet (or never will: the run finished) is converted here.
"""

from __future__ import annotations

import asyncio
import logging
from pathlib import Path

from rollout.blobs import BlobStore
from rollout.bridges.convert import convert_checkpoint
from rollout.evals.errors import EvalError
from rollout.evals.report import version_label
from rollout.inference.base import InferenceBackend
from rollout.inference.weights_cache import fetch, weights_folder
from rollout.launch.serve import serve_gateway
from rollout.ledger import Ledger, NotFound, RunRecord
from rollout.ledger.evals import BASE_VERSION
from rollout.net.server import AppServer
from rollout.rendering.base import Renderer
from rollout.runs.spec import RunSpec

log = logging.getLogger("rollout.evaluator")

CONVERSION = "local"
"""The conversion the evaluator's backend loads."""


class CheckpointServer:
    """At most one checkpoint served at a time; `serve` swaps it when another is asked for."""

    def __init__(self, ledger: Ledger, blobs: BlobStore, cache_dir: Path) -> None:
        self.ledger = ledger
        self.blobs = blobs
        self.cache_dir = cache_dir
        self.serving: tuple[str, int] | None = None
        self._backend: InferenceBackend | None = None
        self._server: AppServer | None = None

    @property
    def base_url(self) -> str:
        if self._server is None:
            raise EvalError("no checkpoint is served")
        return self._server.base_url

    async def serve(self, run: RunRecord, version: int) -> str:
        """Serve checkpoint `version` of `run`; returns the gateway's base URL (`.../v1`)."""
        if self.serving == (run.run_id, version):
            return self.base_url
        await self.close()
        spec = RunSpec.of(run)
        renderer, backend = await asyncio.to_thread(self._load_model, spec, version)
        try:
            if version != BASE_VERSION:
                folder = await self._weights(run, version)
                load = getattr(backend, "load_weights", None)
                if load is None:
                    raise EvalError(f"model {spec.model!r} cannot load checkpoint weights")
                await load(folder, version)
            server = await serve_gateway(
                self.ledger, renderer, backend, model_name=f"{run.name}@{version_label(version)}"
            )
        except BaseException:
            await backend.close()
            raise
        self._backend, self._server = backend, server
        self.serving = (run.run_id, version)
        log.info("serving %s %s at %s", run.name, version_label(version), server.base_url)
        return server.base_url

    @staticmethod
    def _load_model(spec: RunSpec, version: int) -> tuple[Renderer, InferenceBackend]:
        from rollout.rendering import HFRenderer

        if spec.model == "scripted":
            if version != BASE_VERSION:
                raise EvalError("the scripted model has no checkpoints: evaluate 'base'")
            from rollout.inference.scripted import ScriptedBackend
            from rollout.models import default_tokenizer_dir

            renderer = HFRenderer(default_tokenizer_dir())
            return renderer, ScriptedBackend(renderer, version=version)
        from rollout.inference.local import LocalBackend

        folder = Path(spec.model)
        return HFRenderer(folder), LocalBackend(folder, device=spec.device, version=version)

    async def _weights(self, run: RunRecord, version: int) -> Path:
        """The local folder of the checkpoint's conversion, converting it if needed."""
        uri = (await self.ledger.conversions(run.run_id, version)).get(CONVERSION)
        if uri is None:
            checkpoint = next(
                (c for c in await self.ledger.checkpoints(run.run_id) if c.version == version),
                None,
            )
            if checkpoint is None:
                raise NotFound(f"run {run.name!r} has no checkpoint version {version}")
            uri = await asyncio.to_thread(
                convert_checkpoint, self.blobs, checkpoint.uri, CONVERSION
            )
            await self.ledger.record_conversion(run.run_id, version, CONVERSION, uri)
        # Shared with the run's inference server on this machine (inference.weights_cache).
        folder = weights_folder(self.cache_dir, run.run_id, CONVERSION, version)
        return await asyncio.to_thread(fetch, self.blobs, uri, folder)

    async def close(self) -> None:
        server, backend = self._server, self._backend
        self._server = self._backend = None
        self.serving = None
        if server is not None:
            await server.stop()
        if backend is not None:
            await backend.close()
