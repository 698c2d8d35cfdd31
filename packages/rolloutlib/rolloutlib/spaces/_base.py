"""Shared machinery of rolloutlib's spaces: validation with errors, JSON per element."""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import Any, TypeVar

import gymnasium as gym
import numpy as np
from pydantic import ValidationError

from rolloutlib.errors import ArgumentError, SpaceValueError

T = TypeVar("T")

DEFAULT_SAMPLE_MAX_LENGTH = 32
"""Longest sample drawn from a space without a `max_length` (membership stays unbounded)."""


class StructuredSpace(gym.spaces.Space[T]):
    """Base of rolloutlib's spaces: values are plain Python data checked by `validate`.

    Subclasses implement `validate` (raise `SpaceValueError` naming the space and the value),
    `sample`, `_params` (for `repr` and `==`) and the JSON conversions of one element.
    """

    def __init__(self, seed: int | np.random.Generator | None = None) -> None:
        super().__init__(shape=None, dtype=None, seed=seed)

    def validate(self, x: Any) -> T:
        """Return `x` (possibly normalized) if it is an element of the space.

        Raises:
            SpaceValueError: `x` is not an element; the message names the space and `x`.
        """
        raise NotImplementedError

    def contains(self, x: Any) -> bool:
        """Whether `x` is an element of the space."""
        try:
            self.validate(x)
        except SpaceValueError:
            return False
        return True

    def _reject(self, x: Any, reason: str) -> SpaceValueError:
        return SpaceValueError(self, x, reason)

    def _reject_validation(self, x: Any, exc: ValidationError) -> SpaceValueError:
        details = "; ".join(
            f"{_loc(err['loc'])}: {err['msg']} (got {err.get('input')!r:.60})"
            for err in exc.errors()[:5]
        )
        return SpaceValueError(self, x, details)

    @property
    def is_np_flattenable(self) -> bool:
        return False

    def element_to_jsonable(self, x: T) -> Any:
        """One element as JSON-compatible data."""
        return x

    def element_from_jsonable(self, data: Any) -> T:
        """Inverse of `element_to_jsonable` (validated)."""
        return self.validate(data)

    def to_jsonable(self, sample_n: Iterable[T]) -> list[Any]:
        return [self.element_to_jsonable(self.validate(x)) for x in sample_n]

    def from_jsonable(self, sample_n: list[Any]) -> list[T]:
        return [self.element_from_jsonable(x) for x in sample_n]

    def _params(self) -> dict[str, Any]:
        raise NotImplementedError

    def __eq__(self, other: object) -> bool:
        return type(other) is type(self) and self._params() == other._params()  # type: ignore[attr-defined]

    def __hash__(self) -> int:
        return hash((type(self), repr(self)))

    def __repr__(self) -> str:
        args = ", ".join(f"{k}={v!r}" for k, v in self._params().items())
        return f"{type(self).__name__}({args})"


def _loc(loc: Sequence[Any]) -> str:
    text = ""
    for part in loc:
        text += f"[{part}]" if isinstance(part, int) else f".{part}"
    return text.lstrip(".") or "value"


def check_length_bounds(min_length: Any, max_length: Any) -> tuple[int, int | None]:
    """Validate `min_length` / `max_length` constructor arguments."""
    if not isinstance(min_length, int | np.integer) or isinstance(min_length, bool):
        raise ArgumentError("min_length", min_length, "expected an int")
    if min_length < 0:
        raise ArgumentError("min_length", min_length, "must be >= 0")
    if max_length is not None:
        if not isinstance(max_length, int | np.integer) or isinstance(max_length, bool):
            raise ArgumentError("max_length", max_length, "expected an int or None")
        if max_length < min_length:
            raise ArgumentError(
                "max_length", max_length, f"must be >= min_length ({int(min_length)})"
            )
        max_length = int(max_length)
    return int(min_length), max_length


def sample_length(space: gym.spaces.Space[Any], min_length: int, max_length: int | None) -> int:
    upper = max_length if max_length is not None else min_length + DEFAULT_SAMPLE_MAX_LENGTH
    return int(space.np_random.integers(min_length, upper + 1))


def element_to_jsonable(space: gym.spaces.Space[Any], x: Any) -> Any:
    """One element of any Gymnasium space as JSON-compatible data.

    Gymnasium's `to_jsonable` works on batches (and `Dict` returns a dict of lists); this
    converts a single element so tool arguments keep their natural shape.
    """
    if isinstance(space, StructuredSpace):
        return space.element_to_jsonable(x)
    if isinstance(space, gym.spaces.Dict):
        return {key: element_to_jsonable(sub, x[key]) for key, sub in space.spaces.items()}
    if isinstance(space, gym.spaces.Tuple):
        return [element_to_jsonable(sub, v) for sub, v in zip(space.spaces, x, strict=True)]
    if isinstance(space, gym.spaces.Discrete):
        return int(x)
    if isinstance(space, gym.spaces.Text):
        return str(x)
    batch = space.to_jsonable([x])
    return batch[0] if isinstance(batch, list) and len(batch) == 1 else {"$batch": batch}


def element_from_jsonable(space: gym.spaces.Space[Any], data: Any) -> Any:
    """Inverse of `element_to_jsonable`."""
    if isinstance(space, StructuredSpace):
        return space.element_from_jsonable(data)
    if isinstance(space, gym.spaces.Dict):
        return {key: element_from_jsonable(sub, data[key]) for key, sub in space.spaces.items()}
    if isinstance(space, gym.spaces.Tuple):
        return tuple(
            element_from_jsonable(sub, v) for sub, v in zip(space.spaces, data, strict=True)
        )
    if isinstance(space, gym.spaces.Discrete):
        return np.int64(data)
    if isinstance(space, gym.spaces.Text):
        return str(data)
    if isinstance(data, dict) and set(data) == {"$batch"}:
        return space.from_jsonable(data["$batch"])[0]
    return space.from_jsonable([data])[0]


def check_space_argument(name: str, space: Any) -> gym.spaces.Space[Any]:
    if not isinstance(space, gym.spaces.Space):
        raise ArgumentError(name, space, "expected a gymnasium.spaces.Space")
    return space
