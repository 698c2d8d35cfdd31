"""Left padding for batched prompting: prompts of different lengths decoded together.

Prompts are right-aligned (padding at the start), so every row's next token is in the last
column. Position ids count real tokens only (`cumsum(mask) - 1`), so each prompt sees the
positions it would see alone and a padded row computes what it would alone, up to float rounding.
The local backend's prefill and the in-process sampler both start here.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import torch


@dataclass(frozen=True)
class LeftPadded:
    """A batch of prompts, left-padded.

    Attributes:
        input_ids: [B, W] token ids, `pad_id` before each prompt.
        attention_mask: [B, W] 1 on real tokens, 0 on padding.
        position_ids: [B, W] positions counted from each prompt's first token (0 on padding).
    """

    input_ids: torch.Tensor
    attention_mask: torch.Tensor
    position_ids: torch.Tensor

    @property
    def next_positions(self) -> torch.Tensor:
        """[B] the position of each row's next token."""
        return self.position_ids[:, -1] + 1


def left_padded(
    prompts: Sequence[Sequence[int]], pad_id: int, device: torch.device | str = "cpu"
) -> LeftPadded:
    """`prompts` as one left-padded batch on `device`.

    >>> batch = left_padded([[5, 6, 7], [8]], pad_id=0)
    >>> batch.input_ids.tolist(), batch.position_ids.tolist(), batch.next_positions.tolist()
    ([[5, 6, 7], [0, 0, 8]], [[0, 1, 2], [0, 0, 0]], [3, 1])
    """
    width = max(len(p) for p in prompts)
    ids = torch.full((len(prompts), width), pad_id, dtype=torch.long)
    mask = torch.zeros((len(prompts), width), dtype=torch.long)
    for row, prompt in enumerate(prompts):
        ids[row, width - len(prompt) :] = torch.tensor(list(prompt), dtype=torch.long)
        mask[row, width - len(prompt) :] = 1
    ids, mask = ids.to(device), mask.to(device)
    return LeftPadded(ids, mask, positions_from_mask(mask))


def positions_from_mask(mask: torch.Tensor) -> torch.Tensor:
    """Position ids of a left-padded attention mask: real tokens count from 0, padding is 0."""
    return (mask.cumsum(-1) - 1).clamp(min=0)


def left_pad(tensor: torch.Tensor, width: int, dim: int = -2) -> torch.Tensor:
    """`tensor` padded with zeros at the start of `dim` up to `width` (KV caches, masks).

    >>> left_pad(torch.ones(1, 2, dtype=torch.long), 4, dim=1).tolist()
    [[0, 0, 1, 1]]
    """
    missing = width - tensor.shape[dim]
    if missing == 0:
        return tensor
    shape = list(tensor.shape)
    shape[dim] = missing
    return torch.cat([tensor.new_zeros(shape), tensor], dim=dim)
