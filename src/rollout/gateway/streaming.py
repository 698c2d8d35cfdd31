"""A turn streamed to its client while it is sampled (`Gateway.stream`), for the adapters.

`LiveTurn.open` waits until the first piece of text (or the whole turn) is there, so a failure
before that (admission, a backend that rejects the prompt) is still answered as an error
response; later failures end the stream with an error event in the protocol's shape
(`stream_response`). The adapters read `start`, then `deltas()`, then `result` (recorded before
the adapter sends its final event) and `rest()` (what the deltas did not send).
"""

from __future__ import annotations

import logging
from collections.abc import AsyncIterator, Callable

from starlette.responses import StreamingResponse

from rollout.gateway.canonical import StreamDelta, StreamStart, TurnResult
from rollout.gateway.errors import GatewayError

log = logging.getLogger("rollout.gateway")

Item = StreamStart | StreamDelta | TurnResult


class LiveTurn:
    """One streamed turn: its start, its text as it comes, then its recorded result."""

    def __init__(self, items: AsyncIterator[Item]) -> None:
        self._items = items
        self._early: list[StreamDelta] = []
        self._result: TurnResult | None = None
        self._start: StreamStart | None = None
        self.sent = ""
        self._sent_positions: set[int] = set()

    async def open(self) -> LiveTurn:
        """Read up to the first text (or the result); errors until then are raised here."""
        async for item in self._items:
            if isinstance(item, StreamStart):
                self._start = item
                continue
            if isinstance(item, StreamDelta):
                self._early.append(item)
            else:
                self._result = item
            break
        if self._start is None:
            raise GatewayError("the turn ended before it started", kind="server")
        return self

    @property
    def start(self) -> StreamStart:
        assert self._start is not None
        return self._start

    @property
    def result(self) -> TurnResult:
        """The recorded turn (after `deltas()` is exhausted)."""
        if self._result is None:
            raise GatewayError("the streamed turn has no result", kind="server")
        return self._result

    async def deltas(self) -> AsyncIterator[StreamDelta]:
        """The reply's text pieces as they are sampled; the result is recorded at the end."""
        early, self._early = self._early, []
        for delta in early:
            yield self._mark(delta)
        if self._result is not None:
            return
        async for item in self._items:
            if isinstance(item, StreamDelta):
                yield self._mark(item)
            elif isinstance(item, TurnResult):
                self._result = item

    def _mark(self, delta: StreamDelta) -> StreamDelta:
        self.sent += delta.text
        self._sent_positions.update(delta.positions)
        return delta

    def rest(self) -> tuple[str, tuple[int, ...]]:
        """The reply's text not sent as deltas, and the positions of its tokens."""
        result = self.result
        text = result.reply.text
        if text.startswith(self.sent):
            rest = text[len(self.sent) :]
        else:  # LiveText only sends prefixes of the parsed reply; never expected
            log.warning("streamed text %r is not a prefix of the reply %r", self.sent, text)
            rest = ""
        positions = tuple(i for i in range(len(result.tokens)) if i not in self._sent_positions)
        return rest, positions


def stream_response(
    events: AsyncIterator[bytes], on_error: Callable[[GatewayError], bytes]
) -> StreamingResponse:
    """An event stream; a failure after the first event ends it with `on_error`'s event."""

    async def body() -> AsyncIterator[bytes]:
        try:
            async for event in events:
                yield event
        except GatewayError as err:
            yield on_error(err)
        except Exception as exc:  # the response has started: end it with an error event
            log.exception("stream failed")
            yield on_error(GatewayError(f"internal error: {type(exc).__name__}", kind="server"))

    return StreamingResponse(
        body(), media_type="text/event-stream", headers={"Cache-Control": "no-cache"}
    )
