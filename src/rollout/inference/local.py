"""The local backend: PyTorch + transformers sampling with per-token logprobs, batched.

Concurrent `sample` calls queue up; one worker thread decodes up to `max_batch` of them
together: prompts left-padded, an attention mask, position ids counted from the mask (so a
padded row computes what it would alone, up to float rounding), one incremental KV-cache step
per token. Batching is continuous: a finished row leaves the batch at once (its caller gets
the completion then), and requests that arrive while a batch decodes join it at the next step
(prefilled on their own, then their cache is left-padded and stacked onto the batch's).
Models whose cache is not plain full attention (sliding windows) batch statically instead. The
event loop is never blocked.

Logprobs are reported under the distribution actually sampled from:

- temperature T > 0: `log_softmax(logits / T)`; with `top_p < 1`, the nucleus (the smallest set
  of most likely tokens whose probability reaches top_p) renormalised, so the logprob of a
  sampled token is `log(p / p_nucleus)`.
- temperature 0 (greedy): the argmax token, with its logprob under `log_softmax(logits)`
  (temperature 1), since the greedy distribution itself is degenerate.

`score` gives teacher-forced logprobs under `log_softmax(logits / T)` (no top_p), which equal
the sampling logprobs of the same tokens when top_p is 1.

Weights change between batches only (`load_weights`), so a completion is sampled by exactly
one version and reports it.
"""

from __future__ import annotations

import asyncio
import contextlib
import inspect
import json
import logging
import os
import secrets
import threading
import time
from collections import deque
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal, TypeVar

import torch
from safetensors.torch import load_file
from transformers import AutoModelForCausalLM, AutoTokenizer, DynamicCache, PreTrainedModel
from transformers.cache_utils import DynamicLayer

from rollout.contracts import Completion, SamplingParams
from rollout.inference.base import BackendError

log = logging.getLogger("rollout.inference.local")

T = TypeVar("T")
SMALL_MODEL_PARAMS = 50_000_000
StopReason = Literal["stop", "length"]


@dataclass(eq=False)
class _Request:
    prompt: list[int]
    params: SamplingParams
    loop: asyncio.AbstractEventLoop
    future: asyncio.Future[Completion]
    generator: torch.Generator
    stop_ids: frozenset[int]
    tokens: list[int] = field(default_factory=list)
    logprobs: list[float] = field(default_factory=list)
    top: list[dict[int, float]] = field(default_factory=list)


