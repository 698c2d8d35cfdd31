"""Reading an assistant turn's text: reasoning, Hermes/Qwen tool-call blocks, the rest.

Tool calls are the blocks Qwen2.5, Qwen3 and Hermes models write:

    <tool_call>
    {"name": "add", "arguments": {"a": 1, "b": 2}}
    </tool_call>

A block whose body is a JSON object with a non-empty string `name` and an object `arguments`
(absent counts as `{}`) becomes a `ToolCall`; any other block stays in the text unchanged, so
nothing the model wrote is lost. Reasoning is a `<think>...</think>` block; see `parse_text`.
Nothing here raises on any input.
"""

from __future__ import annotations

import hashlib
import json
import re
from dataclasses import dataclass, field

from rollout.contracts import Message, ToolCall

THINK_OPEN, THINK_CLOSE = "<think>", "</think>"
TOOL_CALL_BLOCK = re.compile(r"\n?<tool_call>(.*?)</tool_call>", re.DOTALL)


@dataclass(frozen=True)
class ParsedCompletion:
    """An assistant turn read from its text.

    Attributes:
        message: The assistant message: content (reasoning removed unless kept) and tool calls.
        reasoning: The text inside `<think>...</think>` ('' when there is none).
        text: The full decoded text the message was read from (stop token excluded).
        stopped: Whether the completion ended with a stop token (False when it was cut short).
        malformed_tool_calls: Bodies of `<tool_call>` blocks that were not valid calls (they
            stay in the content).
    """

    message: Message
    reasoning: str = ""
    text: str = ""
    stopped: bool = False
    malformed_tool_calls: list[str] = field(default_factory=list)


def split_reasoning(text: str) -> tuple[str, str]:
    """Split `text` into (reasoning, rest) at a `<think>...</think>` block.

    A `</think>` with no `<think>` before it means the prompt opened the block (Qwen3's
    thinking mode), so everything before it is reasoning. An unclosed `<think>` (the
    completion was cut short) makes the rest of the text reasoning. Whitespace right after
    `</think>` is dropped from the rest.
    """
    close = text.find(THINK_CLOSE)
    open_ = text.find(THINK_OPEN)
    if close == -1:
        if open_ == -1:
            return "", text
        return text[open_ + len(THINK_OPEN) :].strip(), text[:open_]
    if open_ != -1 and open_ < close:
        before, reasoning = text[:open_], text[open_ + len(THINK_OPEN) : close]
    else:
        before, reasoning = "", text[:close]
    return reasoning.strip(), before + text[close + len(THINK_CLOSE) :].lstrip()


def extract_tool_calls(text: str, *, id_seed: str = "") -> tuple[str, list[ToolCall], list[str]]:
    """Take the well-formed tool-call blocks out of `text`.

    Args:
        text: Assistant text.
        id_seed: Mixed into the generated call ids (the full completion text, typically), so ids
            are deterministic: `call_<index>_<8 hex digits>`.

    Returns:
        The text without the extracted blocks (each with the newline before it; text that is
        only whitespace becomes ''), the calls in order, and the bodies of malformed blocks.
    """
    calls: list[ToolCall] = []
    malformed: list[str] = []
    kept: list[str] = []
    position = 0
    for match in TOOL_CALL_BLOCK.finditer(text):
        call = _read_call(match.group(1), index=len(calls), id_seed=id_seed)
        if call is None:
            malformed.append(match.group(1))
            continue
        kept.append(text[position : match.start()])
        position = match.end()
        calls.append(call)
    kept.append(text[position:])
    rest = "".join(kept)
    if calls and not rest.strip():
        rest = ""
    return rest, calls, malformed


def parse_text(
    text: str, *, keep_reasoning: bool = False, stopped: bool = True
) -> ParsedCompletion:
    """Read an assistant turn's decoded text (stop token already removed).

    Args:
        text: The completion's text.
        keep_reasoning: Keep the `<think>` block in the message content verbatim (so the next
            prompt, rendered from the returned message, extends this completion). By default
            it is removed from the content and returned as `reasoning`.
        stopped: Recorded on the result: whether the completion ended with a stop token.
    """
    reasoning, rest = split_reasoning(text)
    head = ""
    if keep_reasoning:
        # Calls are read after the reasoning only; the reasoning stays in the content as written.
        close = text.find(THINK_CLOSE)
        cut = close + len(THINK_CLOSE) if close != -1 else (len(text) if reasoning else 0)
        head, rest = text[:cut], text[cut:]
    content, calls, malformed = extract_tool_calls(rest, id_seed=text)
    content = head + content
    return ParsedCompletion(
        message=Message(role="assistant", content=content, tool_calls=calls),
        reasoning=reasoning,
        text=text,
        stopped=stopped,
        malformed_tool_calls=malformed,
    )


def _read_call(body: str, *, index: int, id_seed: str) -> ToolCall | None:
    try:
        value = json.loads(body)
    except (json.JSONDecodeError, RecursionError):
        return None
    if not isinstance(value, dict):
        return None
    name = value.get("name")
    arguments = value.get("arguments", {})
    if not isinstance(name, str) or not name or not isinstance(arguments, dict):
        return None
    # The template renders dict arguments with this exact dump, so render(parse(x)) == x.
    encoded = json.dumps(arguments, ensure_ascii=False)
    digest = hashlib.sha256(f"{id_seed}\x00{index}\x00{body}".encode("utf-8", "replace"))
    return ToolCall(id=f"call_{index}_{digest.hexdigest()[:8]}", name=name, arguments=encoded)
