"""An inference backend that calls an inference server over HTTP (`rollout inference`).

The gateway uses it to reach the run's inference server: tokens in, tokens and logprobs out.
"""

from __future__ import annotations

import asyncio
from typing import Any

import httpx

from rollout.contracts import Completion, SamplingParams
from rollout.harness.errors import RolloutError


class InferenceUnavailable(RolloutError):
    """The inference server could not be reached or failed."""


def completion_to_json(completion: Completion) -> dict[str, Any]:
    return {
        "tokens": list(completion.tokens),
        "logprobs": list(completion.logprobs),
        "stop_reason": completion.stop_reason,
        "version": completion.version,
        "top_logprobs": [{str(k): v for k, v in d.items()} for d in completion.top_logprobs],
    }


def completion_from_json(data: dict[str, Any]) -> Completion:
    return Completion(
        tokens=tuple(int(t) for t in data["tokens"]),
        logprobs=tuple(float(x) for x in data["logprobs"]),
        stop_reason=data["stop_reason"],
        version=int(data["version"]),
        top_logprobs=tuple({int(k): float(v) for k, v in d.items()} for d in data["top_logprobs"]),
    )


class RemoteBackend:
    """`InferenceBackend` over HTTP to `rollout inference`. Retries while the server restarts."""

    name = "remote"

    def __init__(self, base_url: str, *, retries: int = 30, retry_wait: float = 1.0) -> None:
        self.base_url = base_url.rstrip("/")
        self.retries = retries
        self.retry_wait = retry_wait
        self._version = 0
        self._http = httpx.AsyncClient(
            timeout=httpx.Timeout(600.0, connect=5.0),
            limits=httpx.Limits(max_connections=256, max_keepalive_connections=256),
        )

    @property
    def version(self) -> int:
        return self._version

    async def _post(self, path: str, body: dict[str, Any]) -> dict[str, Any]:
        last: Exception | None = None
        for _ in range(self.retries):
            try:
                response = await self._http.post(f"{self.base_url}{path}", json=body)
            except httpx.TransportError as error:  # server restarting: wait and retry
                last = error
                await asyncio.sleep(self.retry_wait)
                continue
            if response.status_code >= 500:
                last = InferenceUnavailable(f"{self.base_url}{path}: {response.status_code}")
                await asyncio.sleep(self.retry_wait)
                continue
            if response.status_code != 200:
                raise InferenceUnavailable(
                    f"{self.base_url}{path} answered {response.status_code}: {response.text[:300]}"
                )
            return response.json()
        raise InferenceUnavailable(f"inference server {self.base_url} unavailable: {last}")

    async def sample(self, prompt_tokens: list[int], params: SamplingParams) -> Completion:
        data = await self._post(
            "/sample", {"prompt_tokens": list(prompt_tokens), "params": params.model_dump()}
        )
        completion = completion_from_json(data)
        self._version = max(self._version, completion.version)
        return completion

    async def health(self) -> dict[str, Any]:
        response = await self._http.get(f"{self.base_url}/health")
        response.raise_for_status()
        data = response.json()
        self._version = int(data.get("version", self._version))
        return data

    async def close(self) -> None:
        await self._http.aclose()
