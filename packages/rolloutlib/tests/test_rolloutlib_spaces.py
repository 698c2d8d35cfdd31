"""Spaces: one catalogue run through generic invariants, plus per-space membership rules."""

from __future__ import annotations

import copy
import json
import pickle
from typing import Any

import gymnasium as gym
import numpy as np
import pytest
from gymnasium.utils.env_checker import data_equivalence
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from rolloutlib import ArgumentError, SpaceValueError, spaces
from rolloutlib.spaces import (
    ChatSpace,
    TextSpace,
    TokenSequenceSpace,
    ToolCallSpace,
    ToolCallsSpace,
)

SEARCH = gym.spaces.Dict({"query": spaces.text.text(min_length=1, max_length=1_000)})
MOVE = gym.spaces.Dict(
    {"direction": gym.spaces.Discrete(4), "speed": gym.spaces.Box(0.0, 1.0, shape=(2,))}
)

CATALOGUE: dict[str, gym.spaces.Space[Any]] = {
    "text-default": spaces.text.text(),
    "text-bounded": spaces.text.text(min_length=2, max_length=5, sample_alphabet="αβγ"),
    "text-empty-only": spaces.text.text(max_length=0, sample_alphabet=""),
    "tokens-large-vocab": spaces.tokens.sequence(vocab_size=128_000),
    "tokens-bounded": spaces.tokens.sequence(vocab_size=5, min_length=2, max_length=4),
    "chat-nonempty": spaces.messages.chat(min_length=1),
    "chat-bounded-content": spaces.messages.chat(
        0, 3, content=spaces.text.text(1, 10), sample_roles=("user",)
    ),
    "chat-with-tools": spaces.messages.chat(1, 2, tools=spaces.tools.call({"search": SEARCH})),
    "tool-call": spaces.tools.call({"search": SEARCH}),
    "tool-call-mixed": spaces.tools.call(
        {"search": SEARCH, "move": MOVE, "noop": gym.spaces.Dict({})}
    ),
    "tool-calls": spaces.tools.calls({"search": gym.spaces.Dict({"query": spaces.text.text()})}),
    "tool-calls-bounded": spaces.tools.calls({"move": MOVE}, min_length=1, max_length=3),
    "gym-dict-of-ours": gym.spaces.Dict(
        {"prompt": spaces.messages.chat(1, 2), "tokens": spaces.tokens.sequence(10, 0, 3)}
    ),
}

OURS = {k: v for k, v in CATALOGUE.items() if isinstance(v, spaces.StructuredSpace)}

seeds = st.integers(min_value=0, max_value=2**32 - 1)
fast = settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow])


@pytest.mark.parametrize("name", CATALOGUE)
def test_spaces_are_gymnasium_spaces(name: str):
    assert isinstance(CATALOGUE[name], gym.spaces.Space)


@pytest.mark.parametrize("name", CATALOGUE)
@fast
@given(seed=seeds)
def test_samples_are_contained(name: str, seed: int):
    space = copy.deepcopy(CATALOGUE[name])
    space.seed(seed)
    for _ in range(3):
        sample = space.sample()
        assert space.contains(sample)
        assert sample in space


@pytest.mark.parametrize("name", CATALOGUE)
@fast
@given(seed=seeds)
def test_seeded_sampling_is_reproducible(name: str, seed: int):
    first, second = copy.deepcopy(CATALOGUE[name]), copy.deepcopy(CATALOGUE[name])
    first.seed(seed)
    second.seed(seed)
    a = [first.sample() for _ in range(3)]
    b = [second.sample() for _ in range(3)]
    assert data_equivalence(a, b)
    first.seed(seed)
    assert data_equivalence([first.sample() for _ in range(3)], a)


@pytest.mark.parametrize("name", CATALOGUE)
@fast
@given(seed=seeds)
def test_json_round_trip(name: str, seed: int):
    space = copy.deepcopy(CATALOGUE[name])
    space.seed(seed)
    samples = [space.sample() for _ in range(3)]
    encoded = json.loads(json.dumps(space.to_jsonable(samples)))
    decoded = space.from_jsonable(encoded)
    assert len(decoded) == len(samples)
    for original, restored in zip(samples, decoded, strict=True):
        assert restored in space
        assert data_equivalence(original, restored)


