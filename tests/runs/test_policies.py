"""A run's policies (`rollout.runs.policies`): the mapping of agents to policies, resolved once
and recorded as indices, and each policy's training settings."""

from __future__ import annotations

import pytest

from rollout.runs.config import RunConfig
from rollout.runs.errors import InvalidPolicies
from rollout.runs.policies import DEFAULT_POLICY, PolicyConfig, PolicyMap

ROLES = ["builder", "builder", "scout", "scout"]


def config(policies: dict) -> RunConfig:
    return RunConfig.model_validate({"policies": policies})


def test_no_policies_is_one_policy_for_every_agent() -> None:
    mapping = PolicyMap.resolve({}, agents=3)
    assert mapping.names == (DEFAULT_POLICY,)
    assert [mapping.policy_of(a) for a in range(3)] == [DEFAULT_POLICY] * 3
    recorded = PolicyMap.recorded({})
    assert recorded.names == (DEFAULT_POLICY,) and recorded.policy_of(7) == DEFAULT_POLICY
    assert not recorded.several


def test_roles_and_indices_resolve_to_indices_that_read_back_the_same() -> None:
    run = config({"builder": {"agents": [0, 1]}, "scout": {"agents": ["scout"]}})
    mapping = PolicyMap.resolve(run.policies, agents=4, roles=ROLES)
    assert mapping.by_agent == ("builder", "builder", "scout", "scout")
    entries = mapping.entries(run.policies)
    assert entries["scout"].agents == [2, 3]
    assert PolicyMap.recorded(entries) == mapping
    assert mapping.agents_of("builder") == (0, 1) and mapping.several


def test_each_policy_trains_with_its_own_settings_or_the_runs() -> None:
    run = RunConfig.model_validate(
        {
            "learning_rate": 0.002,
            "lora_rank": 4,
            "policies": {
                "a": {"agents": [0], "learning_rate": 0.01, "lora_rank": 8, "max_lag": 0},
                "b": {"agents": [1]},
            },
        }
    )
    assert (run.learning_rate_of("a"), run.lora_rank_of("a")) == (0.01, 8)
    assert (run.learning_rate_of("b"), run.lora_rank_of("b")) == (0.002, 4)
    assert run.learning_rate_of(DEFAULT_POLICY) == 0.002


@pytest.mark.parametrize(
    ("policies", "message"),
    [
        ({"a": {"agents": [0, 1, 2]}}, "policies: agent 3 (role 'scout') has no policy"),
        (
            {"a": {"agents": [0, 1, 2, 3]}, "b": {"agents": [4]}},
            "policies.b.agents: agent 4 is not an agent of the environment (it has 4: 0 to 3)",
        ),
        (
            {"a": {"agents": ["builder", "captain"]}},
            "policies.a.agents: 'captain' is neither an agent index nor a role of the environment "
            "(roles: ['builder', 'scout'])",
        ),
        (
            {"a": {"agents": ["builder", 2]}, "b": {"agents": [2, 3]}},
            "policies.b.agents: agent 2 already belongs to policy 'a'",
        ),
    ],
)
def test_a_mapping_that_leaves_out_or_names_an_unknown_agent_is_refused(
    policies: dict, message: str
) -> None:
    with pytest.raises(InvalidPolicies) as caught:
        PolicyMap.resolve(config(policies).policies, agents=4, roles=ROLES)
    assert str(caught.value) == message


@pytest.mark.parametrize(
    ("fields", "message"),
    [
        ({"policies": {"Builder": {"agents": [0]}}}, "'Builder' is not a policy name"),
        ({"policies": {"a": {"agents": []}}}, "policies.a.agents"),
        ({"policies": {"a": {"agents": [-1]}}}, "an agent index must be >= 0, got -1"),
        (
            {"backend": "vllm", "policies": {"a": {"agents": [0]}, "b": {"agents": [1]}}},
            "backend 'vllm' serves several policies as LoRA adapters",
        ),
    ],
)
def test_bad_policy_entries_name_the_field(fields: dict, message: str) -> None:
    with pytest.raises(ValueError, match=None) as caught:
        RunConfig.model_validate({"model": {"init": {"heads": 1}}, **fields})
    assert message in str(caught.value)


def test_a_recorded_mapping_has_indices_only() -> None:
    with pytest.raises(InvalidPolicies, match="agent indices only"):
        PolicyMap.recorded({"a": PolicyConfig.model_validate({"agents": ["builder"]})})
