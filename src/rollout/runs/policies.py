"""A run's policies: which agents each policy plays, and how each one trains.

A run trains one policy unless its preset names several (`RunConfig.policies`): each policy has
its own weights (a LoRA adapter, or full weights for the tiny models), optimizer state, version
chain, checkpoints, groups and serving, and plays the agents mapped to it.

- `DEFAULT_POLICY`: the name of a run's only policy when it names none.
- `PolicyConfig`: a preset's `policies:` entry: the agents (indices or role names) and what the
  policy trains with differently from the run (`lora_rank`, `learning_rate`, `max_lag`).
- `PolicyMap`: the mapping resolved against an environment's agents: agent index -> policy.
  `PolicyMap.resolve` refuses a mapping that leaves an agent out, names an unknown agent or
  role, or gives an agent two policies, in one line naming it. `rollout train` records the
  resolved mapping (`PolicyMap.entries`: agents as indices), so every role reads it back with
  `PolicyMap.recorded(config.policies)` without loading the environment.

Example:
    >>> policies = {"chaser": PolicyConfig(agents=[0]), "evader": PolicyConfig(agents=["evader"])}
    >>> mapping = PolicyMap.resolve(policies, agents=2, roles=["chaser", "evader"])
    >>> mapping.names, mapping.policy_of(1), mapping.agents_of("chaser")
    (('chaser', 'evader'), 'evader', (0,))
    >>> PolicyMap.resolve({}, agents=3).names
    ('main',)
    >>> PolicyMap.resolve({"a": PolicyConfig(agents=[0])}, agents=2)
    Traceback (most recent call last):
    ...
    rollout.runs.errors.InvalidPolicies: policies: agent 1 (role 'agent1') has no policy
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from pydantic import BaseModel, ConfigDict, Field, field_validator

from rollout.contracts import DEFAULT_POLICY
from rollout.errors import describe
from rollout.runs.errors import InvalidPolicies
from rollout.runs.live import MaxLag

__all__ = ["DEFAULT_POLICY", "POLICY_NAME", "PolicyConfig", "PolicyMap", "check_policy_names"]
POLICY_NAME = re.compile(r"^[a-z][a-z0-9_-]{0,39}$")
"""A policy's name: lower case, digits, `_` and `-`, starting with a letter (it appears in blob
keys and serving names)."""


class PolicyConfig(BaseModel):
    """A preset's `policies:` entry.

    Attributes:
        agents: The agents this policy plays: agent indices, or role names
            (`Environment.roles`; a role stands for every agent of that role).
        lora_rank: This policy's LoRA rank (None: the run's `lora_rank`).
        learning_rate: This policy's learning rate (None: the run's).
        max_lag: This policy's `max_lag` (None: the run's setting): a turn of one of its agents
            begins only on a version of this policy >= its newest - max_lag.
    """

    model_config = ConfigDict(extra="forbid", frozen=True)

    agents: list[int | str] = Field(min_length=1)
    lora_rank: int | None = Field(None, ge=1)
    learning_rate: float | None = Field(None, gt=0)
    max_lag: MaxLag | None = None

    @field_validator("agents")
    @classmethod
    def _agents(cls, agents: list[int | str]) -> list[int | str]:
        for agent in agents:
            if isinstance(agent, int) and agent < 0:
                raise ValueError(f"an agent index must be >= 0, got {agent}")
            if isinstance(agent, str) and not agent:
                raise ValueError("a role name must not be empty")
        return agents


def check_policy_names(policies: Mapping[str, PolicyConfig]) -> None:
    """Raise `InvalidPolicies` naming the first policy name that is not a `POLICY_NAME`."""
    for name in policies:
        if not POLICY_NAME.match(name):
            raise InvalidPolicies(
                f"policies: {describe(name)} is not a policy name (lower-case letters, digits, "
                "'_' and '-', starting with a letter, at most 40 characters)"
            )


@dataclass(frozen=True)
class PolicyMap:
    """Which policy plays each agent of a run's environment (`resolve`)."""

    by_agent: tuple[str, ...]
    """The policy of agent index i, at position i."""
    names: tuple[str, ...]
    """The policies, in the preset's order."""

    def policy_of(self, agent: int) -> str:
        """The policy of agent index `agent` (`DEFAULT_POLICY` beyond the mapped agents: an
        agent index outside the environment is not trained)."""
        return self.by_agent[agent] if 0 <= agent < len(self.by_agent) else DEFAULT_POLICY

    def agents_of(self, policy: str) -> tuple[int, ...]:
        """The agent indices policy `policy` plays."""
        return tuple(i for i, name in enumerate(self.by_agent) if name == policy)

    @property
    def several(self) -> bool:
        return len(self.names) > 1

    def entries(self, policies: Mapping[str, PolicyConfig]) -> dict[str, PolicyConfig]:
        """`policies` with each policy's agents written as the indices they resolved to."""
        return {
            name: entry.model_copy(update={"agents": list(self.agents_of(name))})
            for name, entry in policies.items()
        }

    @classmethod
    def recorded(cls, policies: Mapping[str, PolicyConfig]) -> PolicyMap:
        """The mapping a run recorded (`entries`: agents as indices); when it names no
        policies, one policy, `DEFAULT_POLICY`, plays every agent.

        Raises:
            InvalidPolicies: an agent is a role name or is left out (not a recorded mapping).
        """
        if not policies:
            return cls((), (DEFAULT_POLICY,))
        indices = [a for entry in policies.values() for a in entry.agents]
        if not all(isinstance(a, int) for a in indices):
            raise InvalidPolicies(
                f"policies: a recorded mapping has agent indices only, got {describe(indices)}"
            )
        return cls.resolve(policies, agents=max(int(a) for a in indices) + 1)

    @classmethod
    def single(cls, agents: int) -> PolicyMap:
        """One policy, `DEFAULT_POLICY`, plays every agent."""
        return cls((DEFAULT_POLICY,) * agents, (DEFAULT_POLICY,))

    @classmethod
    def resolve(
        cls,
        policies: Mapping[str, PolicyConfig],
        *,
        agents: int,
        roles: Sequence[str] | None = None,
    ) -> PolicyMap:
        """Resolve a preset's `policies:` against an environment's agents and roles.

        Args:
            policies: Policy name -> its entry (empty: one policy plays every agent).
            agents: The environment's number of agents.
            roles: Each agent's role (None: `agent0`, `agent1`, ...).

        Raises:
            InvalidPolicies: a name is not a policy name, an entry names an agent index or role
                the environment does not have, an agent is given two policies, or an agent has
                none (one line naming it).
        """
        if not policies:
            return cls.single(agents)
        check_policy_names(policies)
        role_names = list(roles) if roles is not None else [f"agent{i}" for i in range(agents)]
        owner: dict[int, str] = {}
        for name, policy in policies.items():
            for entry in policy.agents:
                if isinstance(entry, int):
                    if entry >= agents:
                        raise InvalidPolicies(
                            f"policies.{name}.agents: agent {entry} is not an agent of the "
                            f"environment (it has {agents}: 0 to {agents - 1})"
                        )
                    indices = [entry]
                else:
                    indices = [i for i, role in enumerate(role_names) if role == entry]
                    if not indices:
                        raise InvalidPolicies(
                            f"policies.{name}.agents: {describe(entry)} is neither an agent "
                            f"index nor a role of the environment (roles: "
                            f"{sorted(set(role_names))})"
                        )
                for index in indices:
                    if owner.get(index, name) != name:
                        raise InvalidPolicies(
                            f"policies.{name}.agents: agent {index} already belongs to "
                            f"policy {owner[index]!r}"
                        )
                    owner[index] = name
        for index in range(agents):
            if index not in owner:
                raise InvalidPolicies(
                    f"policies: agent {index} (role {role_names[index]!r}) has no policy"
                )
        return cls(tuple(owner[i] for i in range(agents)), tuple(policies))
