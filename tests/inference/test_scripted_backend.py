"""ScriptedBackend: deterministic replies, real tokens, stop tokens and max_tokens."""

from __future__ import annotations

from pathlib import Path

import pytest

from rollout.contracts import Message, SamplingParams, ToolSpec
from rollout.inference.base import BackendError, InferenceBackend
from rollout.inference.scripted import FALLBACK_REPLY, ScriptedBackend, arithmetic_reply
from rollout.rendering import HFRenderer


@pytest.fixture(scope="module")
def renderer(tmp_path_factory: pytest.TempPathFactory) -> HFRenderer:
    return ScriptedBackend.default(state_dir=tmp_path_factory.mktemp("state")).renderer  # type: ignore[return-value]


@pytest.mark.parametrize(
    ("question", "answer"),
    [
        ("What is 3 + 4?", "7"),
        ("What is 12 - 30?", "-18"),
        ("What is 7 * 8?", "56"),
        ("What is 7 divided by 2?", "3.5"),
        ("Compute (2 + 3) * 4.", "20"),
        ("In 2024, what is 6 x 7?", "42"),
        ("What is 1 / 0?", FALLBACK_REPLY),
        ("Tell me a story.", FALLBACK_REPLY),
        ("What is 2 ** 99999999?", FALLBACK_REPLY),
    ],
)
def test_arithmetic_reply(question: str, answer: str) -> None:
    assert arithmetic_reply(question) == answer


async def test_answers_the_last_user_message(renderer: HFRenderer) -> None:
    backend: InferenceBackend = ScriptedBackend(renderer)
    prompt = renderer.render(
        [Message.user("What is 1 + 1?"), Message.assistant("2"), Message.user("What is 3 + 4?")]
    )
    completion = await backend.sample(prompt, SamplingParams())
    assert renderer.parse(completion.tokens).text == "7"
    assert completion.tokens[-1] == renderer.stop_token_ids[0]
    assert completion.tokens[:-1] == tuple(renderer.encode("7"))
    assert completion.logprobs == (0.0,) * len(completion.tokens)
    assert (completion.stop_reason, completion.version) == ("stop", 0)


async def test_scripted_list_cycles_and_replies_can_call_tools(renderer: HFRenderer) -> None:
    call = '<tool_call>\n{"name": "add", "arguments": {"a": 3, "b": 4}}\n</tool_call>'
    backend = ScriptedBackend(renderer, ["one", call], version=5)
    tool = ToolSpec(name="add")
    prompt = renderer.render([Message.user("hi")], [tool])
    replies = [await backend.sample(prompt, SamplingParams()) for _ in range(3)]
    messages = [renderer.parse(c.tokens) for c in replies]
    assert [m.text for m in messages] == ["one", "", "one"]
    assert [c.name for c in messages[1].tool_calls] == ["add"]
    assert messages[1].tool_calls[0].parsed_arguments() == {"a": 3, "b": 4}
    assert all(c.version == 5 for c in replies)
    backend.set_version(6)
    assert (await backend.sample(prompt, SamplingParams())).version == backend.version == 6


async def test_function_script_sees_the_prompt_text(renderer: HFRenderer) -> None:
    seen: list[str] = []

    def script(prompt: str) -> str:
        seen.append(prompt)
        return "ok"

    backend = ScriptedBackend(renderer, script)
    prompt = renderer.render([Message.user("ping")])
    await backend.sample(prompt, SamplingParams())
    assert seen == [renderer.decode(prompt)]


async def test_max_tokens_truncates_to_length(renderer: HFRenderer) -> None:
    backend = ScriptedBackend(renderer, ["a long reply with several tokens in it"])
    prompt = renderer.render([Message.user("hi")])
    completion = await backend.sample(prompt, SamplingParams(max_tokens=3, top_logprobs=2))
    assert len(completion.tokens) == 3 and completion.stop_reason == "length"
    assert renderer.stop_token_ids[0] not in completion.tokens
    assert completion.top_logprobs == tuple({t: 0.0} for t in completion.tokens)


async def test_stop_strings_and_request_stop_tokens(renderer: HFRenderer) -> None:
    backend = ScriptedBackend(renderer, ["first. second."])
    prompt = renderer.render([Message.user("hi")])
    cut = await backend.sample(prompt, SamplingParams(stop=["."]))
    assert renderer.decode(cut.tokens) == "first." and cut.stop_reason == "stop"
    other = await backend.sample(prompt, SamplingParams(stop_token_ids=[0]))
    assert other.tokens[-1] == 0


def test_bad_scripts_are_rejected(renderer: HFRenderer) -> None:
    with pytest.raises(BackendError, match="script"):
        ScriptedBackend(renderer, [])
    with pytest.raises(BackendError, match="script"):
        ScriptedBackend(renderer, "7")


def test_from_model_dir(tmp_path: Path) -> None:
    from rollout.models import init_model

    folder = init_model(tmp_path / "m", hidden=32, heads=2, kv_heads=1, vocab_size=300)
    backend = ScriptedBackend.from_model_dir(folder)
    assert backend.renderer.stop_token_ids


async def test_bad_prompt_tokens_name_the_field(renderer: HFRenderer) -> None:
    backend = ScriptedBackend(renderer)
    with pytest.raises(BackendError, match="prompt_tokens"):
        await backend.sample([], SamplingParams())
    with pytest.raises(BackendError, match="prompt_tokens"):
        await backend.sample([-3], SamplingParams())
