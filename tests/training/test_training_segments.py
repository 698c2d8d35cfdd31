"""Segments from hand-built turns of a multi-turn tool-use episode."""

from __future__ import annotations

import pytest

from rollout.contracts import Turn
from rollout.training.errors import TrainingError
from rollout.training.segments import (
    UNSAMPLED_VERSION,
    Segment,
    build_segments,
    extends,
    mask_after_stop,
)

EOS = 2
SYSTEM_USER = (1, 10, 11, 12, 1, 20, 21, 22)  # "<|im_start|>system ... <|im_start|>user ..."
TOOL_CALL = (30, 31, 32, EOS)  # assistant: <tool_call>{...}</tool_call><|im_end|>
TOOL_RESULT = (1, 40, 41, 42, 1)  # <|im_start|>user <tool_response>...</tool_response> ...
ANSWER = (50, 51, EOS)  # assistant: final answer
REWRITTEN = (1, 10, 11, 60, 1)  # the agent summarised its context: not an extension


def turn(index: int, prompt: tuple[int, ...], completion: tuple[int, ...], version: int, **kw):
    logprobs = tuple(-0.1 * (index + 1) - 0.01 * k for k in range(len(completion)))
    return Turn(
        episode_id="ep",
        agent=0,
        attempt=0,
        index=index,
        prompt_tokens=prompt,
        completion_tokens=completion,
        logprobs=logprobs,
        version=version,
        stop_reason="stop",
        **kw,
    )


def tool_use_episode() -> list[Turn]:
    t0 = turn(0, SYSTEM_USER, TOOL_CALL, version=3)
    t1 = turn(1, SYSTEM_USER + TOOL_CALL + TOOL_RESULT, ANSWER, version=4, extends_previous=True)
    t2 = turn(2, REWRITTEN, (70, EOS), version=5)
    return [t0, t1, t2]


def test_tool_call_result_and_answer_merge_into_one_segment() -> None:
    turns = tool_use_episode()
    segments = build_segments(turns, advantage=0.75)
    assert len(segments) == 2
    first = segments[0]
    assert first.tokens == SYSTEM_USER + TOOL_CALL + TOOL_RESULT + ANSWER
    expected_mask = (
        (False,) * len(SYSTEM_USER)
        + (True,) * len(TOOL_CALL)
        + (False,) * len(TOOL_RESULT)
        + (True,) * len(ANSWER)
    )
    assert first.loss_mask == expected_mask
    assert first.num_loss_tokens == len(TOOL_CALL) + len(ANSWER)
    assert first.sampler_logprobs == (
        (0.0,) * len(SYSTEM_USER)
        + turns[0].logprobs
        + (0.0,) * len(TOOL_RESULT)
        + turns[1].logprobs
    )
    assert first.versions == (
        (UNSAMPLED_VERSION,) * len(SYSTEM_USER)
        + (3,) * len(TOOL_CALL)
        + (UNSAMPLED_VERSION,) * len(TOOL_RESULT)
        + (4,) * len(ANSWER)
    )
    assert first.advantage == 0.75
    assert first.turn_indices == (0, 1)
    assert (first.episode_id, first.agent) == ("ep", 0)


def test_non_extending_turn_starts_a_new_segment() -> None:
    second = build_segments(tool_use_episode(), advantage=-1.0)[1]
    assert second.tokens == (*REWRITTEN, 70, EOS)
    assert second.loss_mask == (False,) * len(REWRITTEN) + (True, True)
    assert second.sampler_logprobs == (0.0,) * len(REWRITTEN) + tool_use_episode()[2].logprobs
    assert second.versions == (UNSAMPLED_VERSION,) * len(REWRITTEN) + (5, 5)
    assert second.turn_indices == (2,)
    assert second.advantage == -1.0


def test_tokens_decide_not_the_extends_previous_flag() -> None:
    t0 = turn(0, SYSTEM_USER, TOOL_CALL, version=0)
    # Flag says it extends, but the previous completion was re-rendered differently.
    t1 = turn(1, (*SYSTEM_USER, 30, 99, EOS, *TOOL_RESULT), ANSWER, 0, extends_previous=True)
    assert len(build_segments([t0, t1])) == 2
    # Flag missing, but the tokens do extend.
    t1 = turn(1, SYSTEM_USER + TOOL_CALL + TOOL_RESULT, ANSWER, 0, extends_previous=False)
    assert len(build_segments([t0, t1])) == 1


