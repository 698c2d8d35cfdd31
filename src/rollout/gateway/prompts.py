"""Prompt building with token-exact history.

When a conversation contains an assistant message this seat produced (same conversation before
it, same tools, same reply: see `fingerprints`), the prompt is that turn's prompt tokens + its
completion tokens + the rendering of everything after the reply. Training then sees exactly the
tokens that were sampled, and the new turn extends the old one. Otherwise the prompt is the
chat template's rendering of the whole conversation.

Two paths, by what the renderer can give:

- text (`HFRenderer.render_text`): the conversation is rendered as text once; the rendering of
  what the reused turn answered (kept with the seat's recent turns, or rendered again) must be
  its start, and the text after the reply's end-of-turn token is encoded and appended;
- tokens (any `Renderer`): the conversation and the part before the reply are rendered as
  tokens, and the tokens after the reply's end-of-turn token are appended.

Either way, when the history renders differently from the recorded prompt (a template that
rewrites earlier turns) the full rendering is used, and nothing is spliced.

The text path keeps the last few conversations' renderings (`RenderCache`): the samples of a
group ask for the same prompt, and all but the first take its text and tokens from there.
"""

from __future__ import annotations

import json
import logging
import time
from array import array
from collections import OrderedDict
from collections.abc import Awaitable, Callable, Hashable, Sequence
from typing import TypeVar

from rollout.contracts import Message, ToolSpec, Turn
from rollout.gateway.errors import GatewayError
from rollout.gateway.fingerprints import prefix_hashes, reply_fingerprint, tools_hash
from rollout.gateway.recording import load_messages
from rollout.gateway.seats import SeatCache
from rollout.ledger import KeyInfo
from rollout.rendering.base import Renderer

log = logging.getLogger("rollout.gateway")

_R = TypeVar("_R")

TextRenderer = Callable[[Sequence[Message], Sequence[ToolSpec]], str]


def rendered(render: Callable[[], _R]) -> _R:
    """Run a chat-template render; a template rejecting a conversation is the client's input."""
    try:
        return render()
    except GatewayError:
        raise
    except Exception as exc:
        raise GatewayError(
            f"messages: the chat template cannot render this conversation: {exc}",
            param="messages",
            code="render_failed",
        ) from exc


def render_key(messages: Sequence[Message], tools: Sequence[ToolSpec]) -> Hashable:
    """What a chat template sees of a conversation, exactly, as a hashable key.

    >>> hi = [Message.user("hi")]
    >>> render_key(hi, []) == render_key([Message.user("hi")], [])
    True
    >>> render_key(hi, []) == render_key([Message.user("hi ")], [])
    False
    """
    return (
        tuple(
            (
                m.role,
                m.content if isinstance(m.content, str) else tuple(p.text for p in m.content),
                tuple((c.id, c.name, c.arguments) for c in m.tool_calls),
                m.tool_call_id,
                m.name,
            )
            for m in messages
        ),
        tuple((t.name, t.description, json.dumps(t.parameters)) for t in tools),
    )


class RenderCache:
    """The renderings (text, and tokens once encoded) of the latest conversations.

    A group's samples send the same conversation, so all but the first reuse its rendering.
    An entry lives `ttl` seconds (a template may print the date: a day's change shows within
    that); texts over `max_chars` are not kept (a long agent conversation rarely repeats), and
    the oldest entries go when there are more than `size` or their texts add up to more than
    `budget_chars` (tokens are kept as 4-byte ids: a few MB at most).

    >>> cache = RenderCache(size=1)
    >>> cache.put("a", "text a", [1])
    >>> cache.get("a")
    ('text a', [1])
    >>> cache.put("b", "text b", None)
    >>> cache.get("a") is None  # the oldest went
    True
    >>> cache = RenderCache(budget_chars=10)
    >>> cache.put("a", "123456", None); cache.put("b", "123456", None)
    >>> cache.get("a"), cache.get("b")  # the two texts exceed the budget
    (None, ('123456', None))
    """

    def __init__(
        self,
        size: int = 256,
        ttl: float = 60.0,
        max_chars: int = 32_768,
        budget_chars: int = 1_000_000,
    ) -> None:
        self.size = size
        self.ttl = ttl
        self.max_chars = max_chars
        self.budget_chars = budget_chars
        self._chars = 0
        self._entries: OrderedDict[Hashable, tuple[float, str, array[int] | None]] = OrderedDict()

    def get(self, key: Hashable) -> tuple[str, list[int] | None] | None:
        """(text, tokens or None) for `key`, if kept and not expired."""
        entry = self._entries.get(key)
        if entry is None:
            return None
        born, text, tokens = entry
        if time.monotonic() - born > self.ttl:
            self._drop(key)
            return None
        return text, None if tokens is None else tokens.tolist()

    def put(self, key: Hashable, text: str, tokens: Sequence[int] | None) -> None:
        """Keep `text` (and its `tokens`) for `key`, dropping the oldest entries when full."""
        if len(text) > self.max_chars:
            return
        if key in self._entries:
            self._drop(key)
        self._entries[key] = (
            time.monotonic(),
            text,
            None if tokens is None else array("i", tokens),
        )
        self._chars += len(text)
        while len(self._entries) > self.size or self._chars > self.budget_chars:
            self._drop(next(iter(self._entries)))

    def _drop(self, key: Hashable) -> None:
        _, text, _ = self._entries.pop(key)
        self._chars -= len(text)


