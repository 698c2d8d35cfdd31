"""OpenAI wire shapes of canonical messages and tools: one module, read and written both ways."""

from __future__ import annotations

import pytest

from rollout.contracts import Message, ToolCall, ToolSpec
from rollout.errors import RolloutError
from rollout.rendering import to_hf_message, to_hf_tool
from rollout.rendering.openai import (
    WireError,
    message_from_openai,
    message_to_openai,
    messages_from_openai,
    tool_to_openai,
    tools_from_openai,
)

CALL = ToolCall(id="call_1", name="add", arguments='{"a": 1, "b": 2}')
CONVERSATION = [
    Message.system("Be brief."),
    Message(role="user", content="add 1 and 2", name="ada"),
    Message.assistant("", [CALL, ToolCall(id="call_2", name="echo", arguments='"raw"')]),
    Message.tool("3", "call_1"),
    Message.assistant("It is 3."),
]
TOOL = ToolSpec(
    name="add",
    description="Add two numbers.",
    parameters={"type": "object", "properties": {"a": {"type": "integer"}}},
)


def test_messages_survive_a_round_trip_through_the_wire() -> None:
    wire = [message_to_openai(m) for m in CONVERSATION]
    assert messages_from_openai(wire) == CONVERSATION
    assert wire[2]["tool_calls"][0] == {
        "id": "call_1",
        "type": "function",
        "function": {"name": "add", "arguments": '{"a": 1, "b": 2}'},
    }
    assert tools_from_openai([tool_to_openai(TOOL)]) == [TOOL]


def test_templates_get_object_arguments_as_dicts_and_tool_names() -> None:
    named_tool_reply = Message.tool("3", "call_1", name="add")
    hf = to_hf_message(CONVERSATION[2])
    assert hf["tool_calls"][0]["function"]["arguments"] == {"a": 1, "b": 2}
    assert hf["tool_calls"][1]["function"]["arguments"] == '"raw"'  # not an object: kept
    assert to_hf_message(named_tool_reply)["name"] == "add"
    assert "name" not in message_to_openai(named_tool_reply)  # the API takes none
    assert to_hf_tool(TOOL) == tool_to_openai(TOOL)
    for message in CONVERSATION:
        assert to_hf_message(message) == message_to_openai(
            message, object_arguments=True, tool_message_name=True
        )


def test_reading_maps_roles_and_accepts_object_arguments_and_text_parts() -> None:
    read = messages_from_openai(
        [
            {"role": "developer", "content": [{"type": "text", "text": "A"}]},
            {"role": "user", "content": None},
            {
                "role": "assistant",
                "content": None,
                "refusal": None,
                "tool_calls": [{"type": "function", "function": {"name": "f", "arguments": {}}}],
            },
        ]
    )
    assert [m.role for m in read] == ["system", "user", "assistant"]
    assert read[0].text == "A" and read[1].text == ""
    (call,) = read[2].tool_calls
    assert call.arguments == "{}" and call.id.startswith("call_")


@pytest.mark.parametrize(
    ("item", "param", "code"),
    [
        ({"role": "tool", "content": "3"}, "messages.0.tool_call_id", "missing_field"),
        ({"role": "robot", "content": "hi"}, "messages.0.role", "invalid_value"),
        ({"content": "hi"}, "messages.0.role", "invalid_value"),
        ({"role": "user", "content": 7}, "messages.0.content", "invalid_type"),
        (
            {"role": "user", "content": [{"type": "image_url", "image_url": {}}]},
            "messages.0.content.0.type",
            "unsupported_value",
        ),
        (
            {"role": "assistant", "tool_calls": [{"function": {"name": "f", "arguments": 3}}]},
            "messages.0.tool_calls.0.function.arguments",
            "invalid_type",
        ),
        ("hello", "messages.0", "invalid_type"),
    ],
)
def test_a_bad_value_names_its_field(item: object, param: str, code: str) -> None:
    with pytest.raises(WireError) as caught:
        messages_from_openai([item])
    assert caught.value.param == param
    assert caught.value.code == code
    assert str(caught.value).startswith(param)
    assert isinstance(caught.value, RolloutError) and isinstance(caught.value, ValueError)


def test_tools_skip_other_types_and_tool_choice_none_drops_them() -> None:
    function = {"type": "function", "function": {"name": "add"}}
    assert [t.name for t in tools_from_openai([{"type": "web_search"}, function])] == ["add"]
    assert tools_from_openai([function], tool_choice="none") == []
    with pytest.raises(WireError, match=r"tools\.0\.function: required"):
        tools_from_openai([{"type": "function"}])


def test_a_single_message_is_read_under_the_field_it_came_from() -> None:
    with pytest.raises(WireError) as caught:
        message_from_openai({"role": "tool"}, "choices.0.message")
    assert caught.value.param == "choices.0.message.tool_call_id"
