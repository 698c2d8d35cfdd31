"""Gateway behaviour beyond the happy path: keys, fencing, previous_response_id, stop sequences,
max tokens, logprobs, the admission hook, fields real clients send, templates that rewrite
history, and concurrent calls on one seat. All over real HTTP against the real ledger.
"""

from __future__ import annotations

import asyncio
import json
from pathlib import Path
from typing import Any

import anthropic
import httpx
import openai
import pytest
from transformers import AutoTokenizer

from rollout.contracts import Message, ToolSpec
from rollout.gateway import GatewayError
from rollout.ledger import KeyInfo, Ledger
from rollout.models import CHAT_TEMPLATE
from rollout.rendering import HFRenderer
from tests.gateway.gateway_helpers import ADD_SCHEMA, FINAL_REPLY, TOOL_REPLY, Serve, claim_new_seat

CHAT_TOOLS: list[Any] = [
    {"type": "function", "function": {"name": "add", "parameters": ADD_SCHEMA}},
]
ADD = ToolSpec(name="add", parameters=ADD_SCHEMA)
ROUTES = [
    ("POST", "/v1/chat/completions", "openai"),
    ("POST", "/v1/responses", "openai"),
    ("POST", "/v1/messages", "anthropic"),
    ("POST", "/v1/messages/count_tokens", "anthropic"),
    ("GET", "/v1/models", "openai"),
]
VALID_BODIES: dict[str, dict[str, Any]] = {
    "/v1/chat/completions": {"model": "m", "messages": [{"role": "user", "content": "hi"}]},
    "/v1/responses": {"model": "m", "input": "hi"},
    "/v1/messages": {
        "model": "m",
        "max_tokens": 16,
        "messages": [{"role": "user", "content": "hi"}],
    },
    "/v1/messages/count_tokens": {"model": "m", "messages": [{"role": "user", "content": "hi"}]},
}


def assert_error_shape(response: httpx.Response, protocol: str, status: int) -> dict[str, Any]:
    assert response.status_code == status, response.text
    body = response.json()
    if protocol == "anthropic":
        assert body["type"] == "error"
        assert set(body["error"]) == {"type", "message"}
        assert isinstance(body["error"]["message"], str) and body["error"]["message"]
        return body["error"]
    assert set(body["error"]) == {"message", "type", "param", "code"}
    assert isinstance(body["error"]["message"], str) and body["error"]["message"]
    return body["error"]


# --- keys ----------------------------------------------------------------------------------------


@pytest.mark.parametrize(("method", "path", "protocol"), ROUTES)
async def test_missing_or_unknown_key_is_401_in_the_protocols_shape(
    serve: Serve, method: str, path: str, protocol: str
) -> None:
    served = await serve()
    async with httpx.AsyncClient(base_url=served.server.root_url) as http:
        for headers in ({}, {"Authorization": "Bearer rk-nope"}, {"x-api-key": "rk-nope"}):
            response = await http.request(
                method, path, json=VALID_BODIES.get(path), headers=headers
            )
            # /v1/models serves both families: an x-api-key alone marks an Anthropic client.
            shape = "anthropic" if path == "/v1/models" and "x-api-key" in headers else protocol
            error = assert_error_shape(response, shape, 401)
            assert error["type"] == (
                "authentication_error" if shape == "anthropic" else "invalid_request_error"
            )
    assert await served.turns() == []


async def test_sdk_errors_for_a_bad_key(serve: Serve) -> None:
    served = await serve()
    with pytest.raises(openai.AuthenticationError) as oe:
        await openai.AsyncOpenAI(
            base_url=served.server.base_url, api_key="bad", max_retries=0
        ).chat.completions.create(model="m", messages=[{"role": "user", "content": "hi"}])
    assert oe.value.code == "invalid_api_key"
    with pytest.raises(anthropic.AuthenticationError):
        await anthropic.AsyncAnthropic(
            base_url=served.server.root_url, api_key="bad", max_retries=0
        ).messages.create(model="m", max_tokens=5, messages=[{"role": "user", "content": "hi"}])


