"""The inference backend contract: tokens in, tokens and logprobs out.

A backend samples one completion for one prompt of token ids and reports the checkpoint version
that sampled it. Backends: `scripted` (deterministic replies for tests and first episodes),
`local` (PyTorch + transformers), `vllm`, `tinker`.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from dataclasses import dataclass
from typing import Protocol, runtime_checkable

from rollout.contracts import Completion, SamplingParams
from rollout.errors import RolloutError


@runtime_checkable
class InferenceBackend(Protocol):
    """Samples completions. Implementations must be safe to call concurrently from one loop."""

    name: str

    @property
    def version(self) -> int:
        """The checkpoint version this backend serves now."""
        ...

    async def sample(self, prompt_tokens: list[int], params: SamplingParams) -> Completion:
        """Sample one completion of `prompt_tokens`."""
        ...

    async def close(self) -> None:
        """Release resources (threads, GPU memory, subprocesses)."""
        ...


@dataclass(frozen=True)
class SampleChunk:
    """Tokens sampled since the previous chunk of a streamed completion.

    The last chunk of a stream carries the whole `completion` (what is recorded); earlier ones
    carry None. `top_logprobs` is empty unless the request asked for alternatives.
    """

    tokens: tuple[int, ...]
    logprobs: tuple[float, ...]
    top_logprobs: tuple[dict[int, float], ...] = ()
    completion: Completion | None = None


@runtime_checkable
class StreamingBackend(InferenceBackend, Protocol):
    """A backend that also yields tokens as they are chosen (optional; see `sample_stream`)."""

    def sample_stream(
        self, prompt_tokens: list[int], params: SamplingParams
    ) -> AsyncIterator[SampleChunk]:
        """Sample one completion, yielding its tokens as they are chosen; the last chunk
        carries the whole completion."""
        ...


async def sample_stream(
    backend: InferenceBackend, prompt_tokens: list[int], params: SamplingParams
) -> AsyncIterator[SampleChunk]:
    """`backend.sample_stream` when the backend has one; else its whole completion, once."""
    stream = getattr(backend, "sample_stream", None)
    if stream is not None:
        async for chunk in stream(prompt_tokens, params):
            yield chunk
        return
    completion = await backend.sample(prompt_tokens, params)
    yield SampleChunk(
        completion.tokens, completion.logprobs, completion.top_logprobs, completion=completion
    )


class BackendError(RolloutError, ValueError):
    """A backend cannot serve a request or load weights; the message names the field."""
