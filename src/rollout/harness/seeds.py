"""Seeds: how a run's seed becomes each group's, episode's and agent's seed.

Every random choice of a run follows from its one seed, so a run replays exactly: the
parameters drawn for a group, the seed each episode is played with, the generator each agent
seat gets (`RunContext.random`). The formulas are written here once; changing one changes what
every existing run's seed means.

>>> parameters_seed(run_seed=1, group_index=2), episode_seed(1, 2, member=3)
(7921, 1002024)
>>> agent_seed(episode_seed=1002024, agent=1)
1002027006073
"""

from __future__ import annotations


def parameters_seed(run_seed: int, group_index: int) -> int:
    """The seed of the generator that draws group `group_index`'s parameters."""
    return run_seed * 7919 + group_index


def episode_seed(run_seed: int, group_index: int, member: int) -> int:
    """The seed of episode `member` of group `group_index` (what `RunContext.seed` holds)."""
    return run_seed * 1_000_003 + group_index * 1_009 + member


def agent_seed(episode_seed: int, agent: int) -> int:
    """The seed of agent `agent`'s generator in an episode (`RunContext.random`)."""
    return episode_seed * 1_000_003 + agent
