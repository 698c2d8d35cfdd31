r"""The chat template of the tiny models: Qwen-style ChatML with Hermes tool calls.

The template follows Qwen2.5's: tools are listed in the system message inside `<tools></tools>`,
assistant tool calls are `<tool_call>{"name": ..., "arguments": ...}</tool_call>` blocks, and tool
results are `<tool_response>` blocks inside one user turn. Unlike Qwen3's template it never drops
or rewrites earlier assistant turns (no `<think>` stripping, no trimming), so the prompt of the
next turn always starts with the previous prompt plus the previous completion. As in Qwen3's,
a system block is rendered only for a system message or tools: no default instructions are added.

An assistant turn renders as `<|im_start|>assistant\n` + body + `<|im_end|>\n`, where the body is
the content followed by one block per tool call, each block preceded by a newline unless it is
the very first thing in the body:

    <tool_call>
    {"name": "add", "arguments": {"a": 1}}
    </tool_call>

`HFRenderer.parse` reads exactly this shape back, so `parse(render(assistant message))` is the
message again.
"""

from __future__ import annotations

# Every tag trims the whitespace around it, so only what `{{ }}` prints reaches the prompt.
CHAT_TEMPLATE = r"""
{%- macro text(content) -%}
    {%- if content is string -%}
        {{- content -}}
    {%- elif content is iterable -%}
        {%- for part in content -%}
            {%- if part.type == 'text' -%}{{- part.text -}}{%- endif -%}
        {%- endfor -%}
    {%- endif -%}
{%- endmacro -%}
{%- if messages and messages[0].role == 'system' -%}
    {%- set system_text = text(messages[0].content) -%}
    {%- set rest = messages[1:] -%}
{%- else -%}
    {%- set system_text = none -%}
    {%- set rest = messages -%}
{%- endif -%}
{%- if system_text is not none or tools -%}
{{- '<|im_start|>system\n' + (system_text or '') -}}
{%- if tools -%}
    {%- if system_text -%}{{- '\n\n' -}}{%- endif -%}
    {{- '# Tools\n\nYou may call one or more functions to assist with the user query.\n\n' -}}
    {{- 'You are provided with function signatures within <tools></tools> XML tags:\n<tools>' -}}
    {%- for tool in tools -%}
        {{- '\n' + (tool | tojson) -}}
    {%- endfor -%}
    {{- '\n</tools>\n\nFor each function call, return a json object with function name and ' -}}
    {{- 'arguments within <tool_call></tool_call> XML tags:\n<tool_call>\n' -}}
    {{- '{"name": <function-name>, "arguments": <args-json-object>}\n</tool_call>' -}}
{%- endif -%}
{{- '<|im_end|>\n' -}}
{%- endif -%}
{%- for message in rest -%}
    {%- if message.role == 'tool' -%}
        {%- if loop.first or rest[loop.index0 - 1].role != 'tool' -%}
            {{- '<|im_start|>user' -}}
        {%- endif -%}
        {{- '\n<tool_response>\n' + text(message.content) + '\n</tool_response>' -}}
        {%- if loop.last or rest[loop.index0 + 1].role != 'tool' -%}
            {{- '<|im_end|>\n' -}}
        {%- endif -%}
    {%- elif message.role == 'assistant' -%}
        {%- set body = text(message.content) -%}
        {{- '<|im_start|>assistant\n' + body -}}
        {%- for call in message.tool_calls or [] -%}
            {%- if call.function is defined -%}
                {%- set call = call.function -%}
            {%- endif -%}
            {%- if body or not loop.first -%}
                {{- '\n' -}}
            {%- endif -%}
            {{- '<tool_call>\n{"name": ' + (call.name | tojson) + ', "arguments": ' -}}
            {%- if call.arguments is string -%}
                {{- call.arguments -}}
            {%- else -%}
                {{- call.arguments | tojson -}}
            {%- endif -%}
            {{- '}\n</tool_call>' -}}
        {%- endfor -%}
        {{- '<|im_end|>\n' -}}
    {%- else -%}
        {{- '<|im_start|>' + message.role + '\n' + text(message.content) + '<|im_end|>\n' -}}
    {%- endif -%}
{%- endfor -%}
{%- if add_generation_prompt -%}
    {{- '<|im_start|>assistant\n' -}}
{%- endif -%}
""".strip()
"""The Jinja chat template saved as `chat_template.jinja` next to every tiny model."""
