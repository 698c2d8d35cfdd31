"""The gateway's pipeline, used by every protocol module.

`Gateway` authenticates keys, builds the prompt (`prompts`: reusing recorded tokens when the
conversation repeats what this seat already sampled), asks the admission hook, samples, parses,
and records the turn in the ledger (`recording`) before the answer (or a stream's final event)
is sent. `Gateway.stream` sends the reply's text while it is sampled (`streaming`). The pieces:

- `canonical`: `CanonicalRequest` (what an adapter makes of a request) and `TurnResult` (what
  it renders back);
- `fingerprints`: which recorded turn a conversation repeats;
- `seats`: what is kept in memory per seat;
- `prompts`: prompt building with token-exact history;
- `output`: stop strings, streaming pieces and token views;
- `recording`: the turn's record and its write under the seat's next index.
"""

from __future__ import annotations

import logging
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass, replace
from typing import Protocol

from rollout.contracts import (
    Completion,
    Message,
    SamplingParams,
    StopReason,
    ToolCall,
    ToolSpec,
    Turn,
)
from rollout.errors import RolloutError
from rollout.gateway.canonical import (
    MAX_TOKENS_LIMIT,
    CanonicalRequest,
    ProtocolName,
    StreamDelta,
    StreamStart,
    TokenView,
    TurnResult,
)
from rollout.gateway.errors import GatewayError
from rollout.gateway.fingerprints import fingerprint
from rollout.gateway.keys import KeyResolver, keys_from_headers
from rollout.gateway.output import LiveText, TokenText
from rollout.gateway.prompts import PromptBuilder
from rollout.gateway.recording import Recorder, TurnStore, request_record
from rollout.gateway.seats import SeatCache
from rollout.inference.base import InferenceBackend, sample_stream
from rollout.inference.direct import with_stop_ids
from rollout.inference.remote import InferenceUnavailable
from rollout.ledger import KeyInfo, LedgerError
from rollout.rendering.base import Renderer
from rollout.rendering.openai import new_id

log = logging.getLogger("rollout.gateway")

Admission = Callable[[KeyInfo], Awaitable[None]]
"""Called before sampling each turn (the lead plugs max_lag waiting in here)."""


class LedgerLike(TurnStore, Protocol):
    """The part of `rollout.ledger.Ledger` the gateway uses."""

    async def resolve_key(self, api_key: str) -> KeyInfo | None: ...

    async def seat_turns(self, episode_id: str, agent: int, attempt: int) -> list[Turn]: ...


