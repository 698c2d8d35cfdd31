"""`TorchProvider`: the local PyTorch training provider, full weights or LoRA, on CPU or GPU.

`TorchProvider(model_dir, lora_rank=None | r, ...)` loads a Hugging Face causal LM. With
`lora_rank` it wraps the model in peft LoRA adapters on the attention and MLP projections and
trains only those; otherwise it trains every weight. The optimizer is AdamW (Adam when
`weight_decay=0`). A step is `forward_backward` (score, loss, gradients accumulated; see
`scoring`) once or more, then `optim_step`; `save` and `load` write and read checkpoints (see
`checkpoints`).
"""

from __future__ import annotations

import math
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any, cast

import torch
from transformers import AutoModelForCausalLM, PreTrainedModel

from rollout.models.hf import pad_token_id
from rollout.training.errors import TrainingError
from rollout.training.loss import LossOutput, policy_gradient_loss, supervised_loss
from rollout.training.providers.base import (
    CheckpointKind,
    ForwardBackwardResult,
    SavedCheckpoint,
    TrainBatch,
)
from rollout.training.providers.torch.checkpoints import (
    CheckpointWriter,
    load_full,
    load_lora,
    read_state,
    rng_state,
    set_rng_state,
)
from rollout.training.providers.torch.scoring import micro_batches, score
from rollout.training.segments import Segment

DEFAULT_LORA_TARGETS = ("q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj")

_DTYPES = {"float32": torch.float32, "bfloat16": torch.bfloat16, "float16": torch.float16}


def _resolve_dtype(dtype: torch.dtype | str) -> torch.dtype:
    if isinstance(dtype, torch.dtype):
        return dtype
    if dtype not in _DTYPES:
        raise TrainingError(f"dtype must be one of {sorted(_DTYPES)}, got {dtype!r}")
    return _DTYPES[dtype]


