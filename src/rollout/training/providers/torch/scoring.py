"""Scoring segments with the model being trained: padding, micro-batches, logprobs, entropy.

Segments are right-padded into one batch with an attention mask; the logprob of token t is
`log_softmax(logits[t-1] / T)[token t]` at the segment's sampling temperature T, in float32
(`rollout.models.logprobs.token_logprobs`, the formula the local backend scores with too).
Sequences longer than the micro-batch budget are split into several forward passes.
"""

from __future__ import annotations

from collections.abc import Sequence

import torch

from rollout.models.logprobs import token_logprobs
from rollout.training.segments import UNSAMPLED_VERSION, Segment

ENTROPY_CHUNK = 1024
"""Trained positions per chunk when measuring entropy (bounds the [N, vocab] temporaries)."""


def pad_segments(
    segments: Sequence[Segment], pad_token_id: int, device: torch.device | str = "cpu"
) -> dict[str, torch.Tensor]:
    """Right-pad segments into batch tensors.

    Returns:
        `input_ids` [B, T], `attention_mask` [B, T] (1 on real tokens), `loss_mask` [B, T] bool,
        `sampler_logprobs` [B, T] float32, `advantages` [B] float32 ([B, T] when a segment has
        per-token advantages), `temperatures` [B] float32, `versions` [B, T] int64 (-1 on
        untrained and padded tokens).
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
        "advantages": _advantages(segments, width),
        "temperatures": torch.tensor([s.temperature for s in segments], dtype=torch.float32),
    }
    return {k: v.to(device) for k, v in out.items()}


def _advantages(segments: Sequence[Segment], width: int) -> torch.Tensor:
    """[B] per-segment advantages, or [B, T] per token when any segment has them."""
    if all(s.advantages is None for s in segments):
        return torch.tensor([s.advantage for s in segments], dtype=torch.float32)
    out = torch.zeros((len(segments), width), dtype=torch.float32)
    for i, s in enumerate(segments):
        out[i, : len(s)] = torch.tensor(s.token_advantages(), dtype=torch.float32)
    return out


def micro_batches(lengths: Sequence[int], budget: int | None) -> list[list[int]]:
    """Indices grouped, shortest first, so each group's padded size (rows x longest) fits.

    >>> micro_batches([5, 2, 4, 3], budget=8)
    [[1, 3], [2], [0]]
    >>> micro_batches([5, 2], budget=None)
    [[1, 0]]
    """
    order = sorted(range(len(lengths)), key=lambda i: lengths[i])
    if budget is None:
        return [order]
    groups: list[list[int]] = []
    current: list[int] = []
    for i in order:
        width = lengths[i]  # sorted ascending: this is the new max width
        if current and width * (len(current) + 1) > budget:
            groups.append(current)
            current = []
        current.append(i)
    if current:
        groups.append(current)
    return groups


def score(
    model: torch.nn.Module,
    segments: Sequence[Segment],
    *,
    pad_token_id: int,
    device: torch.device,
    temperature: float | None = None,
    entropy: bool = False,
    entropy_grad: bool = False,
) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
    """One forward pass over `segments`: token logprobs [B, T] and the padded batch tensors.

    Args:
        model: The causal LM.
        segments: The sequences to score.
        pad_token_id: Fills the right padding.
        device: Where the batch goes.
        temperature: Score every segment at this temperature (None: each at its own).
        entropy: Add `entropy_sum`, the summed policy entropy over trained tokens.
        entropy_grad: Let gradients flow through `entropy_sum` (an entropy bonus).
    """
    tensors = pad_segments(segments, pad_token_id, device)
    out = model(
        input_ids=tensors["input_ids"],
        attention_mask=tensors["attention_mask"],
        use_cache=False,
    )
    logits = out.logits
    temperatures = tensors["temperatures"]
    if temperature is not None:
        temperatures = torch.full_like(temperatures, temperature)
    logp = token_logprobs(logits, tensors["input_ids"], temperatures)
    if entropy or entropy_grad:
        with torch.set_grad_enabled(entropy_grad and torch.is_grad_enabled()):
            tensors["entropy_sum"] = _entropy_sum(logits, tensors["loss_mask"], temperatures)
    return logp, tensors


def _entropy_sum(
    logits: torch.Tensor, loss_mask: torch.Tensor, temperatures: torch.Tensor
) -> torch.Tensor:
    # Positions t-1 predict trained tokens t; chunked so [N, V] never materialises.
    rows = loss_mask[:, 1:].nonzero(as_tuple=True)
    total = torch.zeros((), device=logits.device)
    for start in range(0, rows[0].numel(), ENTROPY_CHUNK):
        b = rows[0][start : start + ENTROPY_CHUNK]
        t = rows[1][start : start + ENTROPY_CHUNK]
        picked = logits[b, t].float() / temperatures[b][:, None]
        logp_all = torch.log_softmax(picked, dim=-1)
        total = total - (logp_all.exp() * logp_all).sum()
    return total