async def test_bearer_and_x_api_key_both_work_on_every_protocol(serve: Serve) -> None:
    served = await serve(["ok"])
    async with httpx.AsyncClient(base_url=served.server.root_url) as http:
        for path in ("/v1/chat/completions", "/v1/responses", "/v1/messages"):
            for headers in ({"Authorization": f"Bearer {served.key}"}, {"x-api-key": served.key}):
                response = await http.post(path, json=VALID_BODIES[path], headers=headers)
                assert response.status_code == 200, response.text
    client = anthropic.AsyncAnthropic(base_url=served.server.root_url, auth_token=served.key)
    reply = await client.messages.create(
        model="m", max_tokens=8, messages=[{"role": "user", "content": "hi"}]
    )
    assert reply.content[0].text == "ok"  # type: ignore[union-attr]
    assert len(await served.turns()) == 7


async def test_fenced_out_attempt_gets_409_and_nothing_is_recorded(serve: Serve) -> None:
    served = await serve(["ok"])
    ledger = served.ledger
    old = await served.new_seat(run="fence", lease_seconds=0.2)
    await asyncio.sleep(0.4)
    new = await ledger.claim_seat("other-runner", run_id=old.run_id)
    assert new is not None and new.episode_id == old.episode_id and new.attempt == old.attempt + 1
    async with httpx.AsyncClient(base_url=served.server.root_url) as http:
        for path, protocol in (
            ("/v1/chat/completions", "openai"),
            ("/v1/responses", "openai"),
            ("/v1/messages", "anthropic"),
        ):
            response = await http.post(
                path, json=VALID_BODIES[path], headers={"x-api-key": old.api_key}
            )
            assert_error_shape(response, protocol, 409)
        assert await served.turns(old) == []
        ok = await http.post(
            "/v1/chat/completions",
            json=VALID_BODIES["/v1/chat/completions"],
            headers={"Authorization": f"Bearer {new.api_key}"},
        )
        assert ok.status_code == 200
    assert [t.attempt for t in await served.turns(new)] == [new.attempt]


async def test_key_of_an_ended_or_expired_seat_gets_401_in_every_protocol(serve: Serve) -> None:
    served = await serve(["ok"])
    await served.ledger.end_seat(served.claim, reward=1.0)
    with pytest.raises(openai.AuthenticationError):
        await openai.AsyncOpenAI(
            base_url=served.server.base_url, api_key=served.key, max_retries=0
        ).chat.completions.create(model="m", messages=[{"role": "user", "content": "hi"}])
    expired = await served.new_seat(run="expiry", lease_seconds=0.2)
    await asyncio.sleep(0.4)  # the claim expired and nobody reclaimed the seat yet
    async with httpx.AsyncClient(base_url=served.server.root_url) as http:
        for path, protocol in (
            ("/v1/chat/completions", "openai"),
            ("/v1/responses", "openai"),
            ("/v1/messages", "anthropic"),
        ):
            response = await http.post(
                path, json=VALID_BODIES[path], headers={"x-api-key": expired.api_key}
            )
            assert_error_shape(response, protocol, 401)
    assert await served.turns() == [] and await served.turns(expired) == []


# --- previous_response_id ------------------------------------------------------------------------


