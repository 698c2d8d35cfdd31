"""Fingerprints: which recorded turn a conversation repeats.

A turn records the fingerprint of (conversation before the reply, tools, reply). When a later
request's conversation contains an assistant message with the same fingerprint, that message is
the seat's own earlier reply, and the prompt can reuse the turn's exact tokens. Ids of the
assistant's own tool calls are ours and clients echo them, but they never change what the model
sees, so they do not count; text is compared without surrounding whitespace, and tool-call
arguments as parsed JSON.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Sequence
from typing import Any

from rollout.contracts import Message, ToolSpec


def _canonical_arguments(arguments: str) -> Any:
    try:
        return json.loads(arguments)
    except (json.JSONDecodeError, RecursionError):
        return arguments.strip()


def _norm_message(message: Message) -> bytes:
    calls = [
        (c.name, json.dumps(_canonical_arguments(c.arguments), sort_keys=True))
        for c in message.tool_calls
    ]
    item = (message.role, message.text.strip(), calls, message.tool_call_id, message.name)
    return repr(item).encode("utf-8", "surrogatepass")


def prefix_hashes(messages: Sequence[Message]) -> list[bytes]:
    """`out[j]` identifies `messages[:j]`."""
    out = [hashlib.sha256(b"conversation").digest()]
    for message in messages:
        out.append(hashlib.sha256(out[-1] + _norm_message(message)).digest())
    return out


def tools_hash(tools: Sequence[ToolSpec]) -> bytes:
    """Identifies a list of tools."""
    payload = json.dumps(
        [t.model_dump(mode="json") for t in tools], sort_keys=True, separators=(",", ":")
    )
    return hashlib.sha256(payload.encode()).digest()


def reply_fingerprint(prefix_hash: bytes, tools_hash: bytes, reply: Message) -> str:
    """`fingerprint` from the conversation's prefix hash and the tools' hash."""
    return hashlib.sha256(prefix_hash + tools_hash + _norm_message(reply)).hexdigest()


def fingerprint(messages: Sequence[Message], tools: Sequence[ToolSpec], reply: Message) -> str:
    """Identifies (conversation, tools, assistant reply): equal iff a client repeats the reply.

    >>> asked, four = [Message.user("2+2?")], Message.assistant("4")
    >>> fingerprint(asked, [], four) == fingerprint(asked, [], Message.assistant(" 4 "))
    True
    >>> fingerprint(asked, [], four) == fingerprint([], [], four)
    False
    """
    return reply_fingerprint(prefix_hashes(messages)[-1], tools_hash(tools), reply)
