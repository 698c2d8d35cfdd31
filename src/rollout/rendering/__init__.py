"""Rendering: canonical conversations to prompt tokens and completion tokens back to messages.

`HFRenderer` renders with a Hugging Face tokenizer's own chat template and parses Qwen/Hermes
`<tool_call>` blocks; `rollout.rendering.toolcalls` holds the text-level parsing and
`rollout.rendering.openai` the OpenAI wire shapes of messages and tools (both ways).
"""

from rollout.rendering.base import Renderer, RenderError
from rollout.rendering.hf import HFRenderer, to_hf_message, to_hf_tool
from rollout.rendering.toolcalls import ParsedCompletion, extract_tool_calls, parse_text

__all__ = [
    "HFRenderer",
    "ParsedCompletion",
    "RenderError",
    "Renderer",
    "extract_tool_calls",
    "parse_text",
    "to_hf_message",
    "to_hf_tool",
]
