"""A renderer that uses a Hugging Face tokenizer and the model's own chat template.

`HFRenderer` works with any local Hugging Face model folder whose tokenizer has a chat template
(the tiny models of `rollout.models`, Qwen2.5/Qwen3, Llama 3, ...). Rendering is the template's
own output (`apply_chat_template(..., add_generation_prompt=True)`), tokenized without adding
special tokens, so it is deterministic. Parsing reads Qwen/Hermes `<tool_call>` blocks; models
with other tool-call formats get their calls back as text.

A folder whose tokenizer is its `tokenizer.json` loads without transformers (and so without
torch: `rollout.rendering.template`), which keeps the gateway's start-up short; other folders
load through transformers' `AutoTokenizer`.
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from jinja2 import TemplateError

from rollout.contracts import Message, ToolSpec
from rollout.models.hf import turn_stop_ids
from rollout.rendering.base import RenderError
from rollout.rendering.openai import message_to_openai, tool_to_openai
from rollout.rendering.template import TemplateTokenizer
from rollout.rendering.toolcalls import ParsedCompletion, parse_text

if TYPE_CHECKING:
    from transformers import PreTrainedTokenizerBase


class HFRenderer:
    """Renders canonical conversations with a Hugging Face tokenizer's chat template.

    Args:
        source: A model folder (or anything `AutoTokenizer.from_pretrained` accepts), or a
            loaded tokenizer (a transformers tokenizer or a `TemplateTokenizer`).
        stop_token_ids: Override the stop tokens (default: the template's end-of-turn token,
            then the ids in `generation_config.json`'s `eos_token_id`, then the tokenizer's
            eos token).
        keep_reasoning: Keep `<think>...</think>` in the parsed message's content instead of
            moving it to `ParsedCompletion.reasoning` (see `parse_completion`).

    Raises:
        RenderError: When the tokenizer has no chat template or no stop token can be found.
    """

    def __init__(
        self,
        source: str | os.PathLike[str] | PreTrainedTokenizerBase | TemplateTokenizer,
        *,
        stop_token_ids: Sequence[int] | None = None,
        keep_reasoning: bool = False,
    ) -> None:
        folder: Path | None = None
        self.tokenizer: Any
        if not isinstance(source, (str, os.PathLike)):
            self.tokenizer = source
            name = getattr(source, "name_or_path", "")
            folder = Path(name) if name and Path(name).is_dir() else None
        else:
            folder = Path(source) if Path(source).is_dir() else None
            light = TemplateTokenizer.load(folder) if folder is not None else None
            self.tokenizer = light if light is not None else _auto_tokenizer(source)
        template = self.tokenizer.chat_template
        if not isinstance(template, str) or not template:
            raise RenderError(f"source {str(source)!r}: the tokenizer has no chat template")
        self.chat_template: str = template
        self.keep_reasoning = keep_reasoning
        self.vocab_size = len(self.tokenizer)
        if stop_token_ids is None:
            stop_token_ids = turn_stop_ids(self.tokenizer, self.chat_template, folder)
        self._stop_token_ids = list(dict.fromkeys(int(t) for t in stop_token_ids))
        if not self._stop_token_ids:
            raise RenderError(f"source {str(source)!r}: no stop token found; pass stop_token_ids")

    @property
    def stop_token_ids(self) -> list[int]:
        """Token ids that end an assistant turn; the first is the template's end of turn."""
        return list(self._stop_token_ids)

    def render_text(
        self,
        messages: Sequence[Message],
        tools: Sequence[ToolSpec] = (),
        *,
        add_generation_prompt: bool = True,
    ) -> str:
        """The chat template's text for `messages` and `tools`."""
        if not messages:
            raise RenderError("messages must not be empty, got []")
        for i, message in enumerate(messages):
            if not isinstance(message, Message):
                raise RenderError(f"messages[{i}] must be a Message, got {message!r}")
        try:
            text = self.tokenizer.apply_chat_template(
                [to_hf_message(m) for m in messages],
                tools=[to_hf_tool(t) for t in tools] or None,
                add_generation_prompt=add_generation_prompt,
                tokenize=False,
            )
        except TemplateError as exc:
            raise RenderError(f"messages: the chat template rejected them: {exc}") from exc
        if not isinstance(text, str):
            raise RenderError(f"chat template returned {type(text).__name__}, expected str")
        return text

    def render(self, messages: Sequence[Message], tools: Sequence[ToolSpec] = ()) -> list[int]:
        """Prompt tokens for the assistant's next turn (generation prompt included)."""
        return self.encode(self.render_text(messages, tools))

    def parse(self, completion_tokens: Sequence[int]) -> Message:
        """The assistant message that `completion_tokens` encode (stop token stripped)."""
        return self.parse_completion(completion_tokens).message

    def parse_completion(self, completion_tokens: Sequence[int]) -> ParsedCompletion:
        """Read a completion: the message, the reasoning, the decoded text, whether it stopped.

        The completion is cut at its first stop token. Ids outside the vocabulary are skipped.
        Never raises.
        """
        tokens: list[int] = []
        stopped = False
        stops = set(self._stop_token_ids)
        for token in completion_tokens:
            token = int(token)
            if token in stops:
                stopped = True
                break
            if 0 <= token < self.vocab_size:
                tokens.append(token)
        return parse_text(self.decode(tokens), keep_reasoning=self.keep_reasoning, stopped=stopped)

    def encode(self, text: str) -> list[int]:
        """Plain text to token ids (no special tokens added; markup tokens are recognised)."""
        return list(self.tokenizer.encode(text, add_special_tokens=False))

    def decode(self, tokens: Sequence[int]) -> str:
        """Token ids to text, special tokens included."""
        text = self.tokenizer.decode(
            [int(t) for t in tokens],
            skip_special_tokens=False,
            clean_up_tokenization_spaces=False,
        )
        return text if isinstance(text, str) else "".join(text)


def _auto_tokenizer(source: str | os.PathLike[str]) -> Any:
    # Imported here: transformers' tokenizers import torch, seconds of start-up.
    from transformers import AutoTokenizer

    try:
        return AutoTokenizer.from_pretrained(str(source))
    except (OSError, ValueError) as exc:
        raise RenderError(f"source {str(source)!r} has no loadable tokenizer: {exc}") from exc


def to_hf_message(message: Message) -> dict[str, Any]:
    """A canonical message in the dict shape chat templates expect (OpenAI's, see
    `rollout.rendering.openai`): JSON-object tool-call arguments as dicts, tool names kept."""
    return message_to_openai(message, object_arguments=True, tool_message_name=True)


def to_hf_tool(tool: ToolSpec) -> dict[str, Any]:
    """A tool spec in the OpenAI function shape chat templates expect."""
    return tool_to_openai(tool)
