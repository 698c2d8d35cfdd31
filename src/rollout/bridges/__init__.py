"""Bridges convert each checkpoint into what each inference backend loads, and record it.

- `local` (PyTorch + transformers) and `vllm` both load a Hugging Face folder (full weights) or a
  peft LoRA adapter folder; the conversion keeps the model files and drops the trainer's state
  (optimizer, RNG), so servers fetch only what they load.

The bridge role (`rollout bridge`) follows new checkpoints of every active run.
"""

from rollout.bridges.convert import BACKENDS, convert_checkpoint
from rollout.bridges.role import Bridge

__all__ = ["BACKENDS", "Bridge", "convert_checkpoint"]
