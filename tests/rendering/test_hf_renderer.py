"""HFRenderer: the model's chat template renders tools and calls; parse reads calls back."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from rollout.contracts import ContentPart, Message, ToolCall, ToolSpec
from rollout.models import init_model
from rollout.rendering import HFRenderer, Renderer, RenderError, parse_text

ADD = ToolSpec(
    name="add",
    description="Add two integers.",
    parameters={
        "type": "object",
        "properties": {"a": {"type": "integer"}, "b": {"type": "integer"}},
    },
)


@pytest.fixture(scope="module")
def model_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return init_model(tmp_path_factory.mktemp("renderer"), hidden=32, heads=2, kv_heads=1)


@pytest.fixture(scope="module")
def renderer(model_dir: Path) -> HFRenderer:
    return HFRenderer(model_dir)


def test_is_a_renderer_with_chatml_stop_tokens(renderer: HFRenderer) -> None:
    r: Renderer = renderer
    vocab = renderer.tokenizer.get_vocab()
    assert r.stop_token_ids == [vocab["<|im_end|>"], vocab["<|endoftext|>"]]


def test_renders_system_user_and_generation_prompt(renderer: HFRenderer) -> None:
    messages = [Message.system("Be brief."), Message.user("What is 3 + 4?")]
    text = renderer.render_text(messages)
    assert text == (
        "<|im_start|>system\nBe brief.<|im_end|>\n"
        "<|im_start|>user\nWhat is 3 + 4?<|im_end|>\n"
        "<|im_start|>assistant\n"
    )
    tokens = renderer.render(messages)
    assert renderer.decode(tokens) == text
    assert tokens == renderer.render(messages)  # deterministic


def test_no_system_block_without_a_system_message_or_tools(renderer: HFRenderer) -> None:
    assert renderer.render_text([Message.user("hi")]) == (
        "<|im_start|>user\nhi<|im_end|>\n<|im_start|>assistant\n"
    )
    assert renderer.render_text([Message.system("be brief"), Message.user("hi")]).startswith(
        "<|im_start|>system\nbe brief<|im_end|>\n<|im_start|>user\nhi"
    )


def test_renders_tools_calls_and_results(renderer: HFRenderer) -> None:
    call = ToolCall(id="c1", name="add", arguments='{"a": 3, "b": 4}')
    messages = [
        Message.user("What is 3 + 4?"),
        Message.assistant("Let me add.", [call]),
        Message.tool("7", tool_call_id="c1", name="add"),
        Message.tool("ok", tool_call_id="c2"),
    ]
    text = renderer.render_text(messages, [ADD])
    assert (
        "<tools>\n"
        + json.dumps({"type": "function", "function": ADD.model_dump()}, ensure_ascii=False)
        in text
    )
    assert (
        "<|im_start|>assistant\nLet me add.\n<tool_call>\n"
        '{"name": "add", "arguments": {"a": 3, "b": 4}}\n</tool_call><|im_end|>\n'
    ) in text
    assert (
        "<|im_start|>user\n<tool_response>\n7\n</tool_response>\n"
        "<tool_response>\nok\n</tool_response><|im_end|>\n<|im_start|>assistant\n"
    ) in text
    assert text.startswith("<|im_start|>system\n# Tools\n")  # no system message: tools only


def test_content_parts_render_as_their_text(renderer: HFRenderer) -> None:
    parts = Message(role="user", content=[ContentPart(text="a"), ContentPart(text="b")])
    assert renderer.render([parts]) == renderer.render([Message.user("ab")])


def _completion(renderer: HFRenderer, message: Message) -> list[int]:
    """The tokens the model would have to sample to produce `message`: its rendering in a
    conversation, minus the prompt before it, ending at the stop token."""
    prompt = renderer.render([Message.user("q")])
    full = renderer.encode(
        renderer.render_text([Message.user("q"), message], add_generation_prompt=False)
    )
    assert full[: len(prompt)] == prompt
    rest = full[len(prompt) :]
    stop = renderer.stop_token_ids[0]
    return rest[: rest.index(stop) + 1]


@pytest.mark.parametrize(
    "message",
    [
        Message.assistant("7"),
        Message.assistant("Two lines\nof text "),
        Message.assistant("", [ToolCall(id="x", name="add", arguments='{"a": 3, "b": 4}')]),
        Message.assistant(
            "Calling both.",
            [
                ToolCall(id="x", name="add", arguments='{"a": 1, "b": 2}'),
                ToolCall(id="y", name="lookup", arguments='{"q": "héllo \\"x\\"", "n": [1, {}]}'),
            ],
        ),
    ],
)
def test_parse_of_render_round_trips(renderer: HFRenderer, message: Message) -> None:
    tokens = _completion(renderer, message)
    parsed = renderer.parse(tokens)
    assert parsed.text == message.text
    assert [(c.name, json.loads(c.arguments)) for c in parsed.tool_calls] == [
        (c.name, json.loads(c.arguments)) for c in message.tool_calls
    ]
    # And rendering the parsed message gives back exactly the sampled tokens.
    assert _completion(renderer, parsed) == tokens


def test_tool_call_ids_are_deterministic_and_distinct(renderer: HFRenderer) -> None:
    text = (
        '<tool_call>\n{"name": "a", "arguments": {}}\n</tool_call>\n'
        '<tool_call>\n{"name": "a", "arguments": {}}\n</tool_call>'
    )
    tokens = renderer.encode(text)
    first, second = renderer.parse(tokens).tool_calls
    assert first.id != second.id
    assert first.id.startswith("call_0_") and second.id.startswith("call_1_")
    assert renderer.parse(tokens).tool_calls[0].id == first.id


@pytest.mark.parametrize(
    "body",
    [
        "{not json}",
        '{"arguments": {}}',
        '{"name": "", "arguments": {}}',
        '{"name": "f", "arguments": [1]}',
        "[1, 2]",
    ],
)
def test_malformed_tool_calls_stay_as_text(renderer: HFRenderer, body: str) -> None:
    text = f"before\n<tool_call>\n{body}\n</tool_call>"
    parsed = renderer.parse_completion(renderer.encode(text) + renderer.stop_token_ids[:1])
    assert parsed.message.tool_calls == []
    assert parsed.message.text == text
    assert parsed.malformed_tool_calls == [f"\n{body}\n"]
    assert parsed.stopped


def test_unclosed_tool_call_is_text(renderer: HFRenderer) -> None:
    text = 'sure\n<tool_call>\n{"name": "add", "argu'
    parsed = renderer.parse_completion(renderer.encode(text))
    assert parsed.message.text == text and not parsed.message.tool_calls
    assert not parsed.stopped


def test_parse_cuts_at_the_first_stop_token(renderer: HFRenderer) -> None:
    stop = renderer.stop_token_ids[0]
    tokens = [*renderer.encode("done"), stop, *renderer.encode("junk")]
    assert renderer.parse(tokens).text == "done"


def test_reasoning_is_removed_from_content_and_kept_apart(model_dir: Path) -> None:
    renderer = HFRenderer(model_dir)
    call = '<tool_call>\n{"name": "f", "arguments": {}}\n</tool_call>'
    text = f"<think>\n3 plus 4\n</think>\n\n7\n{call}"
    parsed = renderer.parse_completion(renderer.encode(text))
    assert parsed.reasoning == "3 plus 4"
    assert parsed.message.text == "7"
    assert [c.name for c in parsed.message.tool_calls] == ["f"]
    kept = HFRenderer(model_dir, keep_reasoning=True).parse(renderer.encode(text))
    assert kept.text == "<think>\n3 plus 4\n</think>\n\n7"
    assert [c.name for c in kept.tool_calls] == ["f"]


def test_reasoning_opened_by_the_prompt_or_cut_short() -> None:
    assert parse_text("plan</think>answer").reasoning == "plan"
    assert parse_text("plan</think>answer").message.text == "answer"
    cut = parse_text("hi <think>still thinking")
    assert (cut.reasoning, cut.message.text) == ("still thinking", "hi ")


def test_render_errors_name_the_field(renderer: HFRenderer, tmp_path: Path) -> None:
    with pytest.raises(RenderError, match="messages"):
        renderer.render([])
    with pytest.raises(RenderError, match=r"messages\[0\]"):
        renderer.render(["hi"])  # type: ignore[list-item]
    with pytest.raises(RenderError, match="source"):
        HFRenderer(tmp_path)


def test_renderer_from_a_loaded_tokenizer(renderer: HFRenderer) -> None:
    again = HFRenderer(renderer.tokenizer)
    assert again.stop_token_ids == renderer.stop_token_ids
    assert again.render([Message.user("hi")]) == renderer.render([Message.user("hi")])


@settings(max_examples=300, deadline=None)
@given(st.lists(st.integers(min_value=-5, max_value=700), max_size=60))
def test_parse_never_raises_on_any_tokens(renderer: HFRenderer, tokens: list[int]) -> None:
    message = renderer.parse(tokens)
    assert message.role == "assistant"


MARKUP = st.sampled_from(
    ["<tool_call>", "</tool_call>", "<think>", "</think>", '{"name": "f", "arguments": {}}', "\n"]
)


@settings(max_examples=300, deadline=None)
@given(st.lists(st.one_of(st.text(max_size=8), MARKUP), max_size=12).map("".join))
def test_parse_never_raises_on_any_text(renderer: HFRenderer, text: str) -> None:
    parsed = renderer.parse_completion(renderer.encode(text))
    for call in parsed.message.tool_calls:
        assert isinstance(json.loads(call.arguments), dict)
    plain = parse_text(text)
    if "<think>" not in text and "</think>" not in text and not plain.message.tool_calls:
        assert plain.message.text == text
