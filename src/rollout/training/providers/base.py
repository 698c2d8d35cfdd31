"""The training provider contract.

A training provider owns the trainable weights and the optimizer. The training loop hands it
batches of `Segment`s; the provider scores them (at each segment's sampling temperature),
computes the loss named by the batch, and accumulates gradients. `optim_step` applies them.
`save` writes everything needed to resume exactly (weights, optimizer state, step count, RNG
state); `load` restores it. Providers: `torch` (local PyTorch, full weights or LoRA) and `tinker`.

Calls are synchronous and not thread-safe: one loop drives one provider (run it in a worker
thread from asyncio code).
"""

from __future__ import annotations

import contextlib
import os
import shutil
import tempfile
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal, Protocol, runtime_checkable

from rollout.training.errors import CheckpointError, TrainingError
from rollout.training.loss import LossConfig
from rollout.training.segments import Segment

CheckpointKind = Literal["full", "lora"]


@dataclass(frozen=True)
class TrainBatch:
    """Segments to train on and the loss to take.

    Attributes:
        segments: The training sequences (any lengths; the provider pads and micro-batches).
        loss: Policy gradient (with its importance correction) or supervised.
        num_loss_tokens: The loss denominator: the number of trained tokens in the whole
            optimizer step. Default: those of this batch. Set it when one step is split over
            several `forward_backward` calls so the accumulated gradient is a per-token mean
            over the step.
    """

    segments: tuple[Segment, ...]
    loss: LossConfig = field(default_factory=LossConfig)
    num_loss_tokens: int | None = None

    def __post_init__(self) -> None:
        if not self.segments:
            raise TrainingError("TrainBatch.segments is empty")
        if self.num_loss_tokens is not None and self.num_loss_tokens <= 0:
            raise TrainingError(
                f"TrainBatch.num_loss_tokens must be > 0, got {self.num_loss_tokens!r}"
            )

    @property
    def loss_tokens(self) -> int:
        """Trained tokens in this batch."""
        return sum(s.num_loss_tokens for s in self.segments)


@dataclass(frozen=True)
class ForwardBackwardResult:
    """What one `forward_backward` call measured.

    Attributes:
        metrics: `loss`, token counts, `is/*` importance metrics, `train/entropy`, lag, timing.
        logprobs: Trainer logprobs per segment, aligned to its tokens (0.0 at position 0), at
            the segment's temperature, before the update.
    """

    metrics: dict[str, float]
    logprobs: tuple[tuple[float, ...], ...]


@dataclass(frozen=True)
class SavedCheckpoint:
    """Where a checkpoint was written and what it is.

    Attributes:
        path: The checkpoint folder.
        kind: "full" (a Hugging Face model folder) or "lora" (a peft adapter folder).
        step: Optimizer steps behind the weights (the checkpoint's version).
        base_model: The base model folder (what a LoRA adapter applies to).
        metadata: Provider details (LoRA rank, dtype, files).
    """

    path: str
    kind: CheckpointKind
    step: int
    base_model: str
    metadata: dict[str, Any] = field(default_factory=dict)


@runtime_checkable
class TrainingProvider(Protocol):
    """Owns trainable weights and an optimizer."""

    kind: CheckpointKind

    @property
    def step(self) -> int:
        """Optimizer steps taken so far (the version of the current weights)."""
        ...

    def forward_backward(self, batch: TrainBatch) -> ForwardBackwardResult:
        """Score the batch, compute its loss and accumulate gradients."""
        ...

    def optim_step(self) -> dict[str, float]:
        """Apply the accumulated gradients (clipped), clear them and count the step.

        With nothing accumulated the weights stay as they are but the step still counts.
        Metrics: `grad_norm`, `lr`, `step`, `optim/skipped`.
        """
        ...

    def reset_optimizer(self) -> None:
        """Forget the optimizer's moments (after warm-up, before RL); the step count is kept."""
        ...

    def logprobs(self, segments: TrainBatch | Sequence[Segment]) -> list[tuple[float, ...]]:
        """Trainer logprobs of each segment's tokens (no gradient), aligned to tokens."""
        ...

    def save(self, path: str | Path) -> SavedCheckpoint:
        """Write weights, optimizer state, step and RNG state to a new folder."""
        ...

    def load(self, path: str | Path) -> None:
        """Restore everything `save` wrote, so training resumes exactly."""
        ...


@contextlib.contextmanager
def new_checkpoint_folder(path: str | Path) -> Iterator[Path]:
    """A staging folder to write a checkpoint in, renamed to `path` when the block ends.

    Nothing appears at `path` until every file is written: a block that raises leaves no
    folder behind, and readers never see half a checkpoint.

    Raises:
        CheckpointError: `path` exists and is not empty.
    """
    target = Path(path)
    if target.exists() and any(target.iterdir()):
        raise CheckpointError(f"checkpoint path {str(target)!r} exists and is not empty")
    target.parent.mkdir(parents=True, exist_ok=True)
    staging = Path(tempfile.mkdtemp(prefix=f".{target.name}.", dir=target.parent))
    try:
        yield staging
        if target.exists():
            target.rmdir()
        os.replace(staging, target)
    except BaseException:
        shutil.rmtree(staging, ignore_errors=True)
        raise
