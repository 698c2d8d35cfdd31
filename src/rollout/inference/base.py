"""The inference backend contract: tokens in, tokens and logprobs out.

A backend samples one completion for one prompt of token ids and reports the checkpoint version
that sampled it. Backends: `scripted` (deterministic replies for tests and first episodes),
`local` (PyTorch + transformers), `vllm`, `tinker`.
"""

from __future__ import annotations

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


class BackendError(RolloutError, ValueError):
    """A backend cannot serve a request or load weights; the message names the field."""
