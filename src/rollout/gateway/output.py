"""What the sampled tokens look like to clients: stop strings, streaming pieces, token views.

- `cut_at_stop_string`: a completion cut after the first client stop string (the shortest
  token prefix whose text contains it), so what is recorded is what the client got.
- `pieces`: the reply's text split into per-token streaming pieces when the tokens spell it
  exactly (a character split across tokens waits for its last token); otherwise one piece.
- `token_views`: each token's text and logprob, and its most likely alternatives when asked.
- `LiveText`: the reply's text while it is sampled, in the pieces that are safe to send early.

Token texts are cached: decoding one token at a time is most of the cost of streaming.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

from rollout.contracts import Completion, Message, SamplingParams
from rollout.gateway.canonical import StreamDelta, TokenView
from rollout.rendering.base import Renderer

MAX_CACHED_TOKENS = 500_000


def finite(logprob: float) -> float:
    """JSON has no -inf; OpenAI reports impossible tokens as -9999.0.

    >>> finite(float("-inf")), finite(-0.5)
    (-9999.0, -0.5)
    """
    return logprob if math.isfinite(logprob) else -9999.0


class TokenText:
    """Decodes completions for clients with `renderer`; `stop_ids` end a reply."""

    def __init__(self, renderer: Renderer, stop_ids: Sequence[int]) -> None:
        self.renderer = renderer
        self.stop_ids = list(stop_ids)
        self._text: dict[int, str] = {}

    def token(self, token: int) -> str:
        """The text of one token (cached)."""
        text = self._text.get(token)
        if text is None:
            text = self.renderer.decode([token])
            if len(self._text) < MAX_CACHED_TOKENS:
                self._text[token] = text
        return text

    def body(self, completion: Completion) -> list[int]:
        """The completion's tokens without the stop token that ended it."""
        body = list(completion.tokens)
        if body and body[-1] in self.stop_ids and completion.stop_reason == "stop":
            body = body[:-1]
        return body

    def cut_at_stop_string(
        self, completion: Completion, stops: Sequence[str]
    ) -> tuple[Completion, str | None]:
        """The completion cut after the first client stop string, and that string."""
        wanted = [s for s in stops if s]
        if not wanted:
            return completion, None
        body = list(completion.tokens)
        if body and body[-1] in self.stop_ids:
            body = body[:-1]
        decode = self.renderer.decode
        text = decode(body)
        hits = [(text.find(s), s) for s in wanted if s in text]
        if not hits:
            return completion, None
        pos, stop = min(hits)
        need = pos + len(stop)
        lo, hi = 1, len(body)
        while lo < hi:  # shortest token prefix whose text reaches the end of the stop string
            mid = (lo + hi) // 2
            if len(decode(body[:mid])) >= need:
                hi = mid
            else:
                lo = mid + 1
        k = lo
        while k < len(body) and stop not in decode(body[:k]):
            k += 1
        cut = Completion(
            tokens=tuple(body[:k]),
            logprobs=tuple(completion.logprobs[:k]),
            stop_reason="stop",
            version=completion.version,
            top_logprobs=tuple(completion.top_logprobs[:k]),
        )
        return cut, stop

    def pieces(
        self, reply: Message, body: Sequence[int]
    ) -> tuple[tuple[str, tuple[int, ...]], ...]:
        """The reply's text split into per-token pieces when the tokens spell it exactly."""
        text = reply.text
        if not reply.tool_calls:
            decode = self.renderer.decode
            pieces: list[tuple[str, tuple[int, ...]]] = []
            group: list[int] = []
            for pos, token in enumerate(body):
                group.append(pos)
                piece = self.token(token) if len(group) == 1 else decode([body[i] for i in group])
                if not piece.endswith("\ufffd"):
                    pieces.append((piece, tuple(group)))
                    group = []
            if group:
                pieces.append((decode([body[i] for i in group]), tuple(group)))
            if "".join(p for p, _ in pieces) == text:
                return tuple(p for p in pieces if p[0])
        if not text:
            return ()
        return ((text, tuple(range(len(body)))),)

    def views(
        self, completion: Completion, body: Sequence[int], params: SamplingParams
    ) -> tuple[TokenView, ...]:
        """Per-token views of `body`, with `params.top_logprobs` alternatives each."""
        logprobs, top = completion.logprobs, completion.top_logprobs
        want = params.top_logprobs
        return tuple(
            TokenView(
                token=self.token(t),
                logprob=finite(logprobs[i]) if i < len(logprobs) else 0.0,
                top=tuple(
                    (self.token(tid), finite(lp))
                    for tid, lp in sorted(top[i].items(), key=lambda kv: -kv[1])[:want]
                )
                if want and i < len(top)
                else (),
            )
            for i, t in enumerate(body)
        )


class LiveText:
    """The reply's text while it is sampled, in the pieces that can be sent before parsing.

    Text is held back from the first `<` on (a tool call or a reasoning block may start there,
    and only the parsed reply says what it is) and while it ends in whitespace (a tool call
    takes the newline before it); a character split across tokens waits for its last token.
    With `streaming=False` everything is held: the reply comes whole from the `TurnResult`.
    What was sent is always a prefix of the parsed reply's text.

    Args:
        text: the token texts of the served model.
        params: the request's sampling settings (`top_logprobs` alternatives per token).
        streaming: whether anything may be sent before the end.
    """

    def __init__(self, text: TokenText, params: SamplingParams, *, streaming: bool) -> None:
        self._text = text
        self._want = params.top_logprobs
        self._open = streaming
        self._stops = frozenset(text.stop_ids)
        self._position = 0
        self._group: list[tuple[int, int, TokenView]] = []
        self._pending: list[StreamDelta] = []
        self.sent = ""
        """The text sent so far."""

    def feed(
        self,
        tokens: Sequence[int],
        logprobs: Sequence[float],
        top: Sequence[dict[int, float]] = (),
    ) -> list[StreamDelta]:
        """The pieces that can be sent now that `tokens` were sampled."""
        if not self._open:
            return []
        for k, token in enumerate(tokens):
            position = self._position
            self._position += 1
            if token in self._stops:
                self._open = False
                break
            view = TokenView(
                token=self._text.token(token),
                logprob=finite(logprobs[k]) if k < len(logprobs) else 0.0,
                top=tuple(
                    (self._text.token(tid), finite(lp))
                    for tid, lp in sorted(top[k].items(), key=lambda kv: -kv[1])[: self._want]
                )
                if self._want and k < len(top)
                else (),
            )
            self._group.append((position, token, view))
            if len(self._group) == 1:
                piece = view.token
            else:
                piece = self._text.renderer.decode([t for _, t, _ in self._group])
            if piece.endswith("\ufffd"):
                continue  # a character split across tokens: wait for the rest
            group, self._group = self._group, []
            if "<" in piece:
                self._open = False
                break
            self._pending.append(
                StreamDelta(
                    text=piece,
                    positions=tuple(p for p, _, _ in group),
                    tokens=tuple(v for _, _, v in group),
                )
            )
        if not self._pending:
            return []
        if self._pending[-1].text[-1:].isspace() or not self._pending[-1].text:
            ready, self._pending = self._pending[:-1], self._pending[-1:]
        else:
            ready, self._pending = self._pending, []
        ready = [d for d in ready if d.text]
        self.sent += "".join(d.text for d in ready)
        return ready
