"""`TextSpace`: every Unicode string whose length is within bounds.

Unlike `gymnasium.spaces.Text`, membership does not depend on a character set: any string of
the right length (counted in code points) belongs to the space. `sample_alphabet` only
controls which characters `sample()` draws.
"""

from __future__ import annotations

import string
from collections.abc import Sequence
from typing import Any

import numpy as np

from rolloutlib.errors import ArgumentError
from rolloutlib.spaces._base import StructuredSpace, check_length_bounds, sample_length

__all__ = ["DEFAULT_ALPHABET", "TextSpace", "text"]

DEFAULT_ALPHABET = string.ascii_letters + string.digits + " "


class TextSpace(StructuredSpace[str]):
    """Strings with `min_length <= len(s) <= max_length` (`max_length=None`: no upper bound).

    Example:
        >>> space = TextSpace(min_length=1, max_length=5, sample_alphabet="ab", seed=0)
        >>> "héllo" in space, "" in space, "toolong" in space
        (True, False, False)
        >>> set(space.sample()) <= {"a", "b"}
        True
    """

    def __init__(
        self,
        min_length: int = 0,
        max_length: int | None = None,
        sample_alphabet: str | Sequence[str] = DEFAULT_ALPHABET,
        *,
        seed: int | np.random.Generator | None = None,
    ) -> None:
        self.min_length, self.max_length = check_length_bounds(min_length, max_length)
        if isinstance(sample_alphabet, str):
            chars = list(dict.fromkeys(sample_alphabet))
        else:
            chars = list(dict.fromkeys(sample_alphabet))
            for char in chars:
                if not isinstance(char, str) or len(char) != 1:
                    raise ArgumentError(
                        "sample_alphabet", sample_alphabet, f"{char!r} is not one character"
                    )
        if not chars and self.max_length != 0:
            raise ArgumentError(
                "sample_alphabet", sample_alphabet, "must not be empty (nothing to sample)"
            )
        self.sample_alphabet = "".join(chars)
        self._alphabet = np.array(chars if chars else [""], dtype=object)
        super().__init__(seed=seed)

    def validate(self, x: Any) -> str:
        if not isinstance(x, str):
            raise self._reject(x, f"expected a str, got {type(x).__name__}")
        n = len(x)
        if n < self.min_length:
            raise self._reject(x, f"length {n} is below min_length {self.min_length}")
        if self.max_length is not None and n > self.max_length:
            raise self._reject(x, f"length {n} is above max_length {self.max_length}")
        return x

    def contains(self, x: Any) -> bool:
        # Fast path: membership is checked on every step by some callers.
        return (
            isinstance(x, str)
            and len(x) >= self.min_length
            and (self.max_length is None or len(x) <= self.max_length)
        )

    def sample(self, mask: Any | None = None, probability: Any | None = None) -> str:
        """A random string of `sample_alphabet` characters.

        Args:
            mask: Optional `(length, char_mask)` as in `gymnasium.spaces.Text`: a fixed length
                (or None) and an int8 array over `sample_alphabet` (1 = may be drawn).
            probability: Not supported (must be None).
        """
        if probability is not None:
            raise ArgumentError("probability", probability, "TextSpace samples uniformly")
        length: int | None = None
        alphabet = self._alphabet
        if mask is not None:
            length, char_mask = mask
            if char_mask is not None:
                char_mask = np.asarray(char_mask)
                if char_mask.shape != (len(self.sample_alphabet),):
                    raise ArgumentError(
                        "mask", mask, f"char mask must have shape ({len(self.sample_alphabet)},)"
                    )
                alphabet = alphabet[char_mask.astype(bool)]
        if length is None:
            length = sample_length(self, self.min_length, self.max_length)
        elif not self.contains("x" * int(length)):
            raise ArgumentError("mask", mask, f"length {length} is outside the space's bounds")
        if length and len(alphabet) == 0:
            raise ArgumentError("mask", mask, "no characters left to sample")
        return "".join(self.np_random.choice(alphabet, size=int(length)))

    def _params(self) -> dict[str, Any]:
        return {
            "min_length": self.min_length,
            "max_length": self.max_length,
            "sample_alphabet": self.sample_alphabet,
        }

    def __repr__(self) -> str:
        alphabet = (
            ""
            if self.sample_alphabet == DEFAULT_ALPHABET
            else (f", sample_alphabet={self.sample_alphabet!r:.40}")
        )
        return f"TextSpace(min_length={self.min_length}, max_length={self.max_length}{alphabet})"


def text(
    min_length: int = 0,
    max_length: int | None = None,
    sample_alphabet: str | Sequence[str] = DEFAULT_ALPHABET,
    *,
    seed: int | np.random.Generator | None = None,
) -> TextSpace:
    """A `TextSpace`: any Unicode string with `min_length <= len <= max_length`.

    Args:
        min_length: Shortest allowed string.
        max_length: Longest allowed string (`None`: unbounded; samples are then at most
            `min_length + 32` characters long).
        sample_alphabet: Characters `sample()` draws from. It does not restrict membership.
        seed: Optional seed for `sample()`.
    """
    return TextSpace(min_length, max_length, sample_alphabet, seed=seed)
