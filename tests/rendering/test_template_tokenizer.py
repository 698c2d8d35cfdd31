"""TemplateTokenizer renders and tokenizes exactly as transformers does, without importing it."""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from typing import Any

import pytest
from transformers import AutoTokenizer

from rollout.contracts import Message, ToolCall, ToolSpec
from rollout.models import init_model
from rollout.models.default_tokenizer import default_tokenizer_dir
from rollout.rendering import HFRenderer, to_hf_message, to_hf_tool
from rollout.rendering.template import TemplateTokenizer

ADD = ToolSpec(
    name="add",
    description="Add two integers.",
    parameters={"type": "object", "properties": {"a": {"type": "integer"}}},
)
CALL = ToolCall(id="call_1", name="add", arguments='{"a": 3}')
CONVERSATIONS: list[tuple[list[Message], list[ToolSpec]]] = [
    ([Message.user("hi")], []),
    ([Message.system("Be brief."), Message.user("What is 3 + 4?")], []),
    (
        [
            Message.system("Use tools."),
            Message.user("add 3"),
            Message.assistant("", tool_calls=[CALL]),
            Message.tool("3", tool_call_id="call_1", name="add"),
            Message.assistant("It is 3. <|im_end|> ünïcode"),
            Message.user("again"),
        ],
        [ADD],
    ),
]


@pytest.fixture(scope="module", params=["scripted", "chars"])
def folder(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> Path:
    if request.param == "scripted":
        return default_tokenizer_dir()
    return init_model(
        tmp_path_factory.mktemp("chars"),
        hidden=32,
        heads=2,
        kv_heads=1,
        tokenizer="chars",
        alphabet="0123456789EO=",
    )


def _hf(conversation: list[Message], tools: list[ToolSpec]) -> dict[str, Any]:
    return {
        "conversation": [to_hf_message(m) for m in conversation],
        "tools": [to_hf_tool(t) for t in tools] or None,
    }


@pytest.mark.parametrize("generation_prompt", [True, False])
def test_same_text_and_tokens_as_transformers(folder: Path, generation_prompt: bool) -> None:
    light = TemplateTokenizer.load(folder)
    assert light is not None
    reference = AutoTokenizer.from_pretrained(str(folder))
    assert light.get_vocab() == reference.get_vocab()
    assert len(light) == len(reference)
    assert light.eos_token_id == reference.eos_token_id
    for conversation, tools in CONVERSATIONS:
        kwargs = _hf(conversation, tools)
        text = light.apply_chat_template(add_generation_prompt=generation_prompt, **kwargs)
        expected = reference.apply_chat_template(
            add_generation_prompt=generation_prompt, tokenize=False, **kwargs
        )
        assert text == expected
        assert isinstance(text, str)
        ids = light.encode(text)
        assert ids == reference.encode(text, add_special_tokens=False)
        assert light.decode(ids) == reference.decode(
            ids, skip_special_tokens=False, clean_up_tokenization_spaces=False
        )


def test_the_renderer_uses_it_and_saves_its_files(folder: Path, tmp_path: Path) -> None:
    renderer = HFRenderer(folder)
    assert isinstance(renderer.tokenizer, TemplateTokenizer)
    reference = HFRenderer(AutoTokenizer.from_pretrained(str(folder)))
    assert renderer.stop_token_ids == reference.stop_token_ids
    messages = CONVERSATIONS[2][0]
    assert renderer.render(messages, [ADD]) == reference.render(messages, [ADD])
    copied = renderer.tokenizer.save_pretrained(tmp_path / "copy")
    assert "tokenizer.json" in copied
    assert HFRenderer(tmp_path / "copy").render(messages) == renderer.render(messages)


def test_folders_it_cannot_render_identically_go_through_transformers(
    folder: Path, tmp_path: Path
) -> None:
    copy = Path(shutil.copytree(folder, tmp_path / "copy"))
    config_path = copy / "tokenizer_config.json"
    config = json.loads(config_path.read_text())
    config["tokenizer_class"] = "Qwen2Tokenizer"
    config_path.write_text(json.dumps(config))
    assert TemplateTokenizer.load(copy) is None
    renderer = HFRenderer(copy)
    assert not isinstance(renderer.tokenizer, TemplateTokenizer)
    # A named class may tokenize differently from its tokenizer.json (transformers 5 rebuilds
    # Qwen2Tokenizer's pre-tokenizer): the renderer follows transformers.
    reference = AutoTokenizer.from_pretrained(str(copy))
    text = renderer.render_text([Message.user("hi 12")])
    assert renderer.render([Message.user("hi 12")]) == reference.encode(
        text, add_special_tokens=False
    )
