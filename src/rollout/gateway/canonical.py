"""What the protocol adapters and the gateway's pipeline hand each other.

- `CanonicalRequest`: what an adapter makes of a request: canonical messages, tools and
  sampling settings, plus what to record with the turn.
- `TurnResult`: what an adapter renders back: the reply, the recorded turn, the finish reason
  and the per-token views (`TokenView`s, streaming pieces).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Literal

from rollout.contracts import Completion, Message, SamplingParams, StopReason, ToolSpec, Turn

ProtocolName = Literal["chat.completions", "responses", "messages"]

MAX_TOKENS_LIMIT = 1 << 20
"""Largest max_tokens a request may ask for; larger values are rejected as malformed."""


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
class StreamStart:
    """A streamed turn is admitted and sampling: what the stream's first event says."""

    prompt_tokens: int
    created: float
    version: int


@dataclass(frozen=True)
class StreamDelta:
    """Reply text sent while the turn is still sampled, with the views of its tokens.

    `positions` index the completion's tokens (the same positions as `TurnResult.tokens`).
    """

    text: str
    positions: tuple[int, ...]
    tokens: tuple[TokenView, ...]


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
    stop_token: tuple[TokenView, ...] = ()
    """The view of the stop token that ended the completion (empty when none did)."""

    @property
    def completion_tokens(self) -> int:
        return len(self.completion.tokens)
