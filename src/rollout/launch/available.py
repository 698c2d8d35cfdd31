"""A preflight for a preset: refuse, before anything starts, one this machine cannot run.

`require_available(config)` checks what the preset needs of the machine that runs it: enough
CUDA GPUs, vLLM's environment (`rollout setup vllm`) for a `vllm` backend that starts its own
server, the tinker SDK for the `tinker` provider (and the factory `ROLLOUT_TINKER_SERVICE` names,
when set, importable). `rollout train` calls it before it creates the
run, and the trainer role before it trains (it may run on another machine).
"""

from __future__ import annotations

import importlib.util

from rollout.launch.errors import Unavailable
from rollout.runs.config import RunConfig
from rollout.settings import get_settings


def require_available(config: RunConfig) -> None:
    """Refuse a preset this machine cannot run: too few GPUs, vLLM's environment missing, the
    tinker SDK missing, or the Tinker service factory named by `ROLLOUT_TINKER_SERVICE` not
    importable.

    Raises:
        Unavailable: one line saying what is needed.
    """
    needed = config.gpus_needed
    if needed:
        have = _cuda_devices()
        if have < needed:
            engine = ""
            if config.backend == "vllm":
                engine = f", vLLM tensor_parallel_size {config.vllm.tensor_parallel_size}"
            raise Unavailable(
                f"preset {config.name!r} needs {needed} CUDA GPU(s) (device {config.device!r}, "
                f"backend {config.backend!r}{engine}); this machine has {have}"
            )
    if config.backend == "vllm" and config.vllm.url is None:
        from rollout.inference.vllm_env import VllmEnvError, vllm_python

        try:
            vllm_python()
        except VllmEnvError as error:
            raise Unavailable(f"backend 'vllm': {error}") from None
    if config.provider == "tinker":
        if importlib.util.find_spec("tinker") is None:
            raise Unavailable("provider 'tinker' needs the tinker SDK: uv sync --extra tinker")
        factory = get_settings().tinker_service
        if factory is not None:
            from rollout.training.errors import TrainingError
            from rollout.training.providers.tinker import service_factory

            try:
                service_factory(factory)
            except TrainingError as error:
                raise Unavailable(f"provider 'tinker': {error}") from None


def _cuda_devices() -> int:
    try:
        import torch
    except ImportError:
        return 0
    return torch.cuda.device_count() if torch.cuda.is_available() else 0
