"""The gateway's shared pipeline, used by every protocol module.

- `CanonicalRequest`: what a protocol adapter makes of a request: canonical messages, tools and
  sampling settings, plus what to record with the turn.
- `Gateway`: authenticates keys, builds the prompt (reusing recorded tokens when the
  conversation repeats what this seat already sampled), asks the admission hook, samples,
  parses, and records the turn in the ledger before anything is answered.
- `TurnResult`: what a protocol module renders back: the reply, the recorded turn, the finish
  reason and the per-token views (logprobs, streaming pieces).

Token-exact history: when a conversation contains an assistant message this seat produced (same
conversation before it, same tools, same reply), the prompt is that turn's prompt tokens + its
completion tokens + the rendering of everything after the reply. Training then sees exactly the
tokens that were sampled, and the new turn extends the old one.
"""

from __future__ import annotations

import asyncio
import hashlib
import json
import logging
import math
import secrets
import time
from collections import OrderedDict
from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal, Protocol, TypeVar

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
from rollout.gateway.errors import GatewayError
from rollout.gateway.keys import KeyResolver, keys_from_headers
from rollout.inference.base import InferenceBackend
from rollout.inference.remote import InferenceUnavailable
from rollout.ledger import KeyInfo, LedgerError, StaleFence
from rollout.rendering.base import Renderer

log = logging.getLogger("rollout.gateway")

Admission = Callable[[KeyInfo], Awaitable[None]]
"""Called before sampling each turn (the lead plugs max_lag waiting in here)."""

ProtocolName = Literal["chat.completions", "responses", "messages"]

MAX_TOKENS_LIMIT = 1 << 20
"""Largest max_tokens a request may ask for; larger values are rejected as malformed."""


class LedgerLike(Protocol):
    """The part of `rollout.ledger.Ledger` the gateway uses."""

    async def resolve_key(self, api_key: str) -> KeyInfo | None: ...

    async def last_turn(self, episode_id: str, agent: int, attempt: int) -> Turn | None: ...

    async def seat_turns(self, episode_id: str, agent: int, attempt: int) -> list[Turn]: ...

    async def record_turn(self, turn: Turn) -> bool: ...


def new_id(prefix: str, nbytes: int = 12) -> str:
    """A random id with a protocol's prefix (`call_`, `toolu_`, `resp_`, ...)."""
    return prefix + secrets.token_hex(nbytes)


@dataclass(frozen=True)
class CanonicalRequest:
    """A request in the platform's vocabulary.

    `record` holds protocol-specific facts stored with the turn (response id, instructions);
    `tool_call_prefix` is the protocol's id prefix for tool calls in the reply.
    """

    protocol: ProtocolName
    messages: tuple[Message, ...]
    tools: tuple[ToolSpec, ...]
    params: SamplingParams
    model: str
    tool_call_prefix: str = "call_"
    record: dict[str, Any] = field(default_factory=dict)


@dataclass(frozen=True)
class TokenView:
    """One sampled token as the protocols show it."""

    token: str
    logprob: float
    top: tuple[tuple[str, float], ...] = ()


@dataclass(frozen=True)
class TurnResult:
    """One answered (and recorded) model call.

    `finish` is the canonical finish reason; `stop_sequence` the client stop string that ended
    the reply, if one did. `completion` is what was recorded: the sampled tokens, cut after a
    client stop string when one matched.
    """

    reply: Message
    turn: Turn
    completion: Completion
    finish: StopReason
    stop_sequence: str | None
    prompt_tokens: int
    created: float
    pieces: tuple[tuple[str, tuple[int, ...]], ...]
    """The reply's text in streaming pieces, each with the positions of its tokens."""
    tokens: tuple[TokenView, ...]
    """Per-token views of the completion's tokens (the final stop token excluded)."""

    @property
    def completion_tokens(self) -> int:
        return len(self.completion.tokens)


# --- fingerprints: which recorded turn a conversation repeats -----------------------------------


def _canonical_arguments(arguments: str) -> Any:
    try:
        return json.loads(arguments)
    except (json.JSONDecodeError, RecursionError):
        return arguments.strip()


