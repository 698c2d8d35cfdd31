"""The gateway's pipeline, used by every protocol module.

`Gateway` authenticates keys, builds the prompt (`prompts`: reusing recorded tokens when the
conversation repeats what this seat already sampled), asks the admission hook, samples, parses,
and records the turn in the ledger (`recording`) before anything is answered. The pieces:

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
from collections.abc import Awaitable, Callable, Mapping, Sequence
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
    TokenView,
    TurnResult,
)
from rollout.gateway.errors import GatewayError
from rollout.gateway.fingerprints import fingerprint
from rollout.gateway.keys import KeyResolver, keys_from_headers
from rollout.gateway.output import TokenText
from rollout.gateway.prompts import PromptBuilder
from rollout.gateway.recording import Recorder, TurnStore, request_record
from rollout.gateway.seats import SeatCache
from rollout.inference.base import InferenceBackend
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
    ) -> None:
        self.ledger = ledger
        self.renderer = renderer
        self.backend = backend
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

    async def _sample(self, prompt: list[int], params: SamplingParams) -> Completion:
        """The backend's completion; its failures as gateway errors (503, 400 or 500)."""
        try:
            return await self.backend.sample(prompt, params)
        except GatewayError:
            raise
        except InferenceUnavailable as exc:
            raise GatewayError(f"inference is unavailable: {exc}", kind="unavailable") from exc
        except Exception as exc:
            if isinstance(exc, RolloutError) and isinstance(exc, ValueError):
                # A backend's BackendError: it names the request field it cannot serve.
                raise GatewayError(str(exc), code="backend_rejected") from exc
            log.exception("backend %s failed", getattr(self.backend, "name", "?"))
            raise GatewayError(
                f"inference backend failed: {type(exc).__name__}: {exc}", kind="server"
            ) from exc

    async def complete(self, info: KeyInfo, request: CanonicalRequest) -> TurnResult:
        """Render, admit, sample, parse and record one turn; raises GatewayError."""
        started = time.time()
        prompt, base, prompt_text = await self.build_prompt(info, request.messages, request.tools)
        if self.admission is not None:
            await self.admission(info)
        params = with_stop_ids(request.params, self._stop_ids)
        sample_started = time.time()
        completion = await self._sample(prompt, params)
        ended = time.time()

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
            reused_turn=None if base is None else base.index,
            queued_seconds=sample_started - started,
        )
        turn = await self.recorder.record(
            info,
            prompt=prompt,
            completion=completion,
            finish=finish,
            temperature=params.temperature,
            started=started,
            ended=ended,
            request=record,
            prompt_text=prompt_text,
        )
        body = self.text.body(completion)
        return TurnResult(
            reply=reply,
            turn=turn,
            completion=completion,
            finish=finish,
            stop_sequence=stop_sequence,
            prompt_tokens=len(prompt),
            created=started,
            pieces=self.text.pieces(reply, body),
            tokens=self.text.views(completion, body, params),
        )


__all__ = [
    "MAX_TOKENS_LIMIT",
    "Admission",
    "CanonicalRequest",
    "Gateway",
    "LedgerLike",
    "ProtocolName",
    "TokenView",
    "TurnResult",
    "fingerprint",
    "new_id",
]
