"""The local backend's batching engine: decode a group of requests together, step by step.

Prompts are left-padded (`rollout.models.padding`) with an attention mask and position ids
counted from the mask, so a padded row computes what it would alone, up to float rounding; each
step feeds every row's last token through one incremental KV-cache step. Batching is
continuous: a finished row leaves the group at once (its caller gets the completion then), and
requests that arrive while a group decodes join it at the next step (prefilled on their own,
then their cache is left-padded and stacked onto the group's). Models whose cache is not plain
full attention (sliding windows) take no new rows (`room` is 0).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, Literal

import torch
from transformers import DynamicCache, PreTrainedModel
from transformers.cache_utils import DynamicLayer

from rollout.contracts import Completion, SamplingParams
from rollout.inference.local.sampling import choose
from rollout.models.hf import cache_argument
from rollout.models.padding import left_pad, left_padded

log = logging.getLogger("rollout.inference.local")

StopReason = Literal["stop", "length"]


@dataclass(eq=False)
class Request:
    """One `sample` call: its prompt and settings, where to answer, and what it sampled so far."""

    prompt: list[int]
    params: SamplingParams
    loop: asyncio.AbstractEventLoop
    future: asyncio.Future[Completion]
    generator: torch.Generator
    stop_ids: frozenset[int]
    tokens: list[int] = field(default_factory=list)
    logprobs: list[float] = field(default_factory=list)
    top: list[dict[int, float]] = field(default_factory=list)
    on_token: Callable[[int, float, dict[int, float] | None], None] | None = None
    """Called on the worker thread with each token as it is chosen (`sample_stream`)."""


@dataclass(eq=False)
class Group:
    """Requests decoding together: their KV cache, attention mask and next positions.

    The mask covers the cached columns; `last` holds each row's latest token, not yet fed.
    """

    requests: list[Request]
    cache: DynamicCache
    mask: torch.Tensor
    next_position: torch.Tensor
    last: list[int] = field(default_factory=list)


class Decoder:
    """Decodes groups of requests with `model` (on its worker thread only).

    Args:
        model: The causal LM (its weights may be swapped between `run` calls).
        device: Where inputs go.
        pad_id: The id that fills left padding.
        max_positions: The model's context length (a row ends there).
        tokenizer: Decodes completions for stop strings (None: no stop strings).
    """

    def __init__(
        self,
        model: PreTrainedModel,
        device: torch.device,
        *,
        pad_id: int,
        max_positions: int,
        tokenizer: Any = None,
    ) -> None:
        self.model = model
        self.device = device
        self.pad_id = pad_id
        self.max_positions = max_positions
        self.tokenizer = tokenizer
        self._cache_kwarg = cache_argument(model)
        self.batches_run = 0
        """Groups of requests admitted together (one prefill each)."""
        self.tokens_sampled = 0

    def run(
        self, batch: list[Request], version: int, admit: Callable[[Group], list[Request]]
    ) -> None:
        """Decode `batch`, admitting `admit(group)` into it at step boundaries, until it drains.

        Every completion reports `version`: the caller changes weights only between runs.
        """
        group: Group | None = None
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
                    admitted = admit(group)
        except Exception as exc:
            log.exception("decoding failed")
            for request in [*(group.requests if group else []), *admitted, *batch]:
                resolve(request.loop, request.future, error=exc)

    def room(self, group: Group, max_batch: int) -> int:
        """How many requests may join `group` now (0 when its cache cannot take rows)."""
        room = max_batch - len(group.requests)
        return room if room > 0 and _joinable(group.cache) else 0

    def _prefill(self, requests: list[Request]) -> tuple[Group, torch.Tensor]:
        """Run the prompts (left-padded) through the model: a new group with a KV cache."""
        self.batches_run += 1
        batch = left_padded([r.prompt for r in requests], self.pad_id, self.device)
        cache = DynamicCache(config=self.model.config)
        out = self.model(
            input_ids=batch.input_ids,
            attention_mask=batch.attention_mask,
            position_ids=batch.position_ids,
            use_cache=True,
            logits_to_keep=1,
            **{self._cache_kwarg: cache},
        )
        group = Group(
            requests=list(requests),
            cache=cache,
            mask=batch.attention_mask,
            next_position=batch.next_positions,
        )
        return group, out.logits[:, -1, :].float()

    def _step(self, group: Group) -> torch.Tensor:
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

    def _advance(self, group: Group, logits: torch.Tensor, version: int) -> None:
        """Choose each row's next token; finish the rows that are done and drop them."""
        chosen = self._choose(group.requests, logits)
        keep: list[int] = []
        finished: list[tuple[Request, Completion]] = []
        for row, request in enumerate(group.requests):
            if request.future.cancelled():
                continue  # nobody is waiting: stop spending compute on it
            if self._done(request, chosen[row]):
                finished.append((request, self._complete(request, version)))
            else:
                keep.append(row)
        settle_all(finished)
        if len(keep) < len(group.requests):
            index = torch.tensor(keep, device=self.device, dtype=torch.long)
            group.cache.batch_select_indices(index)
            group.mask, group.next_position = group.mask[index], group.next_position[index]
            group.requests = [group.requests[row] for row in keep]
            self._trim(group)
        group.last = [chosen[row] for row in keep]

    def _choose(self, active: list[Request], logits: torch.Tensor) -> list[int]:
        """Pick each row's next token and append it, its logprob and alternatives to the row."""
        choice = choose([r.params for r in active], [r.generator for r in active], logits)
        for row, request in enumerate(active):
            request.tokens.append(choice.tokens[row])
            request.logprobs.append(choice.logprobs[row])
            if request.params.top_logprobs:
                request.top.append(choice.top[row])
            if request.on_token is not None:
                top = choice.top[row] if request.params.top_logprobs else None
                request.on_token(choice.tokens[row], choice.logprobs[row], top)
        return choice.tokens

    def _complete(self, request: Request, version: int) -> Completion:
        completion = Completion(
            tokens=tuple(request.tokens),
            logprobs=tuple(request.logprobs),
            stop_reason=self._finish_reason(request),
            version=version,
            top_logprobs=tuple(request.top),
        )
        self.tokens_sampled += len(request.tokens)
        return completion

    def _merge(self, group: Group, fresh: Group) -> Group:
        """One group of both: caches and masks left-padded to one length, rows stacked."""
        if not fresh.requests:
            return group
        if not group.requests:
            return fresh
        width = max(group.mask.shape[1], fresh.mask.shape[1])
        for old, new in zip(_layers(group.cache), _layers(fresh.cache), strict=True):
            old.keys = torch.cat([left_pad(old.keys, width), left_pad(new.keys, width)])
            old.values = torch.cat([left_pad(old.values, width), left_pad(new.values, width)])
        mask = torch.cat([left_pad(group.mask, width, dim=1), left_pad(fresh.mask, width, dim=1)])
        return Group(
            requests=group.requests + fresh.requests,
            cache=group.cache,
            mask=mask,
            next_position=torch.cat([group.next_position, fresh.next_position]),
            last=group.last + fresh.last,
        )

    def _trim(self, group: Group) -> None:
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

    def _done(self, request: Request, token: int) -> bool:
        if token in request.stop_ids:
            return True
        if len(request.tokens) >= request.params.max_tokens:
            return True
        if len(request.prompt) + len(request.tokens) >= self.max_positions:
            return True
        return self._hit_stop_string(request)

    def _finish_reason(self, request: Request) -> StopReason:
        if request.tokens and request.tokens[-1] in request.stop_ids:
            return "stop"
        return "stop" if self._hit_stop_string(request) else "length"

    def _hit_stop_string(self, request: Request) -> bool:
        if not request.params.stop:
            return False
        text = self.tokenizer.decode(request.tokens, skip_special_tokens=False)
        return any(s and s in text for s in request.params.stop)


