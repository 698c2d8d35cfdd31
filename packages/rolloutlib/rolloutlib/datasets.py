"""Datasets: sources of pre-rollout work (items), not collections of finished trajectories.

- `Dataset(items, metadata=...)`: an immutable sequence of items with metadata.
- `RLDataset(items, make_env, get_item_id)`: items plus how to build an environment for one
  and how to name it, with `make_env(i)`, `item_id(i)` and `rollout_group(i, policy, ...)`
  helpers.

Batching, shuffling, repetition and the number of rollouts per item stay in the training
loop. Any `Sequence` of items works wherever rolloutlib needs items; these containers are
conveniences, not base classes to inherit from.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from types import MappingProxyType
from typing import Any, Generic, TypeVar, overload

from rolloutlib.errors import ArgumentError
from rolloutlib.rollouts import (
    AsyncPolicy,
    Policy,
    TrajectoryGroup,
    arollout_group,
    rollout_group,
)

__all__ = ["Dataset", "RLDataset"]

ItemT = TypeVar("ItemT")


class Dataset(Sequence[ItemT], Generic[ItemT]):
    """An immutable sequence of items with read-only metadata.

    Example:
        >>> items = Dataset(["a", "b", "c"], metadata={"split": "train"})
        >>> len(items), items[0], list(items[1:]), items.metadata["split"]
        (3, 'a', ['b', 'c'], 'train')
    """

    def __init__(self, items: Iterable[ItemT], metadata: Mapping[str, Any] | None = None) -> None:
        if isinstance(items, str | bytes) or not isinstance(items, Iterable):
            raise ArgumentError("items", items, "expected an iterable of items")
        if metadata is not None and not isinstance(metadata, Mapping):
            raise ArgumentError("metadata", metadata, "expected a mapping or None")
        self._items: tuple[ItemT, ...] = tuple(items)
        self._metadata: Mapping[str, Any] = MappingProxyType(dict(metadata or {}))

    @property
    def items(self) -> tuple[ItemT, ...]:
        """The items, in order."""
        return self._items

    @property
    def metadata(self) -> Mapping[str, Any]:
        """Read-only metadata (split, source, version, ...)."""
        return self._metadata

    def __len__(self) -> int:
        return len(self._items)

    @overload
    def __getitem__(self, index: int) -> ItemT: ...

    @overload
    def __getitem__(self, index: slice) -> Dataset[ItemT]: ...

    def __getitem__(self, index: int | slice) -> ItemT | Dataset[ItemT]:
        if isinstance(index, slice):
            return self._with_items(self._items[index])
        try:
            return self._items[index]
        except IndexError:
            raise IndexError(
                f"index {index} out of range for a dataset of {len(self)} items"
            ) from None
        except TypeError:
            raise ArgumentError("index", index, "expected an int or a slice") from None

    def __iter__(self) -> Iterator[ItemT]:
        return iter(self._items)

    def _with_items(self, items: Sequence[ItemT]) -> Dataset[ItemT]:
        return Dataset(items, self._metadata)

    def __eq__(self, other: object) -> bool:
        if type(other) is not type(self):
            return NotImplemented
        assert isinstance(other, Dataset)
        return self._items == other._items and dict(self._metadata) == dict(other._metadata)

    __hash__ = None  # type: ignore[assignment]

    def __repr__(self) -> str:
        return f"{type(self).__name__}({len(self)} items, metadata={dict(self._metadata)!r})"


class RLDataset(Dataset[ItemT]):
    """Items plus an environment factory and an item namer.

    Args:
        items: The items.
        make_env: `item -> environment` (a `gymnasium.Env` or an `AsyncEnv`).
        get_item_id: `item -> str` (default: the item's index as a string).
        metadata: Read-only metadata.

    Example:
        >>> from rolloutlib.rollouts import rollout
        >>> from rolloutlib.evals.benchmarks import GSM8KEnv
        >>> data = RLDataset(
        ...     [{"id": "p1", "question": "1+1?", "answer": "#### 2"}],
        ...     make_env=GSM8KEnv,
        ...     get_item_id=lambda item: item["id"],
        ... )
        >>> data.item_id(0)
        'p1'
        >>> rollout(data.make_env(0), lambda q: "2").total_reward
        1.0
    """

    def __init__(
        self,
        items: Iterable[ItemT],
        make_env: Callable[[ItemT], Any],
        get_item_id: Callable[[ItemT], str] | None = None,
        metadata: Mapping[str, Any] | None = None,
    ) -> None:
        super().__init__(items, metadata)
        if not callable(make_env):
            raise ArgumentError("make_env", make_env, "expected a callable item -> environment")
        if get_item_id is not None and not callable(get_item_id):
            raise ArgumentError("get_item_id", get_item_id, "expected a callable item -> str")
        self.env_factory = make_env
        self.get_item_id = get_item_id

    def _with_items(self, items: Sequence[ItemT]) -> RLDataset[ItemT]:
        return RLDataset(items, self.env_factory, self.get_item_id, self.metadata)

    def make_env(self, index: int) -> Any:
        """A fresh environment for item `index` (the caller owns and closes it)."""
        return self.env_factory(self[index])

    def item_id(self, index: int) -> str:
        """The id of item `index` (`get_item_id(item)`, or `str(index)` without one)."""
        item = self[index]
        if self.get_item_id is None:
            return str(index if index >= 0 else len(self) + index)
        item_id = self.get_item_id(item)
        if not isinstance(item_id, str):
            raise ArgumentError("get_item_id", item_id, f"returned a non-str id for item {index}")
        return item_id

    def rollout_group(
        self,
        index: int,
        policy: Policy[Any, Any] | AsyncPolicy[Any, Any],
        num_rollouts: int = 1,
        **kwargs: Any,
    ) -> TrajectoryGroup:
        """`rollouts.rollout_group` for item `index`, with its id."""
        return rollout_group(
            self[index],
            self.env_factory,
            policy,
            num_rollouts,
            item_id=self.item_id(index),
            **kwargs,
        )

    async def arollout_group(
        self,
        index: int,
        policy: AsyncPolicy[Any, Any] | Policy[Any, Any],
        num_rollouts: int = 1,
        **kwargs: Any,
    ) -> TrajectoryGroup:
        """`rollouts.arollout_group` for item `index`, with its id."""
        return await arollout_group(
            self[index],
            self.env_factory,
            policy,
            num_rollouts,
            item_id=self.item_id(index),
            **kwargs,
        )

    def __eq__(self, other: object) -> bool:
        result = super().__eq__(other)
        if result is NotImplemented or not result:
            return result
        assert isinstance(other, RLDataset)
        return self.env_factory == other.env_factory and self.get_item_id == other.get_item_id

    __hash__ = None  # type: ignore[assignment]