@pytest.mark.parametrize("name", CATALOGUE)
def test_equality_copy_and_pickle(name: str):
    space = CATALOGUE[name]
    assert space == copy.deepcopy(space)
    assert pickle.loads(pickle.dumps(space)) == space
    assert repr(space)


@pytest.mark.parametrize("name", OURS)
@pytest.mark.parametrize("value", [None, 1.5, object(), b"bytes", {"role": "user"}])
def test_foreign_values_are_rejected_with_a_named_error(name: str, value: Any):
    space = OURS[name]
    assert not space.contains(value)
    with pytest.raises(SpaceValueError) as caught:
        space.validate(value)
    assert type(space).__name__ in str(caught.value)
    assert caught.value.space is space and caught.value.value is value


# --- text ------------------------------------------------------------------------------------


@given(value=st.text(), lo=st.integers(0, 10), extra=st.integers(0, 10))
def test_text_accepts_every_unicode_string_within_bounds(value: str, lo: int, extra: int):
    space = TextSpace(min_length=lo, max_length=lo + extra, sample_alphabet="a")
    assert (value in space) == (lo <= len(value) <= lo + extra)


@given(value=st.text(alphabet=st.characters(min_codepoint=0x80)), seed=seeds)
def test_text_alphabet_only_controls_sampling(value: str, seed: int):
    space = spaces.text.text(sample_alphabet="ab")
    assert value in space  # characters outside the sample alphabet are still members
    space.seed(seed)
    assert set(space.sample()) <= {"a", "b"}


def test_text_errors_name_space_and_value():
    space = spaces.text.text(min_length=3, max_length=4)
    with pytest.raises(SpaceValueError, match=r"'ab' is not an element of TextSpace\(min_length=3"):
        space.validate("ab")
    with pytest.raises(SpaceValueError, match=r"expected a str, got int"):
        space.validate(12)
    with pytest.raises(ArgumentError, match=r"max_length=1: must be >= min_length"):
        spaces.text.text(min_length=2, max_length=1)
    with pytest.raises(ArgumentError, match=r"min_length=-1"):
        spaces.text.text(min_length=-1)
    with pytest.raises(ArgumentError, match=r"sample_alphabet"):
        spaces.text.text(sample_alphabet="")


def test_text_sample_mask_like_gymnasium():
    space = spaces.text.text(max_length=6, sample_alphabet="abc", seed=1)
    sample = space.sample(mask=(4, np.array([0, 1, 0], dtype=np.int8)))
    assert sample == "bbbb"


# --- tokens ----------------------------------------------------------------------------------


@given(tokens=st.lists(st.integers(-5, 20), max_size=8))
def test_tokens_membership(tokens: list[int]):
    space = spaces.tokens.sequence(vocab_size=16, min_length=1, max_length=6)
    expected = 1 <= len(tokens) <= 6 and all(0 <= t < 16 for t in tokens)
    assert (tokens in space) == expected


def test_tokens_accept_numpy_and_reject_non_ints():
    space = spaces.tokens.sequence(vocab_size=10)
    assert np.array([1, 2, 3], dtype=np.int32) in space
    assert [np.int64(4), 5] in space
    assert space.validate((1, 2)) == [1, 2]
    assert [True] not in space
    assert [1.0] not in space
    assert ["1"] not in space
    assert np.array([1.0]) not in space
    with pytest.raises(SpaceValueError, match=r"\[1\]: Input should be less than 10"):
        space.validate([3, 10])
    with pytest.raises(ArgumentError, match=r"vocab_size=0"):
        spaces.tokens.sequence(vocab_size=0)


# --- messages --------------------------------------------------------------------------------


