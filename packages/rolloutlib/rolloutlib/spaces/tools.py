"""Tool-call spaces: `ToolCallSpace` (one call) and `ToolCallsSpace` (a list of calls).

A tool call is a plain dict `{"name": str, "arguments": value}` with an optional `"id": str`.
Each tool's arguments belong to a Gymnasium space of your choice (often a
`gymnasium.spaces.Dict` of `rolloutlib.spaces.text.text()` fields). The dict's shape is
validated with pydantic; the arguments by the tool's space.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import gymnasium as gym
import numpy as np
from pydantic import BaseModel, ConfigDict, Field, ValidationError

from rolloutlib.errors import ArgumentError, SpaceValueError
from rolloutlib.spaces._base import (
    StructuredSpace,
    check_length_bounds,
    check_space_argument,
    element_from_jsonable,
    element_to_jsonable,
    sample_length,
)

__all__ = ["ToolCallSpace", "ToolCallsSpace", "call", "calls"]

_SEED_BOUND = int(np.iinfo(np.int32).max)


class _ToolCallShape(BaseModel):
    model_config = ConfigDict(extra="forbid", strict=True)

    name: str = Field(min_length=1)
    arguments: Any
    id: str | None = None


class ToolCallSpace(StructuredSpace[dict[str, Any]]):
    """One call to one of the named tools.

    Example:
        >>> import gymnasium as gym
        >>> from rolloutlib.spaces.text import text
        >>> space = ToolCallSpace({"search": gym.spaces.Dict({"query": text(min_length=1)})})
        >>> {"name": "search", "arguments": {"query": "weather"}} in space
        True
        >>> {"name": "search", "arguments": {"query": ""}} in space
        False
        >>> {"name": "delete", "arguments": {}} in space
        False
    """

    def __init__(
        self,
        tools: Mapping[str, gym.spaces.Space[Any]],
        *,
        seed: int | np.random.Generator | None = None,
    ) -> None:
        if not isinstance(tools, Mapping) or not tools:
            raise ArgumentError("tools", tools, "expected a non-empty mapping of name to space")
        checked: dict[str, gym.spaces.Space[Any]] = {}
        for name, space in tools.items():
            if not isinstance(name, str) or not name:
                raise ArgumentError("tools", name, "tool names must be non-empty strings")
            checked[name] = check_space_argument(f"tools[{name!r}]", space)
        self.tools = checked
        self._names = list(checked)
        super().__init__(seed=seed)

    def validate(self, x: Any) -> dict[str, Any]:
        if not isinstance(x, dict):
            raise self._reject(
                x, f"expected a dict with name and arguments, got {type(x).__name__}"
            )
        try:
            call = _ToolCallShape.model_validate(x)
        except ValidationError as exc:
            raise self._reject_validation(x, exc) from None
        space = self.tools.get(call.name)
        if space is None:
            raise self._reject(x, f"unknown tool {call.name!r}; known tools: {self._names}")
        if isinstance(space, StructuredSpace):
            try:
                space.validate(call.arguments)
            except SpaceValueError as exc:
                raise self._reject(x, f"arguments of {call.name!r}: {exc.reason}") from None
        elif not space.contains(call.arguments):
            raise self._reject(x, f"arguments of {call.name!r} are not in {space!r}")
        return x

    def sample(self, mask: Any | None = None, probability: Any | None = None) -> dict[str, Any]:
        """A random call: a uniformly chosen tool and a sample of its argument space."""
        if mask is not None or probability is not None:
            raise ArgumentError("mask", mask, "ToolCallSpace does not support masks")
        name = self._names[int(self.np_random.integers(len(self._names)))]
        return {"name": name, "arguments": self.tools[name].sample()}

    def seed(self, seed: int | None = None) -> dict[str, Any]:
        """Seed the space and every tool's argument space (derived seeds, as `Dict` does)."""
        if seed is None:
            super().seed(None)
            return {name: space.seed(None) for name, space in self.tools.items()}
        if not isinstance(seed, int | np.integer):
            raise ArgumentError("seed", seed, "expected an int or None")
        super().seed(int(seed))
        subseeds = self.np_random.integers(_SEED_BOUND, size=len(self.tools))
        return {
            name: space.seed(int(sub))
            for (name, space), sub in zip(self.tools.items(), subseeds, strict=True)
        }

    def element_to_jsonable(self, x: dict[str, Any]) -> dict[str, Any]:
        data = {
            "name": x["name"],
            "arguments": element_to_jsonable(self.tools[x["name"]], x["arguments"]),
        }
        if x.get("id") is not None:
            data["id"] = x["id"]
        return data

    def element_from_jsonable(self, data: Any) -> dict[str, Any]:
        if (
            not isinstance(data, dict)
            or data.get("name") not in self.tools
            or "arguments" not in data
        ):
            raise self._reject(data, "not a JSON tool call of this space")
        value = dict(data)
        value["arguments"] = element_from_jsonable(self.tools[data["name"]], data["arguments"])
        return self.validate(value)

    def _params(self) -> dict[str, Any]:
        return {"tools": self.tools}


