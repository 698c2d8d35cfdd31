"""Format warm-up: teach a fresh policy the shape of an answer, and nothing about the task.

A randomly initialised (or badly matched) policy may almost never produce an answer the grader
can read, so every reward is 0 and group-relative advantages are all zero: RL cannot start.
Warm-up fixes that with a few supervised steps on the task's prompts paired with *random*
answers of the right shape (a random letter, a random number of the right length) followed by
the stop token. The policy learns to answer in format with no information about which answer is
right, so any skill measured afterwards was learned by RL.

>>> import random
>>> def random_answer(rng: random.Random) -> list[int]:
...     return [rng.choice([15, 16])]  # "E" or "O"; EOS is appended
"""

from __future__ import annotations

import random
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING

from rollout.training.errors import TrainingError
from rollout.training.loss import LossConfig
from rollout.training.providers.base import TrainBatch, TrainingProvider
from rollout.training.segments import UNSAMPLED_VERSION, Segment

if TYPE_CHECKING:
    from rollout.contracts import Message
    from rollout.rendering.base import Renderer

AnswerFn = Callable[[random.Random], Sequence[int]]
"""Returns the token ids of one random answer of the right shape (without the stop token)."""


def warmup_segment(prompt: Sequence[int], answer: Sequence[int]) -> Segment:
    """A supervised segment: the prompt (not trained) followed by the answer (trained)."""
    if not prompt:
        raise TrainingError("warm-up prompt is empty")
    if not answer:
        raise TrainingError("warm-up answer is empty")
    n, m = len(prompt), len(answer)
    return Segment(
        tokens=(*prompt, *answer),
        loss_mask=(False,) * n + (True,) * m,
        sampler_logprobs=(0.0,) * (n + m),
        versions=(UNSAMPLED_VERSION,) * (n + m),
    )


def warmup_segments(
    renderer: Renderer, examples: Sequence[tuple[Sequence[Message], str]]
) -> list[Segment]:
    """Supervised segments from chat examples: (messages, answer text) pairs.

    The prompt is `renderer.render(messages)` (the generation prompt included) and the trained
    completion is the answer's tokens followed by the renderer's first stop token: exactly the
    tokens a policy answering in format would sample.
    """
    if not renderer.stop_token_ids:
        raise TrainingError("renderer has no stop_token_ids: cannot end warm-up answers")
    stop = renderer.stop_token_ids[0]
    return [
        warmup_segment(renderer.render(list(messages)), (*renderer.encode(answer), stop))
        for messages, answer in examples
    ]


def format_warmup(
    provider: TrainingProvider,
    prompts: Sequence[Sequence[int]],
    answer_fn: AnswerFn,
    *,
    steps: int,
    batch_size: int = 64,
    eos_token_id: int | None = None,
    seed: int = 0,
    on_step: Callable[[int, dict[str, float]], None] | None = None,
) -> list[dict[str, float]]:
    """Run `steps` supervised steps on random prompts with random answers.

    Args:
        provider: The training provider (its optimizer takes the steps).
        prompts: Prompt token ids to draw from (with replacement).
        answer_fn: Makes one random answer of the right shape from an RNG.
        steps: Optimizer steps to take.
        batch_size: Sequences per step.
        eos_token_id: Appended to every answer (the model must learn to stop).
        seed: Seeds the draws of prompts and answers.
        on_step: Called with (step index, metrics) after each step.

    Returns:
        The metrics of each step (`loss` and the provider's step metrics).
    """
    if steps < 0:
        raise TrainingError(f"steps must be >= 0, got {steps!r}")
    if batch_size < 1:
        raise TrainingError(f"batch_size must be >= 1, got {batch_size!r}")
    if not prompts:
        raise TrainingError("prompts is empty")
    rng = random.Random(seed)
    suffix = () if eos_token_id is None else (eos_token_id,)
    history: list[dict[str, float]] = []
    for i in range(steps):
        segments = tuple(
            warmup_segment(rng.choice(prompts), (*answer_fn(rng), *suffix))
            for _ in range(batch_size)
        )
        result = provider.forward_backward(
            TrainBatch(segments=segments, loss=LossConfig(kind="supervised"))
        )
        metrics = {**result.metrics, **provider.optim_step()}
        history.append(metrics)
        if on_step is not None:
            on_step(i, metrics)
    return history
