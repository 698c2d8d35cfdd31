"""The local PyTorch training provider: full weights or LoRA, on CPU or GPU.

`TorchProvider(model_dir, lora_rank=None | r, ...)` loads a Hugging Face causal LM. With
`lora_rank` it wraps the model in peft LoRA adapters on the attention and MLP projections and
trains only those; otherwise it trains every weight. The optimizer is AdamW (Adam when
`weight_decay=0`).

Scoring: segments are right-padded into one batch with an attention mask; the logprob of token
t is `log_softmax(logits[t-1] / T)[token t]` at the segment's sampling temperature T, computed
in float32. Sequences longer than the micro-batch budget are processed in several forward
passes whose gradients accumulate (the loss is normalised over the whole batch either way).

Checkpoints (`save(dir)`):

- full: `model.safetensors` + `config.json` (+ generation config) and the tokenizer files of the
  base folder: a Hugging Face folder any backend can load;
- LoRA: `adapter_config.json` + `adapter_model.safetensors` (peft `save_pretrained`);
- both: `trainer_state.pt` (optimizer state, step, RNG states) and `trainer_state.json` (a
  readable summary), so `load(dir)` resumes exactly where `save` left off.
"""

from __future__ import annotations

import json
import math
import os
import random
import shutil
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any, cast

import numpy as np
import torch
from safetensors.torch import load_file
from transformers import AutoModelForCausalLM, PreTrainedModel

from rollout.training.errors import CheckpointError, TrainingError
from rollout.training.loss import LossOutput, policy_gradient_loss, supervised_loss
from rollout.training.providers.base import (
    CheckpointKind,
    ForwardBackwardResult,
    SavedCheckpoint,
    TrainBatch,
)
from rollout.training.segments import UNSAMPLED_VERSION, Segment

DEFAULT_LORA_TARGETS = ("q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj")

TOKENIZER_FILE_PATTERNS = (
    "tokenizer*",
    "special_tokens_map.json",
    "added_tokens.json",
    "chat_template*",
    "vocab*",
    "merges.txt",
    "*.tiktoken",
)
"""Files copied from the base folder into a full checkpoint so it is a complete HF folder."""

_ENTROPY_CHUNK = 1024
"""Trained positions per chunk when measuring entropy (bounds the [N, vocab] temporaries)."""

STATE_FILE = "trainer_state.pt"
STATE_SUMMARY = "trainer_state.json"

_DTYPES = {"float32": torch.float32, "bfloat16": torch.bfloat16, "float16": torch.float16}


def _resolve_dtype(dtype: torch.dtype | str) -> torch.dtype:
    if isinstance(dtype, torch.dtype):
        return dtype
    if dtype not in _DTYPES:
        raise TrainingError(f"dtype must be one of {sorted(_DTYPES)}, got {dtype!r}")
    return _DTYPES[dtype]


def _rng_state() -> dict[str, Any]:
    state: dict[str, Any] = {
        "torch": torch.get_rng_state(),
        "python": random.getstate(),
        "numpy": np.random.get_state(),
    }
    if torch.cuda.is_available():
        state["cuda"] = torch.cuda.get_rng_state_all()
    return state


def _set_rng_state(state: dict[str, Any]) -> None:
    torch.set_rng_state(state["torch"])
    random.setstate(state["python"])
    np.random.set_state(state["numpy"])
    if "cuda" in state and torch.cuda.is_available():
        torch.cuda.set_rng_state_all(state["cuda"])


