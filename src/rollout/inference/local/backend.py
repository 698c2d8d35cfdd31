"""`LocalBackend`: the request queue, the worker thread and the public API of the local backend.

Concurrent `sample` calls queue up; one worker thread takes up to `max_batch` of them and
decodes them together (`decoding.Decoder`), admitting queued requests into the running group at
step boundaries. Work that must not overlap decoding (weight swaps, scoring) runs as jobs on
the same thread between groups. The event loop is never blocked.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import secrets
import threading
import time
from collections import deque
from collections.abc import AsyncIterator, Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypeVar

import torch
from transformers import AutoModelForCausalLM, AutoTokenizer, PreTrainedModel

from rollout.contracts import Completion, SamplingParams
from rollout.inference.base import BackendError, SampleChunk
from rollout.inference.local.decoding import Decoder, Group, Request, resolve
from rollout.inference.local.weights import WeightSource, read_weights
from rollout.models.hf import eos_token_ids, pad_token_id
from rollout.models.logprobs import completion_logprobs

log = logging.getLogger("rollout.inference.local")

T = TypeVar("T")
SMALL_MODEL_PARAMS = 50_000_000


@dataclass(eq=False)
class _Job:
    """Work that must run on the worker thread between batches (weight swaps, scoring)."""

    fn: Callable[[], Any]
    loop: asyncio.AbstractEventLoop
    future: asyncio.Future[Any]


class LocalBackend:
    """Samples from a Hugging Face causal LM in this process.

    Args:
        model_dir: A local Hugging Face model folder (config, weights, optionally tokenizer).
        device: Torch device (`cpu`, `cuda`, `cuda:1`, ...).
        dtype: Weight and compute dtype (a `torch.dtype` or its name, e.g. "bfloat16").
        max_batch: The most requests decoded together.
        version: The checkpoint version of the weights in `model_dir`.
        batch_window: Seconds the worker waits for more requests after the first one arrives,
            so requests sent together are batched together.
        attn_implementation: Passed to `from_pretrained` (default: transformers' choice).
        threads: CPU threads for the model's operations (`torch.set_num_threads` on the worker
            thread only; other threads keep theirs). Default on CPU: 1 for models under
            `SMALL_MODEL_PARAMS` parameters, which run fastest single-threaded (and on a busy
            machine spinning OpenMP threads slow them ~10x), else torch's default.

    Raises:
        BackendError: When the folder cannot be loaded or an argument is invalid.
    """

    name = "local"

    def __init__(
        self,
        model_dir: str | os.PathLike[str],
        *,
        device: str | torch.device = "cpu",
        dtype: torch.dtype | str = torch.float32,
        max_batch: int = 16,
        version: int = 0,
        batch_window: float = 0.005,
        attn_implementation: str | None = None,
        threads: int | None = None,
    ) -> None:
        if max_batch < 1:
            raise BackendError(f"max_batch must be at least 1, got {max_batch}")
        if threads is not None and threads < 1:
            raise BackendError(f"threads must be at least 1, got {threads}")
        self.threads = threads
        if batch_window < 0:
            raise BackendError(f"batch_window must not be negative, got {batch_window}")
        self.model_dir = Path(model_dir)
        if not (self.model_dir / "config.json").is_file():
            raise BackendError(f"model_dir {str(model_dir)!r} has no config.json")
        self.device = torch.device(device)
        if isinstance(dtype, str):
            resolved = getattr(torch, dtype, None)
            if not isinstance(resolved, torch.dtype):
                raise BackendError(f"dtype must name a torch dtype, got {dtype!r}")
            dtype = resolved
        self.dtype = dtype
        self.max_batch = max_batch
        self.batch_window = batch_window
        self._attn = attn_implementation
        self.model: PreTrainedModel = self._load_base()
        self.model.to(self.device)  # pyright: ignore[reportArgumentType]
        size = sum(p.numel() for p in self.model.parameters())
        if threads is None and self.device.type == "cpu" and size < SMALL_MODEL_PARAMS:
            self.threads = 1
        config = self.model.config
        self.vocab_size = int(config.get_text_config().vocab_size)
        self.max_positions = int(getattr(config, "max_position_embeddings", 0) or 1 << 30)
        self.pad_id = pad_token_id(config)
        self.default_stop_ids = frozenset(eos_token_ids(self.model_dir, config))
        self.tokenizer: Any = None
        with contextlib.suppress(Exception):  # stop strings need one; token ids do not
            self.tokenizer = AutoTokenizer.from_pretrained(str(self.model_dir))
        self._decoder = Decoder(
            self.model,
            self.device,
            pad_id=self.pad_id,
            max_positions=self.max_positions,
            tokenizer=self.tokenizer,
        )
        self._version = version
        self._cond = threading.Condition()
        self._requests: deque[Request] = deque()
        self._jobs: deque[_Job] = deque()
        self._closed = False
        self._thread = threading.Thread(
            target=self._work, name="rollout-local-backend", daemon=True
        )
        self._thread.start()

    # ---------------------------------------------------------------- public API

    @property
    def version(self) -> int:
        """The checkpoint version of the weights served now."""
        return self._version

    @property
    def batches_run(self) -> int:
        """Groups of requests admitted together (one prefill each)."""
        return self._decoder.batches_run

    @property
    def tokens_sampled(self) -> int:
        """Tokens of every completion answered so far."""
        return self._decoder.tokens_sampled

    async def sample(self, prompt_tokens: list[int], params: SamplingParams) -> Completion:
        """Sample one completion of `prompt_tokens`; batched with concurrent calls.

        Generation stops after a token in `params.stop_token_ids` (default, when empty: the
        model's eos ids from `generation_config.json` / `config.json`), after a stop string
        appears in the decoded completion (the completion keeps the token that completed it),
        at `max_tokens`, or at the model's context length. `stop_reason` is `stop` for a stop
        token or string and `length` otherwise. Logprobs are those of the distribution sampled
        from (see `rollout.inference.local.sampling`).
        """
        return await self._submit(prompt_tokens, params).future

    def _submit(
        self,
        prompt_tokens: list[int],
        params: SamplingParams,
        on_token: Callable[[int, float, dict[int, float] | None], None] | None = None,
    ) -> Request:
        """Queue one request for the worker."""
        prompt = self._check_prompt(prompt_tokens)
        if params.stop and self.tokenizer is None:
            raise BackendError(f"stop strings {params.stop!r} need a tokenizer in model_dir")
        loop = asyncio.get_running_loop()
        seed = params.seed if params.seed is not None else secrets.randbits(63)
        request = Request(
            prompt=prompt,
            params=params,
            loop=loop,
            future=loop.create_future(),
            generator=torch.Generator().manual_seed(seed),
            stop_ids=frozenset(params.stop_token_ids) or self.default_stop_ids,
            on_token=on_token,
        )
        self._enqueue(self._requests, request)
        return request

    async def sample_stream(
        self, prompt_tokens: list[int], params: SamplingParams
    ) -> AsyncIterator[SampleChunk]:
        """`sample`, yielding each token as the worker chooses it; the last chunk carries the
        completion. Leaving the iteration early cancels the request (its row stops decoding)."""
        loop = asyncio.get_running_loop()
        queue: asyncio.Queue[tuple[int, float, dict[int, float] | None] | None] = asyncio.Queue()

        def on_token(token: int, logprob: float, top: dict[int, float] | None) -> None:
            loop.call_soon_threadsafe(queue.put_nowait, (token, logprob, top))

        request = self._submit(prompt_tokens, params, on_token)
        # Settled after every token was queued (both go through call_soon_threadsafe in order).
        request.future.add_done_callback(lambda _: queue.put_nowait(None))
        try:
            while (item := await queue.get()) is not None:
                token, logprob, top = item
                yield SampleChunk((token,), (logprob,), () if top is None else (top,))
            yield SampleChunk((), (), completion=request.future.result())
        finally:
            if not request.future.done():
                request.future.cancel()

    async def score(
        self,
        prompt_tokens: Sequence[int],
        completion_tokens: Sequence[int],
        temperature: float = 1.0,
    ) -> list[float]:
        """Teacher-forced logprobs of `completion_tokens` after `prompt_tokens`.

        Under `log_softmax(logits / temperature)` (`rollout.models.logprobs`, the trainer's
        formula); temperature 0 counts as 1 (as greedy sampling reports).
        """
        prompt = self._check_prompt(list(prompt_tokens))
        completion = [int(t) for t in completion_tokens]
        if any(not 0 <= t < self.vocab_size for t in completion):
            raise BackendError(f"completion_tokens has ids outside [0, {self.vocab_size})")
        if temperature < 0:
            raise BackendError(f"temperature must not be negative, got {temperature}")
        t = temperature or 1.0
        return await self._run_job(lambda: completion_logprobs(self.model, prompt, completion, t))

    async def load_weights(self, source: WeightSource, version: int) -> None:
        """Serve new weights from the next batch on, reported as `version`.

        Args:
            source: A full state dict (a mapping of tensors, a `.safetensors` file, or a folder
                of safetensors shards / a Hugging Face model folder), or a peft LoRA adapter
                folder (`adapter_config.json`), which is merged into the base weights of
                `model_dir` (the adapter's own base path is ignored).
            version: The version completions sampled with these weights report.

        Raises:
            BackendError: When the weights cannot be read or do not fit the model.
        """
        state = await asyncio.to_thread(
            read_weights,
            source,
            self.model,
            load_base=self._load_base,
            device=self.device,
            dtype=self.dtype,
        )
        await self._run_job(lambda: self._swap(state, version))

    async def close(self) -> None:
        """Stop the worker; queued requests fail with `BackendError`."""
        with self._cond:
            self._closed = True
            pending = list(self._requests) + list(self._jobs)
            self._requests.clear()
            self._jobs.clear()
            self._cond.notify_all()
        for item in pending:
            resolve(item.loop, item.future, error=BackendError("backend is closed"))
        await asyncio.to_thread(self._thread.join)

    # ---------------------------------------------------------------- worker thread

    def _work(self) -> None:
        if self.threads is not None:
            torch.set_num_threads(self.threads)
        while True:
            with self._cond:
                while not (self._requests or self._jobs or self._closed):
                    self._cond.wait()
                if self._closed:
                    return
                job = self._jobs.popleft() if self._jobs else None
            if job is not None:
                self._run_on_worker(job)
                continue
            if self.batch_window and len(self._requests) < self.max_batch:
                time.sleep(self.batch_window)
            with self._cond:
                batch = self._take(self.max_batch)
            if batch:
                # Weights never change while a group decodes (jobs wait for it to drain, and no
                # request is admitted while a job waits), so every completion has one version.
                self._decoder.run(batch, self._version, self._admit)

    def _take(self, most: int) -> list[Request]:
        """Up to `most` queued requests whose callers still wait (call holding `_cond`)."""
        taken: list[Request] = []
        while self._requests and len(taken) < most:
            request = self._requests.popleft()
            if not request.future.cancelled():
                taken.append(request)
        return taken

    def _admit(self, group: Group) -> list[Request]:
        """Queued requests that can join `group` now (none while a job waits)."""
        room = self._decoder.room(group, self.max_batch)
        if not room:
            return []
        with self._cond:
            if self._jobs or self._closed:
                return []
            return self._take(room)

    def _run_on_worker(self, job: _Job) -> None:
        try:
            result = job.fn()
        except Exception as exc:
            resolve(job.loop, job.future, error=exc)
        else:
            resolve(job.loop, job.future, result=result)

    def _swap(self, state: dict[str, torch.Tensor], version: int) -> None:
        with torch.no_grad():
            # Keys were checked when read; tied weights (absent from `state`) follow their twin.
            self.model.load_state_dict(state, strict=False)
        self._version = version
        log.info("serving version %d (%d tensors)", version, len(state))

    # ---------------------------------------------------------------- helpers

    async def _run_job(self, fn: Callable[[], T]) -> T:
        loop = asyncio.get_running_loop()
        job = _Job(fn=fn, loop=loop, future=loop.create_future())
        self._enqueue(self._jobs, job)
        return await job.future

    def _enqueue(self, queue: deque[Any], item: Request | _Job) -> None:
        with self._cond:
            if self._closed:
                raise BackendError("backend is closed")
            queue.append(item)
            self._cond.notify()

    def _check_prompt(self, prompt_tokens: Sequence[int]) -> list[int]:
        if not prompt_tokens:
            raise BackendError("prompt_tokens must not be empty")
        prompt = [int(t) for t in prompt_tokens]
        bad = [t for t in prompt if not 0 <= t < self.vocab_size]
        if bad:
            raise BackendError(
                f"prompt_tokens has ids outside the vocabulary [0, {self.vocab_size}): {bad[:5]}"
            )
        if len(prompt) >= self.max_positions:
            raise BackendError(
                f"prompt_tokens has {len(prompt)} tokens; the model takes at most "
                f"{self.max_positions - 1} before the first new one"
            )
        return prompt

    def _load_base(self) -> PreTrainedModel:
        kwargs: dict[str, Any] = {"dtype": self.dtype}
        if self._attn is not None:
            kwargs["attn_implementation"] = self._attn
        try:
            model = AutoModelForCausalLM.from_pretrained(str(self.model_dir), **kwargs)
        except (OSError, ValueError) as exc:
            raise BackendError(
                f"model_dir {str(self.model_dir)!r} cannot be loaded: {exc}"
            ) from exc
        return model.eval()


__all__ = ["SMALL_MODEL_PARAMS", "LocalBackend"]