async def test_previous_response_id_rebuilds_the_conversation_from_the_ledger(
    serve: Serve,
) -> None:
    served = await serve()
    client = openai.AsyncOpenAI(base_url=served.server.base_url, api_key=served.key)
    tools: list[Any] = [{"type": "function", "name": "add", "parameters": ADD_SCHEMA}]
    first = await client.responses.create(
        model="m", input="Add 2 and 3.", tools=tools, instructions="Be exact."
    )
    call = next(item for item in first.output if item.type == "function_call")
    second = await client.responses.create(
        model="m",
        previous_response_id=first.id,
        input=[{"type": "function_call_output", "call_id": call.call_id, "output": "5"}],
        tools=tools,
        instructions="Be exact.",
    )
    assert second.output_text == FINAL_REPLY
    assert second.previous_response_id == first.id
    one, two = await served.turns()
    assert two.extends_previous
    messages = [Message.model_validate(m) for m in two.request["messages"]]
    assert [m.role for m in messages] == ["system", "user", "assistant", "tool"]
    assert messages[2].tool_calls[0].id == call.call_id
    assert two.prompt_tokens == (
        *one.prompt_tokens,
        *one.completion_tokens,
        *two.prompt_tokens[len(one.prompt_tokens) + len(one.completion_tokens) :],
    )

    other = await served.new_seat()
    with pytest.raises(openai.BadRequestError) as err:
        await openai.AsyncOpenAI(
            base_url=served.server.base_url, api_key=other.api_key, max_retries=0
        ).responses.create(model="m", previous_response_id=first.id, input="again")
    assert err.value.param == "previous_response_id"
    assert await served.turns(other) == []


# --- sampling settings ---------------------------------------------------------------------------


async def test_stop_sequences_cut_the_reply_and_history_stays_token_exact(serve: Serve) -> None:
    served = await serve(["Hello STOP world", "Fine."])
    client = openai.AsyncOpenAI(base_url=served.server.base_url, api_key=served.key)
    messages: list[Any] = [{"role": "user", "content": "Say hello."}]
    first = await client.chat.completions.create(model="m", messages=messages, stop=["STOP"])
    assert first.choices[0].message.content == "Hello "
    assert first.choices[0].finish_reason == "stop"
    messages += [{"role": "assistant", "content": "Hello "}, {"role": "user", "content": "Again."}]
    second = await client.chat.completions.create(model="m", messages=messages, stop="STOP")
    assert second.choices[0].message.content == "Fine."
    one, two = await served.turns()
    r = served.renderer
    assert one.completion_tokens == tuple(r.encode("Hello STOP"))  # what the backend sampled
    assert one.request["stop_sequence"] == "STOP"
    head = len(one.prompt_tokens) + len(one.completion_tokens)
    assert two.extends_previous
    assert two.prompt_tokens[head] == r.stop_token_ids[0]  # the cut reply is closed

    claude = await served.new_seat()
    served.backend.calls = 0
    reply = await anthropic.AsyncAnthropic(
        base_url=served.server.root_url, api_key=claude.api_key
    ).messages.create(
        model="m",
        max_tokens=32,
        stop_sequences=["STOP"],
        messages=[{"role": "user", "content": "Say hello."}],
    )
    assert reply.stop_reason == "stop_sequence" and reply.stop_sequence == "STOP"
    assert reply.content[0].text == "Hello "  # type: ignore[union-attr]


async def test_max_tokens_cuts_in_every_protocol(serve: Serve) -> None:
    served = await serve(["one two three four five six seven eight nine ten"])
    oa = openai.AsyncOpenAI(base_url=served.server.base_url, api_key=served.key)
    chat = await oa.chat.completions.create(
        model="m",
        messages=[{"role": "user", "content": "count"}],
        max_tokens=50,
        max_completion_tokens=3,  # the newer field wins
    )
    assert chat.choices[0].finish_reason == "length"
    assert chat.usage is not None and chat.usage.completion_tokens == 3
    resp = await oa.responses.create(model="m", input="count", max_output_tokens=4)
    assert resp.status == "incomplete"
    assert resp.incomplete_details is not None
    assert resp.incomplete_details.reason == "max_output_tokens"
    msg = await anthropic.AsyncAnthropic(
        base_url=served.server.root_url, api_key=served.key
    ).messages.create(model="m", max_tokens=5, messages=[{"role": "user", "content": "count"}])
    assert msg.stop_reason == "max_tokens" and msg.usage.output_tokens == 5
    turns = await served.turns()
    assert [len(t.completion_tokens) for t in turns] == [3, 4, 5]
    assert {t.stop_reason for t in turns} == {"length"}


