"""Dataset and RLDataset."""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from dataclasses import dataclass

import pytest
from rolloutlib import ArgumentError, SingleTurnEnv, spaces
from rolloutlib.datasets import Dataset, RLDataset


@dataclass(frozen=True)
class Problem:
    id: str
    question: str
    answer: str


class ProblemEnv(SingleTurnEnv[str, str]):
    observation_space = spaces.text.text()
    action_space = spaces.text.text()

    def __init__(self, problem: Problem) -> None:
        self.problem = problem

    def observe(self) -> str:
        return self.problem.question

    def evaluate(self, action: str) -> float:
        return float(action == self.problem.answer)


A = Problem("a", "1+1?", "2")
B = Problem("b", "2+2?", "4")


def test_dataset_is_an_immutable_sequence_with_metadata():
    items = Dataset([A, B], metadata={"split": "train"})
    assert isinstance(items, Sequence)
    assert len(items) == 2 and items[0] is A and items[-1] is B and list(items) == [A, B]
    assert items.metadata["split"] == "train"
    with pytest.raises(TypeError):
        items.metadata["split"] = "test"  # type: ignore[index]
    sliced = items[1:]
    assert (
        isinstance(sliced, Dataset) and list(sliced) == [B] and sliced.metadata["split"] == "train"
    )
    assert items == Dataset([A, B], metadata={"split": "train"})
    assert B in items and items.index(B) == 1
    with pytest.raises(IndexError, match=r"index 5 out of range for a dataset of 2 items"):
        items[5]
    with pytest.raises(ArgumentError, match=r"items="):
        Dataset(3)  # type: ignore[arg-type]


def test_rl_dataset_makes_envs_and_ids():
    data = RLDataset([A, B], make_env=lambda p: ProblemEnv(p), get_item_id=lambda p: p.id)
    assert data.item_id(1) == "b"
    env = data.make_env(0)
    assert env.reset()[0] == "1+1?"
    group = data.rollout_group(1, lambda q: "4", num_rollouts=3)
    assert group.item_id == "b" and group.rewards == [1.0, 1.0, 1.0]
    agroup = asyncio.run(data.arollout_group(0, lambda q: "3", num_rollouts=2, max_concurrency=1))
    assert agroup.item_id == "a" and agroup.rewards == [0.0, 0.0]
    sliced = data[1:]
    assert isinstance(sliced, RLDataset) and sliced.item_id(0) == "b"


def test_rl_dataset_defaults_and_errors():
    data = RLDataset([A, B], make_env=ProblemEnv)
    assert [data.item_id(0), data.item_id(-1)] == ["0", "1"]
    with pytest.raises(ArgumentError, match=r"make_env=None"):
        RLDataset([A], make_env=None)  # type: ignore[arg-type]
    bad = RLDataset([A], make_env=ProblemEnv, get_item_id=lambda p: 7)  # type: ignore[arg-type, return-value]
    with pytest.raises(ArgumentError, match=r"get_item_id=7: returned a non-str id"):
        bad.item_id(0)