class PromptBuilder:
    """Builds a seat's prompt tokens, reusing recorded tokens where the conversation repeats.

    Args:
        renderer: the model's chat template.
        seats: the gateway's seats (recent turns and their prompt texts).
        seat_turns: every recorded turn of a seat (read when the recent ones do not match).
    """

    def __init__(
        self,
        renderer: Renderer,
        seats: SeatCache,
        seat_turns: Callable[[KeyInfo], Awaitable[list[Turn]]],
    ) -> None:
        self.renderer = renderer
        self.seats = seats
        self.seat_turns = seat_turns
        self._stop_ids = list(renderer.stop_token_ids)
        self._stop_set = frozenset(self._stop_ids)
        texts = [(t, renderer.decode([t])) for t in self._stop_ids]
        self._stop_texts = [(t, text) for t, text in texts if text]
        # HFRenderer renders text first; splicing on text saves a second render per turn.
        self._text_renderer: TextRenderer | None = getattr(renderer, "render_text", None)
        self.cache = RenderCache()

    def render(self, messages: Sequence[Message], tools: Sequence[ToolSpec]) -> list[int]:
        """The full rendering of `messages` as tokens (400 when the template rejects them)."""
        return rendered(lambda: list(self.renderer.render(messages, tools)))

    def _render_text(self, messages: Sequence[Message], tools: Sequence[ToolSpec]) -> str:
        text_renderer = self._text_renderer
        assert text_renderer is not None
        return rendered(lambda: text_renderer(messages, tools))

    async def match(
        self, info: KeyInfo, messages: Sequence[Message], tools: Sequence[ToolSpec]
    ) -> tuple[int, Turn] | None:
        """(j, turn): the latest assistant message `messages[j]` that repeats a recorded turn."""
        positions = [j for j, m in enumerate(messages) if m.role == "assistant"]
        if not positions:
            return None
        hashes = prefix_hashes(messages)
        tools_id = tools_hash(tools)
        wanted = {reply_fingerprint(hashes[j], tools_id, messages[j]): j for j in positions}
        seat = self.seats.get(info)
        found = [(wanted[fp], t) for fp, (t, _) in seat.recent.items() if fp in wanted]
        if not found or max(j for j, _ in found) != positions[-1]:
            for turn in await self.seat_turns(info):
                fp = turn.request.get("fingerprint")
                if isinstance(fp, str) and fp in wanted:
                    found.append((wanted[fp], turn))
        if not found:
            return None
        return max(found, key=lambda item: (item[0], item[1].index))

    async def build(
        self, info: KeyInfo, messages: Sequence[Message], tools: Sequence[ToolSpec]
    ) -> tuple[list[int], Turn | None, str | None]:
        """The prompt tokens, the recorded turn whose tokens they reuse (if any), and the
        prompt's text when the renderer can give it (kept to splice the next turn cheaply)."""
        if self._text_renderer is None:
            prompt, turn = await self._build_from_tokens(info, messages, tools)
            return prompt, turn, None
        key = render_key(messages, tools)
        kept = self.cache.get(key)
        if kept is None:
            full, tokens = self._render_text(messages, tools), None
        else:
            full, tokens = kept
        match = await self.match(info, messages, tools)
        if match is None:
            if tokens is None:
                tokens = self.renderer.encode(full)
                self.cache.put(key, full, tokens)
            return tokens, None, full
        if kept is None:
            self.cache.put(key, full, None)
        _, turn = match
        prefix = self.seats.get(info).prompt_text(turn)
        if prefix is None:
            prefix = self._render_text(
                load_messages(turn.request.get("messages", [])),
                [ToolSpec.model_validate(t) for t in turn.request.get("tools", [])],
            )
        # The conversation the turn answered must render, on its own, exactly as the start of
        # this one; otherwise (a template that rewrites history) splicing would mix renderings.
        if not full.startswith(prefix):
            log.debug("history renders differently; full render after turn %s", turn.index)
            return self.renderer.encode(full), None, full
        tail = full[len(prefix) :]
        hits = [(tail.find(text), text, tid) for tid, text in self._stop_texts if text in tail]
        if not hits:
            return self.renderer.encode(full), None, full
        pos, text, tid = min(hits)
        prompt = self._reused(turn, tid)
        # A special token splits tokenization, so what follows it encodes on its own.
        prompt.extend(self.renderer.encode(tail[pos + len(text) :]))
        return prompt, turn, full

    async def _build_from_tokens(
        self, info: KeyInfo, messages: Sequence[Message], tools: Sequence[ToolSpec]
    ) -> tuple[list[int], Turn | None]:
        """`build` for renderers that only give tokens."""
        full = self.render(messages, tools)
        match = await self.match(info, messages, tools)
        if match is None:
            return full, None
        j, turn = match
        prefix = self.render(messages[:j], tools)
        if full[: len(prefix)] != prefix:
            log.debug("history renders differently; full render after turn %s", turn.index)
            return full, None
        tail = full[len(prefix) :]
        end = next((i for i, t in enumerate(tail) if t in self._stop_set), None)
        if end is None:
            return full, None
        prompt = self._reused(turn, tail[end])
        prompt.extend(tail[end + 1 :])
        return prompt, turn

    def _reused(self, turn: Turn, end_of_turn: int) -> list[int]:
        """`turn`'s prompt and completion, closed with `end_of_turn` if the reply was cut."""
        prompt = [*turn.prompt_tokens, *turn.completion_tokens]
        if not turn.completion_tokens or turn.completion_tokens[-1] not in self._stop_set:
            prompt.append(end_of_turn)  # the reply was cut (length, stop string): close it
        return prompt
