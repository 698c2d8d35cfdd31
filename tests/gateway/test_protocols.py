"""Each protocol end to end, driven by the official SDKs over real HTTP.

The scripted backend plays a two-turn tool use (call `add`, then answer). For every protocol,
streaming and not, the tests check the reply in the protocol's own shape, that the ledger holds
exactly the tokens the backend sampled (the reply encoded + the stop token, logprob 0.0 each), and
that turn 2's prompt is turn 1's prompt + completion + more (token-exact history).
"""

from __future__ import annotations

import json
from typing import Any

import anthropic
import openai
import pytest

from rollout.contracts import Message, ToolCall, ToolSpec, Turn
from tests.gateway.gateway_helpers import (
    ADD_SCHEMA,
    FINAL_REPLY,
    TOOL_REPLY,
    VERSION,
    Serve,
    Served,
)

ADD = ToolSpec(name="add", description="Add two integers.", parameters=ADD_SCHEMA)
CHAT_TOOLS: list[Any] = [
    {
        "type": "function",
        "function": {"name": "add", "description": "Add two integers.", "parameters": ADD_SCHEMA},
    }
]
RESPONSES_TOOLS: list[Any] = [
    {
        "type": "function",
        "name": "add",
        "description": "Add two integers.",
        "parameters": ADD_SCHEMA,
        "strict": False,
    }
]
ANTHROPIC_TOOLS: list[Any] = [
    {"name": "add", "description": "Add two integers.", "input_schema": ADD_SCHEMA}
]
QUESTION = "What is 2 + 3? Use the tool."


def assert_two_turn_tool_use(served: Served, turns: list[Turn], first_prompt: list[int]) -> None:
    """The ledger holds both turns with exactly the sampled tokens, turn 2 extending turn 1."""
    r = served.renderer
    stop = r.stop_token_ids[0]
    assert [t.index for t in turns] == [0, 1]
    one, two = turns
    assert one.prompt_tokens == tuple(first_prompt)
    assert one.completion_tokens == (*r.encode(TOOL_REPLY), stop)
    assert two.completion_tokens == (*r.encode(FINAL_REPLY), stop)
    for turn in turns:
        assert turn.logprobs == (0.0,) * len(turn.completion_tokens)
        assert turn.version == VERSION
    assert one.stop_reason == "tool_calls" and two.stop_reason == "stop"
    head = len(one.prompt_tokens) + len(one.completion_tokens)
    assert two.prompt_tokens[:head] == one.prompt_tokens + one.completion_tokens
    assert len(two.prompt_tokens) > head
    assert not one.extends_previous and two.extends_previous
    assert two.request["reused_turn"] == 0


@pytest.mark.parametrize("stream", [False, True])
async def test_chat_completions_tool_use(serve: Serve, stream: bool) -> None:
    served = await serve()
    client = openai.AsyncOpenAI(base_url=served.server.base_url, api_key=served.key)
    messages: list[Any] = [
        {"role": "system", "content": "You add numbers."},
        {"role": "user", "content": QUESTION},
    ]
    kwargs: dict[str, Any] = {"model": "tiny", "tools": CHAT_TOOLS, "max_tokens": 64}
    if stream:
        async with client.chat.completions.stream(
            messages=messages, stream_options={"include_usage": True}, **kwargs
        ) as s:
            async for _ in s:
                pass
            first = await s.get_final_completion()
    else:
        first = await client.chat.completions.create(messages=messages, **kwargs)
    choice = first.choices[0]
    assert choice.finish_reason == "tool_calls"
    calls = choice.message.tool_calls or []
    assert len(calls) == 1 and calls[0].type == "function"
    assert calls[0].function.name == "add"
    assert json.loads(calls[0].function.arguments) == {"a": 2, "b": 3}
    assert calls[0].id.startswith("call_")
    assert (
        first.usage is not None
        and first.usage.completion_tokens == len(served.renderer.encode(TOOL_REPLY)) + 1
    )

    messages.append(choice.message.model_dump(exclude_none=True))
    messages.append({"role": "tool", "tool_call_id": calls[0].id, "content": "5"})
    if stream:
        chunks = []
        response = await client.chat.completions.create(
            messages=messages, stream=True, stream_options={"include_usage": True}, **kwargs
        )
        async for chunk in response:
            chunks.append(chunk)
        text = "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
        finish = [c.choices[0].finish_reason for c in chunks if c.choices][-1]
        assert chunks[-1].choices == [] and chunks[-1].usage is not None
        assert chunks[-1].usage.completion_tokens == len(served.renderer.encode(FINAL_REPLY)) + 1
    else:
        second = await client.chat.completions.create(messages=messages, **kwargs)
        text, finish = second.choices[0].message.content, second.choices[0].finish_reason
    assert text == FINAL_REPLY and finish == "stop"

    expected_prompt = served.renderer.render(
        [Message.system("You add numbers."), Message.user(QUESTION)], [ADD]
    )
    turns = await served.turns()
    assert_two_turn_tool_use(served, turns, expected_prompt)
    assert turns[0].request["protocol"] == "chat.completions"
    assert Message.model_validate(turns[0].request["reply"]).tool_calls[0].id == calls[0].id