def test_chat_membership_and_errors():
    chat = spaces.messages.chat(min_length=1)
    assert [{"role": "user", "content": "hi"}] in chat
    assert [
        {"role": "assistant", "content": None, "tool_calls": [{"name": "f", "arguments": {}}]}
    ] in chat
    assert [{"role": "user", "content": [{"type": "text", "text": "hi"}]}] in chat
    assert [{"role": "tool", "content": "42", "tool_call_id": "call_1"}] in chat
    assert [] not in chat
    with pytest.raises(SpaceValueError, match=r"\[0\].role: 'robot' is not one of"):
        chat.validate([{"role": "robot", "content": "x"}])
    with pytest.raises(SpaceValueError, match=r"\[0\].colour: Extra inputs are not permitted"):
        chat.validate([{"role": "user", "content": "x", "colour": "red"}])
    with pytest.raises(SpaceValueError, match=r"\[0\].role: Field required"):
        chat.validate([{"content": "x"}])


def test_chat_content_and_tools_constraints():
    chat = spaces.messages.chat(
        content=spaces.text.text(max_length=3), tools=spaces.tools.call({"search": SEARCH})
    )
    assert [{"role": "user", "content": "abc"}] in chat
    assert [{"role": "user", "content": "abcd"}] not in chat
    good = {"name": "search", "arguments": {"query": "q"}, "id": "1"}
    assert [{"role": "assistant", "tool_calls": [good]}] in chat
    with pytest.raises(SpaceValueError, match=r"tool_calls\[0\]: unknown tool 'delete'"):
        chat.validate([{"role": "assistant", "tool_calls": [{"name": "delete", "arguments": {}}]}])


@given(
    messages=st.lists(
        st.fixed_dictionaries(
            {"role": st.sampled_from(["system", "user", "assistant", "tool"]), "content": st.text()}
        ),
        max_size=4,
    )
)
def test_chat_accepts_any_text_content(messages: list[dict[str, str]]):
    assert messages in spaces.messages.chat()


# --- tools -----------------------------------------------------------------------------------


@pytest.mark.filterwarnings("ignore:.*Casting input x to numpy array")
def test_tool_call_membership_and_errors():
    call = spaces.tools.call({"search": SEARCH, "move": MOVE})
    assert {"name": "search", "arguments": {"query": "weather"}} in call
    assert {"name": "search", "arguments": {"query": "weather"}, "id": "c1"} in call
    assert {"name": "move", "arguments": {"direction": 2, "speed": [0.5, 0.5]}} in call
    assert {"name": "search", "arguments": {"query": ""}} not in call
    with pytest.raises(
        SpaceValueError, match=r"unknown tool 'delete'; known tools: \['search', 'move'\]"
    ):
        call.validate({"name": "delete", "arguments": {}})
    with pytest.raises(SpaceValueError, match=r"arguments: Field required"):
        call.validate({"name": "search"})
    with pytest.raises(SpaceValueError, match=r"arguments of 'move' are not in Dict"):
        call.validate({"name": "move", "arguments": {"direction": 9, "speed": [0.0, 0.0]}})
    with pytest.raises(ArgumentError, match=r"tools\['bad'\]=.*expected a gymnasium.spaces.Space"):
        spaces.tools.call({"bad": "not a space"})  # type: ignore[dict-item]


def test_tool_calls_lengths():
    calls = spaces.tools.calls({"search": SEARCH}, min_length=1, max_length=2)
    one = {"name": "search", "arguments": {"query": "x"}}
    assert [one] in calls and [one, one] in calls
    assert [] not in calls and [one] * 3 not in calls
    with pytest.raises(SpaceValueError, match=r"\[1\]: unknown tool"):
        calls.validate([one, {"name": "nope", "arguments": {}}])
    assert isinstance(calls, ToolCallsSpace) and isinstance(calls.call, ToolCallSpace)


def test_space_constructors_return_named_types():
    assert isinstance(spaces.text.text(), TextSpace)
    assert isinstance(spaces.tokens.sequence(3), TokenSequenceSpace)
    assert isinstance(spaces.messages.chat(), ChatSpace)
