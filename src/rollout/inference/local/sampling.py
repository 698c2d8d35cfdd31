"""The local backend's sampling maths: one next token per row, with its logprob.

Logprobs are reported under the distribution actually sampled from:

- temperature T > 0: `log_softmax(logits / T)`; with `top_p < 1`, the nucleus (the smallest set
  of most likely tokens whose probability reaches top_p) renormalised, so the logprob of a
  sampled token is `log(p / p_nucleus)`.
- temperature 0 (greedy): the argmax token, with its logprob under `log_softmax(logits)`
  (temperature 1), since the greedy distribution itself is degenerate.

Each row draws its uniform from its own generator, so a seeded request samples the same tokens
whatever else shares its batch.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import torch

from rollout.contracts import SamplingParams


@dataclass(frozen=True)
class Choice:
    """The tokens chosen for a batch: per row the token, its logprob and the top alternatives."""

    tokens: list[int]
    logprobs: list[float]
    top: list[dict[int, float]]
    """Per row its `top_logprobs` most likely tokens ({} when the row asked for none)."""


def nucleus(logp: torch.Tensor, top_p: torch.Tensor) -> torch.Tensor:
    """Restrict each row to its top-p nucleus and renormalise (rows with top_p 1 unchanged).

    >>> logp = torch.tensor([[0.5, 0.3, 0.15, 0.05]]).log()
    >>> nucleus(logp, torch.tensor([0.75])).exp()
    tensor([[0.6250, 0.3750, 0.0000, 0.0000]])
    """
    sorted_logp, order = logp.sort(dim=-1, descending=True)
    cumulative = sorted_logp.exp().cumsum(dim=-1)
    before = cumulative - sorted_logp.exp()  # mass of the strictly more likely tokens
    drop_sorted = (before >= top_p.unsqueeze(-1)) & (top_p.unsqueeze(-1) < 1.0)
    drop = torch.zeros_like(drop_sorted).scatter(-1, order, drop_sorted)
    kept = logp.masked_fill(drop, float("-inf"))
    return kept - torch.logsumexp(kept, dim=-1, keepdim=True)


def choose(
    params: Sequence[SamplingParams], generators: Sequence[torch.Generator], logits: torch.Tensor
) -> Choice:
    """Pick each row's next token under its own settings (see the module docstring).

    Args:
        params: Each row's sampling settings.
        generators: Each row's random generator (one uniform is drawn from each).
        logits: [B, V] next-token logits, float32.
    """
    device = logits.device
    temps = torch.tensor([p.temperature or 1.0 for p in params], device=device).unsqueeze(-1)
    logp = torch.log_softmax(logits / temps, dim=-1)
    # Greedy rows report the plain temperature-1 distribution (no nucleus).
    top_ps = [p.top_p if p.temperature else 1.0 for p in params]
    if any(p < 1.0 for p in top_ps):
        logp = nucleus(logp, torch.tensor(top_ps, device=device))
    greedy = torch.argmax(logits, dim=-1)
    uniforms = torch.stack([torch.rand((), generator=g) for g in generators])
    probs = logp.exp()
    cdf = probs.cumsum(dim=-1)
    targets = uniforms.to(device).unsqueeze(-1) * cdf[:, -1:]
    sampled = torch.searchsorted(cdf, targets, right=True).squeeze(-1)
    # Never land on a zero-probability token (float rounding at the top of the cdf).
    sampled = torch.where(
        probs.gather(-1, sampled.clamp(max=logits.shape[-1] - 1).unsqueeze(-1)).squeeze(-1) > 0,
        sampled.clamp(max=logits.shape[-1] - 1),
        torch.argmax(logp, dim=-1),
    )
    is_greedy = torch.tensor([p.temperature == 0 for p in params], device=device)
    tokens = torch.where(is_greedy, greedy, sampled)
    chosen_logp = logp.gather(-1, tokens.unsqueeze(-1)).squeeze(-1)
    top: list[dict[int, float]] = [{} for _ in params]
    want_top = max(p.top_logprobs for p in params)
    if want_top:
        top_values, top_ids = logp.topk(want_top, dim=-1)
        values, ids = top_values.tolist(), top_ids.tolist()
        for row, p in enumerate(params):
            k = p.top_logprobs
            top[row] = {
                t: v
                for t, v in zip(ids[row][:k], values[row][:k], strict=True)
                if v > float("-inf")
            }
    return Choice(tokens=tokens.tolist(), logprobs=chosen_logp.tolist(), top=top)
