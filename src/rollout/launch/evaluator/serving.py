"""Serve one checkpoint of a run to eval episodes, alongside (never instead of) training.

`CheckpointServer.serve(run, version)` loads the checkpoint into an inference backend owned by
the evaluator, of the run's own kind (`rollout.launch.backends`: `local`, `vllm` with a vLLM
server of its own, `tinker`): the run's model with the checkpoint's conversion for that backend
loaded on top, or the model alone for the base model (version -1). It puts the platform's
gateway app in front of it on loopback, in this process. Eval seats talk to that gateway with
their own keys, so every eval turn is recorded like any other, reporting the version that
sampled it, and the job's scores name the backend (`backend`). A checkpoint the bridge has not
converted yet (or never will: the run finished) is converted here.

A run with several policies (`rollout.runs.policies`) gets a backend per policy
(`start_backend(per_policy=True)`: a weight set each on the local backend, an adapter each on the
one vLLM server), each loaded with its own policy's checkpoint `version`, and the gateway routes
each seat to its agent's policy and records that policy with the turn. The base model (version
-1) is the same for every policy: one backend serves it, each turn still recorded with its
agent's policy.
"""

from __future__ import annotations

import asyncio
import logging
from pathlib import Path

from rollout.blobs import BlobStore
from rollout.bridges.convert import convert_checkpoint
from rollout.contracts import DEFAULT_POLICY
from rollout.evals.errors import EvalError
from rollout.evals.report import version_label
from rollout.inference.base import InferenceBackend
from rollout.inference.weights_cache import fetch, weights_folder
from rollout.launch.backends import StartedBackend, backend_name, start_backend
from rollout.launch.serve import serve_gateway
from rollout.ledger import Ledger, NotFound, RunRecord
from rollout.ledger.evals import BASE_VERSION
from rollout.net.server import AppServer
from rollout.rendering.base import Renderer
from rollout.runs.policies import PolicyMap
from rollout.runs.spec import RunSpec

log = logging.getLogger("rollout.evaluator")


class CheckpointServer:
    """At most one checkpoint served at a time; `serve` swaps it when another is asked for."""

    def __init__(self, ledger: Ledger, blobs: BlobStore, cache_dir: Path) -> None:
        self.ledger = ledger
        self.blobs = blobs
        self.cache_dir = cache_dir
        self.serving: tuple[str, int] | None = None
        self.backend: str | None = None
        """The name of the backend serving now (`local`, `vllm`, ...)."""
        self._started: StartedBackend | None = None
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
        name = backend_name(spec)
        if name == "scripted" and version != BASE_VERSION:
            raise EvalError("the scripted model has no checkpoints: evaluate 'base'")
        renderer = await asyncio.to_thread(self._renderer, spec)
        work = self.cache_dir / run.run_id / "evaluator-engine"
        mapping = seat_policies(spec)
        started = await start_backend(
            spec,
            work,
            version=version,
            own_server=not _shares_run_server(spec, version),
            per_policy=mapping.several and version != BASE_VERSION,
        )
        try:
            # Each policy's backend (the one backend for a run with one policy).
            backends: dict[str, InferenceBackend] = {DEFAULT_POLICY: started.backend}
            if mapping.several:
                if version == BASE_VERSION:
                    backends = dict.fromkeys(mapping.names, started.backend)
                elif started.policies is None:
                    raise EvalError(
                        f"the {name} backend has no backend per policy: run {run.name!r} of "
                        f"policies {', '.join(mapping.names)} cannot be evaluated on it"
                    )
                else:
                    backends = dict(started.policies)
            if version != BASE_VERSION:
                for policy, backend in backends.items():
                    folder = await self._weights(run, version, name, policy)
                    load = getattr(backend, "load_weights", None)
                    if load is None:
                        raise EvalError(f"model {spec.model!r} cannot load checkpoint weights")
                    await load(folder, version)
            routing = (
                {"policies": backends, "policy_of": mapping.policy_of} if mapping.several else {}
            )
            server = await serve_gateway(
                self.ledger,
                renderer,
                started.backend,
                model_name=f"{run.name}@{version_label(version)}",
                **routing,
            )
        except BaseException:
            await started.close()
            raise
        self._started, self._server, self.backend = started, server, name
        self.serving = (run.run_id, version)
        log.info(
            "serving %s %s with %s at %s", run.name, version_label(version), name, server.base_url
        )
        return server.base_url

    @staticmethod
    def _renderer(spec: RunSpec) -> Renderer:
        from rollout.rendering import HFRenderer

        if spec.model == "scripted":
            from rollout.models import default_tokenizer_dir

            return HFRenderer(default_tokenizer_dir())
        return HFRenderer(Path(spec.model))

    async def _weights(
        self, run: RunRecord, version: int, conversion: str, policy: str = DEFAULT_POLICY
    ) -> Path:
        """The local folder of `policy`'s checkpoint's `conversion`, converting it if needed."""
        uri = (await self.ledger.conversions(run.run_id, version, policy=policy)).get(conversion)
        if uri is None:
            checkpoint = next(
                (
                    c
                    for c in await self.ledger.checkpoints(run.run_id, policy=policy)
                    if c.version == version
                ),
                None,
            )
            if checkpoint is None:
                shown = "" if policy == DEFAULT_POLICY else f"policy {policy!r} of "
                raise NotFound(f"{shown}run {run.name!r} has no checkpoint version {version}")
            uri = await asyncio.to_thread(
                convert_checkpoint, self.blobs, checkpoint.uri, conversion
            )
            await self.ledger.record_conversion(run.run_id, version, conversion, uri, policy=policy)
        # Shared with the run's inference server on this machine (inference.weights_cache).
        folder = weights_folder(self.cache_dir, run.run_id, conversion, version, policy=policy)
        return await asyncio.to_thread(fetch, self.blobs, uri, folder)

    async def close(self) -> None:
        server, started = self._server, self._started
        self._server, self._started = None, None
        self.serving = self.backend = None
        if server is not None:
            await server.stop()
        if started is not None:
            await started.close()


def seat_policies(spec: RunSpec) -> PolicyMap:
    """Which policy plays each agent of the run's eval episodes: the run's recorded mapping
    (`PolicyMap.recorded`; one policy, 'main', plays every agent of a run that names none)."""
    training = spec.training
    return PolicyMap.recorded(training.policies if training is not None else {})


def _shares_run_server(spec: RunSpec, version: int) -> bool:
    """Whether the evaluator may sample from the vLLM server the run names by URL: only the
    base model of a LoRA run, which no training step changes there (a checkpoint, or the base
    of a full-weights run, is served by a vLLM server of the evaluator's own)."""
    training = spec.training
    return (
        version == BASE_VERSION
        and training is not None
        and training.vllm.url is not None
        and training.lora_rank is not None
    )
