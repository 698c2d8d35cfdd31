"""An eval job's episodes and scores: what a suite asks to play, and what its ends are worth.

- `episode_specs(job, suite)`: the job's episodes (group `job_id`, member k = the episode's place
  in the suite, kind 'eval'), seeded from the suite's sampling seed.
- `job_scores(suite, ends, policy_of)`: one `EvalScore` per policy and environment from the seat
  ends of a finished job (an episode's value for a policy is the mean reward of the seats of
  that policy's agents; each episode counts once per policy that plays in it). A run with one
  policy has one score per environment, the policy 'main'.

The evaluator role (`rollout.launch.evaluator`) plays the episodes and records the scores.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Callable, Sequence
from typing import Any

from rollout.contracts import DEFAULT_POLICY
from rollout.evals.stats import estimate
from rollout.evals.suite import ResolvedSuite
from rollout.ledger import EpisodeSpec
from rollout.ledger.evals import EvalJob, EvalScore


def episode_specs(job: EvalJob, suite: ResolvedSuite) -> list[EpisodeSpec]:
    """The job's episodes: group `job_id`, member k = the episode's place in the suite."""
    specs: list[EpisodeSpec] = []
    for member in suite.members:
        for parameters in member.parameters:
            k = len(specs)
            specs.append(
                EpisodeSpec(
                    group_index=job.job_id,
                    member=k,
                    parameters=dict(parameters),
                    seed=(suite.sampling.seed or 0) + k,
                    agents=member.agents,
                    kind="eval",
                )
            )
    return specs


def job_scores(
    suite: ResolvedSuite, ends: Sequence[Any], policy_of: Callable[[int], str] | None = None
) -> list[EvalScore]:
    """One score per policy and environment from the seat ends of a finished job.

    An episode's value for a policy is the mean reward of the seats of that policy's agents (a
    failed seat counts with the reward it ended with, 0); each episode counts once per policy
    that plays in it. `policy_of` maps an agent index to its policy (None: one policy,
    'main', plays every agent). Scores come by environment, then policy in order of first seat.

    Example:
        >>> from rollout.evals.suite import ResolvedMember, SuiteSampling
        >>> from rollout.ledger.evals import EvalSeatEnd
        >>> pair = ResolvedMember("pair", "environment", "m:pair", "1", 2, "", ({}, {}))
        >>> suite = ResolvedSuite("s", "1", "", SuiteSampling(), (pair,))
        >>> ends = [EvalSeatEnd(0, 0, "completed", 1.0), EvalSeatEnd(0, 1, "completed", 0.0),
        ...         EvalSeatEnd(1, 0, "completed", 1.0), EvalSeatEnd(1, 1, "failed", 0.0)]
        >>> [(s.policy, s.score) for s in job_scores(suite, ends)]
        [('main', 0.5)]
        >>> [(s.policy, s.score, s.failed) for s in job_scores(suite, ends, ["a", "b"].__getitem__)]
        [('a', 1.0, 0), ('b', 0.0, 1)]
    """
    rewards: dict[tuple[str, int], list[float]] = defaultdict(list)
    failed: set[tuple[str, int]] = set()
    policies: list[str] = []
    for end in ends:
        policy = DEFAULT_POLICY if policy_of is None else policy_of(end.agent)
        if policy not in policies:
            policies.append(policy)
        rewards[policy, end.member].append(float(end.reward))
        if end.status == "failed":
            failed.add((policy, end.member))
    scores: list[EvalScore] = []
    first = 0
    for position, member in enumerate(suite.members):
        members = range(first, first + len(member.parameters))
        first += len(member.parameters)
        for policy in policies:
            seats = [rewards[policy, k] for k in members if rewards[policy, k]]
            if not seats:
                continue
            e = estimate([sum(values) / len(values) for values in seats])
            scores.append(
                EvalScore(
                    environment=member.name,
                    position=position,
                    score=e.mean,
                    ci_low=e.low,
                    ci_high=e.high,
                    episodes=e.n,
                    failed=sum(1 for k in members if (policy, k) in failed),
                    method=e.method,
                    policy=policy,
                )
            )
    return scores