async def test_temperature_top_p_seed_reach_the_record(serve: Serve) -> None:
    served = await serve(["ok"])
    oa = openai.AsyncOpenAI(base_url=served.server.base_url, api_key=served.key)
    await oa.chat.completions.create(
        model="m",
        messages=[{"role": "user", "content": "hi"}],
        temperature=0.5,
        top_p=0.9,
        seed=1234,
    )
    (turn,) = await served.turns()
    assert turn.temperature == 0.5
    assert turn.request["sampling"] == {
        "temperature": 0.5,
        "top_p": 0.9,
        "seed": 1234,
        "max_tokens": 1024,
    }


async def test_logprobs_in_chat_and_responses(serve: Serve) -> None:
    served = await serve(["The sum is 5."])
    oa = openai.AsyncOpenAI(base_url=served.server.base_url, api_key=served.key)
    r = served.renderer
    n = len(r.encode("The sum is 5."))
    chat = await oa.chat.completions.create(
        model="m", messages=[{"role": "user", "content": "hi"}], logprobs=True, top_logprobs=2
    )
    content = (chat.choices[0].logprobs and chat.choices[0].logprobs.content) or []
    # Every completion token has its logprob, the stop token too (a trainer needs it).
    assert chat.usage is not None and len(content) == chat.usage.completion_tokens == n + 1
    assert "".join(item.token for item in content) == "The sum is 5.<|im_end|>"
    assert all(item.logprob == 0.0 and len(item.top_logprobs) == 1 for item in content)

    stream = await oa.chat.completions.create(
        model="m",
        messages=[{"role": "user", "content": "hi"}],
        logprobs=True,
        stream=True,
    )
    streamed = [
        item
        async for chunk in stream
        if chunk.choices and chunk.choices[0].logprobs
        for item in chunk.choices[0].logprobs.content or []
    ]
    assert [i.token for i in streamed] == [i.token for i in content]

    resp = await oa.responses.create(
        model="m", input="hi", include=["message.output_text.logprobs"], top_logprobs=1
    )
    part = resp.output[0].content[0]  # type: ignore[union-attr]
    assert part.type == "output_text" and part.logprobs is not None and len(part.logprobs) == n
    plain = await oa.chat.completions.create(
        model="m", messages=[{"role": "user", "content": "hi"}]
    )
    assert plain.choices[0].logprobs is None


# --- the admission hook ---------------------------------------------------------------------


async def test_admission_is_awaited_before_sampling(serve: Serve) -> None:
    admitted: list[KeyInfo] = []
    gate = asyncio.Event()

    async def admission(info: KeyInfo) -> None:
        admitted.append(info)
        await gate.wait()

    served = await serve(["ok"], admission=admission)
    client = openai.AsyncOpenAI(base_url=served.server.base_url, api_key=served.key)
    call = asyncio.create_task(
        client.chat.completions.create(model="m", messages=[{"role": "user", "content": "hi"}])
    )
    for _ in range(200):
        if admitted:
            break
        await asyncio.sleep(0.01)
    assert admitted == [
        KeyInfo(
            served.claim.run_id, served.claim.episode_id, served.claim.agent, served.claim.attempt
        )
    ]
    assert served.backend.calls == 0 and not call.done()
    gate.set()
    reply = await call
    assert reply.choices[0].message.content == "ok" and served.backend.calls == 1


async def test_admission_can_refuse_in_the_protocols_shape(serve: Serve) -> None:
    async def admission(info: KeyInfo) -> None:
        raise GatewayError("run is paused", kind="rate_limit", code="paused")

    served = await serve(["ok"], admission=admission)
    async with httpx.AsyncClient(base_url=served.server.root_url) as http:
        response = await http.post(
            "/v1/messages", json=VALID_BODIES["/v1/messages"], headers={"x-api-key": served.key}
        )
    assert assert_error_shape(response, "anthropic", 429)["type"] == "rate_limit_error"
    assert served.backend.calls == 0 and await served.turns() == []


