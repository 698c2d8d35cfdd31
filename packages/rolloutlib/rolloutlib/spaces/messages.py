"""`ChatSpace`: conversations as lists of plain message dicts.

A message is `{"role": str, "content": str | list[dict] | None}` with the optional keys
`"name"`, `"tool_calls"` (a list of `{"name", "arguments"[, "id"]}` dicts) and
`"tool_call_id"`, the common shape of chat APIs. The structure is validated with pydantic;
applications pass ordinary dicts, never framework objects.
"""

from __future__ import annotations

import copy
from collections.abc import Sequence
from typing import Any

import numpy as np
from pydantic import BaseModel, ConfigDict, Field, JsonValue, TypeAdapter, ValidationError

from rolloutlib.errors import ArgumentError, SpaceValueError
from rolloutlib.spaces._base import StructuredSpace, check_length_bounds, sample_length
from rolloutlib.spaces.text import TextSpace
from rolloutlib.spaces.tools import ToolCallSpace

__all__ = ["DEFAULT_ROLES", "ChatSpace", "chat"]

DEFAULT_ROLES = ("system", "user", "assistant", "tool")


class _ToolCallShape(BaseModel):
    model_config = ConfigDict(extra="forbid", strict=True)

    name: str = Field(min_length=1)
    arguments: Any
    id: str | None = None


class _MessageShape(BaseModel):
    model_config = ConfigDict(extra="forbid", strict=True)

    role: str
    content: str | list[dict[str, JsonValue]] | None = None
    name: str | None = None
    tool_calls: list[_ToolCallShape] | None = None
    tool_call_id: str | None = None


_MESSAGES: TypeAdapter[list[_MessageShape]] = TypeAdapter(list[_MessageShape])