def _norm_message(message: Message) -> bytes:
    # Ids of the assistant's own calls are ours and clients echo them, but they never change
    # what the model sees; text is compared without surrounding whitespace.
    calls = [
        (c.name, json.dumps(_canonical_arguments(c.arguments), sort_keys=True))
        for c in message.tool_calls
    ]
    item = (message.role, message.text.strip(), calls, message.tool_call_id, message.name)
    return repr(item).encode("utf-8", "surrogatepass")


def _prefix_hashes(messages: Sequence[Message]) -> list[bytes]:
    """`out[j]` identifies `messages[:j]`."""
    out = [hashlib.sha256(b"conversation").digest()]
    for message in messages:
        out.append(hashlib.sha256(out[-1] + _norm_message(message)).digest())
    return out


def _tools_hash(tools: Sequence[ToolSpec]) -> bytes:
    payload = json.dumps(
        [t.model_dump(mode="json") for t in tools], sort_keys=True, separators=(",", ":")
    )
    return hashlib.sha256(payload.encode()).digest()


def _fingerprint(prefix_hash: bytes, tools_hash: bytes, reply: Message) -> str:
    return hashlib.sha256(prefix_hash + tools_hash + _norm_message(reply)).hexdigest()


def fingerprint(messages: Sequence[Message], tools: Sequence[ToolSpec], reply: Message) -> str:
    """Identifies (conversation, tools, assistant reply): equal iff a client repeats the reply."""
    return _fingerprint(_prefix_hashes(messages)[-1], _tools_hash(tools), reply)


def dump_messages(messages: Sequence[Message]) -> list[dict[str, Any]]:
    return [m.model_dump(mode="json", exclude_defaults=True) for m in messages]


def load_messages(items: Sequence[dict[str, Any]]) -> list[Message]:
    return [Message.model_validate(item) for item in items]


# --- per-seat state ------------------------------------------------------------------------------


@dataclass
class _Seat:
    lock: asyncio.Lock = field(default_factory=asyncio.Lock)
    last: Turn | None = None
    loaded: bool = False
    recent: OrderedDict[str, tuple[Turn, str | None]] = field(default_factory=OrderedDict)
    """Recently recorded turns by fingerprint, with their prompt's text when known (the common
    case needs no ledger read and no second rendering)."""


SeatId = tuple[str, int, int]


def _seat_id(info: KeyInfo) -> SeatId:
    return (info.episode_id, info.agent, info.attempt)


_R = TypeVar("_R")


