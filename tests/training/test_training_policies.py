"""Several policies in one run: each policy's step trains only its own agents' turns
(`rollout.training.batch.policy_group`)."""

from __future__ import annotations

from rollout.contracts import Turn
from rollout.ledger import EpisodeRecord, GroupRecord, SeatEnd
from rollout.training.advantages import AdvantageConfig
from rollout.training.batch import policy_group, segments_of_groups

POLICY_OF = {0: "walker", 1: "avoider", 2: "walker"}


def episode(member: int) -> EpisodeRecord:
    eid = f"e{member}"
    turns = tuple(
        Turn(
            episode_id=eid,
            agent=agent,
            attempt=1,
            index=0,
            prompt_tokens=(1, 2, agent),
            completion_tokens=(10 + agent, 20 + member),
            logprobs=(-0.5, -0.5),
            version=4,
            stop_reason="stop",
            policy=POLICY_OF[agent],
        )
        for agent in POLICY_OF
    )
    ends = tuple(
        SeatEnd(eid, agent, 1, "completed", float(member + agent), None, {}, None)
        for agent in POLICY_OF
    )
    return EpisodeRecord(eid, "r", 0, member, {}, member, 3, "train", turns, ends)


def test_each_policys_step_trains_only_its_own_agents_turns() -> None:
    group = GroupRecord("r", 0, tuple(episode(m) for m in range(4)))
    config = AdvantageConfig(normalize_std=False)
    trained: dict[str, set[int]] = {}
    for policy, agents in (("walker", (0, 2)), ("avoider", (1,))):
        part = policy_group(GroupRecord("r", 0, group.episodes, policy), agents)
        [segments] = segments_of_groups([part], config)
        trained[policy] = {s.agent for s in segments.segments}
        assert {seat.agent for seat in segments.seats} == set(agents)
        # Every trained token is one the policy's own agents sampled.
        for segment in segments.segments:
            assert segment.tokens[-2] == 10 + segment.agent
    assert trained == {"walker": {0, 2}, "avoider": {1}}
    # The whole group, as a one-policy run trains it, has every agent's turns.
    [whole] = segments_of_groups([group], config)
    assert {s.agent for s in whole.segments} == {0, 1, 2}


def test_a_turn_another_policy_sampled_is_not_trained() -> None:
    first = episode(0)
    mixed = EpisodeRecord(
        "e0", "r", 0, 0, {}, 0, 3, "train",
        tuple(t if t.agent else Turn(**{**t.__dict__, "policy": "avoider"}) for t in first.turns),
        first.ends,
    )  # fmt: skip
    part = policy_group(GroupRecord("r", 0, (mixed,), "walker"), (0, 2))
    assert [(t.agent, t.policy) for t in part.episodes[0].turns] == [(2, "walker")]
