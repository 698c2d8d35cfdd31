"""The local PyTorch training provider: full weights or LoRA, on CPU or GPU.

- `provider`: `TorchProvider` (construction, the step: `forward_backward` and `optim_step`);
- `scoring`: right-padded batches, micro-batches, float32 token logprobs and entropy;
- `checkpoints`: `save`/`load` folders (a Hugging Face folder or a peft adapter, plus the
  optimizer and RNG state for an exact resume).
"""

from rollout.training.providers.torch.checkpoints import STATE_FILE, STATE_SUMMARY
from rollout.training.providers.torch.provider import DEFAULT_LORA_TARGETS, TorchProvider
from rollout.training.providers.torch.scoring import pad_segments

__all__ = ["DEFAULT_LORA_TARGETS", "STATE_FILE", "STATE_SUMMARY", "TorchProvider", "pad_segments"]