def pad_segments(
    segments: Sequence[Segment], pad_token_id: int, device: torch.device | str = "cpu"
) -> dict[str, torch.Tensor]:
    """Right-pad segments into batch tensors.

    Returns:
        `input_ids` [B, T], `attention_mask` [B, T] (1 on real tokens), `loss_mask` [B, T] bool,
        `sampler_logprobs` [B, T] float32, `advantages` [B] float32, `temperatures` [B] float32,
        `versions` [B, T] int64 (-1 on untrained and padded tokens).
    """
    width = max(len(s) for s in segments)
    b = len(segments)
    ids = torch.full((b, width), pad_token_id, dtype=torch.long)
    attention = torch.zeros((b, width), dtype=torch.long)
    loss_mask = torch.zeros((b, width), dtype=torch.bool)
    sampler = torch.zeros((b, width), dtype=torch.float32)
    versions = torch.full((b, width), UNSAMPLED_VERSION, dtype=torch.long)
    for i, s in enumerate(segments):
        n = len(s)
        ids[i, :n] = torch.tensor(s.tokens, dtype=torch.long)
        attention[i, :n] = 1
        loss_mask[i, :n] = torch.tensor(s.loss_mask, dtype=torch.bool)
        sampler[i, :n] = torch.tensor(s.sampler_logprobs, dtype=torch.float32)
        versions[i, :n] = torch.tensor(s.versions, dtype=torch.long)
    out = {
        "input_ids": ids,
        "attention_mask": attention,
        "loss_mask": loss_mask,
        "sampler_logprobs": sampler,
        "versions": versions,
        "advantages": torch.tensor([s.advantage for s in segments], dtype=torch.float32),
        "temperatures": torch.tensor([s.temperature for s in segments], dtype=torch.float32),
    }
    return {k: v.to(device) for k, v in out.items()}