@dataclass(eq=False)
class _Group:
    """Requests decoding together: their KV cache, attention mask and next positions.

    The mask covers the cached columns; `last` holds each row's latest token, not yet fed.
    """

    requests: list[_Request]
    cache: DynamicCache
    mask: torch.Tensor
    next_position: torch.Tensor
    last: list[int] = field(default_factory=list)


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
        self.vocab_size = int(self.model.config.get_text_config().vocab_size)
        # transformers 5 renamed `past_key_values` to `cache`; accept both.
        parameters = inspect.signature(self.model.forward).parameters
        self._cache_kwarg = "cache" if "cache" in parameters else "past_key_values"
        config = self.model.config
        self.max_positions = int(getattr(config, "max_position_embeddings", 0) or 1 << 30)
        self.pad_id = _first_id(getattr(config, "pad_token_id", None), default=0)
        self.default_stop_ids = frozenset(_eos_ids(self.model_dir, config))
        self.tokenizer: Any = None
        with contextlib.suppress(Exception):  # stop strings need one; token ids do not
            self.tokenizer = AutoTokenizer.from_pretrained(str(self.model_dir))
        self._version = version
        self._cond = threading.Condition()
        self._requests: deque[_Request] = deque()
        self._jobs: deque[_Job] = deque()
        self._closed = False
        self.batches_run = 0
        """Groups of requests admitted together (one prefill each)."""
        self.tokens_sampled = 0
        self._thread = threading.Thread(
            target=self._work, name="rollout-local-backend", daemon=True
        )
        self._thread.start()

    # ---------------------------------------------------------------- public API

    @property
    def version(self) -> int:
        """The checkpoint version of the weights served now."""
        return self._version

    async def sample(self, prompt_tokens: list[int], params: SamplingParams) -> Completion:
        """Sample one completion of `prompt_tokens`; batched with concurrent calls.

        Generation stops after a token in `params.stop_token_ids` (default, when empty: the
        model's eos ids from `generation_config.json` / `config.json`), after a stop string
        appears in the decoded completion (the completion keeps the token that completed it),
        at `max_tokens`, or at the model's context length. `stop_reason` is `stop` for a stop
        token or string and `length` otherwise.
        """
        prompt = self._check_prompt(prompt_tokens)
        if params.stop and self.tokenizer is None:
            raise BackendError(f"stop strings {params.stop!r} need a tokenizer in model_dir")
        loop = asyncio.get_running_loop()
        seed = params.seed if params.seed is not None else secrets.randbits(63)
        request = _Request(
            prompt=prompt,
            params=params,
            loop=loop,
            future=loop.create_future(),
            generator=torch.Generator().manual_seed(seed),
            stop_ids=frozenset(params.stop_token_ids) or self.default_stop_ids,
        )
        with self._cond:
            if self._closed:
                raise BackendError("backend is closed")
            self._requests.append(request)
            self._cond.notify()
        return await request.future

    async def score(
        self,
        prompt_tokens: Sequence[int],
        completion_tokens: Sequence[int],
        temperature: float = 1.0,
    ) -> list[float]:
        """Teacher-forced logprobs of `completion_tokens` after `prompt_tokens`.

        Under `log_softmax(logits / temperature)`; temperature 0 counts as 1 (as greedy
        sampling reports).
        """
        prompt = self._check_prompt(list(prompt_tokens))
        completion = [int(t) for t in completion_tokens]
        if any(not 0 <= t < self.vocab_size for t in completion):
            raise BackendError(f"completion_tokens has ids outside [0, {self.vocab_size})")
        if temperature < 0:
            raise BackendError(f"temperature must not be negative, got {temperature}")
        t = temperature or 1.0
        return await self._run_job(lambda: self._score(prompt, completion, t))

    async def load_weights(
        self, source: str | os.PathLike[str] | Mapping[str, torch.Tensor], version: int
    ) -> None:
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
        state = await asyncio.to_thread(self._read_weights, source)
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
            _resolve(item.loop, item.future, error=BackendError("backend is closed"))
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
                batch: list[_Request] = []
                while self._requests and len(batch) < self.max_batch:
                    request = self._requests.popleft()
                    if not request.future.cancelled():
                        batch.append(request)
            if batch:
                self._run_batch(batch)

    def _run_on_worker(self, job: _Job) -> None:
        try:
            result = job.fn()
        except Exception as exc:
            _resolve(job.loop, job.future, error=exc)
        else:
            _resolve(job.loop, job.future, result=result)

    def _run_batch(self, batch: list[_Request]) -> None:
        """Decode `batch`, admitting newer requests into it at step boundaries, until it drains.

        Weights never change while a group is decoding (jobs wait for it to drain, and no
        request is admitted while a job waits), so every completion has one version.
        """
        version = self._version
        group: _Group | None = None
        admitted = batch
        try:
            with torch.inference_mode():
                while True:
                    if admitted:
                        fresh, logits = self._prefill(admitted)
                        self._advance(fresh, logits, version)
                        group = fresh if group is None else self._merge(group, fresh)
                    if group is None or not group.requests:
                        return
                    self._advance(group, self._step(group), version)
                    admitted = self._admit(group)
        except Exception as exc:
            log.exception("decoding failed")
            for request in [*(group.requests if group else []), *admitted, *batch]:
                _resolve(request.loop, request.future, error=exc)

    def _prefill(self, requests: list[_Request]) -> tuple[_Group, torch.Tensor]:
        """Run the prompts (left-padded) through the model: a new group with a KV cache."""
        self.batches_run += 1
        width = max(len(r.prompt) for r in requests)
        ids = torch.full((len(requests), width), self.pad_id, dtype=torch.long)
        mask = torch.zeros((len(requests), width), dtype=torch.long)
        for row, request in enumerate(requests):
            ids[row, width - len(request.prompt) :] = torch.tensor(request.prompt)
            mask[row, width - len(request.prompt) :] = 1
        ids, mask = ids.to(self.device), mask.to(self.device)
        positions = (mask.cumsum(-1) - 1).clamp(min=0)
        cache = DynamicCache(config=self.model.config)
        out = self.model(
            input_ids=ids,
            attention_mask=mask,
            position_ids=positions,
            use_cache=True,
            logits_to_keep=1,
            **{self._cache_kwarg: cache},
        )
        group = _Group(
            requests=list(requests), cache=cache, mask=mask, next_position=positions[:, -1] + 1
        )
        return group, out.logits[:, -1, :].float()

    def _step(self, group: _Group) -> torch.Tensor:
        """Feed each row's last chosen token; the logits of the next position."""
        tokens = torch.tensor(group.last, device=self.device, dtype=torch.long).unsqueeze(-1)
        group.mask = torch.cat([group.mask, group.mask.new_ones((len(group.requests), 1))], -1)
        out = self.model(
            input_ids=tokens,
            attention_mask=group.mask,
            position_ids=group.next_position.unsqueeze(-1),
            use_cache=True,
            **{self._cache_kwarg: group.cache},
        )
        group.next_position = group.next_position + 1
        return out.logits[:, -1, :].float()

    def _advance(self, group: _Group, logits: torch.Tensor, version: int) -> None:
        """Choose each row's next token; finish the rows that are done and drop them."""
        chosen = self._choose(group.requests, logits)
        keep: list[int] = []
        for row, request in enumerate(group.requests):
            if request.future.cancelled():
                continue  # nobody is waiting: stop spending compute on it
            if self._done(request, chosen[row]):
                self._complete(request, version)
            else:
                keep.append(row)
        if len(keep) < len(group.requests):
            index = torch.tensor(keep, device=self.device, dtype=torch.long)
            group.cache.batch_select_indices(index)
            group.mask, group.next_position = group.mask[index], group.next_position[index]
            group.requests = [group.requests[row] for row in keep]
            self._trim(group)
        group.last = [chosen[row] for row in keep]

    def _complete(self, request: _Request, version: int) -> None:
        completion = Completion(
            tokens=tuple(request.tokens),
            logprobs=tuple(request.logprobs),
            stop_reason=self._finish_reason(request),
            version=version,
            top_logprobs=tuple(request.top),
        )
        self.tokens_sampled += len(request.tokens)
        _resolve(request.loop, request.future, result=completion)

    def _admit(self, group: _Group) -> list[_Request]:
        """Queued requests that can join `group` now (none while a job waits)."""
        room = self.max_batch - len(group.requests)
        if room <= 0 or not _joinable(group.cache):
            return []
        with self._cond:
            if self._jobs or self._closed:
                return []
            admitted: list[_Request] = []
            while self._requests and len(admitted) < room:
                request = self._requests.popleft()
                if not request.future.cancelled():
                    admitted.append(request)
        return admitted

    def _merge(self, group: _Group, fresh: _Group) -> _Group:
        """One group of both: caches and masks left-padded to one length, rows stacked."""
        if not fresh.requests:
            return group
        if not group.requests:
            return fresh
        width = max(group.mask.shape[1], fresh.mask.shape[1])
        for old, new in zip(_layers(group.cache), _layers(fresh.cache), strict=True):
            old.keys = torch.cat([_left_pad(old.keys, width), _left_pad(new.keys, width)])
            old.values = torch.cat([_left_pad(old.values, width), _left_pad(new.values, width)])
        mask = torch.cat([_left_pad(group.mask, width, dim=1), _left_pad(fresh.mask, width, dim=1)])
        return _Group(
            requests=group.requests + fresh.requests,
            cache=group.cache,
            mask=mask,
            next_position=torch.cat([group.next_position, fresh.next_position]),
            last=group.last + fresh.last,
        )

    def _trim(self, group: _Group) -> None:
        """Drop leading columns that no row attends to (left by rows that finished)."""
        if not group.requests or not _joinable(group.cache):
            return
        used = group.mask.any(dim=0).nonzero()
        start = int(used[0]) if len(used) else 0
        if start == 0:
            return
        group.mask = group.mask[:, start:]
        for layer in _layers(group.cache):
            layer.keys = layer.keys[..., start:, :]
            layer.values = layer.values[..., start:, :]

    def _choose(self, active: list[_Request], logits: torch.Tensor) -> list[int]:
        """Pick each row's next token and record its logprob (see the module docstring)."""
        temps = torch.tensor(
            [r.params.temperature or 1.0 for r in active], device=logits.device
        ).unsqueeze(-1)
        logp = torch.log_softmax(logits / temps, dim=-1)
        # Greedy rows report the plain temperature-1 distribution (no nucleus).
        top_ps = [r.params.top_p if r.params.temperature else 1.0 for r in active]
        if any(p < 1.0 for p in top_ps):
            logp = _nucleus(logp, torch.tensor(top_ps, device=logits.device))
        greedy = torch.argmax(logits, dim=-1)
        # One uniform per row from the row's own generator: seeded rows are reproducible
        # whatever else is in the batch.
        uniforms = torch.stack([torch.rand((), generator=r.generator) for r in active])
        probs = logp.exp()
        cdf = probs.cumsum(dim=-1)
        targets = uniforms.to(logits.device).unsqueeze(-1) * cdf[:, -1:]
        sampled = torch.searchsorted(cdf, targets, right=True).squeeze(-1)
        # Never land on a zero-probability token (float rounding at the top of the cdf).
        sampled = torch.where(
            probs.gather(-1, sampled.clamp(max=logits.shape[-1] - 1).unsqueeze(-1)).squeeze(-1) > 0,
            sampled.clamp(max=logits.shape[-1] - 1),
            torch.argmax(logp, dim=-1),
        )
        is_greedy = torch.tensor([r.params.temperature == 0 for r in active], device=logits.device)
        tokens = torch.where(is_greedy, greedy, sampled)
        chosen_logp = logp.gather(-1, tokens.unsqueeze(-1)).squeeze(-1)
        want_top = max(r.params.top_logprobs for r in active)
        top_values = top_ids = None
        if want_top:
            top_values, top_ids = logp.topk(want_top, dim=-1)
            top_values, top_ids = top_values.tolist(), top_ids.tolist()
        token_list, logp_list = tokens.tolist(), chosen_logp.tolist()
        for row, request in enumerate(active):
            request.tokens.append(token_list[row])
            request.logprobs.append(logp_list[row])
            k = request.params.top_logprobs
            if k and top_values is not None and top_ids is not None:
                request.top.append(
                    {
                        t: v
                        for t, v in zip(top_ids[row][:k], top_values[row][:k], strict=True)
                        if v > float("-inf")
                    }
                )
        return token_list

    def _done(self, request: _Request, token: int) -> bool:
        if token in request.stop_ids:
            return True
        if len(request.tokens) >= request.params.max_tokens:
            return True
        if len(request.prompt) + len(request.tokens) >= self.max_positions:
            return True
        if request.params.stop:
            text = self.tokenizer.decode(request.tokens, skip_special_tokens=False)
            return any(s and s in text for s in request.params.stop)
        return False

    def _finish_reason(self, request: _Request) -> StopReason:
        if request.tokens and request.tokens[-1] in request.stop_ids:
            return "stop"
        if request.params.stop:
            text = self.tokenizer.decode(request.tokens, skip_special_tokens=False)
            if any(s and s in text for s in request.params.stop):
                return "stop"
        return "length"

    def _score(self, prompt: list[int], completion: list[int], temperature: float) -> list[float]:
        if not completion:
            return []
        ids = torch.tensor([prompt + completion], device=self.device)
        with torch.inference_mode():
            logits = self.model(input_ids=ids).logits[0].float()
        logp = torch.log_softmax(logits[len(prompt) - 1 : -1] / temperature, dim=-1)
        target = torch.tensor(completion, device=self.device).unsqueeze(-1)
        return logp.gather(-1, target).squeeze(-1).tolist()

    def _swap(self, state: dict[str, torch.Tensor], version: int) -> None:
        with torch.no_grad():
            # Keys were checked by _fit; tied weights (absent from `state`) follow their twin.
            self.model.load_state_dict(state, strict=False)
        self._version = version
        log.info("serving version %d (%d tensors)", version, len(state))

    # ---------------------------------------------------------------- helpers

    async def _run_job(self, fn: Callable[[], T]) -> T:
        loop = asyncio.get_running_loop()
        job = _Job(fn=fn, loop=loop, future=loop.create_future())
        with self._cond:
            if self._closed:
                raise BackendError("backend is closed")
            self._jobs.append(job)
            self._cond.notify()
        return await job.future

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

    def _read_weights(
        self, source: str | os.PathLike[str] | Mapping[str, torch.Tensor]
    ) -> dict[str, torch.Tensor]:
        """A complete state dict for the model, on the device, checked against its keys."""
        if isinstance(source, Mapping):
            state = dict(source)
        else:
            path = Path(source)
            if path.is_dir() and (path / "adapter_config.json").is_file():
                state = self._merge_adapter(path)
            elif path.is_file() and path.suffix == ".safetensors":
                state = load_file(str(path))
            elif path.is_dir() and sorted(path.glob("*.safetensors")):
                state = {}
                for shard in sorted(path.glob("*.safetensors")):
                    state.update(load_file(str(shard)))
            elif path.is_dir() and (path / "config.json").is_file():
                model = AutoModelForCausalLM.from_pretrained(str(path), dtype=self.dtype)
                state = model.state_dict()
            else:
                raise BackendError(
                    f"source {str(source)!r} is not a safetensors file, a model folder or a "
                    "LoRA adapter folder"
                )
        return self._fit(state, source)

    def _merge_adapter(self, folder: Path) -> dict[str, torch.Tensor]:
        from peft import PeftModel

        base = self._load_base()
        try:
            merged = PeftModel.from_pretrained(base, str(folder)).merge_and_unload()
        except (OSError, ValueError, KeyError, RuntimeError) as exc:
            raise BackendError(f"source {str(folder)!r}: cannot load the adapter: {exc}") from exc
        if not isinstance(merged, torch.nn.Module):
            raise BackendError(f"source {str(folder)!r}: merging gave {type(merged).__name__}")
        return merged.state_dict()

    def _fit(self, state: dict[str, torch.Tensor], source: object) -> dict[str, torch.Tensor]:
        expected = self.model.state_dict()
        fitted: dict[str, torch.Tensor] = {}
        unexpected: list[str] = []
        for key, tensor in state.items():
            name = key.removeprefix("base_model.model.")
            if name not in expected:
                unexpected.append(key)
                continue
            if tuple(tensor.shape) != tuple(expected[name].shape):
                raise BackendError(
                    f"source {_describe(source)}: {name} has shape {tuple(tensor.shape)}, "
                    f"the model has {tuple(expected[name].shape)}"
                )
            fitted[name] = tensor.to(device=self.device, dtype=expected[name].dtype)
        tied = _tied_keys(self.model)
        missing = [k for k in expected if k not in fitted and k not in tied]
        if unexpected or missing:
            raise BackendError(
                f"source {_describe(source)} does not fit the model: "
                f"unexpected keys {unexpected[:5]}, missing keys {missing[:5]}"
            )
        return fitted


