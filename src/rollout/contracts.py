"""The shared vocabulary of the platform.

Every part of rollout speaks in these records:

- `Message`, `ContentPart`, `ToolCall`, `ToolSpec`: the canonical conversation. Protocol adapters
  in the gateway translate OpenAI Chat Completions, OpenAI Responses and Anthropic Messages to and
  from it; renderers turn it into prompt tokens.
- `SamplingParams`: how to sample one completion.
- `Completion`: what an inference backend returns for one prompt.
- `Turn`: one recorded model call of one agent seat: the exact prompt tokens, the sampled tokens,
  their logprobs and the checkpoint version that sampled them.

Messages are pydantic models because they cross wire boundaries; `Completion` and `Turn` are
frozen dataclasses because they are internal records.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field

Role = Literal["system", "user", "assistant", "tool"]
StopReason = Literal["stop", "length", "tool_calls"]
DEFAULT_POLICY = "main"
"""The policy of a run that names none, and of every fact recorded before runs had policies
(`rollout.runs.policies`)."""


class ContentPart(BaseModel):
    """One part of a message's content. Only text parts are rendered today."""

    model_config = ConfigDict(frozen=True)

    type: Literal["text"] = "text"
    text: str


class ToolCall(BaseModel):
    """A call the assistant asked for. `arguments` is a JSON object encoded as text."""

    model_config = ConfigDict(frozen=True)

    id: str
    name: str
    arguments: str = "{}"

    def parsed_arguments(self) -> dict[str, Any]:
        """The arguments decoded, or `{}` when they are not a JSON object."""
        try:
            value = json.loads(self.arguments)
        except json.JSONDecodeError:
            return {}
        return value if isinstance(value, dict) else {}


class ToolSpec(BaseModel):
    """A tool the model may call: a name, a description and a JSON schema for its arguments."""

    model_config = ConfigDict(frozen=True)

    name: str
    description: str = ""
    parameters: dict[str, Any] = Field(default_factory=lambda: {"type": "object", "properties": {}})


class Message(BaseModel):
    """One message of the canonical conversation.

    `content` is either plain text or a list of parts. Assistant messages may carry `tool_calls`;
    tool messages answer one call, named by `tool_call_id`.
    """

    model_config = ConfigDict(frozen=True)

    role: Role
    content: str | list[ContentPart] = ""
    tool_calls: list[ToolCall] = Field(default_factory=list)
    tool_call_id: str | None = None
    name: str | None = None

    @property
    def text(self) -> str:
        """The message's text: the content, or its text parts joined."""
        if isinstance(self.content, str):
            return self.content
        return "".join(part.text for part in self.content)

    @classmethod
    def system(cls, text: str) -> Message:
        return cls(role="system", content=text)

    @classmethod
    def user(cls, text: str) -> Message:
        return cls(role="user", content=text)

    @classmethod
    def assistant(cls, text: str = "", tool_calls: list[ToolCall] | None = None) -> Message:
        return cls(role="assistant", content=text, tool_calls=tool_calls or [])

    @classmethod
    def tool(cls, text: str, tool_call_id: str, name: str | None = None) -> Message:
        return cls(role="tool", content=text, tool_call_id=tool_call_id, name=name)


class SamplingParams(BaseModel):
    """How to sample one completion. Stop token ids come from the model's chat template."""

    model_config = ConfigDict(frozen=True)

    max_tokens: int = Field(default=256, ge=1)
    temperature: float = Field(default=1.0, ge=0.0)
    top_p: float = Field(default=1.0, gt=0.0, le=1.0)
    seed: int | None = None
    stop: list[str] = Field(default_factory=list)
    stop_token_ids: list[int] = Field(default_factory=list)
    top_logprobs: int = Field(default=0, ge=0, le=20)


@dataclass(frozen=True)
class Completion:
    """What an inference backend sampled for one prompt.

    `logprobs[i]` is the log probability of `tokens[i]` under the sampling distribution (after
    temperature). `top_logprobs[i]` maps the most likely token ids at position i to their
    logprobs, when asked for. `version` is the checkpoint version that sampled it, a version of
    policy `policy` (`rollout.runs.policies`).
    """

    tokens: tuple[int, ...]
    logprobs: tuple[float, ...]
    stop_reason: Literal["stop", "length"]
    version: int
    top_logprobs: tuple[dict[int, float], ...] = ()
    policy: str = DEFAULT_POLICY


@dataclass(frozen=True)
class Turn:
    """One recorded model call of one agent seat of one episode attempt.

    `extends_previous` is true when `prompt_tokens` starts with the previous turn's prompt tokens
    followed by its completion tokens, so both can train as one sequence.
    """

    episode_id: str
    agent: int
    attempt: int
    index: int
    prompt_tokens: tuple[int, ...]
    completion_tokens: tuple[int, ...]
    logprobs: tuple[float, ...]
    version: int
    stop_reason: str
    extends_previous: bool = False
    started_at: float = 0.0
    ended_at: float = 0.0
    temperature: float = 1.0
    request: dict[str, Any] = field(default_factory=dict)
    """What the client sent (protocol name, messages), for transcripts; never used for training."""
    policy: str = DEFAULT_POLICY
    """The policy whose `version` sampled the turn (`rollout.runs.policies`)."""