@pytest.mark.parametrize("stream", [False, True])
async def test_responses_tool_use(serve: Serve, stream: bool) -> None:
    served = await serve()
    client = openai.AsyncOpenAI(base_url=served.server.base_url, api_key=served.key)
    kwargs: dict[str, Any] = {
        "model": "tiny",
        "tools": RESPONSES_TOOLS,
        "instructions": "You add numbers.",
        "max_output_tokens": 64,
        "store": False,
        "reasoning": {"effort": "low"},
        "parallel_tool_calls": True,
        "prompt_cache_key": "abc",
    }
    inputs: list[Any] = [{"role": "user", "content": QUESTION}]
    if stream:
        async with client.responses.stream(input=inputs, **kwargs) as s:
            types = [event.type async for event in s]
            first = await s.get_final_response()
        assert types[0] == "response.created" and types[-1] == "response.completed"
        assert "response.function_call_arguments.delta" in types
    else:
        first = await client.responses.create(input=inputs, **kwargs)
    assert first.status == "completed"
    calls = [item for item in first.output if item.type == "function_call"]
    assert len(calls) == 1 and calls[0].name == "add"
    assert json.loads(calls[0].arguments) == {"a": 2, "b": 3}

    # Codex style: send the whole conversation back (store=false), output items included.
    inputs += [item.model_dump(exclude_none=True) for item in first.output]
    inputs.append({"type": "function_call_output", "call_id": calls[0].call_id, "output": "5"})
    if stream:
        async with client.responses.stream(input=inputs, **kwargs) as s:
            deltas = [e.delta async for e in s if e.type == "response.output_text.delta"]
            second = await s.get_final_response()
        assert "".join(deltas) == FINAL_REPLY
    else:
        second = await client.responses.create(input=inputs, **kwargs)
    assert second.output_text == FINAL_REPLY and second.status == "completed"
    assert second.usage is not None
    assert second.usage.output_tokens == len(served.renderer.encode(FINAL_REPLY)) + 1

    expected_prompt = served.renderer.render(
        [Message.system("You add numbers."), Message.user(QUESTION)], [ADD]
    )
    turns = await served.turns()
    assert_two_turn_tool_use(served, turns, expected_prompt)
    assert turns[0].request["response_id"] == first.id
    assert turns[1].request["response_id"] == second.id


@pytest.mark.parametrize("stream", [False, True])
async def test_anthropic_messages_tool_use(serve: Serve, stream: bool) -> None:
    served = await serve()
    client = anthropic.AsyncAnthropic(
        base_url=served.server.root_url,
        api_key=served.key,
        default_headers={"anthropic-beta": "interleaved-thinking-2025-05-14"},
    )
    kwargs: dict[str, Any] = {
        "model": "tiny",
        "max_tokens": 64,
        "system": [
            {"type": "text", "text": "You add numbers.", "cache_control": {"type": "ephemeral"}}
        ],
        "tools": ANTHROPIC_TOOLS,
        "metadata": {"user_id": "u1"},
    }
    messages: list[Any] = [{"role": "user", "content": QUESTION}]
    if stream:
        async with client.messages.stream(messages=messages, **kwargs) as s:
            types = [event.type async for event in s]
            first = await s.get_final_message()
        assert types[0] == "message_start" and "content_block_start" in types
    else:
        first = await client.messages.create(messages=messages, **kwargs)
    assert first.stop_reason == "tool_use"
    uses = [b for b in first.content if b.type == "tool_use"]
    assert len(uses) == 1 and uses[0].name == "add" and uses[0].input == {"a": 2, "b": 3}
    assert uses[0].id.startswith("toolu_")

    messages.append({"role": "assistant", "content": [b.model_dump() for b in first.content]})
    messages.append(
        {
            "role": "user",
            "content": [{"type": "tool_result", "tool_use_id": uses[0].id, "content": "5"}],
        }
    )
    if stream:
        async with client.messages.stream(messages=messages, **kwargs) as s:
            texts = [t async for t in s.text_stream]
            second = await s.get_final_message()
        assert "".join(texts) == FINAL_REPLY
    else:
        second = await client.messages.create(messages=messages, **kwargs)
    assert second.stop_reason == "end_turn"
    assert [b.type for b in second.content] == ["text"]
    assert second.content[0].text == FINAL_REPLY  # type: ignore[union-attr]
    assert second.usage.output_tokens == len(served.renderer.encode(FINAL_REPLY)) + 1

    expected_prompt = served.renderer.render(
        [Message.system("You add numbers."), Message.user(QUESTION)], [ADD]
    )
    turns = await served.turns()
    assert_two_turn_tool_use(served, turns, expected_prompt)
    assert turns[1].request["protocol"] == "messages"
    assert turns[1].request["messages"][-1] == {
        "role": "tool",
        "content": "5",
        "tool_call_id": uses[0].id,
    }


async def test_recorded_conversation_rebuilds_the_transcript(serve: Serve) -> None:
    served = await serve()
    client = openai.AsyncOpenAI(base_url=served.server.base_url, api_key=served.key)
    first = await client.chat.completions.create(
        model="tiny", messages=[{"role": "user", "content": QUESTION}], tools=CHAT_TOOLS
    )
    (turn,) = await served.turns()
    messages = [Message.model_validate(m) for m in turn.request["messages"]]
    reply = Message.model_validate(turn.request["reply"])
    assert messages == [Message.user(QUESTION)]
    assert turn.request["tools"] == [ADD.model_dump(mode="json")]
    call = (first.choices[0].message.tool_calls or [])[0]
    assert reply == Message.assistant(
        "", [ToolCall(id=call.id, name="add", arguments=json.dumps({"a": 2, "b": 3}))]
    )
