"""The renderer contract: canonical conversation <-> tokens.

A renderer owns a model's tokenizer and chat template. `render` turns messages and tools into the
prompt tokens for the next assistant turn; `parse` turns sampled completion tokens into an
assistant `Message` (text and tool calls, malformed calls kept as text).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Protocol

from rollout.contracts import Message, ToolSpec
from rollout.errors import RolloutError


class Renderer(Protocol):
    @property
    def stop_token_ids(self) -> list[int]:
        """Token ids that end an assistant turn (from the chat template / tokenizer)."""
        ...

    def render(self, messages: Sequence[Message], tools: Sequence[ToolSpec] = ()) -> list[int]:
        """Prompt tokens for the assistant's next turn (generation prompt included)."""
        ...

    def parse(self, completion_tokens: Sequence[int]) -> Message:
        """The assistant message that `completion_tokens` encode (stop token stripped)."""
        ...

    def encode(self, text: str) -> list[int]:
        """Plain text to token ids (no special tokens added)."""
        ...

    def decode(self, tokens: Sequence[int]) -> str:
        """Token ids to text."""
        ...


class RenderError(RolloutError, ValueError):
    """Messages or tools cannot be rendered; the message names the field and the value."""
