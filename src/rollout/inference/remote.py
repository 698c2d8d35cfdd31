"""An inference backend that calls an inference server over HTTP (`rollout inference`).

The gateway uses it to reach the run's inference server: tokens in, tokens and logprobs out.
Samples asked for in the same pass of the event loop go together in one `POST /sample/batch`
(the gateway admits the turns of a batch of key checks at once), and each caller is answered
when its own completion's line arrives: one HTTP exchange for many turns, none waiting for the
others. Streamed samples (`sample_stream`) each have a request of their own.
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
        self._pending: list[tuple[dict[str, Any], asyncio.Future[Completion]]] = []
        self._batches: set[asyncio.Task[None]] = set()

    @property
    def version(self) -> int:
        return self._version

    def _body(self, prompt_tokens: list[int], params: SamplingParams) -> dict[str, Any]:
        body: dict[str, Any] = {"prompt_tokens": list(prompt_tokens), "params": params.model_dump()}
        if self.policy != DEFAULT_POLICY:
            body["policy"] = self.policy
        return body

    async def sample(self, prompt_tokens: list[int], params: SamplingParams) -> Completion:
        """One completion, sampled in the batch of the samples asked for in this loop pass."""
        loop = asyncio.get_running_loop()
        future: asyncio.Future[Completion] = loop.create_future()
        if not self._pending:
            loop.call_soon(self._send_pending)
        self._pending.append((self._body(prompt_tokens, params), future))
        completion = await future
        self._version = max(self._version, completion.version)
        return completion

    def _send_pending(self) -> None:
        batch, self._pending = self._pending, []
        task = asyncio.create_task(self._send(batch))
        self._batches.add(task)
        task.add_done_callback(self._batches.discard)

    async def _send(self, batch: list[tuple[dict[str, Any], asyncio.Future[Completion]]]) -> None:
        """Sample `batch` in one request, answering each future as its line arrives; what is
        unanswered when the server fails (restarting: no answer, or 5xx) is sent again."""
        url = f"{self.base_url}/sample/batch"
        last: Exception | None = None
        left = [item for item in batch if not item[1].done()]
        try:
            for _ in range(self.retries):
                if not left:
                    return
                body = json.dumps({"requests": [item_body for item_body, _ in left]})
                again: list[tuple[dict[str, Any], asyncio.Future[Completion]]] = []
                answered: set[int] = set()
                try:
                    async for response in self._http.lines(url, data=body, headers=self._headers):
                        if response.status >= 500:
                            last = InferenceUnavailable(f"{url}: {response.status}")
                            break
                        if response.status != 200:
                            raise InferenceUnavailable(
                                f"{url} answered {response.status}: {response.text[:300]}"
                            )
                        line = json.loads(response.body)
                        index = int(line["index"])
                        answered.add(index)
                        future = left[index][1]
                        if "completion" in line:
                            if not future.done():
                                future.set_result(completion_from_json(line["completion"]))
                        elif int(line.get("status", 500)) >= 500:
                            last = InferenceUnavailable(f"{url}: {line['error']}")
                            again.append(left[index])
                        elif not future.done():
                            future.set_exception(
                                InferenceUnavailable(
                                    f"{self.base_url}/sample answered {line['status']}: "
                                    f"{str(line['error'])[:300]}"
                                )
                            )
                except TransportError as error:  # server restarting: wait and send the rest
                    last = error
                again += [item for n, item in enumerate(left) if n not in answered]
                left = [item for item in again if not item[1].done()]
                if left:
                    await asyncio.sleep(self.retry_wait)
            error = InferenceUnavailable(f"inference server {self.base_url} unavailable: {last}")
        except Exception as failure:  # every waiter hears of it
            error = failure
        except BaseException:  # cancelled (shutting down): so are its waiters
            for _, future in left:
                future.cancel()
            raise
        for _, future in left:
            if not future.done():
                future.set_exception(error)

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
        for task in list(self._batches):
            task.cancel()
        await asyncio.gather(*self._batches, return_exceptions=True)
        await self._http.close()