# --- what real clients send ----------------------------------------------------------------------


async def test_fields_and_headers_real_clients_send_are_accepted(serve: Serve) -> None:
    served = await serve(["ok"])
    headers = {
        "x-api-key": served.key,
        "anthropic-version": "2023-06-01",
        "anthropic-beta": "claude-code-20250219,interleaved-thinking-2025-05-14",
        "x-stainless-lang": "js",
    }
    claude_code_body = {
        "model": "claude-sonnet-4-5-20250929",
        "max_tokens": 32000,
        "stream": True,
        "thinking": {"type": "enabled", "budget_tokens": 1024},
        "metadata": {"user_id": "user_abc"},
        "temperature": 1,
        "system": [
            {"type": "text", "text": "You are Claude Code.", "cache_control": {"type": "ephemeral"}}
        ],
        "tools": [
            {"name": "Bash", "description": "Run a command", "input_schema": {"type": "object"}},
            {"type": "web_search_20250305", "name": "web_search", "max_uses": 5},
        ],
        "messages": [
            {
                "role": "user",
                "content": [{"type": "text", "text": "hi", "cache_control": {"type": "ephemeral"}}],
            }
        ],
    }
    codex_body = {
        "model": "gpt-5-codex",
        "instructions": "You are Codex.",
        "input": [
            {
                "type": "message",
                "role": "developer",
                "content": [{"type": "input_text", "text": "env"}],
            },
            {"type": "message", "role": "user", "content": [{"type": "input_text", "text": "hi"}]},
        ],
        "tools": [
            {
                "type": "function",
                "name": "shell",
                "parameters": {"type": "object"},
                "strict": False,
            },
            {"type": "web_search"},
            {"type": "custom", "name": "apply_patch", "format": {"type": "grammar"}},
        ],
        "tool_choice": "auto",
        "parallel_tool_calls": False,
        "reasoning": {"effort": "medium", "summary": "auto"},
        "store": False,
        "stream": True,
        "include": ["reasoning.encrypted_content"],
        "prompt_cache_key": "0199",
        "service_tier": "auto",
        "text": {"verbosity": "low"},
    }
    chat_body = {
        "model": "gpt-4o",
        "messages": [
            {"role": "developer", "content": "Be brief."},
            {"role": "user", "content": [{"type": "text", "text": "hi"}], "name": "me"},
        ],
        "user": "u1",
        "metadata": {"a": "b"},
        "store": False,
        "service_tier": "default",
        "parallel_tool_calls": True,
        "reasoning_effort": "low",
        "prompt_cache_key": "k",
        "frequency_penalty": 0,
        "presence_penalty": 0,
        "response_format": {"type": "text"},
        "n": 1,
    }
    async with httpx.AsyncClient(base_url=served.server.root_url, headers=headers) as http:
        r1 = await http.post("/v1/messages?beta=true", json=claude_code_body)
        assert r1.status_code == 200, r1.text
        assert r1.headers["content-type"].startswith("text/event-stream")
        assert "event: message_stop" in r1.text
        r2 = await http.post("/v1/responses", json=codex_body)
        assert r2.status_code == 200, r2.text
        assert "event: response.completed" in r2.text
        r3 = await http.post("/v1/chat/completions", json=chat_body)
        assert r3.status_code == 200, r3.text
    turns = await served.turns()
    assert len(turns) == 3
    tools = [t["name"] for t in turns[0].request["tools"]]
    assert tools == ["Bash"]  # the server tool is not offered to the model
    assert [t["name"] for t in turns[1].request["tools"]] == ["shell"]