class Gateway:
    """The pipeline behind every route.

    Args:
        ledger: where keys are resolved and turns recorded (`rollout.ledger.Ledger`).
        renderer: the model's chat template and parser.
        backend: the inference backend that samples.
        model_name: the name `GET /v1/models` lists.
        admission: optional `async (KeyInfo) -> None` awaited before sampling each turn.
        default_max_tokens: max tokens when a request gives none (Chat, Responses).
        key_cache_seconds: how long a resolved key is trusted before asking the ledger again.
        max_cached_seats: seats whose recent turns are kept in memory.
        recent_turns_per_seat: recent turns each seat keeps in memory.
        policies: a run with several policies (`rollout.runs.policies`): each policy's backend,
            and `policy_of` the policy of each agent index; each seat samples from its agent's
            policy, and the turn records that policy (a backend that serves one policy, such as
            a local weight set, does not name it).
        policy_of: agent index -> policy name (with `policies`).
    """

    def __init__(
        self,
        ledger: LedgerLike,
        renderer: Renderer,
        backend: InferenceBackend,
        *,
        model_name: str,
        admission: Admission | None = None,
        default_max_tokens: int = 1024,
        key_cache_seconds: float = 2.0,
        max_cached_seats: int = 1024,
        recent_turns_per_seat: int = 4,
        policies: Mapping[str, InferenceBackend] | None = None,
        policy_of: Callable[[int], str] | None = None,
    ) -> None:
        self.ledger = ledger
        self.renderer = renderer
        self.backend = backend
        self.policies = dict(policies or {})
        self.policy_of = policy_of
        self.model_name = model_name
        self.admission = admission
        self.default_max_tokens = default_max_tokens
        self.keys = KeyResolver(ledger, ttl=key_cache_seconds)
        self.seats = SeatCache(max_cached_seats)
        self.prompts = PromptBuilder(renderer, self.seats, self.seat_turns)
        self.recorder = Recorder(ledger, self.seats, recent_turns_per_seat=recent_turns_per_seat)
        self._stop_ids = list(renderer.stop_token_ids)
        self.text = TokenText(renderer, self._stop_ids)

    # keys

    async def authenticate(self, keys: list[str]) -> KeyInfo:
        """The seat that `keys` belong to (401 in the caller's shape when unknown)."""
        return await self.keys.resolve(keys)

    async def authenticate_headers(self, headers: Mapping[str, str]) -> KeyInfo:
        """The seat of the key in `Authorization: Bearer` or `x-api-key`."""
        return await self.keys.resolve(keys_from_headers(headers))

    # seats

    async def seat_turns(self, info: KeyInfo) -> list[Turn]:
        """Every recorded turn of the seat (503 when the ledger cannot be read)."""
        try:
            return await self.ledger.seat_turns(info.episode_id, info.agent, info.attempt)
        except LedgerError as exc:
            raise GatewayError(f"ledger error: {exc}", kind="unavailable") from exc

    async def find_response(self, info: KeyInfo, response_id: str) -> Turn:
        """The recorded turn that answered `response_id` for this seat (400 if none)."""
        seat = self.seats.get(info)
        for turn, _ in reversed(seat.recent.values()):
            if turn.request.get("response_id") == response_id:
                return turn
        for turn in reversed(await self.seat_turns(info)):
            if turn.request.get("response_id") == response_id:
                return turn
        raise GatewayError(
            f"previous_response_id: no response {response_id!r} was recorded for this key",
            param="previous_response_id",
            code="previous_response_not_found",
        )

    # prompt

    def count_tokens(self, messages: Sequence[Message], tools: Sequence[ToolSpec]) -> int:
        """The length of the full rendering of `messages` and `tools`."""
        return len(self.prompts.render(messages, tools))

    async def build_prompt(
        self, info: KeyInfo, messages: Sequence[Message], tools: Sequence[ToolSpec]
    ) -> tuple[list[int], Turn | None, str | None]:
        """See `PromptBuilder.build`."""
        return await self.prompts.build(info, messages, tools)

    # sampling

    def _backend_error(self, exc: Exception) -> GatewayError:
        """A backend's failure as a gateway error (503, 400 or 500)."""
        if isinstance(exc, GatewayError):
            return exc
        if isinstance(exc, InferenceUnavailable):
            return GatewayError(f"inference is unavailable: {exc}", kind="unavailable")
        if isinstance(exc, RolloutError) and isinstance(exc, ValueError):
            # A backend's BackendError: it names the request field it cannot serve.
            return GatewayError(str(exc), code="backend_rejected")
        log.error("backend %s failed", getattr(self.backend, "name", "?"), exc_info=exc)
        return GatewayError(f"inference backend failed: {type(exc).__name__}: {exc}", kind="server")

    def backend_for(self, info: KeyInfo) -> InferenceBackend:
        """The backend of the seat's policy (the one backend of a run with one policy)."""
        if not self.policies or self.policy_of is None:
            return self.backend
        policy = self.policy_of(info.agent)
        backend = self.policies.get(policy)
        if backend is None:
            raise GatewayError(
                f"agent {info.agent}'s policy {policy!r} is not served", kind="server"
            )
        return backend

    async def _sample(self, info: KeyInfo, prompt: list[int], params: SamplingParams) -> Completion:
        """The backend's completion; its failures as gateway errors (503, 400 or 500)."""
        try:
            return await self.backend_for(info).sample(prompt, params)
        except Exception as exc:
            raise self._backend_error(exc) from exc

    async def _prepare(self, info: KeyInfo, request: CanonicalRequest) -> _Prepared:
        started = time.time()
        prompt, base, prompt_text = await self.build_prompt(info, request.messages, request.tools)
        if self.admission is not None:
            await self.admission(info)
        params = with_stop_ids(request.params, self._stop_ids)
        return _Prepared(started, prompt, base, prompt_text, params, time.time())

    async def complete(self, info: KeyInfo, request: CanonicalRequest) -> TurnResult:
        """Render, admit, sample, parse and record one turn; raises GatewayError."""
        prepared = await self._prepare(info, request)
        completion = await self._sample(info, prepared.prompt, prepared.params)
        return await self._finish(info, request, prepared, completion, time.time())

    async def stream(
        self, info: KeyInfo, request: CanonicalRequest
    ) -> AsyncIterator[StreamStart | StreamDelta | TurnResult]:
        """Like `complete`, but the reply's text comes as `StreamDelta`s while it is sampled.

        The first item is a `StreamStart` (the prompt is built and admitted), the last one the
        `TurnResult`, yielded once the turn is recorded. Text that may turn out to be a tool
        call, reasoning or a stop string is held back until the end (see `LiveText`).
        """
        prepared = await self._prepare(info, request)
        backend = self.backend_for(info)
        yield StreamStart(len(prepared.prompt), prepared.started, backend.version)
        live = LiveText(self.text, prepared.params, streaming=self._may_stream(prepared))
        completion: Completion | None = None
        try:
            async for chunk in sample_stream(backend, prepared.prompt, prepared.params):
                for delta in live.feed(chunk.tokens, chunk.logprobs, chunk.top_logprobs):
                    yield delta
                if chunk.completion is not None:
                    completion = chunk.completion
        except Exception as exc:
            raise self._backend_error(exc) from exc
        if completion is None:
            raise GatewayError(
                "inference backend ended a stream without a completion", kind="server"
            )
        yield await self._finish(info, request, prepared, completion, time.time())

    def _may_stream(self, prepared: _Prepared) -> bool:
        """Whether text can be sent before the reply is parsed whole."""
        if prepared.params.stop:  # a client stop string may cut text already sampled
            return False
        # A prompt that opens a reasoning block makes the first text reasoning, not content.
        return "<think>" not in self.text.renderer.decode(prepared.prompt[-4:])

    async def _finish(
        self,
        info: KeyInfo,
        request: CanonicalRequest,
        prepared: _Prepared,
        completion: Completion,
        ended: float,
    ) -> TurnResult:
        """Parse and record the sampled completion; the result the adapters render."""
        params = prepared.params
        if self.policies and self.policy_of is not None:  # sampled by the seat's policy
            completion = replace(completion, policy=self.policy_of(info.agent))
        completion, stop_sequence = self.text.cut_at_stop_string(completion, params.stop)
        parsed = self.renderer.parse(completion.tokens)
        if stop_sequence is not None and stop_sequence in parsed.text:
            parsed = parsed.model_copy(
                update={"content": parsed.text[: parsed.text.index(stop_sequence)]}
            )
        reply = Message.assistant(
            parsed.text,
            [
                ToolCall(id=new_id(request.tool_call_prefix), name=c.name, arguments=c.arguments)
                for c in parsed.tool_calls
            ],
        )
        finish: StopReason
        if completion.stop_reason == "length" and stop_sequence is None:
            finish = "length"
        elif reply.tool_calls:
            finish = "tool_calls"
        else:
            finish = "stop"

        record = request_record(
            request,
            reply,
            finish=finish,
            stop_sequence=stop_sequence,
            reused_turn=None if prepared.base is None else prepared.base.index,
            queued_seconds=prepared.sample_started - prepared.started,
        )
        turn = await self.recorder.record(
            info,
            prompt=prepared.prompt,
            completion=completion,
            finish=finish,
            temperature=params.temperature,
            started=prepared.started,
            ended=ended,
            request=record,
            prompt_text=prepared.prompt_text,
        )
        body = self.text.body(completion)
        views = self.text.views(completion, completion.tokens, params)
        return TurnResult(
            reply=reply,
            turn=turn,
            completion=completion,
            finish=finish,
            stop_sequence=stop_sequence,
            prompt_tokens=len(prepared.prompt),
            created=prepared.started,
            pieces=self.text.pieces(reply, body),
            tokens=views[: len(body)],
            stop_token=views[len(body) :],
        )


@dataclass(frozen=True)
class _Prepared:
    """A turn ready to sample: its prompt (and the turn it reuses), settings and timings."""

    started: float
    prompt: list[int]
    base: Turn | None
    prompt_text: str | None
    params: SamplingParams
    sample_started: float


__all__ = [
    "MAX_TOKENS_LIMIT",
    "Admission",
    "CanonicalRequest",
    "Gateway",
    "LedgerLike",
    "ProtocolName",
    "StreamDelta",
    "StreamStart",
    "TokenView",
    "TurnResult",
    "fingerprint",
    "new_id",
]
