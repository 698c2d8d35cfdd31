"""Sample chat replies straight from a backend, without a gateway or a ledger.

Used by `rollout env check`, which must work with nothing running.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from rollout.contracts import Message, SamplingParams, ToolSpec
from rollout.inference.base import InferenceBackend
from rollout.rendering.base import Renderer


def with_stop_ids(params: SamplingParams, stop_ids: Sequence[int]) -> SamplingParams:
    """`params` with `stop_ids` (a chat template's end of turn) added after its own.

    >>> with_stop_ids(SamplingParams(stop_token_ids=[7, 2]), [2, 3]).stop_token_ids
    [7, 2, 3]
    """
    merged = list(dict.fromkeys([*params.stop_token_ids, *stop_ids]))
    return params.model_copy(update={"stop_token_ids": merged})


def sampling_params(settings: Mapping[str, Any], renderer: Renderer) -> SamplingParams:
    """SamplingParams from loose settings, with the template's stop tokens added."""
    return with_stop_ids(SamplingParams.model_validate(dict(settings)), renderer.stop_token_ids)


class DirectModel:
    """`complete(messages, tools, sampling)` by rendering, sampling and parsing in-process."""

    def __init__(self, renderer: Renderer, backend: InferenceBackend) -> None:
        self.renderer = renderer
        self.backend = backend

    async def complete(
        self,
        messages: Sequence[Message],
        tools: Sequence[ToolSpec],
        sampling: Mapping[str, Any],
    ) -> Message:
        prompt = self.renderer.render(messages, tools)
        completion = await self.backend.sample(prompt, sampling_params(sampling, self.renderer))
        return self.renderer.parse(completion.tokens)