class ToolCallsSpace(StructuredSpace[list[dict[str, Any]]]):
    """A list of tool calls (each an element of `ToolCallSpace(tools)`).

    Example:
        >>> import gymnasium as gym
        >>> space = ToolCallsSpace({"noop": gym.spaces.Dict({})}, max_length=2)
        >>> [] in space, [{"name": "noop", "arguments": {}}] * 3 in space
        (True, False)
    """

    def __init__(
        self,
        tools: Mapping[str, gym.spaces.Space[Any]] | ToolCallSpace,
        min_length: int = 0,
        max_length: int | None = None,
        *,
        seed: int | np.random.Generator | None = None,
    ) -> None:
        self.call = tools if isinstance(tools, ToolCallSpace) else ToolCallSpace(tools)
        self.min_length, self.max_length = check_length_bounds(min_length, max_length)
        super().__init__(seed=seed)

    @property
    def tools(self) -> dict[str, gym.spaces.Space[Any]]:
        return self.call.tools

    def validate(self, x: Any) -> list[dict[str, Any]]:
        if not isinstance(x, list | tuple):
            raise self._reject(x, f"expected a list of tool calls, got {type(x).__name__}")
        n = len(x)
        if n < self.min_length:
            raise self._reject(x, f"{n} calls, fewer than min_length {self.min_length}")
        if self.max_length is not None and n > self.max_length:
            raise self._reject(x, f"{n} calls, more than max_length {self.max_length}")
        for i, item in enumerate(x):
            try:
                self.call.validate(item)
            except SpaceValueError as exc:
                raise self._reject(x, f"[{i}]: {exc.reason}") from None
        return list(x)

    def sample(
        self, mask: Any | None = None, probability: Any | None = None
    ) -> list[dict[str, Any]]:
        if mask is not None or probability is not None:
            raise ArgumentError("mask", mask, "ToolCallsSpace does not support masks")
        n = sample_length(self, self.min_length, self.max_length)
        return [self.call.sample() for _ in range(n)]

    def seed(self, seed: int | None = None) -> tuple[Any, Any]:
        if seed is None:
            return super().seed(None), self.call.seed(None)
        own = super().seed(int(seed))
        return own, self.call.seed(int(self.np_random.integers(_SEED_BOUND)))

    def element_to_jsonable(self, x: list[dict[str, Any]]) -> list[Any]:
        return [self.call.element_to_jsonable(c) for c in x]

    def element_from_jsonable(self, data: Any) -> list[dict[str, Any]]:
        if not isinstance(data, list):
            raise self._reject(data, "expected a JSON list of tool calls")
        return self.validate([self.call.element_from_jsonable(c) for c in data])

    def _params(self) -> dict[str, Any]:
        return {"tools": self.tools, "min_length": self.min_length, "max_length": self.max_length}


def call(
    tools: Mapping[str, gym.spaces.Space[Any]], *, seed: int | np.random.Generator | None = None
) -> ToolCallSpace:
    """A `ToolCallSpace`: one call `{"name", "arguments"[, "id"]}` to one of `tools`.

    Args:
        tools: Tool name -> the Gymnasium space of its arguments.
        seed: Optional seed for `sample()`.
    """
    return ToolCallSpace(tools, seed=seed)


def calls(
    tools: Mapping[str, gym.spaces.Space[Any]],
    min_length: int = 0,
    max_length: int | None = None,
    *,
    seed: int | np.random.Generator | None = None,
) -> ToolCallsSpace:
    """A `ToolCallsSpace`: a list of `min_length..max_length` calls to `tools`."""
    return ToolCallsSpace(tools, min_length, max_length, seed=seed)
