"""The inference server role (`rollout inference`): serve one run's policy and follow its
serving records.

It answers `POST /sample` (prompt tokens + SamplingParams -> Completion), `POST /sample/stream`
(the same, as JSON lines of `SampleChunk`s while the tokens are chosen), `POST /sample/batch`
(many prompts in one request, each completion a JSON line as soon as it is sampled: the gateway
sends the prompts of the turns it admits together this way, one HTTP exchange for all of them)
and `GET /health`.
A follower task watches the run's serving record; when it names a new version, the server
fetches that checkpoint's converted files from the blob store, loads them between batches (no
restart), and acknowledges in the ledger what it serves now. Every completion reports the version
that sampled it.
"""

from __future__ import annotations

import asyncio
import dataclasses
import hmac
import json
import logging
from collections.abc import AsyncIterator, Mapping
from pathlib import Path
from typing import Any, Protocol

from fastapi import FastAPI, HTTPException, Request, Response
from fastapi.responses import JSONResponse, StreamingResponse
from pydantic import BaseModel, ValidationError

from rollout.blobs import BlobStore
from rollout.contracts import DEFAULT_POLICY, SamplingParams
from rollout.inference.base import InferenceBackend, sample_stream
from rollout.inference.remote import SECRET_HEADER, chunk_to_json, completion_to_json
from rollout.inference.weights_cache import fetch, version_folder
from rollout.ledger import Ledger

log = logging.getLogger("rollout.inference")

BACKEND_NAME = "local"


class WeightLoader(Protocol):
    async def load_weights(self, source: str | Path, version: int) -> None: ...


class SampleRequest(BaseModel):
    prompt_tokens: list[int]
    params: dict[str, Any] = {}
    policy: str = DEFAULT_POLICY
    """Which policy samples (a run with several policies serves each one's version)."""


def create_inference_app(
    backend: InferenceBackend,
    *,
    model: str,
    secret: str | None = None,
    policies: Mapping[str, InferenceBackend] | None = None,
) -> FastAPI:
    """The inference server's HTTP app.

    Args:
        backend: What samples (the default policy's backend).
        model: The model named by `GET /health`.
        secret: When set (a server bound beyond loopback), every request must carry it in the
            `X-Rollout-Secret` header, else it is refused with 401.
        policies: A run with several policies: each policy's backend (a request names its
            `policy`; an unknown one is refused with 422). Every completion reports the policy
            that sampled it.
    """
    app = FastAPI(title="rollout inference", docs_url=None, redoc_url=None)
    by_policy: dict[str, InferenceBackend] = dict(policies or {DEFAULT_POLICY: backend})

    def backend_of(request: SampleRequest) -> InferenceBackend:
        chosen = by_policy.get(request.policy)
        if chosen is None:
            raise HTTPException(
                422,
                detail=f"policy: {request.policy!r} is not served here (serving: "
                f"{sorted(by_policy)})",
            )
        return chosen

    if secret:
        expected = secret.encode()

        @app.middleware("http")
        async def require_secret(request: Request, call_next: Any) -> Response:
            given = request.headers.get(SECRET_HEADER, "").encode()
            if not hmac.compare_digest(given, expected):
                return JSONResponse({"detail": f"missing or wrong {SECRET_HEADER}"}, 401)
            return await call_next(request)

    @app.post("/sample")
    async def sample(request: SampleRequest) -> dict[str, Any]:
        try:
            params = SamplingParams.model_validate(request.params)
        except ValidationError as error:
            raise HTTPException(422, detail=str(error)) from error
        if not request.prompt_tokens:
            raise HTTPException(422, detail="prompt_tokens is empty")
        completion = await backend_of(request).sample(request.prompt_tokens, params)
        return completion_to_json(dataclasses.replace(completion, policy=request.policy))

    @app.post("/sample/stream")
    async def sample_streamed(request: SampleRequest) -> StreamingResponse:
        try:
            params = SamplingParams.model_validate(request.params)
        except ValidationError as error:
            raise HTTPException(422, detail=str(error)) from error
        if not request.prompt_tokens:
            raise HTTPException(422, detail="prompt_tokens is empty")
        chosen = backend_of(request)

        async def lines() -> AsyncIterator[bytes]:
            try:
                async for chunk in sample_stream(chosen, request.prompt_tokens, params):
                    if chunk.completion is not None:
                        done = dataclasses.replace(chunk.completion, policy=request.policy)
                        chunk = dataclasses.replace(chunk, completion=done)
                    yield (json.dumps(chunk_to_json(chunk)) + "\n").encode()
            except Exception as error:  # the response has started: say so in the stream
                log.exception("streamed sample failed")
                yield (json.dumps({"error": f"{type(error).__name__}: {error}"}) + "\n").encode()

        return StreamingResponse(lines(), media_type="application/x-ndjson")

    @app.post("/sample/batch")
    async def sample_batch(request: Request) -> StreamingResponse:
        try:
            items = json.loads(await request.body())["requests"]
            if not isinstance(items, list):
                raise TypeError("requests is not a list")
        except (ValueError, TypeError, KeyError) as error:
            raise HTTPException(422, detail=f"requests: {error}") from error
        return StreamingResponse(_batch_lines(items), media_type="application/x-ndjson")

    async def _one(index: int, item: Any) -> bytes:
        """The line of one request of a batch: its completion, or its error with a status."""
        try:
            request = SampleRequest.model_validate(item)
            params = SamplingParams.model_validate(request.params)
            if not request.prompt_tokens:
                raise HTTPException(422, detail="prompt_tokens is empty")
            completion = await backend_of(request).sample(request.prompt_tokens, params)
            done = dataclasses.replace(completion, policy=request.policy)
            line: dict[str, Any] = {"index": index, "completion": completion_to_json(done)}
        except ValidationError as error:
            line = {"index": index, "status": 422, "error": str(error)}
        except HTTPException as error:
            line = {"index": index, "status": error.status_code, "error": str(error.detail)}
        except Exception as error:  # this request failed; the others of the batch go on
            log.exception("sample %s of a batch failed", index)
            line = {"index": index, "status": 500, "error": f"{type(error).__name__}: {error}"}
        return (json.dumps(line) + "\n").encode()

    async def _batch_lines(items: list[Any]) -> AsyncIterator[bytes]:
        tasks = [asyncio.ensure_future(_one(i, item)) for i, item in enumerate(items)]
        try:
            for next_done in asyncio.as_completed(tasks):
                yield await next_done
        finally:  # the client went away: stop sampling for it
            for task in tasks:
                task.cancel()

    @app.get("/health")
    async def health() -> dict[str, Any]:
        return {"status": "ok", "model": model, "version": backend.version}

    return app


