"""Recording a turn: what the ledger keeps of each model call, under the seat's next index.

`request_record` is the turn's `request` column: the protocol, the canonical conversation and
tools the reply answered, the reply, its fingerprint (see `fingerprints`), the sampling settings
and how the call ended. `Recorder.record` writes the turn before anything is answered: under the
seat's lock, at the index after the seat's last turn, retrying when another gateway took that
index first, and failing with a 409 when the episode attempt was taken over (fenced).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, Protocol

from rollout.contracts import Completion, Message, StopReason, Turn
from rollout.gateway.canonical import CanonicalRequest
from rollout.gateway.errors import GatewayError
from rollout.gateway.fingerprints import fingerprint
from rollout.gateway.seats import SeatCache
from rollout.ledger import KeyInfo, LedgerError, StaleFence

MAX_ATTEMPTS = 16
"""Times a recording is retried when other gateways keep taking the seat's next index."""


class TurnStore(Protocol):
    """The part of `rollout.ledger.Ledger` that recording uses."""

    async def last_turn(self, episode_id: str, agent: int, attempt: int) -> Turn | None: ...

    async def record_turn(self, turn: Turn) -> bool: ...


def dump_messages(messages: Sequence[Message]) -> list[dict[str, Any]]:
    """Messages as recorded in a turn (defaults left out)."""
    return [m.model_dump(mode="json", exclude_defaults=True) for m in messages]


def load_messages(items: Sequence[dict[str, Any]]) -> list[Message]:
    """Recorded messages read back."""
    return [Message.model_validate(item) for item in items]


def request_record(
    request: CanonicalRequest,
    reply: Message,
    *,
    finish: StopReason,
    stop_sequence: str | None,
    reused_turn: int | None,
    queued_seconds: float,
) -> dict[str, Any]:
    """The `request` a turn records (the adapter's own `request.record` facts included)."""
    return {
        "protocol": request.protocol,
        "model": request.model,
        "messages": dump_messages(request.messages),
        "tools": [t.model_dump(mode="json") for t in request.tools],
        "reply": reply.model_dump(mode="json", exclude_defaults=True),
        "fingerprint": fingerprint(request.messages, request.tools, reply),
        "sampling": request.params.model_dump(mode="json", exclude_defaults=True),
        "finish_reason": finish,
        "stop_sequence": stop_sequence,
        "reused_turn": reused_turn,
        "queued_seconds": round(queued_seconds, 6),
        **request.record,
    }


def extends(prompt: tuple[int, ...], prev: Turn) -> bool:
    """Whether `prompt` is `prev`'s prompt + completion + something more."""
    n, m = len(prev.prompt_tokens), len(prev.completion_tokens)
    return (
        len(prompt) > n + m
        and prompt[:n] == prev.prompt_tokens
        and prompt[n : n + m] == prev.completion_tokens
    )


class Recorder:
    """Writes turns to the ledger and keeps each seat's memory of them current.

    Args:
        ledger: where turns are written.
        seats: the gateway's seats (their locks, last and recent turns).
        recent_turns_per_seat: recent turns each seat keeps in memory.
    """

    def __init__(self, ledger: TurnStore, seats: SeatCache, *, recent_turns_per_seat: int) -> None:
        self.ledger = ledger
        self.seats = seats
        self.recent = recent_turns_per_seat

    async def record(
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
        seat = self.seats.get(info)
        prompt_t = tuple(prompt)
        async with seat.lock:
            for _ in range(MAX_ATTEMPTS):
                try:
                    if not seat.loaded:
                        seat.last = await self.ledger.last_turn(
                            info.episode_id, info.agent, info.attempt
                        )
                        seat.loaded = True
                    prev = seat.last
                    turn = Turn(
                        episode_id=info.episode_id,
                        agent=info.agent,
                        attempt=info.attempt,
                        index=0 if prev is None else prev.index + 1,
                        prompt_tokens=prompt_t,
                        completion_tokens=tuple(completion.tokens),
                        logprobs=tuple(completion.logprobs),
                        version=completion.version,
                        policy=completion.policy,
                        stop_reason=finish,
                        extends_previous=prev is not None and extends(prompt_t, prev),
                        started_at=started,
                        ended_at=ended,
                        temperature=temperature,
                        request=request,
                    )
                    new = await self.ledger.record_turn(turn)
                except StaleFence as exc:
                    self.seats.drop(info)
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
                    seat.remember(request["fingerprint"], turn, prompt_text, self.recent)
                    return turn
                # Another gateway recorded this index first: read the seat again.
                seat.loaded = False
        raise GatewayError("could not record the turn: the seat keeps changing", kind="server")
