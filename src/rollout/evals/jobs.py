"""An eval job's episodes and scores: what a suite asks to play, and what its ends are worth.

- `episode_specs(job, suite)`: the job's episodes (group `job_id`, member k = the episode's place
  in the suite, kind 'eval'), seeded from the suite's sampling seed.
- `job_scores(suite, ends)`: one `EvalScore` per environment from the seat ends of a finished
  job (an episode's value is the mean reward of its seats; each episode counts once).

The evaluator role (`rollout.launch.evaluator`) plays the episodes and records the scores.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Sequence
from typing import Any

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


def job_scores(suite: ResolvedSuite, ends: Sequence[Any]) -> list[EvalScore]:
    """One score per environment from the seat ends of a finished job.

    An episode's value is the mean reward of its seats (a failed seat counts with the reward it
    ended with, 0); each episode counts once.
    """
    rewards: dict[int, list[float]] = defaultdict(list)
    failed: set[int] = set()
    for end in ends:
        rewards[end.member].append(float(end.reward))
        if end.status == "failed":
            failed.add(end.member)
    scores: list[EvalScore] = []
    first = 0
    for position, member in enumerate(suite.members):
        members = range(first, first + len(member.parameters))
        first += len(member.parameters)
        values = [sum(rewards[k]) / len(rewards[k]) for k in members if rewards[k]]
        if not values:
            continue
        e = estimate(values)
        scores.append(
            EvalScore(
                environment=member.name,
                position=position,
                score=e.mean,
                ci_low=e.low,
                ci_high=e.high,
                episodes=e.n,
                failed=sum(1 for k in members if k in failed),
                method=e.method,
            )
        )
    return scores
