"""Malformed requests never break the gateway: always a 4xx in the route's error shape (never a
5xx), and nothing recorded. Hypothesis generates bodies (random JSON, random bytes, valid bodies
with one field replaced or removed); a catalogue of hand-picked cases pins the error for each
kind of mistake, naming the field.

The gateway runs in its own thread and event loop so that the (synchronous) hypothesis tests can
call it over real HTTP.
"""

from __future__ import annotations

import asyncio
import copy
import json
import threading
from collections.abc import Coroutine, Iterator
from typing import Any, TypeVar

import httpx
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from rollout.gateway import GatewayServer, create_app
from rollout.inference.scripted import ScriptedBackend
from rollout.ledger import Ledger, SeatClaim
from rollout.rendering import HFRenderer
from tests.gateway.gateway_helpers import claim_new_seat

T = TypeVar("T")

ROUTES = {
    "/v1/chat/completions": "openai",
    "/v1/responses": "openai",
    "/v1/messages": "anthropic",
    "/v1/messages/count_tokens": "anthropic",
}
TOOL_SCHEMA = {"type": "object", "properties": {"x": {"type": "string"}}}
VALID: dict[str, dict[str, Any]] = {
    "/v1/chat/completions": {
        "model": "m",
        "messages": [
            {"role": "system", "content": "s"},
            {"role": "user", "content": [{"type": "text", "text": "hi"}]},
            {
                "role": "assistant",
                "content": None,
                "tool_calls": [
                    {"id": "c1", "type": "function", "function": {"name": "f", "arguments": "{}"}}
                ],
            },
            {"role": "tool", "tool_call_id": "c1", "content": "r"},
        ],
        "tools": [{"type": "function", "function": {"name": "f", "parameters": TOOL_SCHEMA}}],
        "max_tokens": 8,
        "temperature": 0.5,
        "top_p": 0.9,
        "seed": 1,
        "stop": ["x"],
        "logprobs": True,
        "top_logprobs": 1,
        "stream": False,
    },
    "/v1/responses": {
        "model": "m",
        "instructions": "s",
        "input": [
            {"role": "user", "content": [{"type": "input_text", "text": "hi"}]},
            {"type": "function_call", "call_id": "c1", "name": "f", "arguments": "{}"},
            {"type": "function_call_output", "call_id": "c1", "output": "r"},
        ],
        "tools": [{"type": "function", "name": "f", "parameters": TOOL_SCHEMA}],
        "max_output_tokens": 8,
        "temperature": 0.5,
        "top_p": 0.9,
        "top_logprobs": 1,
        "include": ["message.output_text.logprobs"],
        "stream": False,
    },
    "/v1/messages": {
        "model": "m",
        "max_tokens": 8,
        "system": "s",
        "messages": [
            {"role": "user", "content": "hi"},
            {
                "role": "assistant",
                "content": [{"type": "tool_use", "id": "t1", "name": "f", "input": {}}],
            },
            {
                "role": "user",
                "content": [{"type": "tool_result", "tool_use_id": "t1", "content": "r"}],
            },
        ],
        "tools": [{"name": "f", "input_schema": TOOL_SCHEMA}],
        "temperature": 0.5,
        "stop_sequences": ["x"],
        "stream": False,
    },
    "/v1/messages/count_tokens": {
        "model": "m",
        "messages": [{"role": "user", "content": [{"type": "text", "text": "hi"}]}],
        "system": [{"type": "text", "text": "s"}],
    },
}


class ThreadedGateway:
    """A gateway with its own event loop in a thread, for synchronous (hypothesis) tests."""

    def __init__(self, database_url: str, renderer: HFRenderer) -> None:
        self.database_url = database_url
        self.renderer = renderer
        self.loop = asyncio.new_event_loop()
        self.thread = threading.Thread(target=self.loop.run_forever, daemon=True)
        self.thread.start()
        self.claim: SeatClaim
        self.call(self._start())
        self.http = httpx.Client(
            base_url=self.server.root_url, headers={"x-api-key": self.claim.api_key}, timeout=30
        )

    def call(self, coro: Coroutine[Any, Any, T]) -> T:
        return asyncio.run_coroutine_threadsafe(coro, self.loop).result(60)

    async def _start(self) -> None:
        self.ledger = await Ledger.connect(self.database_url)
        backend = ScriptedBackend(self.renderer, ["ok"])
        self.server = GatewayServer(create_app(self.ledger, self.renderer, backend, model_name="m"))
        await self.server.start()
        self.claim = await claim_new_seat(self.ledger)

    def turn_count(self) -> int:
        c = self.claim
        return len(self.call(self.ledger.seat_turns(c.episode_id, c.agent, c.attempt)))

    def close(self) -> None:
        self.http.close()
        self.call(self.server.stop())
        self.call(self.ledger.close())
        self.loop.call_soon_threadsafe(self.loop.stop)
        self.thread.join(10)
        self.loop.close()


