"""`TokenSequenceSpace`: lists of token ids in `[0, vocab_size)`.

Values are plain `list[int]`. Integer numpy arrays (1-D) and tuples are accepted as members
and normalized to lists by `validate`; booleans, floats and strings are not token ids.
"""

from __future__ import annotations

from typing import Annotated, Any

import numpy as np
from pydantic import Field, TypeAdapter, ValidationError

from rolloutlib.errors import ArgumentError
from rolloutlib.spaces._base import StructuredSpace, check_length_bounds, sample_length

__all__ = ["TokenSequenceSpace", "sequence"]


class TokenSequenceSpace(StructuredSpace[list[int]]):
    """Sequences of token ids.

    Example:
        >>> space = TokenSequenceSpace(vocab_size=10, max_length=3, seed=0)
        >>> [1, 2, 9] in space, [10] in space, [True] in space
        (True, False, False)
        >>> all(0 <= t < 10 for t in space.sample())
        True
    """

    def __init__(
        self,
        vocab_size: int,
        min_length: int = 0,
        max_length: int | None = None,
        *,
        seed: int | np.random.Generator | None = None,
    ) -> None:
        if not isinstance(vocab_size, int | np.integer) or isinstance(vocab_size, bool):
            raise ArgumentError("vocab_size", vocab_size, "expected an int")
        if vocab_size < 1:
            raise ArgumentError("vocab_size", vocab_size, "must be >= 1")
        self.vocab_size = int(vocab_size)
        self.min_length, self.max_length = check_length_bounds(min_length, max_length)
        token = Annotated[int, Field(strict=True, ge=0, lt=self.vocab_size)]
        self._adapter: TypeAdapter[list[int]] = TypeAdapter(
            Annotated[
                list[token],  # type: ignore[valid-type]
                Field(min_length=self.min_length, max_length=self.max_length),
            ]
        )
        super().__init__(seed=seed)

    def validate(self, x: Any) -> list[int]:
        if isinstance(x, np.ndarray):
            if x.ndim != 1 or x.dtype.kind not in "iu":
                raise self._reject(x, f"expected a 1-D integer array, got {x.dtype} {x.shape}")
            x_list: Any = x.tolist()
        elif isinstance(x, tuple):
            x_list = list(x)
        else:
            x_list = x
        if isinstance(x_list, list) and any(isinstance(t, np.integer) for t in x_list):
            x_list = [int(t) if isinstance(t, np.integer) else t for t in x_list]
        try:
            return self._adapter.validate_python(x_list)
        except ValidationError as exc:
            raise self._reject_validation(x, exc) from None

    def sample(self, mask: Any | None = None, probability: Any | None = None) -> list[int]:
        """Random token ids; `mask`, if given, is the fixed length to draw."""
        if probability is not None:
            raise ArgumentError("probability", probability, "not supported")
        if mask is None:
            length = sample_length(self, self.min_length, self.max_length)
        else:
            length = int(mask)
            if length < self.min_length or (
                self.max_length is not None and length > self.max_length
            ):
                raise ArgumentError("mask", mask, "length is outside the space's bounds")
        return self.np_random.integers(0, self.vocab_size, size=length).tolist()

    def element_to_jsonable(self, x: list[int]) -> list[int]:
        return list(x)

    def _params(self) -> dict[str, Any]:
        return {
            "vocab_size": self.vocab_size,
            "min_length": self.min_length,
            "max_length": self.max_length,
        }


def sequence(
    vocab_size: int,
    min_length: int = 0,
    max_length: int | None = None,
    *,
    seed: int | np.random.Generator | None = None,
) -> TokenSequenceSpace:
    """A `TokenSequenceSpace` of ids in `[0, vocab_size)`.

    Args:
        vocab_size: Number of token ids.
        min_length: Fewest tokens.
        max_length: Most tokens (`None`: unbounded; samples are then at most
            `min_length + 32` tokens long).
        seed: Optional seed for `sample()`.
    """
    return TokenSequenceSpace(vocab_size, min_length, max_length, seed=seed)