def _rendered(render: Callable[[], _R]) -> _R:
    """Run a chat-template render; a template rejecting a conversation is the client's input."""
    try:
        return render()
    except GatewayError:
        raise
    except Exception as exc:
        raise GatewayError(
            f"messages: the chat template cannot render this conversation: {exc}",
            param="messages",
            code="render_failed",
        ) from exc


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
        self._seats: OrderedDict[SeatId, _Seat] = OrderedDict()
        self._max_seats = max_cached_seats
        self._recent = recent_turns_per_seat
        self._stop_ids = list(renderer.stop_token_ids)
        self._stop_set = frozenset(self._stop_ids)
        self._stop_texts = [(t, renderer.decode([t])) for t in self._stop_ids]
        self._stop_texts = [(t, text) for t, text in self._stop_texts if text]
        # HFRenderer renders text first; splicing on text saves a second render per turn.
        self._text_renderer: Callable[[Sequence[Message], Sequence[ToolSpec]], str] | None = (
            getattr(renderer, "render_text", None)
        )
        self._token_text: dict[int, str] = {}

    # keys

    async def authenticate(self, keys: list[str]) -> KeyInfo:
        """The seat that `keys` belong to (401 in the caller's shape when unknown)."""
        return await self.keys.resolve(keys)

    async def authenticate_headers(self, headers: Mapping[str, str]) -> KeyInfo:
        """The seat of the key in `Authorization: Bearer` or `x-api-key`."""
        return await self.keys.resolve(keys_from_headers(headers))

    # seats

    def _seat(self, info: KeyInfo) -> _Seat:
        sid = _seat_id(info)
        seat = self._seats.get(sid)
        if seat is None:
            seat = self._seats[sid] = _Seat()
            while len(self._seats) > self._max_seats:
                old_id, old = next(iter(self._seats.items()))
                if old.lock.locked():
                    break
                del self._seats[old_id]
        self._seats.move_to_end(sid)
        return seat

    async def seat_turns(self, info: KeyInfo) -> list[Turn]:
        try:
            return await self.ledger.seat_turns(info.episode_id, info.agent, info.attempt)
        except LedgerError as exc:
            raise GatewayError(f"ledger error: {exc}", kind="unavailable") from exc

    async def find_response(self, info: KeyInfo, response_id: str) -> Turn:
        """The recorded turn that answered `response_id` for this seat (400 if none)."""
        seat = self._seat(info)
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
        return len(self._render(messages, tools))

    def _render(self, messages: Sequence[Message], tools: Sequence[ToolSpec]) -> list[int]:
        return _rendered(lambda: list(self.renderer.render(messages, tools)))

    async def _match(
        self, info: KeyInfo, messages: Sequence[Message], tools: Sequence[ToolSpec]
    ) -> tuple[int, Turn] | None:
        """(j, turn): the latest assistant message `messages[j]` that repeats a recorded turn."""
        positions = [j for j, m in enumerate(messages) if m.role == "assistant"]
        if not positions:
            return None
        hashes = _prefix_hashes(messages)
        tools_hash = _tools_hash(tools)
        wanted = {_fingerprint(hashes[j], tools_hash, messages[j]): j for j in positions}
        seat = self._seat(info)
        found = [(wanted[fp], t) for fp, (t, _) in seat.recent.items() if fp in wanted]
        if not found or max(j for j, _ in found) != positions[-1]:
            for turn in await self.seat_turns(info):
                fp = turn.request.get("fingerprint")
                if isinstance(fp, str) and fp in wanted:
                    found.append((wanted[fp], turn))
        if not found:
            return None
        return max(found, key=lambda item: (item[0], item[1].index))

    def _render_text(self, messages: Sequence[Message], tools: Sequence[ToolSpec]) -> str:
        text_renderer = self._text_renderer
        assert text_renderer is not None
        return _rendered(lambda: text_renderer(messages, tools))

    async def build_prompt(
        self, info: KeyInfo, messages: Sequence[Message], tools: Sequence[ToolSpec]
    ) -> tuple[list[int], Turn | None, str | None]:
        """The prompt tokens, the recorded turn whose tokens they reuse (if any), and the
        prompt's text when the renderer can give it (kept to splice the next turn cheaply)."""
        if self._text_renderer is None:
            prompt, turn = await self._build_prompt_tokens(info, messages, tools)
            return prompt, turn, None
        full = self._render_text(messages, tools)
        match = await self._match(info, messages, tools)
        if match is None:
            return self.renderer.encode(full), None, full
        _, turn = match
        cached = self._seat(info).recent.get(turn.request.get("fingerprint", ""))
        prefix = cached[1] if cached is not None and cached[0] is turn else None
        if prefix is None:
            prefix = self._render_text(
                load_messages(turn.request.get("messages", [])),
                [ToolSpec.model_validate(t) for t in turn.request.get("tools", [])],
            )
        # The conversation the turn answered must render, on its own, exactly as the start of
        # this one; otherwise (a template that rewrites history) splicing would mix renderings.
        if not full.startswith(prefix):
            log.debug("history renders differently; full render after turn %s", turn.index)
            return self.renderer.encode(full), None, full
        tail = full[len(prefix) :]
        hits = [(tail.find(text), text, tid) for tid, text in self._stop_texts if text in tail]
        if not hits:
            return self.renderer.encode(full), None, full
        pos, text, tid = min(hits)
        prompt = [*turn.prompt_tokens, *turn.completion_tokens]
        if not turn.completion_tokens or turn.completion_tokens[-1] not in self._stop_set:
            prompt.append(tid)  # the reply was cut (length, stop string): close it
        # A special token splits tokenization, so what follows it encodes on its own.
        prompt.extend(self.renderer.encode(tail[pos + len(text) :]))
        return prompt, turn, full

    async def _build_prompt_tokens(
        self, info: KeyInfo, messages: Sequence[Message], tools: Sequence[ToolSpec]
    ) -> tuple[list[int], Turn | None]:
        """`build_prompt` for renderers that only give tokens."""
        full = self._render(messages, tools)
        match = await self._match(info, messages, tools)
        if match is None:
            return full, None
        j, turn = match
        prefix = self._render(messages[:j], tools)
        if full[: len(prefix)] != prefix:
            log.debug("history renders differently; full render after turn %s", turn.index)
            return full, None
        tail = full[len(prefix) :]
        end = next((i for i, t in enumerate(tail) if t in self._stop_set), None)
        if end is None:
            return full, None
        prompt = [*turn.prompt_tokens, *turn.completion_tokens]
        if not turn.completion_tokens or turn.completion_tokens[-1] not in self._stop_set:
            prompt.append(tail[end])  # the reply was cut (length, stop string): close it
        prompt.extend(tail[end + 1 :])
        return prompt, turn

    # sampling

    def _token_str(self, token: int) -> str:
        text = self._token_text.get(token)
        if text is None:
            text = self.renderer.decode([token])
            if len(self._token_text) < 500_000:
                self._token_text[token] = text
        return text

    def _cut_at_stop_string(
        self, completion: Completion, stops: Sequence[str]
    ) -> tuple[Completion, str | None]:
        """The completion cut after the first client stop string, and that string."""
        wanted = [s for s in stops if s]
        if not wanted:
            return completion, None
        body = list(completion.tokens)
        if body and body[-1] in self._stop_ids:
            body = body[:-1]
        text = self.renderer.decode(body)
        hits = [(text.find(s), s) for s in wanted if s in text]
        if not hits:
            return completion, None
        pos, stop = min(hits)
        need = pos + len(stop)
        lo, hi = 1, len(body)
        while lo < hi:  # shortest token prefix whose text reaches the end of the stop string
            mid = (lo + hi) // 2
            if len(self.renderer.decode(body[:mid])) >= need:
                hi = mid
            else:
                lo = mid + 1
        k = lo
        while k < len(body) and stop not in self.renderer.decode(body[:k]):
            k += 1
        cut = Completion(
            tokens=tuple(body[:k]),
            logprobs=tuple(completion.logprobs[:k]),
            stop_reason="stop",
            version=completion.version,
            top_logprobs=tuple(completion.top_logprobs[:k]),
        )
        return cut, stop

    def _pieces(
        self, reply: Message, body: Sequence[int]
    ) -> tuple[tuple[str, tuple[int, ...]], ...]:
        """The reply's text split into per-token pieces when the tokens spell it exactly."""
        text = reply.text
        if not reply.tool_calls:
            pieces: list[tuple[str, tuple[int, ...]]] = []
            group: list[int] = []
            for pos, token in enumerate(body):
                group.append(pos)
                piece = (
                    self._token_str(token)
                    if len(group) == 1
                    else self.renderer.decode([body[i] for i in group])
                )
                if not piece.endswith("\ufffd"):
                    pieces.append((piece, tuple(group)))
                    group = []
            if group:
                pieces.append((self.renderer.decode([body[i] for i in group]), tuple(group)))
            if "".join(p for p, _ in pieces) == text:
                return tuple(p for p in pieces if p[0])
        if not text:
            return ()
        return ((text, tuple(range(len(body)))),)

    async def complete(self, info: KeyInfo, request: CanonicalRequest) -> TurnResult:
        """Render, admit, sample, parse and record one turn; raises GatewayError."""
        started = time.time()
        prompt, base, prompt_text = await self.build_prompt(info, request.messages, request.tools)
        if self.admission is not None:
            await self.admission(info)
        stop_ids = list(dict.fromkeys([*request.params.stop_token_ids, *self._stop_ids]))
        params = request.params.model_copy(update={"stop_token_ids": stop_ids})
        sample_started = time.time()
        try:
            completion = await self.backend.sample(prompt, params)
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
        ended = time.time()

        completion, stop_sequence = self._cut_at_stop_string(completion, params.stop)
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

        record = {
            "protocol": request.protocol,
            "model": request.model,
            "messages": dump_messages(request.messages),
            "tools": [t.model_dump(mode="json") for t in request.tools],
            "reply": reply.model_dump(mode="json", exclude_defaults=True),
            "fingerprint": fingerprint(request.messages, request.tools, reply),
            "sampling": request.params.model_dump(mode="json", exclude_defaults=True),
            "finish_reason": finish,
            "stop_sequence": stop_sequence,
            "reused_turn": None if base is None else base.index,
            "queued_seconds": round(sample_started - started, 6),
            **request.record,
        }
        turn = await self._record(
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
        body = list(completion.tokens)
        if body and body[-1] in self._stop_ids and completion.stop_reason == "stop":
            body = body[:-1]
        tokens = tuple(
            TokenView(
                token=self._token_str(t),
                logprob=_finite(completion.logprobs[i]) if i < len(completion.logprobs) else 0.0,
                top=tuple(
                    (self._token_str(tid), _finite(lp))
                    for tid, lp in sorted(
                        completion.top_logprobs[i].items(), key=lambda kv: -kv[1]
                    )[: params.top_logprobs]
                )
                if params.top_logprobs and i < len(completion.top_logprobs)
                else (),
            )
            for i, t in enumerate(body)
        )
        return TurnResult(
            reply=reply,
            turn=turn,
            completion=completion,
            finish=finish,
            stop_sequence=stop_sequence,
            prompt_tokens=len(prompt),
            created=started,
            pieces=self._pieces(reply, body),
            tokens=tokens,
        )

    async def _record(
        self,
        info: KeyInfo,
        *,
        prompt: list[int],
        completion: Completion,
        finish: StopReason,
        temperature: float,
        started: float,
        ended: float,
        request: dict[str, Any],
        prompt_text: str | None = None,
    ) -> Turn:
        """Record the turn under the next index of the seat; 409 when the attempt is fenced."""
        seat = self._seat(info)
        prompt_t = tuple(prompt)
        async with seat.lock:
            for _ in range(16):
                try:
                    if not seat.loaded:
                        seat.last = await self.ledger.last_turn(
                            info.episode_id, info.agent, info.attempt
                        )
                        seat.loaded = True
                    prev = seat.last
                    extends = prev is not None and _extends(prompt_t, prev)
                    turn = Turn(
                        episode_id=info.episode_id,
                        agent=info.agent,
                        attempt=info.attempt,
                        index=0 if prev is None else prev.index + 1,
                        prompt_tokens=prompt_t,
                        completion_tokens=tuple(completion.tokens),
                        logprobs=tuple(completion.logprobs),
                        version=completion.version,
                        stop_reason=finish,
                        extends_previous=extends,
                        started_at=started,
                        ended_at=ended,
                        temperature=temperature,
                        request=request,
                    )
                    new = await self.ledger.record_turn(turn)
                except StaleFence as exc:
                    self._seats.pop(_seat_id(info), None)
                    raise GatewayError(
                        "this key's episode attempt was taken over by another runner; "
                        f"nothing was recorded ({exc})",
                        kind="conflict",
                        code="attempt_fenced",
                    ) from exc
                except LedgerError as exc:
                    seat.loaded = False
                    raise GatewayError(f"ledger error: {exc}", kind="unavailable") from exc
                if new:
                    seat.last = turn
                    seat.recent[request["fingerprint"]] = (turn, prompt_text)
                    while len(seat.recent) > self._recent:
                        seat.recent.popitem(last=False)
                    return turn
                # Another gateway recorded this index first: read the seat again.
                seat.loaded = False
        raise GatewayError("could not record the turn: the seat keeps changing", kind="server")


def _finite(logprob: float) -> float:
    # JSON has no -inf; OpenAI reports impossible tokens as -9999.0.
    return logprob if math.isfinite(logprob) else -9999.0


def _extends(prompt: tuple[int, ...], prev: Turn) -> bool:
    n, m = len(prev.prompt_tokens), len(prev.completion_tokens)
    return (
        len(prompt) > n + m
        and prompt[:n] == prev.prompt_tokens
        and prompt[n : n + m] == prev.completion_tokens
    )


__all__ = [
    "Admission",
    "CanonicalRequest",
    "Gateway",
    "TokenView",
    "TurnResult",
    "fingerprint",
    "new_id",
]
