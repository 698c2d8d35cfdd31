"""The run's own inference backend, built in one place for every role that samples.

The inference role serves the run with it, and the evaluator samples eval episodes with it, so an
eval of a vLLM run measures vLLM and an eval of a Tinker run measures Tinker's sampler.

- `backend_name(spec)`: what samples the run (`scripted`, `local`, `vllm`, `tinker`); also the
  name of the checkpoint conversion that backend loads, and what an eval score records.
- `start_backend(spec, work, ...)`: a `StartedBackend` (the backend, and the vLLM server started
  for it, if any; with `per_policy=True` and a run of several policies, each policy's backend
  too); `close()` releases them all.
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from rollout.inference.base import InferenceBackend
from rollout.runs.policies import PolicyMap
from rollout.runs.spec import RunSpec

SCRIPTED = "scripted"


def backend_name(spec: RunSpec) -> str:
    """The inference backend that samples the run (see the module docstring).

    Example:
        >>> from rollout.runs.spec import RunSpec
        >>> backend_name(RunSpec.model_validate({"model": "scripted"}))
        'scripted'
    """
    return SCRIPTED if spec.model == SCRIPTED else spec.backend


@dataclass
class StartedBackend:
    """A backend of the run's kind, and the vLLM server started for it (None otherwise)."""

    backend: InferenceBackend
    vllm_server: Any = None
    policies: dict[str, InferenceBackend] | None = None
    """Each policy's backend, for a run of several policies started with `per_policy=True`
    (None otherwise): a `LocalBackend` (weight set) per policy, or a `VllmBackend` per policy's
    adapter on the one vLLM server. On the local backend `backend` is the first policy's; on
    vLLM it is the server's base-model backend (it puts the engine to sleep and wakes it)."""

    async def close(self) -> None:
        try:
            await self.backend.close()
            for each in (self.policies or {}).values():
                if each is not self.backend:
                    await each.close()
        finally:
            if self.vllm_server is not None:
                await asyncio.to_thread(self.vllm_server.stop)


async def start_backend(
    spec: RunSpec,
    work: Path,
    *,
    version: int = 0,
    own_server: bool = False,
    state_dir: Path | None = None,
    per_policy: bool = False,
) -> StartedBackend:
    """The run's backend, serving the model folder (or Tinker's base model) as `version`.

    Args:
        spec: The run.
        work: A folder for the vLLM server's log and scratch files.
        version: What the backend reports until `load_weights` is called (-1: the base model).
        own_server: Start a vLLM server even when the run names one by URL (the evaluator
            loads checkpoints that must not replace what the run's server serves).
        state_dir: Where the scripted model's tokenizer is cached.
        per_policy: For a run of several policies, a backend per policy too (the inference
            role serves each policy's versions, the evaluator each policy's checkpoint of the
            version it evaluates; see `StartedBackend.policies`).
    """
    name = backend_name(spec)
    training = spec.training
    # The inference role, and the evaluator on a checkpoint, ask for each policy's backend.
    mapping = PolicyMap.recorded(training.policies if training is not None and per_policy else {})
    several = mapping.several
    if name == SCRIPTED:
        from rollout.inference.scripted import ScriptedBackend
        from rollout.models import default_tokenizer_dir
        from rollout.rendering import HFRenderer

        renderer = HFRenderer(default_tokenizer_dir(state_dir))
        return StartedBackend(ScriptedBackend(renderer, version=version))
    if name == "vllm" and training is not None:
        from rollout.inference.vllm_server import vllm_server_options
        from rollout.inference.vllm_serving import start_vllm

        await asyncio.to_thread(work.mkdir, parents=True, exist_ok=True)
        options = vllm_server_options(training, spec.model, work / "vllm.log")
        url = None if own_server else training.vllm.url
        backend, server = await start_vllm(options, url=url, work_dir=work, version=version)
        if not several:
            return StartedBackend(backend, server)
        from rollout.inference.vllm import LORA_NAME, VllmBackend

        # One adapter per policy, each under its own name, all on this one server.
        policies: dict[str, InferenceBackend] = {
            policy: VllmBackend(
                backend.base_url, version=version, lora_name=f"{LORA_NAME}-{policy}"
            )
            for policy in mapping.names
        }
        return StartedBackend(backend, server, policies)
    if name == "tinker" and training is not None:
        from rollout.training.providers.tinker import tinker_sampling_backend

        backend = await asyncio.to_thread(tinker_sampling_backend, training, version=version)
        return StartedBackend(backend)
    from rollout.inference.local import LocalBackend

    model = Path(spec.model)
    if training is None:
        return StartedBackend(LocalBackend(model, device=spec.device, version=version))
    dtype, max_batch = training.dtype, training.local_batch

    async def weight_set() -> LocalBackend:
        return await asyncio.to_thread(
            LocalBackend,
            model,
            device=spec.device,
            dtype=dtype,
            max_batch=max_batch,
            version=version,
        )

    if not several:
        return StartedBackend(await weight_set())
    # One weight set per policy, each following its own policy's versions.
    policies = {policy: await weight_set() for policy in mapping.names}
    return StartedBackend(next(iter(policies.values())), None, policies)
