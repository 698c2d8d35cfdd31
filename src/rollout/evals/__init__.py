"""Evals: versioned suites of environments, scored on a schedule or on any checkpoint.

- suite.py: `Suite` (name, version, environments with parameters and episode counts,
  sampling: greedy or seeded), loaded from YAML or a Python object (`load_suite`); `resolve`
  spells out every episode and gives a `content_hash` that catches a forgotten version bump.
- members.py: the platform `Environment` behind each suite member: any platform environment
  (multi-agent ones included) or rolloutlib's GSM8K/AIME benchmarks, graded by their own
  environments as `rolloutlib.evals.run_benchmark` grades them.
- jobs.py: a job's episodes (ledger episodes of kind 'eval', never trained on) and its scores,
  one per environment (`episode_specs`, `job_scores`).
- stats.py: the score and its 95% interval (`estimate`: Wilson for pass/fail, else Student-t).
- report.py: rows for `rollout evals list|show`, with deltas to the base model and the previous
  eval.

The ledger side (suites, requests, jobs, scores) is `rollout.ledger.evals`; the evaluator role
that plays the jobs (its worker, its checkpoint server, on-demand evals) is assembled in
`rollout.launch.evaluator`. A preset asks for scheduled evals with
`evals: [{suite: parity, every: 20}]`. See docs/evals.md.
"""

from rollout.evals.errors import EvalError, SuiteError
from rollout.evals.stats import Estimate, estimate
from rollout.evals.suite import (
    ResolvedMember,
    ResolvedSuite,
    Suite,
    SuiteMember,
    SuiteSampling,
    load_suite,
    resolve,
)

__all__ = [
    "Estimate",
    "EvalError",
    "ResolvedMember",
    "ResolvedSuite",
    "Suite",
    "SuiteError",
    "SuiteMember",
    "SuiteSampling",
    "estimate",
    "load_suite",
    "resolve",
]
