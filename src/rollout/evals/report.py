"""Eval results for people and scripts: scores with deltas, and jobs with their progress.

`score_rows` gives one row per (run, suite version, checkpoint, environment, policy) with the
delta to the base model's score and to the previous evaluated checkpoint's score under the same
suite version and policy (None where there is none); a run with one policy has the policy 'main'
on every row. `job_rows` gives one row per job.

Example:
    >>> from rollout.ledger.evals import EvalScoreRecord
    >>> def rec(version, score):
    ...     return EvalScoreRecord(1, "r", "parity", "1", version, "parity", 0, score,
    ...                            0.0, 1.0, 10, 0, "wilson", 0.0)
    >>> rows = score_rows([rec(-1, 0.5), rec(0, 0.6), rec(5, 0.9)])
    >>> [(r["checkpoint"], r["delta_base"], r["delta_previous"]) for r in rows]
    [('base', None, None), ('v0', 0.1, 0.1), ('v5', 0.4, 0.3)]
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from rollout.ledger.evals import BASE_VERSION, EvalJob, EvalScoreRecord


def version_label(version: int) -> str:
    """`base` or `v12`.

    Example:
        >>> version_label(-1), version_label(12)
        ('base', 'v12')
    """
    return "base" if version == BASE_VERSION else f"v{version}"


def _delta(score: float, other: float | None) -> float | None:
    return None if other is None else round(score - other, 6)


def score_rows(scores: Sequence[EvalScoreRecord]) -> list[dict[str, Any]]:
    """Rows ordered by run, suite, suite version, checkpoint, the environment's position and
    policy (as recorded, for scores of one checkpoint and environment)."""
    ordered = sorted(
        scores, key=lambda s: (s.run_id, s.suite, s.suite_version, s.version, s.position)
    )
    base: dict[tuple[str, str, str, str, str], float] = {}
    previous: dict[tuple[str, str, str, str, str], float] = {}
    rows: list[dict[str, Any]] = []
    for s in ordered:
        key = (s.run_id, s.suite, s.suite_version, s.environment, s.policy)
        if s.version == BASE_VERSION:
            base[key] = s.score
        rows.append(
            {
                "run_id": s.run_id,
                "suite": s.suite,
                "suite_version": s.suite_version,
                "checkpoint": version_label(s.version),
                "version": s.version,
                "job_id": s.job_id,
                "environment": s.environment,
                "policy": s.policy,
                "score": s.score,
                "ci_low": s.ci_low,
                "ci_high": s.ci_high,
                "episodes": s.episodes,
                "failed": s.failed,
                "method": s.method,
                "backend": s.backend,
                "delta_base": None if s.version == BASE_VERSION else _delta(s.score, base.get(key)),
                "delta_previous": _delta(s.score, previous.get(key)),
            }
        )
        previous[key] = s.score
    return rows


def job_rows(jobs: Sequence[EvalJob]) -> list[dict[str, Any]]:
    """One row per job: what it evaluates and how far it got."""
    rows: list[dict[str, Any]] = []
    for job in jobs:
        if job.scored:
            state = "done"
        elif job.seats_ended:
            state = "playing"
        else:
            state = "queued"
        rows.append(
            {
                "job_id": job.job_id,
                "run_id": job.run_id,
                "suite": job.suite,
                "suite_version": job.suite_version,
                "checkpoint": version_label(job.version),
                "version": job.version,
                "trigger": job.trigger,
                "episodes": job.episodes,
                "seats": job.seats,
                "seats_ended": job.seats_ended,
                "state": state,
            }
        )
    return rows