async def test_models_and_count_tokens(serve: Serve) -> None:
    served = await serve()
    models = await openai.AsyncOpenAI(
        base_url=served.server.base_url, api_key=served.key
    ).models.list()
    assert [m.id for m in models.data] == ["tiny"]
    one = await openai.AsyncOpenAI(
        base_url=served.server.base_url, api_key=served.key
    ).models.retrieve("gpt-5-codex")
    assert one.id == "gpt-5-codex"
    listed = await anthropic.AsyncAnthropic(
        base_url=served.server.root_url, api_key=served.key
    ).models.list()
    assert [m.id for m in listed.data] == ["tiny"]
    counted = await anthropic.AsyncAnthropic(
        base_url=served.server.root_url, api_key=served.key
    ).messages.count_tokens(
        model="m",
        system="Add.",
        messages=[{"role": "user", "content": "2 + 3?"}],
        tools=[{"name": "add", "input_schema": ADD_SCHEMA}],
    )
    expected = served.renderer.render([Message.system("Add."), Message.user("2 + 3?")], [ADD])
    assert counted.input_tokens == len(expected)
    assert await served.turns() == []


# --- token-exact history: when it must not splice ---------------------------------------------


def thinking_renderer(tokenizer_dir: Path) -> HFRenderer:
    """A template whose generation prompt differs from how it renders a past assistant turn
    (Qwen3 with thinking off: an empty think block opens the new turn, past turns have none)."""
    tokenizer = AutoTokenizer.from_pretrained(str(tokenizer_dir))
    opener = "{{- '<|im_start|>assistant\\n' -}}\n{%- endif -%}"
    assert CHAT_TEMPLATE.endswith(opener)
    tokenizer.chat_template = (
        CHAT_TEMPLATE[: -len(opener)]
        + "{{- '<|im_start|>assistant\\n<think>\\n\\n</think>\\n\\n' -}}\n{%- endif -%}"
    )
    return HFRenderer(tokenizer)


async def test_template_that_renders_history_differently_falls_back_to_a_full_render(
    serve: Serve, tokenizer_dir: Path
) -> None:
    r = thinking_renderer(tokenizer_dir)
    served = await serve(use_renderer=r)
    client = openai.AsyncOpenAI(base_url=served.server.base_url, api_key=served.key)
    messages: list[Any] = [{"role": "user", "content": "2 + 3?"}]
    first = await client.chat.completions.create(model="m", messages=messages, tools=CHAT_TOOLS)
    call = (first.choices[0].message.tool_calls or [])[0]
    messages += [
        first.choices[0].message.model_dump(exclude_none=True),
        {"role": "tool", "tool_call_id": call.id, "content": "5"},
    ]
    await client.chat.completions.create(model="m", messages=messages, tools=CHAT_TOOLS)
    _, two = await served.turns()
    assert not two.extends_previous and two.request["reused_turn"] is None
    canonical = [Message.model_validate(m) for m in two.request["messages"]]
    assert two.prompt_tokens == tuple(r.render(canonical, [ADD]))


async def test_edited_history_is_rendered_not_spliced(serve: Serve) -> None:
    served = await serve(["Paris.", "Yes."])
    client = openai.AsyncOpenAI(base_url=served.server.base_url, api_key=served.key)
    await client.chat.completions.create(
        model="m", messages=[{"role": "user", "content": "Capital of France?"}]
    )
    edited: list[Any] = [
        {"role": "user", "content": "Capital of France?"},
        {"role": "assistant", "content": "Lyon."},  # not what the model said
        {"role": "user", "content": "Sure?"},
    ]
    await client.chat.completions.create(model="m", messages=edited)
    _, two = await served.turns()
    assert not two.extends_previous
    expected = served.renderer.render(
        [Message.user("Capital of France?"), Message.assistant("Lyon."), Message.user("Sure?")]
    )
    assert two.prompt_tokens == tuple(expected)


class CountingRenderer(HFRenderer):
    """The real renderer, counting how often the chat template runs."""

    renders = 0

    def render_text(self, *args: Any, **kwargs: Any) -> str:
        self.renders += 1
        return super().render_text(*args, **kwargs)