@pytest.fixture
def gateway(database_url: str, renderer: HFRenderer) -> Iterator[ThreadedGateway]:
    g = ThreadedGateway(database_url, renderer)
    try:
        yield g
    finally:
        g.close()


def check(gateway: ThreadedGateway, path: str, response: httpx.Response, before: int) -> None:
    """The invariant: a well-formed 200 that recorded one turn, or a 4xx that recorded none."""
    assert response.status_code < 500, response.text
    after = gateway.turn_count()
    if response.status_code == 200:
        assert after == before + (0 if path.endswith("count_tokens") else 1)
        if response.headers["content-type"].startswith("text/event-stream"):
            assert response.text.rstrip().endswith(("data: [DONE]", "}")), response.text[-200:]
        else:
            assert isinstance(response.json(), dict)
        return
    assert 400 <= response.status_code < 500
    assert after == before, f"{response.status_code} but a turn was recorded: {response.text}"
    body = response.json()
    if ROUTES.get(path) == "anthropic":
        assert body["type"] == "error" and set(body["error"]) == {"type", "message"}
    else:
        assert set(body["error"]) == {"message", "type", "param", "code"}


json_values = st.recursive(
    st.none()
    | st.booleans()
    | st.integers(min_value=-(10**20), max_value=10**20)
    | st.floats(allow_nan=False)
    | st.text(max_size=20),
    lambda children: (
        st.lists(children, max_size=4) | st.dictionaries(st.text(max_size=12), children, max_size=4)
    ),
    max_leaves=12,
)
field_names = st.sampled_from(
    [
        "model",
        "messages",
        "input",
        "tools",
        "max_tokens",
        "max_completion_tokens",
        "max_output_tokens",
        "temperature",
        "top_p",
        "seed",
        "stop",
        "stop_sequences",
        "stream",
        "logprobs",
        "top_logprobs",
        "system",
        "instructions",
        "include",
        "previous_response_id",
        "tool_choice",
        "n",
        "stream_options",
    ]
)


def paths_of(value: Any, prefix: tuple[Any, ...] = ()) -> list[tuple[Any, ...]]:
    """Every key path inside a JSON value (dict keys and list indices)."""
    out: list[tuple[Any, ...]] = []
    if isinstance(value, dict):
        for k, v in value.items():
            out.append((*prefix, k))
            out.extend(paths_of(v, (*prefix, k)))
    elif isinstance(value, list):
        for i, v in enumerate(value):
            out.append((*prefix, i))
            out.extend(paths_of(v, (*prefix, i)))
    return out


@st.composite
def mutated_bodies(draw: st.DrawFn, path: str) -> Any:
    """A valid body with one field (at any depth) replaced, removed, or added."""
    body = copy.deepcopy(VALID[path])
    action = draw(st.sampled_from(["replace", "delete", "add"]))
    if action == "add":
        body[draw(field_names)] = draw(json_values)
        return body
    where = draw(st.sampled_from(paths_of(body)))
    parent: Any = body
    for part in where[:-1]:
        parent = parent[part]
    if action == "delete":
        del parent[where[-1]]
    else:
        parent[where[-1]] = draw(json_values)
    return body


HYPOTHESIS = settings(
    max_examples=60,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)


@pytest.mark.parametrize("path", list(ROUTES))
@HYPOTHESIS
@given(data=st.data())
def test_mutated_bodies_get_200_or_a_shaped_4xx(
    gateway: ThreadedGateway, path: str, data: st.DataObject
) -> None:
    body = data.draw(mutated_bodies(path))
    before = gateway.turn_count()
    response = gateway.http.post(path, content=json.dumps(body))
    check(gateway, path, response, before)


@pytest.mark.parametrize("path", list(ROUTES))
@HYPOTHESIS
@given(body=json_values)
def test_random_json_gets_a_shaped_4xx(gateway: ThreadedGateway, path: str, body: Any) -> None:
    before = gateway.turn_count()
    response = gateway.http.post(path, content=json.dumps(body))
    check(gateway, path, response, before)
    assert response.status_code >= 400