def _nucleus(logp: torch.Tensor, top_p: torch.Tensor) -> torch.Tensor:
    """Restrict each row to its top-p nucleus and renormalise (rows with top_p 1 unchanged)."""
    sorted_logp, order = logp.sort(dim=-1, descending=True)
    cumulative = sorted_logp.exp().cumsum(dim=-1)
    before = cumulative - sorted_logp.exp()  # mass of the strictly more likely tokens
    drop_sorted = (before >= top_p.unsqueeze(-1)) & (top_p.unsqueeze(-1) < 1.0)
    drop = torch.zeros_like(drop_sorted).scatter(-1, order, drop_sorted)
    kept = logp.masked_fill(drop, float("-inf"))
    return kept - torch.logsumexp(kept, dim=-1, keepdim=True)


def _joinable(cache: DynamicCache) -> bool:
    """Whether rows can be added to and columns trimmed from `cache` (full-attention layers)."""
    return all(type(layer) is DynamicLayer and layer.is_initialized for layer in cache.layers)


def _layers(cache: DynamicCache) -> list[Any]:
    """The cache's layers; only called on joinable caches, whose layers hold keys and values."""
    return list(cache.layers)


def _left_pad(tensor: torch.Tensor, width: int, dim: int = -2) -> torch.Tensor:
    """`tensor` padded with zeros at the start of `dim` to `width`."""
    missing = width - tensor.shape[dim]
    if missing == 0:
        return tensor
    shape = list(tensor.shape)
    shape[dim] = missing
    return torch.cat([tensor.new_zeros(shape), tensor], dim=dim)