class ServingFollower:
    """Loads what the run's serving record names and acknowledges it (for one policy: a run
    with several has a follower for each, each loading into that policy's backend)."""

    def __init__(
        self,
        ledger: Ledger,
        backend: WeightLoader,
        *,
        run_id: str,
        server_id: str,
        blobs: BlobStore,
        cache_dir: Path,
        poll: float = 2.0,
        backend_name: str = BACKEND_NAME,
        policy: str = DEFAULT_POLICY,
    ) -> None:
        self.policy = policy
        self.backend_name = backend_name
        """Which conversion of the serving record to load (`local`, `vllm`, `tinker`)."""
        self.ledger = ledger
        self.backend = backend
        self.run_id = run_id
        self.server_id = server_id
        self.blobs = blobs
        self.cache_dir = cache_dir
        self.poll = poll
        self.serving_version: int | None = None

    async def sync_once(self) -> bool:
        """Load the current serving record if it is new. True if something was loaded."""
        record = await self.ledger.serving(self.run_id, policy=self.policy)
        if record is None or record.version == self.serving_version:
            return False
        uri = record.uris.get(self.backend_name)
        if uri is None:
            log.warning("serving record v%s has no %r files", record.version, self.backend_name)
            return False
        # Shared with the run's other roles on this machine (weights_cache), filled atomically.
        folder = self.cache_dir / version_folder(record.version, self.policy)
        local = await asyncio.to_thread(fetch, self.blobs, uri, folder)
        await self.backend.load_weights(local, record.version)
        self.serving_version = record.version
        await self.ledger.ack_serving(
            self.run_id, self.server_id, record.version, policy=self.policy
        )
        log.info("serving %s v%s", self.policy, record.version)
        return True

    async def run(self, stop: asyncio.Event) -> None:
        while not stop.is_set():
            try:
                await self.sync_once()
            except Exception:  # keep serving the old weights; retry on the next wake-up
                log.exception("could not load the serving record")
            await self.ledger.wait("serving", timeout=self.poll)