@pytest.mark.parametrize("path", list(ROUTES))
@settings(
    max_examples=30,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
@given(raw=st.binary(max_size=64))
def test_random_bytes_get_a_shaped_4xx(gateway: ThreadedGateway, path: str, raw: bytes) -> None:
    before = gateway.turn_count()
    response = gateway.http.post(path, content=raw)
    check(gateway, path, response, before)
    assert response.status_code >= 400


def _set(body: dict[str, Any], where: tuple[Any, ...], value: Any) -> dict[str, Any]:
    body = copy.deepcopy(body)
    parent: Any = body
    for part in where[:-1]:
        parent = parent[part]
    if value is _DELETE:
        del parent[where[-1]]
    else:
        parent[where[-1]] = value
    return body


_DELETE = object()
CHAT, RESP, MSG, COUNT = list(ROUTES)

# (route, field path, new value or _DELETE, expected status, words the message must contain)
CASES: list[tuple[str, tuple[Any, ...], Any, int, str]] = [
    (CHAT, ("messages",), _DELETE, 400, "messages"),
    (CHAT, ("messages",), "hi", 400, "messages"),
    (CHAT, ("messages",), [], 400, "messages"),
    (CHAT, ("model",), _DELETE, 400, "model"),
    (CHAT, ("messages", 1, "role"), "wizard", 400, "messages.1.role"),
    (CHAT, ("messages", 1, "content"), 5, 400, "messages.1.content"),
    (CHAT, ("messages", 1, "content"), [{"type": "image_url", "image_url": {}}], 400, "image_url"),
    (CHAT, ("messages", 2, "tool_calls"), "call", 400, "messages.2.tool_calls"),
    (CHAT, ("messages", 2, "tool_calls", 0, "function"), _DELETE, 400, "function"),
    (CHAT, ("messages", 2, "tool_calls", 0, "function", "arguments"), 5, 400, "arguments"),
    (CHAT, ("messages", 3, "tool_call_id"), _DELETE, 400, "tool_call_id"),
    (CHAT, ("tools",), {"a": 1}, 400, "tools"),
    (CHAT, ("tools", 0, "function"), _DELETE, 400, "tools.0.function"),
    (CHAT, ("tools", 0, "function", "name"), "", 400, "tools.0.function.name"),
    (CHAT, ("tools", 0, "function", "parameters"), "schema", 400, "parameters"),
    (CHAT, ("max_tokens",), 10**12, 400, "max_tokens"),
    (CHAT, ("max_tokens",), 0, 400, "max_tokens"),
    (CHAT, ("max_tokens",), "many", 400, "max_tokens"),
    (CHAT, ("max_completion_tokens",), -1, 400, "max_completion_tokens"),
    (CHAT, ("temperature",), -1, 400, "temperature"),
    (CHAT, ("temperature",), 3, 400, "temperature"),
    (CHAT, ("top_p",), 0, 400, "top_p"),
    (CHAT, ("seed",), 10**30, 400, "seed"),
    (CHAT, ("n",), 2, 400, "n"),
    (CHAT, ("stop",), 5, 400, "stop"),
    (CHAT, ("top_logprobs",), 50, 400, "top_logprobs"),
    (CHAT, ("stream_options",), "yes", 400, "stream_options"),
    (RESP, ("input",), 5, 400, "input"),
    (RESP, ("input", 0), 5, 400, "input.0"),
    (RESP, ("input", 0, "role"), "wizard", 400, "input.0.role"),
    (RESP, ("input", 1, "type"), "bogus", 400, "input.1.type"),
    (RESP, ("input", 1, "call_id"), _DELETE, 400, "input.1.call_id"),
    (RESP, ("input", 1, "arguments"), [1], 400, "input.1.arguments"),
    (RESP, ("input", 2, "call_id"), _DELETE, 400, "input.2.call_id"),
    (RESP, ("input", 0, "content"), [{"type": "input_image", "image_url": "x"}], 400, "input"),
    (RESP, ("tools", 0, "name"), _DELETE, 400, "tools.0.name"),
    (RESP, ("tools", 0), 5, 400, "tools.0"),
    (RESP, ("tools", 0, "type"), 5, 400, "tools.0.type"),
    (RESP, ("max_output_tokens",), 10**12, 400, "max_output_tokens"),
    (RESP, ("include",), 5, 400, "include"),
    (RESP, ("instructions",), 5, 400, "instructions"),
    (RESP, ("previous_response_id",), "resp_nope", 400, "previous_response_id"),
    (MSG, ("max_tokens",), _DELETE, 400, "max_tokens"),
    (MSG, ("max_tokens",), 10**12, 400, "max_tokens"),
    (MSG, ("messages", 0, "role"), "system", 400, "messages.0.role"),
    (MSG, ("messages", 0, "content"), 5, 400, "messages.0.content"),
    (MSG, ("messages", 0, "content"), [{"type": "image", "source": {}}], 400, "image"),
    (MSG, ("messages", 1, "content", 0, "input"), "x", 400, "messages.1.content.0.input"),
    (MSG, ("messages", 1, "content", 0, "id"), _DELETE, 400, "messages.1.content.0.id"),
    (MSG, ("messages", 2, "content", 0, "tool_use_id"), _DELETE, 400, "tool_use_id"),
    (MSG, ("messages", 2, "content", 0, "content"), 7, 400, "messages.2.content.0.content"),
    (
        MSG,
        ("messages", 0, "content"),
        [{"type": "tool_use", "id": "t", "name": "f", "input": {}}],
        400,
        "tool_use",
    ),
    (MSG, ("tools", 0, "input_schema"), _DELETE, 400, "tools.0.input_schema"),
    (MSG, ("temperature",), 1.5, 400, "temperature"),
    (MSG, ("stop_sequences",), "x", 400, "stop_sequences"),
    (MSG, ("system",), 5, 400, "system"),
    (COUNT, ("messages",), _DELETE, 400, "messages"),
    (COUNT, ("messages", 0, "content", 0, "type"), "audio", 400, "audio"),
    # Postgres text cannot hold U+0000: refused up front, not a 500 at recording time.
    (CHAT, ("messages", 1, "content"), "a\x00b", 400, "messages.1.content"),
    (CHAT, ("tools", 0, "function", "parameters"), {"\x00": 1}, 400, "U+0000"),
    (MSG, ("system",), "\x00", 400, "system"),
]


def test_hand_picked_mistakes_name_the_field(gateway: ThreadedGateway) -> None:
    before = gateway.turn_count()
    for path, where, value, status, words in CASES:
        body = _set(VALID[path], where, value)
        response = gateway.http.post(path, content=json.dumps(body))
        assert response.status_code == status, (path, where, value, response.text)
        error = response.json()["error"]
        assert words in error["message"], (path, where, error)
        if ROUTES[path] == "openai":
            assert error["type"] == "invalid_request_error"
        else:
            assert error["type"] == "invalid_request_error"
    assert gateway.turn_count() == before


def test_the_valid_bodies_are_valid(gateway: ThreadedGateway) -> None:
    for path, body in VALID.items():
        before = gateway.turn_count()
        response = gateway.http.post(path, content=json.dumps(body))
        assert response.status_code == 200, response.text
        check(gateway, path, response, before)


@pytest.mark.parametrize(
    "raw",
    [
        b"",
        b"{",
        b"[]",
        b'"text"',
        b"1",
        b"null",
        b"true",
        b"[" * 100_000,
        b'{"a": ' * 50_000,
        b"\xff\xfe{}",
        b'{"model": "m", "max_tokens": 8, "temperature": NaN, "messages": []}',
        b'{"model": "m", "max_tokens": Infinity, "messages": [], "input": "x"}',
        b'{"model": "m", "top_p": -Infinity, "max_tokens": 1e400, "messages": [], "input": "x"}',
    ],
)
def test_non_objects_and_broken_json(gateway: ThreadedGateway, raw: bytes) -> None:
    for path in ROUTES:
        before = gateway.turn_count()
        response = gateway.http.post(path, content=raw)
        assert response.status_code == 400, response.text
        check(gateway, path, response, before)


def test_unknown_routes_and_methods_answer_in_shape(gateway: ThreadedGateway) -> None:
    missing = gateway.http.post("/v1/nope", content="{}")
    assert missing.status_code == 404 and set(missing.json()["error"]) >= {"message", "type"}
    wrong = gateway.http.get("/v1/chat/completions")
    assert wrong.status_code == 405 and "error" in wrong.json()
    wrong = gateway.http.get("/v1/messages")
    assert wrong.status_code == 405 and wrong.json()["type"] == "error"