class ChatSpace(StructuredSpace[list[dict[str, Any]]]):
    """Lists of chat messages with `min_length <= len <= max_length`.

    Args:
        min_length: Fewest messages.
        max_length: Most messages (`None`: unbounded).
        roles: Allowed roles.
        content: A `TextSpace` that string contents must belong to; it also draws the
            contents of samples. Default: any string (samples up to 32 characters).
        tools: If given, every entry of a message's `tool_calls` must belong to it.
        sample_roles: Roles that `sample()` alternates through (it starts at a random one).

    Example:
        >>> space = ChatSpace(min_length=1)
        >>> [{"role": "user", "content": "hi"}] in space
        True
        >>> [] in space, [{"role": "robot", "content": "hi"}] in space
        (False, False)
    """

    def __init__(
        self,
        min_length: int = 0,
        max_length: int | None = None,
        *,
        roles: Sequence[str] = DEFAULT_ROLES,
        content: TextSpace | None = None,
        tools: ToolCallSpace | None = None,
        sample_roles: Sequence[str] = ("user", "assistant"),
        seed: int | np.random.Generator | None = None,
    ) -> None:
        self.min_length, self.max_length = check_length_bounds(min_length, max_length)
        if isinstance(roles, str) or not roles or not all(isinstance(r, str) for r in roles):
            raise ArgumentError("roles", roles, "expected a non-empty sequence of strings")
        self.roles = tuple(roles)
        if content is not None and not isinstance(content, TextSpace):
            raise ArgumentError("content", content, "expected a TextSpace or None")
        self.content = content if content is not None else TextSpace(max_length=None)
        if tools is not None and not isinstance(tools, ToolCallSpace):
            raise ArgumentError("tools", tools, "expected a ToolCallSpace or None")
        self.tools = tools
        self.sample_roles = tuple(sample_roles)
        unknown = [r for r in self.sample_roles if r not in self.roles]
        if not self.sample_roles or unknown:
            raise ArgumentError(
                "sample_roles", sample_roles, f"must be a non-empty subset of roles {self.roles}"
            )
        super().__init__(seed=seed)

    def validate(self, x: Any) -> list[dict[str, Any]]:
        if not isinstance(x, list | tuple):
            raise self._reject(x, f"expected a list of message dicts, got {type(x).__name__}")
        n = len(x)
        if n < self.min_length:
            raise self._reject(x, f"{n} messages, fewer than min_length {self.min_length}")
        if self.max_length is not None and n > self.max_length:
            raise self._reject(x, f"{n} messages, more than max_length {self.max_length}")
        try:
            messages = _MESSAGES.validate_python(list(x))
        except ValidationError as exc:
            raise self._reject_validation(x, exc) from None
        for i, message in enumerate(messages):
            if message.role not in self.roles:
                raise self._reject(x, f"[{i}].role: {message.role!r} is not one of {self.roles}")
            if isinstance(message.content, str) and not self.content.contains(message.content):
                raise self._reject(
                    x, f"[{i}].content: length {len(message.content)} is outside {self.content!r}"
                )
            if self.tools is not None:
                for j, call in enumerate(x[i].get("tool_calls") or ()):
                    try:
                        self.tools.validate(call)
                    except SpaceValueError as exc:
                        raise self._reject(x, f"[{i}].tool_calls[{j}]: {exc.reason}") from None
        return list(x)

    def sample(
        self, mask: Any | None = None, probability: Any | None = None
    ) -> list[dict[str, Any]]:
        """Random messages with alternating `sample_roles` and contents from `content`."""
        if mask is not None or probability is not None:
            raise ArgumentError("mask", mask, "ChatSpace does not support masks")
        n = sample_length(self, self.min_length, self.max_length)
        start = int(self.np_random.integers(len(self.sample_roles)))
        roles = self.sample_roles
        return [
            {"role": roles[(start + i) % len(roles)], "content": self.content.sample()}
            for i in range(n)
        ]

    def seed(self, seed: int | None = None) -> tuple[Any, Any]:
        if seed is None:
            return super().seed(None), self.content.seed(None)
        own = super().seed(int(seed))
        return own, self.content.seed(int(self.np_random.integers(np.iinfo(np.int32).max)))

    def element_to_jsonable(self, x: list[dict[str, Any]]) -> list[dict[str, Any]]:
        if self.tools is None:
            return copy.deepcopy(list(x))
        out = []
        for message in x:
            message = dict(message)
            if message.get("tool_calls"):
                message["tool_calls"] = [
                    self.tools.element_to_jsonable(c) for c in message["tool_calls"]
                ]
            out.append(copy.deepcopy(message))
        return out

    def element_from_jsonable(self, data: Any) -> list[dict[str, Any]]:
        if not isinstance(data, list):
            raise self._reject(data, "expected a JSON list of messages")
        if self.tools is not None:
            data = [dict(m) if isinstance(m, dict) else m for m in data]
            for message in data:
                if isinstance(message, dict) and message.get("tool_calls"):
                    message["tool_calls"] = [
                        self.tools.element_from_jsonable(c) for c in message["tool_calls"]
                    ]
        return self.validate(data)

    def _params(self) -> dict[str, Any]:
        return {
            "min_length": self.min_length,
            "max_length": self.max_length,
            "roles": self.roles,
            "content": self.content,
            "tools": self.tools,
            "sample_roles": self.sample_roles,
        }

    def __repr__(self) -> str:
        extra = "" if self.roles == DEFAULT_ROLES else f", roles={self.roles!r}"
        return f"ChatSpace(min_length={self.min_length}, max_length={self.max_length}{extra})"


def chat(
    min_length: int = 0,
    max_length: int | None = None,
    *,
    roles: Sequence[str] = DEFAULT_ROLES,
    content: TextSpace | None = None,
    tools: ToolCallSpace | None = None,
    sample_roles: Sequence[str] = ("user", "assistant"),
    seed: int | np.random.Generator | None = None,
) -> ChatSpace:
    """A `ChatSpace`: lists of `min_length..max_length` message dicts (see `ChatSpace`)."""
    return ChatSpace(
        min_length,
        max_length,
        roles=roles,
        content=content,
        tools=tools,
        sample_roles=sample_roles,
        seed=seed,
    )
