"""The `tinker` provider: train a LoRA adapter on Tinker (hosted) through the `tinker` SDK.

`TinkerProvider(service, base_model=..., rank=..., lr=...)` holds one `TrainingClient` from
`service.create_lora_training_client`. Nothing trains on this machine:

- `forward_backward(batch)`: each segment becomes a `tinker.types.Datum` (inputs
  `tokens[:-1]`; `target_tokens = tokens[1:]`; for policy gradient the sampler's `logprobs` and
  per-token `advantages`, zero where the token was not sampled; for supervised warm-up
  `cross_entropy` with per-token `weights`). Policy gradient uses Tinker's `importance_sampling`
  loss, `-sum(exp(logp - logp_sampler) * A)`; values are divided by the step's loss tokens, so
  the gradient is a per-token mean as with the torch provider. TIS (`cap`) and IcePop (band)
  need the ratio before the loss: a `forward` pass first gives the trainer's logprobs, and each
  token's advantage is scaled by `w / ratio` (w = min(ratio, cap), or ratio inside the band and
  0 outside), so the gradient is `w * A * grad logp`, exactly the torch provider's. Mode `none`
  needs one call, and so does the clipped objective (mode `clip`): Tinker's `ppo` loss with
  `clip_low_threshold` 1 - clip_low and `clip_high_threshold` 1 + clip_high, the torch
  provider's objective.
- `optim_step()`: `optim_step(AdamParams(learning_rate=lr, beta1, beta2, eps))`.
- `save(dir)`: `save_state` (weights + optimizer) and `save_weights_for_sampler` (what the
  sampler loads); the folder holds only those Tinker paths (`tinker_checkpoint.json`) and the
  readable `trainer_state.json`. The bridge turns it into the `tinker` conversion.
- `load(dir)`: `create_training_client_from_state_with_optimizer(state_path)`.

Tinker scores at temperature 1 and computes no entropy over the vocabulary here; segments
sampled at another temperature are refused.

`TinkerSamplingBackend` (in `rollout.inference.tinker`) samples from the newest sampler path.

Both get their client from `service_client()`: the SDK's `tinker.ServiceClient`, or the factory
`ROLLOUT_TINKER_SERVICE` names (`package.module:factory`), so every role process of a run can
talk to a fake of Tinker (tests) or another service instead.
"""

from __future__ import annotations

import importlib
import json
import os
import shutil
import tempfile
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from rollout.runs.config import ImportanceConfig, RunConfig
from rollout.settings import TINKER_SERVICE_VAR, get_settings
from rollout.training.errors import CheckpointError, TrainingError
from rollout.training.importance import importance_weights
from rollout.training.providers.base import (
    CheckpointKind,
    ForwardBackwardResult,
    SavedCheckpoint,
    TrainBatch,
)
from rollout.training.segments import Segment

TINKER_CHECKPOINT = "tinker_checkpoint.json"
"""The checkpoint's Tinker paths (read by `rollout.bridges.convert` under the same name)."""
STATE_SUMMARY = "trainer_state.json"
"""The readable summary every provider writes next to its checkpoint."""


def service_client(base_url: str | None = None) -> Any:
    """The Tinker service client of this process: a real `tinker.ServiceClient` (the API key
    comes from TINKER_API_KEY), or, when `ROLLOUT_TINKER_SERVICE` names a factory
    (`package.module:factory`, see `rollout.settings`), what that zero-argument callable
    returns (then `base_url` is the factory's business and is not passed).

    Raises:
        TrainingError: When the factory cannot be imported or called (one line naming the
            variable and its value).
    """
    factory = get_settings().tinker_service
    if factory is not None:
        return _from_factory(factory)
    import tinker

    return tinker.ServiceClient(base_url=base_url) if base_url else tinker.ServiceClient()


def _from_factory(value: str) -> Any:
    """What the factory named by `ROLLOUT_TINKER_SERVICE` returns."""
    factory = service_factory(value)
    try:
        return factory()
    except Exception as error:
        raise TrainingError(
            f"{TINKER_SERVICE_VAR}={value!r} failed: {type(error).__name__}: {error}"
        ) from error


def service_factory(value: str) -> Callable[[], Any]:
    """The callable a `package.module:factory` value names, imported (not called).

    Raises:
        TrainingError: When it cannot be imported or is not callable (one line naming
            `ROLLOUT_TINKER_SERVICE` and `value`).
    """
    module_name, _, attribute = value.partition(":")
    try:
        target: Any = importlib.import_module(module_name)
        for name in attribute.split("."):
            target = getattr(target, name)
    except (ImportError, AttributeError) as error:
        raise TrainingError(
            f"{TINKER_SERVICE_VAR}={value!r}: cannot import it ({type(error).__name__}: {error})"
        ) from None
    if not callable(target):
        raise TrainingError(f"{TINKER_SERVICE_VAR}={value!r} is not callable")
    return target


