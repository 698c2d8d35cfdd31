"""`EventStream`: the headers go out with the first event, the last events with the body's end."""

from __future__ import annotations

from collections.abc import AsyncIterator, MutableMapping
from typing import Any

from rollout.gateway import sse
from rollout.gateway.errors import GatewayError
from rollout.gateway.streaming import stream_response


async def _play(events: AsyncIterator[bytes]) -> list[Any]:
    """The ASGI messages the response sends, with what the stream had produced by each."""
    sent: list[Any] = []

    async def receive() -> dict[str, Any]:
        raise AssertionError("spec 2.4: the response does not listen for a disconnect")

    async def send(message: MutableMapping[str, Any]) -> None:
        sent.append(message)

    def on_error(err: GatewayError) -> bytes:
        return sse.data_event({"error": err.message})

    response = stream_response(events, on_error)
    scope = {"type": "http", "asgi": {"spec_version": "2.4"}}
    await response(scope, receive, send)
    return sent


async def test_headers_wait_for_the_first_event_and_the_last_events_end_the_body() -> None:
    produced: list[str] = []

    async def events() -> AsyncIterator[bytes]:
        produced.append("first")
        yield b"data: 1\n\n"
        produced.append("second")
        yield b"data: 2\n\n"
        yield sse.final([b"data: end\n\n", sse.DONE])

    seen: list[tuple[str, list[str]]] = []

    async def recording() -> AsyncIterator[bytes]:
        async for event in events():
            seen.append((bytes(event).decode(), list(produced)))
            yield event

    messages = await _play(recording())
    assert [m["type"] for m in messages] == ["http.response.start"] + ["http.response.body"] * 3
    assert [m.get("body") for m in messages[1:]] == [
        b"data: 1\n\n",
        b"data: 2\n\n",
        b"data: end\n\n" + sse.DONE,
    ]
    # The last events end the body: no separate empty write after them.
    assert [m.get("more_body") for m in messages[1:]] == [True, True, False]
    assert seen[0][1] == ["first"]  # the first event existed before the headers were sent


async def test_a_stream_without_a_final_mark_still_ends_and_errors_become_events() -> None:
    async def failing() -> AsyncIterator[bytes]:
        yield b"data: 1\n\n"
        raise GatewayError("backend went away", kind="unavailable")

    messages = await _play(failing())
    bodies = [(m.get("body"), m.get("more_body")) for m in messages[1:]]
    assert bodies[0] == (b"data: 1\n\n", True)
    assert b"backend went away" in bodies[1][0] and bodies[1][1] is True
    assert bodies[-1] == (b"", False)


async def test_an_empty_stream_sends_headers_and_an_empty_body() -> None:
    async def nothing() -> AsyncIterator[bytes]:
        return
        yield b""

    messages = await _play(nothing())
    assert messages[0]["type"] == "http.response.start" and messages[0]["status"] == 200
    assert [(m["body"], m["more_body"]) for m in messages[1:]] == [(b"", False)]
