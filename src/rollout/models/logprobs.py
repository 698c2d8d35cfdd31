"""Teacher-forced logprobs: the logprob a causal LM gives each token after the ones before it.

The trainer scores its segments with `token_logprobs`, and the local backend's `score` does the
same for one prompt and completion, so trainer and sampler logprobs are computed by one formula:
`log_softmax(logits[t - 1] / T)[token t]`, in float32, at a per-row temperature T.
"""

from __future__ import annotations

import torch


def token_logprobs(
    logits: torch.Tensor, input_ids: torch.Tensor, temperatures: torch.Tensor
) -> torch.Tensor:
    """Logprob of each token given the ones before it, at per-row temperatures, in float32.

    Args:
        logits: [B, T, V] model outputs.
        input_ids: [B, T] the tokens.
        temperatures: [B] sampling temperatures (> 0).

    Returns:
        [B, T] logprobs; position 0 (no context) is 0.

    >>> logits = torch.zeros(1, 3, 4)  # a uniform model over 4 tokens
    >>> token_logprobs(logits, torch.tensor([[1, 2, 3]]), torch.tensor([1.0])).exp()
    tensor([[1.0000, 0.2500, 0.2500]])
    """
    scaled = logits[:, :-1].float() / temperatures.float()[:, None, None]
    targets = input_ids[:, 1:]
    picked = scaled.gather(-1, targets[..., None]).squeeze(-1)
    lp = picked - torch.logsumexp(scaled, dim=-1)
    return torch.nn.functional.pad(lp, (1, 0))


def completion_logprobs(
    model: torch.nn.Module,
    prompt: list[int],
    completion: list[int],
    temperature: float = 1.0,
) -> list[float]:
    """Teacher-forced logprobs of `completion` after `prompt` under `model`, no gradient.

    Args:
        model: A Hugging Face causal LM (inputs go to its parameters' device).
        prompt: Token ids before the completion (non-empty).
        completion: The tokens to score.
        temperature: Scores under `log_softmax(logits / temperature)` (> 0).
    """
    if not completion:
        return []
    device = next(model.parameters()).device
    ids = torch.tensor([prompt + completion], device=device)
    with torch.inference_mode():
        logits = model(input_ids=ids).logits
        logp = token_logprobs(logits, ids, torch.tensor([temperature], device=device))
    return logp[0, len(prompt) :].tolist()
