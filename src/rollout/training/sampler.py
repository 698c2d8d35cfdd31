"""A minimal in-process batched sampler with per-token logprobs, for experiments and tests.

This is not a serving backend (those live in `rollout.inference`); it exists so learning
experiments, format warm-up and trainer/sampler agreement tests can sample from a model held in
the same process, with the same numerics the trainer uses.

Prompts of different lengths are left-padded (`rollout.models.padding`); position ids come from
the attention mask (`cumsum(mask) - 1`), so each prompt sees the positions it would see alone.
Decoding uses the KV cache. The logprob of each sampled token is taken from
`log_softmax(logits / T)`, the distribution it was sampled from.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import torch

from rollout.models.hf import cache_argument
from rollout.models.padding import left_padded
from rollout.training.errors import TrainingError


@dataclass(frozen=True)
class Sample:
    """One sampled completion: tokens (ending with the stop token if one was sampled)."""

    tokens: tuple[int, ...]
    logprobs: tuple[float, ...]
    stop_reason: str  # "stop" | "length"


@torch.no_grad()
def sample_batch(
    model: Any,
    prompts: Sequence[Sequence[int]],
    *,
    max_new_tokens: int,
    stop_token_ids: Sequence[int],
    pad_token_id: int,
    temperature: float = 1.0,
    generator: torch.Generator | None = None,
) -> list[Sample]:
    """Sample one completion per prompt, all prompts in one batch.

    Args:
        model: A Hugging Face causal LM (any device; inputs follow its parameters).
        prompts: Token ids per prompt (non-empty).
        max_new_tokens: The most tokens to sample per prompt.
        stop_token_ids: Sampling one of these ends that completion (it is included).
        pad_token_id: Fills the left padding.
        temperature: Sampling temperature (> 0).
        generator: Random generator for reproducible sampling (on the model's device).

    Returns:
        One `Sample` per prompt, in order.
    """
    if temperature <= 0:
        raise TrainingError(f"temperature must be > 0, got {temperature!r}")
    if max_new_tokens < 1:
        raise TrainingError(f"max_new_tokens must be >= 1, got {max_new_tokens!r}")
    if not prompts or any(len(p) == 0 for p in prompts):
        raise TrainingError("prompts must be a non-empty list of non-empty token lists")
    device = next(model.parameters()).device
    b = len(prompts)
    batch = left_padded(prompts, pad_token_id, device)
    mask = batch.attention_mask
    stops = torch.tensor(list(stop_token_ids), dtype=torch.long, device=device)
    cache_arg = cache_argument(model)

    was_training = model.training
    model.eval()
    try:
        out = model(
            input_ids=batch.input_ids,
            attention_mask=mask,
            position_ids=batch.position_ids,
            use_cache=True,
            logits_to_keep=1,
        )
        cache = out[cache_arg]
        logits = out.logits[:, -1]
        next_pos = batch.next_positions
        done = torch.zeros(b, dtype=torch.bool, device=device)
        tokens: list[torch.Tensor] = []
        logprobs: list[torch.Tensor] = []
        alive: list[torch.Tensor] = []
        for step in range(max_new_tokens):
            logp = torch.log_softmax(logits.float() / temperature, dim=-1)
            token = torch.multinomial(logp.exp(), 1, generator=generator).squeeze(-1)
            token = torch.where(done, torch.full_like(token, pad_token_id), token)
            tokens.append(token)
            logprobs.append(logp.gather(-1, token[:, None]).squeeze(-1))
            alive.append(~done)
            if stops.numel():
                done = done | torch.isin(token, stops)
            if bool(done.all()) or step == max_new_tokens - 1:
                break
            mask = torch.cat([mask, torch.ones((b, 1), dtype=mask.dtype, device=device)], dim=1)
            out = model(
                input_ids=token[:, None],
                attention_mask=mask,
                position_ids=next_pos[:, None],
                use_cache=True,
                **{cache_arg: cache},
            )
            cache = out[cache_arg]
            logits = out.logits[:, -1]
            next_pos = next_pos + 1
    finally:
        model.train(was_training)

    tok = torch.stack(tokens, dim=1).cpu()
    lps = torch.stack(logprobs, dim=1).cpu()
    live = torch.stack(alive, dim=1).cpu()
    stop_set = set(stop_token_ids)
    samples: list[Sample] = []
    for i in range(b):
        n = int(live[i].sum().item())
        row = tuple(tok[i, :n].tolist())
        samples.append(
            Sample(
                tokens=row,
                logprobs=tuple(lps[i, :n].tolist()),
                stop_reason="stop" if row and row[-1] in stop_set else "length",
            )
        )
    return samples