def _tied_keys(model: torch.nn.Module) -> set[str]:
    """Parameter names that share storage with an earlier one (tied embeddings)."""
    seen: dict[int, str] = {}
    tied: set[str] = set()
    for name, tensor in model.state_dict(keep_vars=True).items():
        pointer = tensor.data_ptr()
        if pointer in seen:
            tied.add(name)
        else:
            seen[pointer] = name
    return tied


def _eos_ids(folder: Path, config: Any) -> list[int]:
    ids: list[int] = []
    generation = folder / "generation_config.json"
    if generation.is_file():
        ids += _as_ids(json.loads(generation.read_text()).get("eos_token_id"))
    ids += _as_ids(getattr(config, "eos_token_id", None))
    return list(dict.fromkeys(ids))


def _as_ids(value: object) -> list[int]:
    if isinstance(value, int):
        return [value]
    if isinstance(value, list):
        return [v for v in value if isinstance(v, int)]
    return []


def _first_id(value: object, *, default: int) -> int:
    ids = _as_ids(value)
    return ids[0] if ids else default


def _describe(source: object) -> str:
    return "state dict" if isinstance(source, Mapping) else repr(str(source))


def _resolve(
    loop: asyncio.AbstractEventLoop,
    future: asyncio.Future[Any],
    *,
    result: object = None,
    error: BaseException | None = None,
) -> None:
    def settle() -> None:
        if future.done():
            return
        if error is not None:
            future.set_exception(error)
        else:
            future.set_result(result)

    with contextlib.suppress(RuntimeError):  # the caller's loop is gone; nobody is waiting
        loop.call_soon_threadsafe(settle)
