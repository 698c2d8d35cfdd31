"""The `tinker` backend: sample through Tinker's `SamplingClient` (hosted).

`TinkerSamplingBackend(service)` samples from the sampler weights the serving record names:
`load_weights(folder, version)` reads the `tinker` conversion (`sampler.json`, written by the
bridge from the provider's `save_weights_for_sampler` path) and creates a `SamplingClient` for
it; `sample` calls `sample_async` with the prompt's token ids (`ModelInput.from_ints`) and
returns the sampled token ids and their logprobs, tagged with the version.

The SDK's `create_sampling_client` answers a future (using it as the client is deprecated);
the backend waits for its result. A sample that Tinker refuses for a rate limit (HTTP 429) or a
server error (5xx) is retried with growing waits (`retries`, `retry_wait`), then reported as a
`BackendError` naming the status; other errors are reported at once.

Tinker's sampler returns no top-k logprobs here: a request with `top_logprobs > 0` is refused
with an error naming the field (the gateway reports it to the client); the sampled tokens'
logprobs, which training needs, are always returned. Until the first checkpoint the base
model is served (`create_sampling_client(base_model=...)`).
"""

from __future__ import annotations

import asyncio
import json
import os
from pathlib import Path
from typing import Any

from rollout.contracts import Completion, SamplingParams
from rollout.inference.base import BackendError

SAMPLER_FILE = "sampler.json"
"""The `tinker` conversion (see `rollout.bridges.convert`)."""


class TinkerSamplingBackend:
    """Samples from Tinker (see the module docstring).

    Args:
        service: A `tinker.ServiceClient` (or an object with the same methods).
        base_model: Served until a checkpoint is loaded (None: nothing until then).
    """

    name = "tinker"

    def __init__(
        self,
        service: Any,
        *,
        base_model: str | None = None,
        version: int = 0,
        retries: int = 5,
        retry_wait: float = 1.0,
    ) -> None:
        self.service = service
        self._version = version
        self._client: Any = None
        self.sampler_path: str | None = None
        self.retries = retries
        self.retry_wait = retry_wait
        self.retried = 0
        """Samples retried after a rate limit or a server error."""
        if base_model is not None:
            self._client = _resolved(service.create_sampling_client(base_model=base_model))

    @property
    def version(self) -> int:
        return self._version

    async def load_weights(self, source: str | os.PathLike[str], version: int) -> None:
        """Sample from the sampler path in the conversion folder `source` as `version`."""
        paths = await asyncio.to_thread(_read_sampler, Path(source))
        future = await asyncio.to_thread(
            self.service.create_sampling_client, model_path=paths["sampler_path"]
        )
        client = await asyncio.to_thread(_resolved, future)
        self._client, self._version = client, version
        self.sampler_path = paths["sampler_path"]

    async def sample(self, prompt_tokens: list[int], params: SamplingParams) -> Completion:
        from tinker import types

        if params.top_logprobs:
            raise BackendError(
                f"top_logprobs={params.top_logprobs}: Tinker's sampler returns no top-k logprobs"
            )
        if not prompt_tokens:
            raise BackendError("prompt_tokens is empty")
        client, version = self._client, self._version
        if client is None:
            raise BackendError("no Tinker sampler loaded yet (no checkpoint served)")
        stop: list[int] | list[str] | None = None
        if params.stop_token_ids:
            stop = list(params.stop_token_ids)
        elif params.stop:
            stop = list(params.stop)
        request = {
            "prompt": types.ModelInput.from_ints([int(t) for t in prompt_tokens]),
            "num_samples": 1,
            "sampling_params": types.SamplingParams(
                max_tokens=params.max_tokens,
                seed=params.seed,
                stop=stop,
                temperature=params.temperature,
                top_p=params.top_p,
            ),
        }
        response = await self._sample(client, request)
        sequence = response.sequences[0]
        tokens = [int(t) for t in sequence.tokens]
        logprobs = sequence.logprobs
        if logprobs is None or len(logprobs) != len(tokens):
            raise BackendError("Tinker returned a sequence without a logprob per token")
        return Completion(
            tokens=tuple(tokens),
            logprobs=tuple(float(x) for x in logprobs),
            stop_reason="length" if sequence.stop_reason == "length" else "stop",
            version=version,
        )

    async def _sample(self, client: Any, request: dict[str, Any]) -> Any:
        """`sample_async`, retried on a rate limit or a server error (see the module docstring)."""
        import tinker

        for attempt in range(self.retries + 1):
            try:
                return await client.sample_async(**request)
            except (tinker.RateLimitError, tinker.InternalServerError) as error:
                if attempt == self.retries:
                    raise BackendError(
                        f"Tinker's sampler answered {error.status_code} "
                        f"{self.retries + 1} times: {error.message}"
                    ) from error
                self.retried += 1
                await asyncio.sleep(self.retry_wait * 2**attempt)
            except tinker.APIStatusError as error:
                raise BackendError(
                    f"Tinker's sampler answered {error.status_code}: {error.message}"
                ) from error
        raise AssertionError("unreachable")

    async def close(self) -> None:
        self._client = None


def _resolved(value: Any) -> Any:
    """The result of an SDK future (the SDK answers futures), or the value itself."""
    result = getattr(value, "result", None)
    return result() if callable(result) else value


def _read_sampler(folder: Path) -> dict[str, Any]:
    path = folder / SAMPLER_FILE
    if not path.is_file():
        raise BackendError(f"{str(folder)!r} has no {SAMPLER_FILE} (not a tinker conversion)")
    data = json.loads(path.read_text())
    if not data.get("sampler_path"):
        raise BackendError(f"{path} has no sampler_path")
    return data