def _result(value: Any) -> Any:
    """The value of an SDK future (or the value itself)."""
    return value.result() if hasattr(value, "result") else value


def segment_datum(segment: Segment, kind: str, scale: float, ratios: Sequence[float] = ()) -> Any:
    """The `tinker.types.Datum` of one segment (see the module docstring)."""
    from tinker import types

    if segment.temperature != 1.0:
        raise TrainingError(
            f"Tinker scores at temperature 1; segment of episode {segment.episode_id!r} was "
            f"sampled at {segment.temperature}"
        )
    tokens = list(segment.tokens)
    mask = [1.0 if m else 0.0 for m in segment.loss_mask[1:]]
    inputs: dict[str, Any] = {"target_tokens": tokens[1:]}
    if kind == "cross_entropy":
        inputs["weights"] = [m * scale for m in mask]
    else:
        weights = list(ratios) or [1.0] * len(mask)
        advantages = segment.token_advantages()[1:]
        inputs["logprobs"] = [float(x) for x in segment.sampler_logprobs[1:]]
        inputs["advantages"] = [
            a * m * w * scale for a, m, w in zip(advantages, mask, weights, strict=True)
        ]
    return types.Datum(model_input=types.ModelInput.from_ints(tokens[:-1]), loss_fn_inputs=inputs)


class TinkerProvider:
    """A LoRA adapter trained on Tinker (see the module docstring).

    Args:
        service: A `tinker.ServiceClient` (or an object with the same methods).
        base_model: Tinker's name of the base model.
        rank: LoRA rank.
        lr: Adam learning rate.
        seed: Initialisation seed of the adapter.
        betas: Adam's beta1 and beta2.
        eps: Adam's epsilon.
    """

    kind: CheckpointKind = "lora"

    def __init__(
        self,
        service: Any,
        *,
        base_model: str,
        rank: int,
        lr: float,
        seed: int = 0,
        betas: tuple[float, float] = (0.9, 0.999),
        eps: float = 1e-8,
    ) -> None:
        if rank <= 0:
            raise TrainingError(f"rank must be positive, got {rank!r}")
        if lr <= 0:
            raise TrainingError(f"lr must be > 0, got {lr!r}")
        self.service = service
        self.base_model = base_model
        self.rank = rank
        self.lr = lr
        self.betas = betas
        self.eps = eps
        self.client = _result(
            service.create_lora_training_client(base_model=base_model, rank=rank, seed=seed)
        )
        self._step = 0
        self._pending = 0

    @classmethod
    def from_config(cls, config: RunConfig) -> TinkerProvider:
        if config.tinker is None or config.lora_rank is None:
            raise TrainingError("provider 'tinker' needs tinker.base_model and lora_rank")
        return cls(
            service_client(config.tinker.base_url),
            base_model=config.tinker.base_model,
            rank=config.lora_rank,
            lr=config.learning_rate,
            seed=config.seed,
            betas=(config.adam_beta1, config.adam_beta2),
            eps=config.adam_eps,
        )

    @property
    def step(self) -> int:
        return self._step

    def logprobs(self, segments: TrainBatch | Sequence[Segment]) -> list[tuple[float, ...]]:
        """Trainer logprobs of each segment's tokens (0.0 at position 0), by a `forward` pass."""
        items = segments.segments if isinstance(segments, TrainBatch) else tuple(segments)
        data = [segment_datum(s, "cross_entropy", 1.0) for s in items]
        output = _result(self.client.forward(data, "cross_entropy"))
        return [
            (0.0, *(float(x) for x in out["logprobs"].tolist())) for out in output.loss_fn_outputs
        ]

    def forward_backward(self, batch: TrainBatch) -> ForwardBackwardResult:
        segments = batch.segments
        denominator = batch.num_loss_tokens or batch.loss_tokens or 1
        scale = 1.0 / denominator
        if batch.loss.kind == "supervised":
            data = [segment_datum(s, "cross_entropy", scale) for s in segments]
            output = _result(self.client.forward_backward(data, "cross_entropy"))
        elif batch.loss.importance.mode == "clip":
            data = [segment_datum(s, "ppo", scale) for s in segments]
            output = _result(
                self.client.forward_backward(
                    data, "ppo", loss_fn_config=ppo_config(batch.loss.importance)
                )
            )
        else:
            ratios: list[list[float]] = [[] for _ in segments]
            if batch.loss.importance.mode != "none":
                trainer = self.logprobs(segments)
                ratios = [_scaled(s, lp, batch) for s, lp in zip(segments, trainer, strict=True)]
            data = [
                segment_datum(s, "importance_sampling", scale, r)
                for s, r in zip(segments, ratios, strict=True)
            ]
            output = _result(self.client.forward_backward(data, "importance_sampling"))
        self._pending += 1
        logprobs = tuple(
            (0.0, *(float(x) for x in out["logprobs"].tolist())) for out in output.loss_fn_outputs
        )
        metrics = {k: float(v) for k, v in dict(output.metrics).items()}
        loss = metrics.get("loss:sum", metrics.get("loss", float("nan")))
        return ForwardBackwardResult(
            metrics={**metrics, "loss": loss, "loss_tokens": float(batch.loss_tokens)},
            logprobs=logprobs,
        )

    def optim_step(self) -> dict[str, float]:
        from tinker import types

        skipped = self._pending == 0
        if not skipped:
            beta1, beta2 = self.betas
            params = types.AdamParams(learning_rate=self.lr, beta1=beta1, beta2=beta2, eps=self.eps)
            _result(self.client.optim_step(params))
        self._pending = 0
        self._step += 1
        return {"lr": self.lr, "step": float(self._step), "optim/skipped": float(skipped)}

    def reset_optimizer(self) -> None:
        """Keep the weights, forget Adam's moments: reload the weights without the optimizer."""
        saved = _result(self.client.save_state(f"reset-{self._step}"))
        self.client = _result(self.service.create_training_client_from_state(saved.path))

    def save(self, path: str | Path) -> SavedCheckpoint:
        target = Path(path)
        if target.exists() and any(target.iterdir()):
            raise CheckpointError(f"checkpoint path {str(target)!r} exists and is not empty")
        state = _result(self.client.save_state(f"step-{self._step:06d}"))
        sampler = _result(self.client.save_weights_for_sampler(f"sampler-{self._step:06d}"))
        paths = {
            "state_path": state.path,
            "sampler_path": sampler.path,
            "base_model": self.base_model,
            "step": self._step,
        }
        summary = {
            "kind": "lora",
            "step": self._step,
            "base_model": self.base_model,
            "lora": {"rank": self.rank},
            "lr": self.lr,
            "provider": "tinker",
        }
        target.parent.mkdir(parents=True, exist_ok=True)
        staging = Path(tempfile.mkdtemp(prefix=f".{target.name}.", dir=target.parent))
        try:
            (staging / TINKER_CHECKPOINT).write_text(json.dumps(paths, indent=2))
            (staging / STATE_SUMMARY).write_text(json.dumps(summary, indent=2))
            if target.exists():
                target.rmdir()
            os.replace(staging, target)
        except BaseException:
            shutil.rmtree(staging, ignore_errors=True)
            raise
        return SavedCheckpoint(
            path=str(target),
            kind="lora",
            step=self._step,
            base_model=self.base_model,
            metadata={**summary, **paths},
        )

    def load(self, path: str | Path) -> None:
        source = Path(path) / TINKER_CHECKPOINT
        if not source.is_file():
            raise CheckpointError(f"checkpoint {str(path)!r} has no {TINKER_CHECKPOINT}")
        paths = json.loads(source.read_text())
        self.client = _result(
            self.service.create_training_client_from_state_with_optimizer(paths["state_path"])
        )
        self._step = int(paths["step"])
        self._pending = 0