async def test_a_groups_repeated_prompt_renders_once_with_the_same_tokens(
    serve: Serve, tokenizer_dir: Path
) -> None:
    """A group's samples send one conversation: the template runs for the first only."""
    r = CountingRenderer(AutoTokenizer.from_pretrained(str(tokenizer_dir)))
    served = await serve(["E"], use_renderer=r)
    seats = [served.claim, await served.new_seat(), await served.new_seat()]
    asked: list[Any] = [
        {"role": "system", "content": "Parity."},
        {"role": "user", "content": "12="},
    ]
    for seat in seats:
        client = openai.AsyncOpenAI(base_url=served.server.base_url, api_key=seat.api_key)
        await client.chat.completions.create(model="m", messages=asked)
    assert r.renders == 1
    expected = tuple(r.render([Message.system("Parity."), Message.user("12=")]))
    for seat in seats:
        (turn,) = await served.turns(seat)
        assert turn.prompt_tokens == expected
    client = openai.AsyncOpenAI(base_url=served.server.base_url, api_key=served.key)
    await client.chat.completions.create(
        model="m", messages=[*asked[:1], {"role": "user", "content": "13="}]
    )
    assert r.renders == 3  # another conversation renders (and the test's own render above)
    _, other = await served.turns()
    assert other.prompt_tokens == tuple(r.render([Message.system("Parity."), Message.user("13=")]))


async def test_an_older_turn_is_found_when_the_last_one_is_a_side_call(serve: Serve) -> None:
    """Claude Code interleaves side calls (titles, summaries) with the main conversation."""
    served = await serve(lambda prompt: "title" if "Summarize" in prompt else TOOL_REPLY)
    client = openai.AsyncOpenAI(base_url=served.server.base_url, api_key=served.key)
    main: list[Any] = [{"role": "user", "content": "2 + 3?"}]
    first = await client.chat.completions.create(model="m", messages=main, tools=CHAT_TOOLS)
    await client.chat.completions.create(
        model="m", messages=[{"role": "user", "content": "Summarize this chat."}]
    )
    call = (first.choices[0].message.tool_calls or [])[0]
    main += [
        first.choices[0].message.model_dump(exclude_none=True),
        {"role": "tool", "tool_call_id": call.id, "content": "5"},
    ]
    await client.chat.completions.create(model="m", messages=main, tools=CHAT_TOOLS)
    one, _side_call, three = await served.turns()
    assert three.request["reused_turn"] == one.index
    head = len(one.prompt_tokens) + len(one.completion_tokens)
    assert three.prompt_tokens[:head] == one.prompt_tokens + one.completion_tokens
    assert not three.extends_previous  # it extends turn 0, not the side call before it


async def test_concurrent_calls_on_one_seat_get_distinct_turns(serve: Serve) -> None:
    served = await serve(["ok"])
    client = openai.AsyncOpenAI(base_url=served.server.base_url, api_key=served.key)
    await asyncio.gather(
        *(
            client.chat.completions.create(
                model="m", messages=[{"role": "user", "content": f"{i}"}]
            )
            for i in range(8)
        )
    )
    turns = await served.turns()
    assert [t.index for t in turns] == list(range(8))


async def test_two_gateways_share_one_seat_without_losing_turns(
    serve: Serve, ledger: Ledger
) -> None:
    """Two gateway processes (here: two apps) write one seat; indices never collide."""
    a = await serve(["ok"])
    b = await serve(["ok"])
    claim = a.claim
    clients = [
        openai.AsyncOpenAI(base_url=s.server.base_url, api_key=claim.api_key) for s in (a, b)
    ]
    for i in range(3):
        await asyncio.gather(
            *(
                c.chat.completions.create(model="m", messages=[{"role": "user", "content": f"{i}"}])
                for c in clients
            )
        )
    turns = await ledger.seat_turns(claim.episode_id, claim.agent, claim.attempt)
    assert [t.index for t in turns] == list(range(6))


