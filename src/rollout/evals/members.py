"""The platform `Environment` that plays each member of a resolved suite.

A platform environment member is loaded from its MODULE:ATTR. A benchmark member (GSM8K, AIME)
is rolloutlib's own `Benchmark` over the suite's items, played through the rolloutlib adapter:
each episode is one item's environment (`benchmark.env_factory(item)`), its reward the `Score`
that environment grades, which is exactly what `rolloutlib.evals.run_benchmark` averages.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping, Sequence
from typing import Any

from rolloutlib.evals import Benchmark
from rolloutlib.evals.benchmarks import aime, gsm8k

from rollout.evals.errors import SuiteError
from rollout.evals.suite import ResolvedMember
from rollout.harness.adapter import rolloutlib_environment
from rollout.harness.core import Environment
from rollout.harness.loading import load_environment

log = logging.getLogger("rollout.evals")


def benchmark_of(
    name: str, items: Sequence[Mapping[str, Any]], template: str
) -> Benchmark[Mapping[str, Any]]:
    """rolloutlib's benchmark `name` ('gsm8k' or 'aime') over `items`."""
    if name == "gsm8k":
        return gsm8k(items, template=template)
    if name == "aime":
        return aime(items, template=template)
    raise SuiteError(f"benchmark must be 'gsm8k' or 'aime', got {name!r}")


def member_environment(member: ResolvedMember) -> Environment:
    """The environment that plays `member`'s episodes (parameters: one item or mapping each)."""
    if member.kind == "benchmark":
        benchmark = benchmark_of(member.source, member.parameters, member.template)

        def make_env(**item: Any) -> Any:
            return benchmark.env_factory(item)

        make_env.__name__ = member.source
        return rolloutlib_environment(make_env, name=member.name, max_turns=1)
    environment = load_environment(member.source)
    if environment.version != member.source_version:
        log.warning(
            "environment %s is version %s now; the suite was resolved with version %s",
            member.source,
            environment.version,
            member.source_version,
        )
    return environment