def test_prompt_equal_to_previous_sequence_extends_with_no_new_context() -> None:
    t0 = turn(0, SYSTEM_USER, (30, 31), version=0)
    t1 = turn(1, (*SYSTEM_USER, 30, 31), (32, EOS), version=1)
    [segment] = build_segments([t0, t1])
    assert segment.tokens == (*SYSTEM_USER, 30, 31, 32, EOS)
    assert segment.loss_mask == (False,) * len(SYSTEM_USER) + (True,) * 4


def test_temperature_change_splits_segments() -> None:
    t0 = turn(0, SYSTEM_USER, TOOL_CALL, version=0, temperature=1.0)
    t1 = turn(1, SYSTEM_USER + TOOL_CALL + TOOL_RESULT, ANSWER, version=0, temperature=0.7)
    segments = build_segments([t0, t1])
    assert [s.temperature for s in segments] == [1.0, 0.7]
    assert segments[1].tokens == SYSTEM_USER + TOOL_CALL + TOOL_RESULT + ANSWER
    assert segments[1].num_loss_tokens == len(ANSWER)  # the earlier completion is context now


def test_tokens_after_a_stop_token_are_not_trained() -> None:
    t0 = turn(0, SYSTEM_USER, (30, EOS, 31, 32), version=0)
    [segment] = build_segments([t0], stop_token_ids=[EOS])
    assert segment.loss_mask[-4:] == (True, True, False, False)
    assert segment.sampler_logprobs[-2:] == (0.0, 0.0)
    assert segment.versions[-2:] == (UNSAMPLED_VERSION, UNSAMPLED_VERSION)


def test_mask_after_stop_resets_at_each_completion() -> None:
    tokens = [1, 2, 9, 9, 5, 9, 2]
    mask = [False, True, True, True, False, True, True]
    assert mask_after_stop(tokens, mask, [2]) == (False, True, False, False, False, True, True)


def test_extends() -> None:
    assert extends((1, 2, 3), (1, 2))
    assert extends((1, 2), (1, 2))
    assert not extends((1,), (1, 2))
    assert not extends((1, 3, 4), (1, 2))


def test_empty_turn_list_gives_no_segments() -> None:
    assert build_segments([]) == []


def test_bad_turns_are_rejected_with_the_field_named() -> None:
    t0, t1, _ = tool_use_episode()
    with pytest.raises(TrainingError, match="must be in order"):
        build_segments([t1, t0])
    other = Turn("ep", 1, 0, 1, (1,), (2,), (-0.5,), 0, "stop")
    with pytest.raises(TrainingError, match="one seat at a time"):
        build_segments([t0, other])
    bad = Turn("ep", 0, 0, 0, (1,), (2, 3), (-0.5,), 0, "stop")
    with pytest.raises(TrainingError, match="1 logprobs for 2 completion tokens"):
        build_segments([bad])
    with pytest.raises(TrainingError, match=r"Segment\.versions"):
        Segment(tokens=(1, 2), loss_mask=(False, True), sampler_logprobs=(0.0, 0.0), versions=(0,))
    with pytest.raises(TrainingError, match=r"loss_mask\[0\]"):
        Segment(tokens=(1,), loss_mask=(True,), sampler_logprobs=(0.0,), versions=(0,))


def test_turn_advantages_go_to_each_turn_s_tokens() -> None:
    first, second = build_segments(tool_use_episode(), turn_advantages=[0.5, -0.25, 2.0])
    assert first.advantage == 0.5  # its first turn's
    assert first.advantages == (
        (0.0,) * len(SYSTEM_USER)
        + (0.5,) * len(TOOL_CALL)
        + (0.0,) * len(TOOL_RESULT)
        + (-0.25,) * len(ANSWER)
    )
    assert second.advantage == 2.0
    assert second.advantages is None  # one turn: one advantage for every token
    assert second.token_advantages() == (0.0,) * len(REWRITTEN) + (2.0, 2.0)
    # Equal turn advantages need no per-token copy.
    [one, _] = build_segments(tool_use_episode(), turn_advantages=[1.0, 1.0, 1.0])
    assert one.advantages is None and one.advantage == 1.0
    assert first.with_advantage(3.0).advantages is None