async def test_a_gateway_started_mid_episode_continues_the_seat(serve: Serve) -> None:
    """A seat new to a gateway is taken to have no turns (its first request reads nothing
    first); one that has turns (the gateway restarted mid-episode) finds index 0 taken, reads
    the seat, and records the next index, extending the conversation it continues."""
    first = await serve(["one", "two", "three"])
    client = openai.AsyncOpenAI(base_url=first.server.base_url, api_key=first.key)
    messages: list[Any] = [{"role": "user", "content": "count"}]
    for _ in range(2):
        reply = await client.chat.completions.create(model="m", messages=messages)
        messages += [reply.choices[0].message.model_dump(exclude_none=True)]
        messages += [{"role": "user", "content": "go on"}]
    await first.server.stop()
    restarted = await serve(["three"])
    client = openai.AsyncOpenAI(base_url=restarted.server.base_url, api_key=first.key)
    reply = await client.chat.completions.create(model="m", messages=messages)
    assert reply.choices[0].message.content == "three"
    turns = await first.turns()
    assert [t.index for t in turns] == [0, 1, 2]
    assert [t.extends_previous for t in turns] == [False, True, True]
    assert turns[2].prompt_tokens[: len(turns[1].prompt_tokens)] == turns[1].prompt_tokens


async def test_multiple_tool_calls_in_one_reply(serve: Serve) -> None:
    two_calls = TOOL_REPLY + "\n" + TOOL_REPLY.replace('"a": 2', '"a": 4')
    served = await serve(lambda prompt: FINAL_REPLY if "<tool_response>" in prompt else two_calls)
    oa = openai.AsyncOpenAI(base_url=served.server.base_url, api_key=served.key)
    tools: list[Any] = [{"type": "function", "name": "add", "parameters": ADD_SCHEMA}]
    first = await oa.responses.create(model="m", input="Add twice.", tools=tools)
    calls = [item for item in first.output if item.type == "function_call"]
    assert [json.loads(c.arguments)["a"] for c in calls] == [2, 4]
    inputs: list[Any] = [{"role": "user", "content": "Add twice."}]
    inputs += [item.model_dump(exclude_none=True) for item in first.output]
    inputs += [{"type": "function_call_output", "call_id": c.call_id, "output": "x"} for c in calls]
    second = await oa.responses.create(model="m", input=inputs, tools=tools)
    assert second.output_text == FINAL_REPLY
    _, two = await served.turns()
    assert two.extends_previous

    claude = await served.new_seat()
    ac = anthropic.AsyncAnthropic(base_url=served.server.root_url, api_key=claude.api_key)
    atools: list[Any] = [{"name": "add", "input_schema": ADD_SCHEMA}]
    msg = await ac.messages.create(
        model="m", max_tokens=99, tools=atools, messages=[{"role": "user", "content": "Add twice."}]
    )
    uses = [b for b in msg.content if b.type == "tool_use"]
    assert [u.input for u in uses] == [{"a": 2, "b": 3}, {"a": 4, "b": 3}]
    history: list[Any] = [
        {"role": "user", "content": "Add twice."},
        {"role": "assistant", "content": [b.model_dump() for b in msg.content]},
        {
            "role": "user",
            "content": [
                {
                    "type": "tool_result",
                    "tool_use_id": u.id,
                    "content": [{"type": "text", "text": "x"}],
                }
                for u in uses
            ],
        },
    ]
    await ac.messages.create(model="m", max_tokens=99, tools=atools, messages=history)
    _, two = await served.turns(claude)
    assert two.extends_previous


async def test_server_listens_on_loopback_and_stops(serve: Serve) -> None:
    served = await serve()
    assert served.server.base_url.startswith("http://127.0.0.1:")
    assert served.server.base_url.endswith("/v1")
    async with httpx.AsyncClient() as http:
        health = await http.get(f"{served.server.root_url}/healthz")
        assert health.json()["ok"] is True
        await served.server.stop()
        with pytest.raises(httpx.ConnectError):
            await http.get(f"{served.server.root_url}/healthz")


async def test_new_seat_helper_creates_distinct_keys(ledger: Ledger) -> None:
    a = await claim_new_seat(ledger)
    b = await claim_new_seat(ledger)
    assert a.api_key != b.api_key and a.episode_id != b.episode_id