class TorchProvider:
    """Trains a Hugging Face causal LM with PyTorch (see the module docstring).

    Args:
        model_dir: A Hugging Face model folder (config, weights, tokenizer files).
        lora_rank: None trains every weight; an int trains LoRA adapters of that rank.
        lora_alpha: LoRA scaling numerator (default: 2 * rank).
        lora_dropout: Dropout on the LoRA input.
        lora_target_modules: Module names to adapt (default: attention and MLP projections).
        lr: Learning rate.
        weight_decay: AdamW decoupled weight decay (0: plain Adam).
        betas: Adam betas.
        eps: Adam epsilon.
        grad_clip: Clip the global gradient norm to this (None: no clipping).
        device: "cpu", "cuda", "cuda:1", ...
        dtype: Weight dtype ("float32", "bfloat16" or a torch dtype). Logprobs are float32.
        temperature: Score every segment at this temperature. None (default): each segment at
            its own recorded sampling temperature.
        micro_batch_tokens: Padded tokens per forward pass (None: the whole batch at once).
        seed: Seeds torch before the adapters are initialised.
        compute_entropy: Report the mean policy entropy of trained tokens.
        gradient_checkpointing: Recompute activations in the backward pass (less memory for
            long sequences, about a third more compute).
    """

    def __init__(
        self,
        model_dir: str | Path,
        *,
        lora_rank: int | None = None,
        lora_alpha: int | None = None,
        lora_dropout: float = 0.0,
        lora_target_modules: Sequence[str] = DEFAULT_LORA_TARGETS,
        lr: float = 1e-5,
        weight_decay: float = 0.0,
        betas: tuple[float, float] = (0.9, 0.999),
        eps: float = 1e-8,
        grad_clip: float | None = 1.0,
        device: str | torch.device = "cpu",
        dtype: torch.dtype | str = torch.float32,
        temperature: float | None = None,
        micro_batch_tokens: int | None = None,
        seed: int = 0,
        compute_entropy: bool = True,
        gradient_checkpointing: bool = False,
    ) -> None:
        self.model_dir = Path(model_dir)
        if not (self.model_dir / "config.json").is_file():
            raise TrainingError(f"model_dir {str(self.model_dir)!r} has no config.json")
        if lora_rank is not None and lora_rank <= 0:
            raise TrainingError(f"lora_rank must be a positive int or None, got {lora_rank!r}")
        if lr <= 0:
            raise TrainingError(f"lr must be > 0, got {lr!r}")
        if grad_clip is not None and grad_clip <= 0:
            raise TrainingError(f"grad_clip must be > 0 or None, got {grad_clip!r}")
        if temperature is not None and temperature <= 0:
            raise TrainingError(f"temperature must be > 0 or None, got {temperature!r}")
        if micro_batch_tokens is not None and micro_batch_tokens <= 0:
            raise TrainingError(f"micro_batch_tokens must be > 0, got {micro_batch_tokens!r}")
        self.device = torch.device(device)
        self.dtype = _resolve_dtype(dtype)
        self.temperature = None if temperature is None else float(temperature)
        self.grad_clip = grad_clip
        self.micro_batch_tokens = micro_batch_tokens
        self.compute_entropy = compute_entropy
        self.lora_rank = lora_rank
        self.kind: CheckpointKind = "full" if lora_rank is None else "lora"

        torch.manual_seed(seed)
        base = AutoModelForCausalLM.from_pretrained(str(self.model_dir), dtype=self.dtype)
        base.config.use_cache = False
        if gradient_checkpointing:
            base.gradient_checkpointing_enable(
                gradient_checkpointing_kwargs={"use_reentrant": False}
            )
        self.pad_token_id = pad_token_id(base.config)
        self._lora_config: dict[str, Any] = {}
        if lora_rank is None:
            self.model: torch.nn.Module = base
        else:
            from peft import LoraConfig, get_peft_model

            present = {name.rsplit(".", 1)[-1] for name, _ in base.named_modules()}
            targets = [t for t in lora_target_modules if t in present]
            if not targets:
                raise TrainingError(
                    f"lora_target_modules {list(lora_target_modules)!r} match no module of "
                    f"{str(self.model_dir)!r}"
                )
            alpha = int(lora_alpha) if lora_alpha is not None else 2 * lora_rank
            config = LoraConfig(
                r=lora_rank,
                lora_alpha=alpha,
                lora_dropout=lora_dropout,
                target_modules=targets,
                bias="none",
                task_type="CAUSAL_LM",
            )
            self.model = get_peft_model(cast(PreTrainedModel, base), config)
            self._lora_config = {"rank": lora_rank, "alpha": alpha, "targets": targets}
        cast(Any, self.model).to(self.device)
        self._writer = CheckpointWriter(self.model, kind=self.kind, base_dir=self.model_dir)
        self.params = [p for p in self.model.parameters() if p.requires_grad]
        self.optimizer = torch.optim.AdamW(
            self.params, lr=lr, betas=betas, eps=eps, weight_decay=weight_decay
        )
        self._step = 0
        self._pending_backward = 0

    # -- properties ---------------------------------------------------------------------------

    @property
    def step(self) -> int:
        """Optimizer steps taken (the version of the current weights)."""
        return self._step

    @property
    def lr(self) -> float:
        return float(self.optimizer.param_groups[0]["lr"])

    @lr.setter
    def lr(self, value: float) -> None:
        if value <= 0:
            raise TrainingError(f"lr must be > 0, got {value!r}")
        for group in self.optimizer.param_groups:
            group["lr"] = value

    @property
    def num_trainable_parameters(self) -> int:
        return sum(p.numel() for p in self.params)

    # -- scoring ------------------------------------------------------------------------------

    def _micro_batches(self, segments: Sequence[Segment]) -> list[list[int]]:
        return micro_batches([len(s) for s in segments], self.micro_batch_tokens)

    def _score(
        self, segments: Sequence[Segment], *, entropy_grad: bool = False
    ) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
        return score(
            self.model,
            segments,
            pad_token_id=self.pad_token_id,
            device=self.device,
            temperature=self.temperature,
            entropy=self.compute_entropy,
            entropy_grad=entropy_grad,
        )

    def logprobs(self, segments: TrainBatch | Sequence[Segment]) -> list[tuple[float, ...]]:
        """Trainer logprobs of each segment's tokens (no gradient), aligned to its tokens."""
        segs = segments.segments if isinstance(segments, TrainBatch) else tuple(segments)
        if not segs:
            return []
        out: list[tuple[float, ...]] = [() for _ in segs]
        was_training = self.model.training
        self.model.eval()
        try:
            with torch.no_grad():
                for group in self._micro_batches(segs):
                    logp, _ = self._score([segs[i] for i in group])
                    rows = logp.cpu()
                    for row, i in enumerate(group):
                        out[i] = tuple(rows[row, : len(segs[i])].tolist())
        finally:
            self.model.train(was_training)
        return out

    # -- training -----------------------------------------------------------------------------

    def forward_backward(self, batch: TrainBatch) -> ForwardBackwardResult:
        """Score the batch, compute its loss and accumulate gradients (see the module doc)."""
        started = time.perf_counter()
        segs = batch.segments
        total = batch.num_loss_tokens or max(batch.loss_tokens, 1)
        self.model.train()
        out: list[tuple[float, ...]] = [() for _ in segs]
        flat_trainer: list[torch.Tensor] = []
        flat_sampler: list[torch.Tensor] = []
        flat_mask: list[torch.Tensor] = []
        flat_versions: list[torch.Tensor] = []
        loss_total = 0.0
        entropy_sum = 0.0
        clipped_tokens = 0.0
        entropy_coef = batch.loss.entropy_coef if batch.loss.kind == "policy_gradient" else 0.0
        for group in self._micro_batches(segs):
            logp, tensors = self._score([segs[i] for i in group], entropy_grad=entropy_coef > 0)
            mask = tensors["loss_mask"]
            result: LossOutput
            if batch.loss.kind == "supervised":
                result = supervised_loss(logp, mask, num_tokens=total)
            else:
                result = policy_gradient_loss(
                    logp,
                    tensors["sampler_logprobs"],
                    tensors["advantages"],
                    mask,
                    batch.loss.importance,
                    num_tokens=total,
                )
            if not math.isfinite(result.metrics["loss"]):
                self.optimizer.zero_grad(set_to_none=True)
                self._pending_backward = 0
                raise TrainingError(
                    f"loss is {result.metrics['loss']!r}: gradients discarded, no step taken"
                )
            loss = result.loss
            if entropy_coef > 0:  # the bonus, normalised like the loss: per trained token
                loss = loss - entropy_coef * tensors["entropy_sum"] / total
            loss.backward()
            loss_total += float(loss.detach().item())
            clipped_tokens += result.metrics.get("is/clipped_frac", 0.0) * float(mask.sum().item())
            if "entropy_sum" in tensors:
                entropy_sum += float(tensors["entropy_sum"].detach().item())
            detached = logp.detach()
            rows = detached.cpu()
            for row, i in enumerate(group):
                out[i] = tuple(rows[row, : len(segs[i])].tolist())
            flat_trainer.append(detached[mask].cpu())
            flat_sampler.append(tensors["sampler_logprobs"][mask].cpu())
            flat_mask.append(torch.ones(int(mask.sum().item()), dtype=torch.bool))
            flat_versions.append(tensors["versions"][mask].cpu())
        self._pending_backward += 1
        n = batch.loss_tokens
        metrics: dict[str, float] = {
            "loss": loss_total,
            "tokens": float(sum(len(s) for s in segs)),
            "loss_tokens": float(n),
            "sequences": float(len(segs)),
        }
        if n and (self.compute_entropy or entropy_coef > 0):
            metrics["train/entropy"] = entropy_sum / n
        if batch.loss.kind == "policy_gradient" and n:
            from rollout.training.importance import importance_weights

            metrics.update(
                importance_weights(
                    torch.cat(flat_trainer),
                    torch.cat(flat_sampler),
                    torch.cat(flat_mask),
                    batch.loss.importance,
                ).metrics
            )
            if batch.loss.importance.mode == "clip":
                metrics["is/clipped_frac"] = clipped_tokens / n
            versions = torch.cat(flat_versions)
            versions = versions[versions >= 0]
            if versions.numel():
                lag = (self._step - versions).float()
                metrics["train/lag_mean"] = float(lag.mean().item())
                metrics["train/lag_max"] = float(lag.max().item())
        metrics["time/forward_backward_s"] = time.perf_counter() - started
        return ForwardBackwardResult(metrics=metrics, logprobs=tuple(out))

    def optim_step(self) -> dict[str, float]:
        """Clip and apply the accumulated gradients, clear them, and count the step.

        With nothing accumulated (every group of the step was uniform) the weights and the
        optimizer's moments are left alone, but the step still counts (`optim/skipped` = 1):
        versions stay equal to the trainer's step count.
        """
        started = time.perf_counter()
        if self._pending_backward == 0:
            self._step += 1
            return {
                "grad_norm": 0.0,
                "lr": self.lr,
                "step": float(self._step),
                "optim/skipped": 1.0,
                "time/optim_step_s": time.perf_counter() - started,
            }
        grads = [p.grad for p in self.params if p.grad is not None]
        if self.grad_clip is not None:
            norm = torch.nn.utils.clip_grad_norm_(self.params, self.grad_clip)
        elif grads:
            norm = torch.linalg.vector_norm(
                torch.stack([torch.linalg.vector_norm(g) for g in grads])
            )
        else:
            norm = torch.zeros(())
        grad_norm = float(norm.item())
        lr = self.lr
        if math.isfinite(grad_norm):
            self.optimizer.step()
        self.optimizer.zero_grad(set_to_none=True)
        self._pending_backward = 0
        if not math.isfinite(grad_norm):
            raise TrainingError(f"grad_norm is {grad_norm!r}: gradients discarded, no step taken")
        self._step += 1
        return {
            "grad_norm": grad_norm,
            "lr": lr,
            "step": float(self._step),
            "optim/skipped": 0.0,
            "time/optim_step_s": time.perf_counter() - started,
        }

    def reset_optimizer(self) -> None:
        """Forget the optimizer's moments (e.g. after warm-up); the step count is kept."""
        if self._pending_backward:
            raise TrainingError("reset_optimizer called with gradients pending: call optim_step")
        self.optimizer.state.clear()

    # -- checkpoints --------------------------------------------------------------------------

    def save(self, path: str | Path) -> SavedCheckpoint:
        """Write the checkpoint to a new folder `path` (written aside, then renamed into place).

        Raises:
            CheckpointError: `path` exists and is not empty.
        """
        summary = {
            "kind": self.kind,
            "step": self._step,
            "base_model": str(self.model_dir.resolve()),
            "dtype": str(self.dtype).removeprefix("torch."),
            "lora": self._lora_config,
            "lr": self.lr,
        }
        state = {
            "optimizer": self.optimizer.state_dict(),
            "step": self._step,
            "rng": rng_state(),
            "kind": self.kind,
        }
        target, files = self._writer.write(path, state=state, summary=summary)
        return SavedCheckpoint(
            path=str(target),
            kind=self.kind,
            step=self._step,
            base_model=str(self.model_dir.resolve()),
            metadata={**summary, "files": files},
        )

    def load(self, path: str | Path) -> None:
        """Restore weights, optimizer state, step count and RNG state written by `save`.

        Raises:
            CheckpointError: Files are missing or the checkpoint is of another kind.
        """
        source = Path(path)
        state = read_state(source, self.kind)
        if self.kind == "full":
            load_full(self.model, source)
        else:
            load_lora(self.model, source)
        self.optimizer.load_state_dict(state["optimizer"])
        self.optimizer.zero_grad(set_to_none=True)
        self._pending_backward = 0
        self._step = int(state["step"])
        set_rng_state(state["rng"])