def _joinable(cache: DynamicCache) -> bool:
    """Whether rows can be added to and columns trimmed from `cache` (full-attention layers)."""
    return all(type(layer) is DynamicLayer and layer.is_initialized for layer in cache.layers)


def _layers(cache: DynamicCache) -> list[Any]:
    """The cache's layers; only called on joinable caches, whose layers hold keys and values."""
    return list(cache.layers)


def resolve(
    loop: asyncio.AbstractEventLoop,
    future: asyncio.Future[Any],
    *,
    result: object = None,
    error: BaseException | None = None,
) -> None:
    """Settle `future` on its own event loop, from any thread (a no-op once it is done)."""

    def settle() -> None:
        if future.done():
            return
        if error is not None:
            future.set_exception(error)
        else:
            future.set_result(result)

    with contextlib.suppress(RuntimeError):  # the caller's loop is gone; nobody is waiting
        loop.call_soon_threadsafe(settle)


def settle_all(finished: list[tuple[Request, Completion]]) -> None:
    """Answer the requests that finished at one step, from the worker thread: one wake-up of
    each caller's event loop for all of them (a wake-up is a write to the loop's self-pipe and a
    pass of its selector; with one per completion, the self-pipe writes were 14% of a py-spy
    profile's samples of the inference server, 64 one-turn episodes in flight)."""
    by_loop: dict[asyncio.AbstractEventLoop, list[tuple[Request, Completion]]] = {}
    for request, completion in finished:
        by_loop.setdefault(request.loop, []).append((request, completion))
    for loop, answers in by_loop.items():

        def settle(answers: list[tuple[Request, Completion]] = answers) -> None:
            for request, completion in answers:
                if not request.future.done():
                    request.future.set_result(completion)

        with contextlib.suppress(RuntimeError):  # the caller's loop is gone; nobody is waiting
            loop.call_soon_threadsafe(settle)