def token_logprobs(
    logits: torch.Tensor, input_ids: torch.Tensor, temperatures: torch.Tensor
) -> torch.Tensor:
    """Logprob of each token given the ones before it, at per-row temperatures, in float32.

    Args:
        logits: [B, T, V] model outputs.
        input_ids: [B, T] the tokens.
        temperatures: [B] sampling temperatures.

    Returns:
        [B, T] logprobs; position 0 (no context) is 0.
    """
    scaled = logits[:, :-1].float() / temperatures.float()[:, None, None]
    targets = input_ids[:, 1:]
    picked = scaled.gather(-1, targets[..., None]).squeeze(-1)
    lp = picked - torch.logsumexp(scaled, dim=-1)
    return torch.nn.functional.pad(lp, (1, 0))


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
        self.pad_token_id = self._pad_token_id(base)
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

    @staticmethod
    def _pad_token_id(model: PreTrainedModel) -> int:
        for name in ("pad_token_id", "eos_token_id", "bos_token_id"):
            value = getattr(model.config, name, None)
            if isinstance(value, list):
                value = value[0] if value else None
            if isinstance(value, int):
                return value
        return 0

    def _micro_batches(self, segments: Sequence[Segment]) -> list[list[int]]:
        """Segment indices grouped so each group's padded size fits the budget."""
        order = sorted(range(len(segments)), key=lambda i: len(segments[i]))
        if self.micro_batch_tokens is None:
            return [order]
        groups: list[list[int]] = []
        current: list[int] = []
        for i in order:
            width = len(segments[i])  # sorted ascending: this is the new max width
            if current and width * (len(current) + 1) > self.micro_batch_tokens:
                groups.append(current)
                current = []
            current.append(i)
        if current:
            groups.append(current)
        return groups

    def _forward(
        self, segments: Sequence[Segment], *, entropy_grad: bool = False
    ) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
        tensors = pad_segments(segments, self.pad_token_id, self.device)
        out = self.model(
            input_ids=tensors["input_ids"],
            attention_mask=tensors["attention_mask"],
            use_cache=False,
        )
        logits = out.logits
        temperatures = tensors["temperatures"]
        if self.temperature is not None:
            temperatures = torch.full_like(temperatures, self.temperature)
        logp = token_logprobs(logits, tensors["input_ids"], temperatures)
        if self.compute_entropy or entropy_grad:
            with torch.set_grad_enabled(entropy_grad and torch.is_grad_enabled()):
                # Positions t-1 predict trained tokens t; chunked so [N, V] never materialises.
                mask = tensors["loss_mask"][:, 1:]
                rows = mask.nonzero(as_tuple=True)
                total = torch.zeros((), device=logits.device)
                for start in range(0, rows[0].numel(), _ENTROPY_CHUNK):
                    b = rows[0][start : start + _ENTROPY_CHUNK]
                    t = rows[1][start : start + _ENTROPY_CHUNK]
                    picked = logits[b, t].float() / temperatures[b][:, None]
                    logp_all = torch.log_softmax(picked, dim=-1)
                    total = total - (logp_all.exp() * logp_all).sum()
                tensors["entropy_sum"] = total
        return logp, tensors

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
                    logp, _ = self._forward([segs[i] for i in group])
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
        entropy_coef = batch.loss.entropy_coef if batch.loss.kind == "policy_gradient" else 0.0
        for group in self._micro_batches(segs):
            logp, tensors = self._forward([segs[i] for i in group], entropy_grad=entropy_coef > 0)
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
        target = Path(path)
        if target.exists() and any(target.iterdir()):
            raise CheckpointError(f"checkpoint path {str(target)!r} exists and is not empty")
        target.parent.mkdir(parents=True, exist_ok=True)
        staging = Path(tempfile.mkdtemp(prefix=f".{target.name}.", dir=target.parent))
        try:
            # peft and transformers both provide save_pretrained with safetensors by default.
            cast(Any, self.model).save_pretrained(str(staging))
            if self.kind == "full":
                for pattern in TOKENIZER_FILE_PATTERNS:
                    for f in self.model_dir.glob(pattern):
                        if f.is_file() and not (staging / f.name).exists():
                            shutil.copy2(f, staging / f.name)
            torch.save(
                {
                    "optimizer": self.optimizer.state_dict(),
                    "step": self._step,
                    "rng": _rng_state(),
                    "kind": self.kind,
                },
                staging / STATE_FILE,
            )
            summary = {
                "kind": self.kind,
                "step": self._step,
                "base_model": str(self.model_dir.resolve()),
                "dtype": str(self.dtype).removeprefix("torch."),
                "lora": self._lora_config,
                "lr": self.lr,
            }
            (staging / STATE_SUMMARY).write_text(json.dumps(summary, indent=2))
            files = sorted(f.name for f in staging.iterdir())
            if target.exists():
                target.rmdir()
            os.replace(staging, target)
        except BaseException:
            shutil.rmtree(staging, ignore_errors=True)
            raise
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
        state_path = source / STATE_FILE
        if not state_path.is_file():
            raise CheckpointError(f"checkpoint {str(source)!r} has no {STATE_FILE}")
        state = torch.load(state_path, map_location="cpu", weights_only=False)
        if state.get("kind") != self.kind:
            raise CheckpointError(
                f"checkpoint {str(source)!r} is kind {state.get('kind')!r}, provider is "
                f"{self.kind!r}"
            )
        if self.kind == "full":
            self._load_full(source)
        else:
            self._load_lora(source)
        self.optimizer.load_state_dict(state["optimizer"])
        self.optimizer.zero_grad(set_to_none=True)
        self._pending_backward = 0
        self._step = int(state["step"])
        _set_rng_state(state["rng"])

    def _load_full(self, source: Path) -> None:
        files = sorted(source.glob("model*.safetensors"))
        if not files:
            raise CheckpointError(f"checkpoint {str(source)!r} has no model*.safetensors")
        weights: dict[str, torch.Tensor] = {}
        for f in files:
            weights.update(load_file(str(f)))
        result = self.model.load_state_dict(weights, strict=False)
        if result.unexpected_keys:
            raise CheckpointError(
                f"checkpoint {str(source)!r} has unknown weights {result.unexpected_keys[:5]!r}"
            )
        # Tied weights (lm_head = embeddings) are saved once; anything else missing is an error.
        state = self.model.state_dict()
        loaded = {state[k].data_ptr() for k in weights if k in state}
        missing = [k for k in result.missing_keys if state[k].data_ptr() not in loaded]
        if missing:
            raise CheckpointError(f"checkpoint {str(source)!r} lacks weights {missing[:5]!r}")

    def _load_lora(self, source: Path) -> None:
        from peft import set_peft_model_state_dict

        adapter = source / "adapter_model.safetensors"
        if not adapter.is_file():
            raise CheckpointError(f"checkpoint {str(source)!r} has no adapter_model.safetensors")
        result = set_peft_model_state_dict(self.model, load_file(str(adapter)))
        unexpected = getattr(result, "unexpected_keys", [])
        if unexpected:
            raise CheckpointError(
                f"checkpoint {str(source)!r} has unknown adapter weights {unexpected[:5]!r}"
            )
