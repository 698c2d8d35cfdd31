"""Spaces for agentic environments; every Gymnasium space works alongside them.

- `spaces.text.text(min_length, max_length, sample_alphabet)`: any Unicode string within the
  length bounds (`TextSpace`).
- `spaces.tokens.sequence(vocab_size, min_length, max_length)`: lists of token ids
  (`TokenSequenceSpace`).
- `spaces.messages.chat(min_length, max_length, ...)`: lists of chat message dicts
  (`ChatSpace`).
- `spaces.tools.call({name: arguments_space})` / `spaces.tools.calls(...)`: one tool call
  `{"name", "arguments"}` or a list of them (`ToolCallSpace`, `ToolCallsSpace`).

All are `gymnasium.spaces.Space` subclasses whose values are plain dicts, lists and strings,
validated with pydantic where they are structured. `validate(x)` raises a `SpaceValueError`
that names the space and the value; `contains(x)` (`x in space`) returns a bool.
"""

from rolloutlib.spaces import messages, text, tokens, tools
from rolloutlib.spaces._base import StructuredSpace
from rolloutlib.spaces.messages import ChatSpace
from rolloutlib.spaces.text import TextSpace
from rolloutlib.spaces.tokens import TokenSequenceSpace
from rolloutlib.spaces.tools import ToolCallSpace, ToolCallsSpace

__all__ = [
    "ChatSpace",
    "StructuredSpace",
    "TextSpace",
    "TokenSequenceSpace",
    "ToolCallSpace",
    "ToolCallsSpace",
    "messages",
    "text",
    "tokens",
    "tools",
]