def ppo_config(importance: ImportanceConfig) -> dict[str, float]:
    """Tinker's `ppo` loss configuration for the clipped objective's band.

    >>> ppo_config(ImportanceConfig(mode="clip", clip_low=0.2, clip_high=0.28))
    {'clip_low_threshold': 0.8, 'clip_high_threshold': 1.28}
    """
    return {
        "clip_low_threshold": 1.0 - importance.clip_low,
        "clip_high_threshold": 1.0 + importance.clip_high,
    }


def _scaled(segment: Segment, trainer: Sequence[float], batch: TrainBatch) -> list[float]:
    """Per-token `w / ratio` (see the module docstring), aligned to `tokens[1:]`."""
    import torch

    logp = torch.tensor(trainer[1:], dtype=torch.float64)
    sampler = torch.tensor(segment.sampler_logprobs[1:], dtype=torch.float64)
    mask = torch.tensor(segment.loss_mask[1:], dtype=torch.bool)
    result = importance_weights(logp, sampler, mask, batch.loss.importance)
    ratio = (logp - sampler).clamp(-20, 20).exp()
    return (result.weights.double() / ratio).masked_fill(~result.mask, 0.0).tolist()


def tinker_sampling_backend(config: RunConfig, *, version: int = 0) -> Any:
    """The run's `tinker` inference backend (a real ServiceClient), reporting `version` until
    it loads a checkpoint."""
    from rollout.inference.tinker import TinkerSamplingBackend

    if config.tinker is None:
        raise TrainingError("backend 'tinker' needs a tinker: block")
    service = service_client(config.tinker.base_url)
    return TinkerSamplingBackend(service, base_model=config.tinker.base_model, version=version)
