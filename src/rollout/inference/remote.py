"""An inference backend that calls an inference server over HTTP (`rollout inference`).

The gateway uses it to reach the run's inference server: tokens in, tokens and logprobs out.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator
from typing import Any

import aiohttp

from rollout.contracts import DEFAULT_POLICY, Completion, SamplingParams
from rollout.errors import RolloutError
from rollout.inference.base import SampleChunk
from rollout.net.client import JsonHttpClient, TransportError

SECRET_HEADER = "X-Rollout-Secret"
"""The header that carries a run's `internal_secret` to an inference server bound beyond
loopback (which answers 401 without it)."""


class InferenceUnavailable(RolloutError):
    """The inference server could not be reached or failed."""


def completion_to_json(completion: Completion) -> dict[str, Any]:
    return {
        "tokens": list(completion.tokens),
        "logprobs": list(completion.logprobs),
        "stop_reason": completion.stop_reason,
        "version": completion.version,
        "top_logprobs": [{str(k): v for k, v in d.items()} for d in completion.top_logprobs],
        "policy": completion.policy,
    }


def completion_from_json(data: dict[str, Any]) -> Completion:
    return Completion(
        tokens=tuple(int(t) for t in data["tokens"]),
        logprobs=tuple(float(x) for x in data["logprobs"]),
        stop_reason=data["stop_reason"],
        version=int(data["version"]),
        top_logprobs=tuple({int(k): float(v) for k, v in d.items()} for d in data["top_logprobs"]),
        policy=str(data.get("policy", DEFAULT_POLICY)),
    )


def chunk_to_json(chunk: SampleChunk) -> dict[str, Any]:
    return {
        "tokens": list(chunk.tokens),
        "logprobs": list(chunk.logprobs),
        "top_logprobs": [{str(k): v for k, v in d.items()} for d in chunk.top_logprobs],
        "completion": None if chunk.completion is None else completion_to_json(chunk.completion),
    }


def chunk_from_json(data: dict[str, Any]) -> SampleChunk:
    done = data.get("completion")
    return SampleChunk(
        tokens=tuple(int(t) for t in data["tokens"]),
        logprobs=tuple(float(x) for x in data["logprobs"]),
        top_logprobs=tuple({int(k): float(v) for k, v in d.items()} for d in data["top_logprobs"]),
        completion=None if done is None else completion_from_json(done),
    )


class RemoteBackend:
    """`InferenceBackend` over HTTP to `rollout inference`. Retries while the server restarts.

    `policy`: which of the server's policies samples (a run with several serves each one's
    current version from the same server).
    """

    name = "remote"

    def __init__(
        self,
        base_url: str,
        *,
        retries: int = 30,
        retry_wait: float = 1.0,
        secret: str | None = None,
        policy: str = DEFAULT_POLICY,
    ) -> None:
        self.policy = policy
        self.base_url = base_url.rstrip("/")
        self._headers = {"Content-Type": "application/json"}
        if secret:  # the run's internal_secret, for a server bound beyond loopback
            self._headers[SECRET_HEADER] = secret
        self.retries = retries
        self.retry_wait = retry_wait
        self._version = 0
        self._http = JsonHttpClient(timeout=600.0, connect_timeout=5.0)

    @property
    def version(self) -> int:
        return self._version

    async def _post(self, path: str, body: dict[str, Any]) -> dict[str, Any]:
        last: Exception | None = None
        for _ in range(self.retries):
            try:
                response = await self._http.request(
                    "POST",
                    f"{self.base_url}{path}",
                    data=json.dumps(body),
                    headers=self._headers,
                )
            except TransportError as error:  # server restarting: wait and retry
                last = error
                await asyncio.sleep(self.retry_wait)
                continue
            if response.status >= 500:
                last = InferenceUnavailable(f"{self.base_url}{path}: {response.status}")
                await asyncio.sleep(self.retry_wait)
                continue
            if response.status != 200:
                raise InferenceUnavailable(
                    f"{self.base_url}{path} answered {response.status}: {response.text[:300]}"
                )
            return json.loads(response.body)
        raise InferenceUnavailable(f"inference server {self.base_url} unavailable: {last}")

    def _body(self, prompt_tokens: list[int], params: SamplingParams) -> dict[str, Any]:
        body: dict[str, Any] = {"prompt_tokens": list(prompt_tokens), "params": params.model_dump()}
        if self.policy != DEFAULT_POLICY:
            body["policy"] = self.policy
        return body

    async def sample(self, prompt_tokens: list[int], params: SamplingParams) -> Completion:
        data = await self._post("/sample", self._body(prompt_tokens, params))
        completion = completion_from_json(data)
        self._version = max(self._version, completion.version)
        return completion

    async def sample_stream(
        self, prompt_tokens: list[int], params: SamplingParams
    ) -> AsyncIterator[SampleChunk]:
        """Tokens as the server chooses them (`POST /sample/stream`, JSON lines)."""
        url = f"{self.base_url}/sample/stream"
        body = json.dumps(self._body(prompt_tokens, params))
        headers = self._headers
        last: Exception | None = None
        for _ in range(self.retries):
            try:
                session = self._http._client()  # the pooled session, read as a stream
                async with session.post(url, data=body, headers=headers) as response:
                    if response.status >= 500:
                        last = InferenceUnavailable(f"{url}: {response.status}")
                        await asyncio.sleep(self.retry_wait)
                        continue
                    if response.status != 200:
                        text = (await response.read()).decode(errors="replace")
                        raise InferenceUnavailable(
                            f"{url} answered {response.status}: {text[:300]}"
                        )
                    async for line in response.content:
                        if not line.strip():
                            continue
                        data = json.loads(line)
                        if "error" in data:
                            raise InferenceUnavailable(f"{url}: {data['error']}")
                        chunk = chunk_from_json(data)
                        if chunk.completion is not None:
                            self._version = max(self._version, chunk.completion.version)
                        yield chunk
                    return
            except (TimeoutError, aiohttp.ClientConnectionError) as error:
                last = error  # server restarting: wait and retry (nothing was sent yet)
                await asyncio.sleep(self.retry_wait)
        raise InferenceUnavailable(f"inference server {self.base_url} unavailable: {last}")

    async def health(self) -> dict[str, Any]:
        try:
            response = await self._http.request("GET", f"{self.base_url}/health")
        except TransportError as error:
            raise InferenceUnavailable(f"inference server {self.base_url}: {error}") from error
        if response.status != 200:
            raise InferenceUnavailable(
                f"{self.base_url}/health answered {response.status}: {response.text[:300]}"
            )
        data = json.loads(response.body)
        self._version = int(data.get("version", self._version))
        return data

    async def close(self) -> None:
        await self._http.close()
